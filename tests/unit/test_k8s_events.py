"""Kubernetes Events on Kafka (an event exporter's log, or its own Kafka sink) are about their
subject -- a node, a job, a job's pod or Kueue Workload -- never the node the exporter runs on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from schemas import codec
from streams.correlate.correlator import apply_topology
from streams.extract.k8s_events import job_of
from streams.extract.normalize import normalize, normalize_all
from tests.factories import T0, one

EXPORTER_NODE = "gke-ml-pool-sys-41kl"


def _event(kind: str, name: str, reason: str, note: str, ns: str = "team-a", core: bool = False) -> dict:
    about = {"kind": kind, "namespace": ns, "name": name, "uid": "01773d04"}
    if core:  # core/v1 Event, as kubernetes-event-exporter and `kubectl get events -o json` write it
        return {
            "kind": "Event",
            "apiVersion": "v1",
            "metadata": {"name": f"{name}.17a", "namespace": ns},
            "involvedObject": about,
            "reason": reason,
            "message": note,
            "lastTimestamp": "2026-11-25T15:31:19Z",
            "type": "Warning",
        }
    return {
        "kind": "Event",
        "apiVersion": "events.k8s.io/v1",
        "metadata": {"name": f"{name}.e4f6f377", "namespace": ns},
        "eventTime": "2026-11-25T15:31:19.181682Z",
        "reportingController": "kernel-monitor",
        "reason": reason,
        "regarding": about,
        "note": note,
        "type": "Warning",
    }


def _shipped(event: dict) -> bytes:
    """The exporter's stdout line as Vector's kubernetes_logs source ships it."""
    return codec.dumps(
        {
            "message": codec.dumps(event).decode(),
            "timestamp": "2026-11-25T15:31:20Z",
            "kubernetes": {
                "pod_name": "event-exporter-twms",
                "pod_namespace": "monitoring",
                "pod_node_name": EXPORTER_NODE,
                "container_name": "event-exporter",
                "pod_labels": {"app": "event-exporter"},
            },
        }
    )


def test_a_node_event_is_about_that_node_not_the_exporters():
    ev = _event(
        "Node",
        "ip-10-1-9-13.ec2.internal",
        "OOMKilling",
        "Memory cgroup out of memory: Killed process 248817 (python3)",
    )
    line = normalize(_shipped(ev), key_host=EXPORTER_NODE)
    assert (line.host, line.job_id) == ("ip-10-1-9-13.ec2.internal", None)
    assert line.event_time == datetime(2026, 11, 25, 15, 31, 19, 181682, tzinfo=UTC)


def test_a_pod_event_is_about_its_kubeflow_job_and_names_no_node():
    ev = _event("Pod", "mixtral-8x7b-2154152-master-0", "Killing", "Stopping container pytorch")
    line = normalize(_shipped(ev), key_host=EXPORTER_NODE)
    assert (line.host, line.job_id, line.pod, line.namespace) == (
        None,
        "mixtral-8x7b-2154152",
        "mixtral-8x7b-2154152-master-0",
        "team-a",
    )


def test_workload_and_job_events_are_about_the_job():
    preempted = _event(
        "Workload",
        "pytorchjob-mixtral-8x7b-2154152-decli",
        "Preempted",
        "Preempted to accommodate a workload",
    )
    deadline = _event(
        "PyTorchJob", "gpt3-175b-1998410", "DeadlineExceeded", "Job was active longer than specified deadline"
    )
    assert normalize(_shipped(preempted)).job_id == "mixtral-8x7b-2154152"
    assert normalize(_shipped(deadline)).job_id == "gpt3-175b-1998410"


def test_kubeflow_naming_conventions():
    assert job_of("Pod", "llama-7b-worker-12") == "llama-7b"
    assert job_of("Pod", "my-trainjob-node-0-3-x7k2p") == "my-trainjob"
    assert job_of("Pod", "nginx-7c5ddbdf54-x7k2p") is None  # a Deployment's pod: no training job
    assert job_of("Workload", "job-sleep-abcde") == "sleep"
    assert job_of("Workload", "something-else") is None
    assert job_of("Service", "llama-7b-worker-0") is None


def test_a_bare_core_v1_event_on_raw_logs_is_read_not_dead_lettered():
    ev = _event("Node", "gpu-07", "NodeNotReady", "Node gpu-07 status is now: NodeNotReady", core=True)
    [line] = normalize_all(codec.dumps(ev), key_host=EXPORTER_NODE)
    assert (line.adapter, line.host, line.event_time) == (
        "k8s-event",
        "gpu-07",
        datetime(2026, 11, 25, 15, 31, 19, tzinfo=UTC),
    )
    assert "NodeNotReady" in line.text


def test_a_json_log_line_that_is_not_an_event_keeps_the_shippers_metadata():
    other = {"kind": "Deployment", "note": "Successfully assigned a/b to c"}
    line = normalize(_shipped(other), key_host=EXPORTER_NODE)
    assert line.host == EXPORTER_NODE


def _scheduled(pod: str, node: str, at: datetime) -> bytes:
    ev = _event("Pod", pod, "Scheduled", f"Successfully assigned research/{pod} to {node}", ns="research")
    ev["eventTime"] = at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return _shipped(ev)


def test_scheduled_events_build_the_jobs_topology_one_pod_at_a_time():
    s1 = one(_scheduled("llama-master-0", "gke-a", T0))
    s2 = one(_scheduled("llama-worker-0", "gke-b", T0 + timedelta(seconds=1)))
    assert (s1.rule, s1.job_id, s1.node) == ("kubernetes.pod_scheduled", "llama", "gke-a")
    topo, a1 = apply_topology(None, s1, "c1")
    topo, a2 = apply_topology(topo, s2, "c1")
    assert (topo.attempt, topo.nodes) == (1, ["gke-a", "gke-b"])
    assert [(a.node, a.attempt, a.state) for a in a1 + a2] == [
        ("gke-a", 1, "assigned"),
        ("gke-b", 1, "assigned"),
    ]
    same, _again = apply_topology(topo, s2, "c1")  # a redelivered event
    assert same.nodes == topo.nodes and same.attempt == 1
    ended = topo.model_copy(update={"ended_at": T0 + timedelta(minutes=5), "end_state": "pods deleted"})
    replay, _ = apply_topology(ended, s1, "c1")
    assert replay == ended  # from before the end: ignored
    restart, a3 = apply_topology(
        ended, one(_scheduled("llama-master-0", "gke-c", T0 + timedelta(minutes=6))), "c1"
    )
    assert (restart.attempt, restart.nodes, [a.attempt for a in a3]) == (2, ["gke-c"], [2])


def test_a_producer_that_resolved_the_pod_itself_keeps_its_host_and_job():
    ev = _event("Pod", "llama-worker-3", "BackOff", "Back-off restarting failed container")
    rec = codec.loads(_shipped(ev))
    rec["kubernetes"]["pod_node_name"] = "gpu-07"  # sickbay's watch: the pod's own node and name
    rec["kubernetes"]["pod_name"] = "llama-worker-3"
    rec["job_id"] = "llama"
    line = normalize(codec.dumps(rec))
    assert (line.host, line.job_id, line.pod) == ("gpu-07", "llama", "llama-worker-3")
