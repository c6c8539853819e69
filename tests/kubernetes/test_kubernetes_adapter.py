"""The Kubernetes adapter against a real kube-apiserver + etcd (deploy/local/kube.sh)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.types import PatchType

from connectors.actuators.kubernetes_adapter import (
    ANN_EXPIRES,
    ANN_INCIDENT,
    ANN_REASON,
    LABEL_KEY,
    TAINT_KEY,
    KubernetesAdapter,
)
from connectors.actuators.kubernetes_client import KueueWorkload, PyTorchJob, TrainJob, as_dict
from schemas.actions import ActionKind, ActionStatus, WorkloadKind
from tests.kubernetes.conftest import k8s_action, pod

pytestmark = [pytest.mark.integration, pytest.mark.timeout(5400)]


def _node(kube: Client, name: str) -> dict[str, Any]:
    return as_dict(kube.get(Node, name))


def _events(kube: Client, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    found = [as_dict(e) for e in kube.list(Event, namespace=ns, fields={"involvedObject.name": name})]
    return [e for e in found if e.get("reason") == reason]


def test_drain_cordons_taints_labels_and_resume_undoes_it(
    kube: Client, make_node: Callable[..., str], uid: str
):
    name = make_node(f"gpu-{uid}-a")
    adapter = KubernetesAdapter(kube)
    drain = k8s_action(ActionKind.DRAIN_NODE, node=name)

    result = adapter.handle(drain)

    assert result.status == ActionStatus.SUCCEEDED, result.detail
    node = _node(kube, name)
    assert node["spec"]["unschedulable"] is True
    # The API server itself adds node.kubernetes.io/not-ready to a new Node (TaintNodesByCondition).
    assert [
        (t["key"], t.get("value"), t["effect"]) for t in node["spec"]["taints"] if t["key"] == TAINT_KEY
    ] == [(TAINT_KEY, "xid-79-GPU-fell-off-the-bus", "NoSchedule")]
    assert "node.kubernetes.io/not-ready" in {t["key"] for t in node["spec"]["taints"]}
    assert node["metadata"]["labels"][LABEL_KEY] == "true"
    ann = node["metadata"]["annotations"]
    assert ann[ANN_REASON] == "xid 79: GPU fell off the bus" and ann[ANN_INCIDENT] == drain.incident_id
    assert [e["involvedObject"]["kind"] for e in _events(kube, "default", name, "SickbayQuarantine")] == [
        "Node"
    ]
    assert [c.argv[0] for c in result.commands] == ["GET", "PATCH", "POST"]

    again = adapter.handle(k8s_action(ActionKind.DRAIN_NODE, node=name))
    assert again.status == ActionStatus.CONVERGED

    resumed = adapter.handle(k8s_action(ActionKind.RESUME_NODE, node=name))
    assert resumed.status == ActionStatus.SUCCEEDED, resumed.detail
    node = _node(kube, name)
    assert not node["spec"].get("unschedulable")
    assert [t["key"] for t in node["spec"].get("taints") or []] == ["node.kubernetes.io/not-ready"]
    assert LABEL_KEY not in (node["metadata"].get("labels") or {})
    assert not set(node["metadata"].get("annotations") or {}) & {ANN_REASON, ANN_INCIDENT}
    assert len(_events(kube, "default", name, "SickbayRestore")) == 1
    assert adapter.handle(k8s_action(ActionKind.RESUME_NODE, node=name)).status == ActionStatus.CONVERGED


def test_drain_keeps_other_taints_and_resume_leaves_them(
    kube: Client, make_node: Callable[..., str], uid: str
):
    other = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    name = make_node(f"gpu-{uid}-t", taints=[other])
    adapter = KubernetesAdapter(kube)
    assert adapter.handle(k8s_action(ActionKind.DRAIN_NODE, node=name)).status == ActionStatus.SUCCEEDED
    keys = {"nvidia.com/gpu", "node.kubernetes.io/not-ready"}
    assert {t["key"] for t in _node(kube, name)["spec"]["taints"]} == keys | {TAINT_KEY}
    assert adapter.handle(k8s_action(ActionKind.RESUME_NODE, node=name)).status == ActionStatus.SUCCEEDED
    assert {t["key"] for t in _node(kube, name)["spec"]["taints"]} == keys


def test_observe_mode_validates_and_touches_nothing(kube: Client, make_node: Callable[..., str], uid: str):
    name = make_node(f"gpu-{uid}-o")
    before = _node(kube, name)["metadata"]["resourceVersion"]

    result = KubernetesAdapter(kube).handle(k8s_action(ActionKind.DRAIN_NODE, node=name, dry_run=True))

    assert result.status == ActionStatus.DRY_RUN
    assert result.detail.startswith(f"would cordon {name}, taint {TAINT_KEY}=")
    assert _node(kube, name)["metadata"]["resourceVersion"] == before
    assert _events(kube, "default", name, "SickbayQuarantine") == []
    assert [c.argv[0] for c in result.commands] == ["GET"]


def test_unknown_node_is_rejected_and_bad_names_never_reach_the_api(kube: Client, uid: str):
    adapter = KubernetesAdapter(kube)
    unknown = adapter.handle(k8s_action(ActionKind.DRAIN_NODE, node=f"gpu-{uid}-missing"))
    assert unknown.status == ActionStatus.REJECTED
    assert unknown.detail == f"node gpu-{uid}-missing not found"

    hostile = adapter.handle(k8s_action(ActionKind.DRAIN_NODE, node="gpu-01/../../namespaces"))
    assert hostile.status == ActionStatus.REJECTED
    assert "not a valid RFC 1123 subdomain" in hostile.detail
    assert hostile.commands == []

    no_kind = adapter.handle(k8s_action(ActionKind.REQUEUE_JOB, job_id="x", namespace="default"))
    assert no_kind.status == ActionStatus.REJECTED and "needs workload_kind" in no_kind.detail


def test_resume_refuses_a_cordon_sickbay_did_not_make(kube: Client, make_node: Callable[..., str], uid: str):
    name = make_node(f"gpu-{uid}-c", unschedulable=True)
    result = KubernetesAdapter(kube).handle(k8s_action(ActionKind.RESUME_NODE, node=name))
    assert result.status == ActionStatus.REJECTED
    assert "cordoned by someone else" in result.detail
    assert _node(kube, name)["spec"]["unschedulable"] is True


def _pytorchjob(name: str, ns: str) -> Any:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "example.invalid/train:1"}]}}
    worker_template = {
        "spec": {
            "containers": [{"name": "pytorch", "image": "example.invalid/train:1"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]},
                            {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]},
                        ]
                    }
                }
            },
        }
    }
    return PyTorchJob.from_dict(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
                    "Worker": {"replicas": 2, "restartPolicy": "OnFailure", "template": worker_template},
                }
            },
        }
    )


def _gone_or_terminating(kube: Client, name: str, ns: str) -> bool:
    try:
        return bool(as_dict(kube.get(Pod, name, namespace=ns))["metadata"].get("deletionTimestamp"))
    except ApiError as exc:
        return exc.status.code == 404


def test_pytorchjob_restarts_with_anti_affinity_excluding_the_culprit(
    kube: Client, namespace: str, make_node: Callable[..., str], uid: str
):
    culprit, healthy = make_node(f"gpu-{uid}-bad"), make_node(f"gpu-{uid}-ok")
    job = f"llama-{uid}"
    kube.create(_pytorchjob(job, namespace))
    labels = {"training.kubeflow.org/job-name": job}
    pods = {f"{job}-master-0": culprit, f"{job}-worker-0": healthy, f"{job}-worker-1": culprit}
    for pname, node in pods.items():
        kube.create(pod(pname, namespace, node, labels))
    bystander = kube.create(
        pod(f"other-{uid}", namespace, culprit, {"training.kubeflow.org/job-name": "other"})
    )
    adapter = KubernetesAdapter(kube)
    action = k8s_action(
        ActionKind.REQUEUE_JOB,
        job_id=job,
        namespace=namespace,
        workload_kind=WorkloadKind.PYTORCH_JOB,
        exclude_nodes=[culprit],
    )

    observed = adapter.handle(action.model_copy(update={"dry_run": True}))
    assert observed.status == ActionStatus.DRY_RUN
    assert all(not _gone_or_terminating(kube, p, namespace) for p in pods)

    result = adapter.handle(action)

    assert result.status == ActionStatus.SUCCEEDED, result.detail
    spec = as_dict(kube.get(PyTorchJob, job, namespace=namespace))["spec"]["pytorchReplicaSpecs"]
    master_terms = spec["Master"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert master_terms == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [culprit]}]}
    ]
    worker_terms = spec["Worker"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    # ORed terms: the exclusion is ANDed into each, and the user's own expressions stay.
    assert [[e["key"] for e in t["matchExpressions"]] for t in worker_terms] == [
        ["gpu", "kubernetes.io/hostname"],
        ["gpu", "kubernetes.io/hostname"],
    ]
    assert all(t["matchExpressions"][1]["values"] == [culprit] for t in worker_terms)
    assert all(_gone_or_terminating(kube, p, namespace) for p in pods)
    assert not _gone_or_terminating(kube, bystander.metadata.name, namespace)
    assert len(_events(kube, namespace, job, "SickbayRestart")) == 1
    assert len(_events(kube, namespace, f"{job}-worker-0", "SickbayRestart")) == 1

    assert adapter.handle(action).status == ActionStatus.CONVERGED
    assert spec == as_dict(kube.get(PyTorchJob, job, namespace=namespace))["spec"]["pytorchReplicaSpecs"]


def test_unknown_pytorchjob_is_rejected(kube: Client, namespace: str):
    result = KubernetesAdapter(kube).handle(
        k8s_action(
            ActionKind.REQUEUE_JOB, job_id="nope", namespace=namespace, workload_kind=WorkloadKind.PYTORCH_JOB
        )
    )
    assert result.status == ActionStatus.REJECTED
    assert result.detail == f"pytorchjob {namespace}/nope not found"


def test_trainjob_restart_needs_the_culprit_quarantined_then_suspends_and_resumes(
    kube: Client, namespace: str, make_node: Callable[..., str], uid: str
):
    culprit = make_node(f"gpu-{uid}-tj")
    name = f"tj-{uid}"
    kube.create(
        TrainJob.from_dict(
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
            }
        )
    )
    adapter = KubernetesAdapter(kube, settle_s=2, poll_s=0.2)
    action = k8s_action(
        ActionKind.REQUEUE_JOB,
        job_id=name,
        namespace=namespace,
        workload_kind=WorkloadKind.TRAIN_JOB,
        exclude_nodes=[culprit],
    )

    refused = adapter.handle(action)
    assert refused.status == ActionStatus.REJECTED
    assert "cannot express node anti-affinity" in refused.detail and culprit in refused.detail

    assert adapter.handle(k8s_action(ActionKind.DRAIN_NODE, node=culprit)).status == ActionStatus.SUCCEEDED
    result = adapter.handle(action)

    assert result.status == ActionStatus.SUCCEEDED, result.detail
    patches = [c.argv for c in result.commands if c.argv[0] == "PATCH"]
    assert len(patches) == 2  # suspend, then resume
    tj = as_dict(kube.get(TrainJob, name, namespace=namespace))
    assert tj["spec"]["suspend"] is False
    assert tj["metadata"]["annotations"]["sickbay.io/excluded-nodes"] == culprit
    assert len(_events(kube, namespace, name, "SickbayRestart")) == 1
    assert adapter.handle(action).status == ActionStatus.CONVERGED


def _workload(name: str, ns: str) -> Any:
    return KueueWorkload.from_dict(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Workload",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"active": True, "queueName": "gpu", "podSets": [{"name": "main", "count": 2}]},
        }
    )


def _set_conditions(kube: Client, name: str, ns: str, conditions: list[dict[str, str]]) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body = {
        "status": {
            "conditions": [{**c, "lastTransitionTime": now, "message": c["reason"]} for c in conditions]
        }
    }
    kube.patch(KueueWorkload.Status, name, body, namespace=ns, patch_type=PatchType.MERGE)


def test_kueue_workload_is_deactivated_evicted_and_requeued(kube: Client, namespace: str, uid: str):
    name = f"wl-{uid}"
    kube.create(_workload(name, namespace))
    _set_conditions(
        kube, name, namespace, [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}]
    )
    seen_inactive = threading.Event()

    def kueue_stand_in() -> None:
        """What Kueue's workload controller does on spec.active=false: evict and release the quota."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            wl = as_dict(kube.get(KueueWorkload, name, namespace=namespace))
            if wl["spec"].get("active") is False:
                seen_inactive.set()
                _set_conditions(
                    kube,
                    name,
                    namespace,
                    [
                        {"type": "QuotaReserved", "status": "False", "reason": "Pending"},
                        {"type": "Evicted", "status": "True", "reason": "InactiveWorkload"},
                    ],
                )
                return
            time.sleep(0.1)

    controller = threading.Thread(target=kueue_stand_in, daemon=True)
    controller.start()
    action = k8s_action(
        ActionKind.REQUEUE_JOB, job_id=name, namespace=namespace, workload_kind=WorkloadKind.KUEUE_WORKLOAD
    )

    result = KubernetesAdapter(kube, settle_s=15, poll_s=0.2).handle(action)
    controller.join(5)

    assert seen_inactive.is_set()
    assert result.status == ActionStatus.SUCCEEDED, result.detail
    wl = as_dict(kube.get(KueueWorkload, name, namespace=namespace))
    assert wl["spec"]["active"] is True
    assert len(_events(kube, namespace, name, "SickbayRequeue")) == 1


