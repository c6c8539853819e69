"""The controllers that run a multi-node job on Kubernetes (the Kubeflow training operator, JobSet)
end it with a condition that says a child failed, never why: a cascade, behind the pod's own
reason when the log has it."""

from __future__ import annotations

import pytest

from tests.diagnose.logs import verdict

OOM_KILLED = "      Reason:       OOMKilled"


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        (
            "  Message:  PyTorchJob bert-train is failed because 1 Worker replica(s) failed.",
            "scheduler.kubeflow_replica_failed",
        ),
        (
            "  Warning  ReachedMaxRestarts  2m  jobset  jobset failed due to reaching max number of restarts",
            "scheduler.jobset_failed",
        ),
        (
            "    Message:               jobset failed due to one or more job failures",
            "scheduler.jobset_failed",
        ),
    ],
)
def test_a_controllers_job_failed_condition_is_a_cascade_behind_the_pods_reason(tmp_path, line, rule):
    assert verdict(tmp_path, [line]) == (rule, "unknown", True, [])
    assert verdict(tmp_path, [OOM_KILLED, line])[0] == "scheduler.k8s_reason"
