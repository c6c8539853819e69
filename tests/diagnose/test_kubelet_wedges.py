"""Kubelet events that a GPU job's `kubectl describe` shows when the node, not the job, is at fault:
a sandbox or network the node cannot provide, a pod it cannot kill, a container it lost track of.
Each had read as nothing, or (FailedKillPod, whose text ends in `KillPodSandboxError:`) as the
program's own Python exception."""

from __future__ import annotations

from tests.diagnose.logs import verdict

SANDBOX = (
    "  Warning  FailedCreatePodSandBox  2m  kubelet  Failed to create pod sandbox: rpc error: code = Unknown desc = "
    'failed to setup network for sandbox "abc": plugin type="calico" failed (add): connection is unauthorized'
)
KILL = (
    '  Warning  FailedKillPod  1m  kubelet  error killing pod: failed to "KillPodSandbox" for "abc" with '
    'KillPodSandboxError: "rpc error: code = DeadlineExceeded desc = context deadline exceeded"'
)


def test_a_sandbox_the_node_cannot_create_is_a_lead_to_the_nodes_runtime(tmp_path):
    assert verdict(tmp_path, [SANDBOX])[:3] == ("scheduler.k8s_sandbox_failed", "infrastructure", True)


def test_a_pod_the_kubelet_cannot_kill_is_the_node_not_the_programs_exception(tmp_path):
    assert verdict(tmp_path, [KILL])[:3] == ("scheduler.k8s_kill_pod_failed", "hardware_host", True)
    oom = "      Reason:       OOMKilled"
    assert verdict(tmp_path, [KILL, oom])[0] == "scheduler.k8s_reason"  # a stronger reason beside it wins


def test_a_container_the_kubelet_lost_track_of_is_infrastructure(tmp_path):
    assert verdict(tmp_path, ["      Reason:       ContainerStatusUnknown"])[1:3] == ("infrastructure", True)