def test_kueue_workload_without_quota_is_already_queued(kube: Client, namespace: str, uid: str):
    name = f"wl-{uid}"
    kube.create(_workload(name, namespace))
    result = KubernetesAdapter(kube).handle(
        k8s_action(
            ActionKind.REQUEUE_JOB,
            job_id=name,
            namespace=namespace,
            workload_kind=WorkloadKind.KUEUE_WORKLOAD,
        )
    )
    assert result.status == ActionStatus.CONVERGED
    assert "holds no quota" in result.detail


def test_expired_quarantines_are_swept_and_open_ended_ones_stay(
    kube: Client, make_node: Callable[..., str], uid: str
):
    from datetime import UTC, datetime, timedelta

    expired, open_ended = make_node(f"gpu-{uid}-exp"), make_node(f"gpu-{uid}-keep")
    adapter = KubernetesAdapter(kube)
    past = datetime.now(UTC) - timedelta(minutes=5)
    assert adapter.handle(k8s_action(ActionKind.DRAIN_NODE, node=expired, expires_at=past)).status == (
        ActionStatus.SUCCEEDED
    )
    assert adapter.handle(k8s_action(ActionKind.DRAIN_NODE, node=open_ended)).status == ActionStatus.SUCCEEDED
    assert ANN_EXPIRES in _node(kube, expired)["metadata"]["annotations"]

    results = [r for r in adapter.sweep_expired("it") if r.detail.startswith(f"node {expired} ")]

    assert [r.status for r in results] == [ActionStatus.SUCCEEDED]
    assert not _node(kube, expired)["spec"].get("unschedulable")
    assert _node(kube, open_ended)["spec"]["unschedulable"] is True


def test_trainjob_whose_pods_never_stop_is_reported_pending_not_succeeded(
    kube: Client, namespace: str, make_node: Callable[..., str], uid: str
):
    culprit = make_node(f"gpu-{uid}-tp")
    name = f"tjp-{uid}"
    kube.create(
        TrainJob.from_dict(
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"runtimeRef": {"name": "torch-distributed"}},
            }
        )
    )
    # No TrainJob/JobSet controller runs here, so nothing stops this pod when the job is suspended.
    kube.create(pod(f"{name}-node-0-0", namespace, culprit, {"jobset.sigs.k8s.io/jobset-name": name}))
    adapter = KubernetesAdapter(kube, settle_s=1, poll_s=0.2)
    assert adapter.handle(k8s_action(ActionKind.DRAIN_NODE, node=culprit)).status == ActionStatus.SUCCEEDED

    result = adapter.handle(
        k8s_action(
            ActionKind.REQUEUE_JOB,
            job_id=name,
            namespace=namespace,
            workload_kind=WorkloadKind.TRAIN_JOB,
            exclude_nodes=[culprit],
        )
    )

    assert result.status == ActionStatus.PENDING
    assert "pods were still there after 1s" in result.detail
    assert as_dict(kube.get(TrainJob, name, namespace=namespace))["spec"]["suspend"] is False
