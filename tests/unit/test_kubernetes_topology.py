"""Kubernetes job topology for the correlator: the watch's ``kubernetes.job_pods`` snapshots and what
the correlator makes of them (the job's nodes on the incident, one attempt per pod incarnation)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from connectors.sources.kubernetes_watch import KubeWatchCollector, Offsets, Topics
from schemas import codec
from schemas.signals import Role, Signal, SourceRef
from streams.correlate.correlator import (
    K8S_JOB_PODS,
    Timing,
    add_signal,
    apply_topology,
    decide_now,
    tick,
)
from streams.correlate.state import JobTopology
from tests.factories import T0, kernel_xid, one

NODES = ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
TIMING = Timing(root_grace_s=5, quiet_s=120, refine_interval_s=1)


class MemorySink:
    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes]] = []

    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> int:
        self.records.append((topic, key, value))
        return len(self.records)

    def flush(self, timeout_s: float = 30.0) -> int:
        return 0

    def placements(self) -> list[tuple[bytes | None, list[str]]]:
        out = []
        for topic, key, value in self.records:
            if topic == "signals-job":
                sig = Signal.model_validate(codec.loads(value))
                assert (sig.rule, sig.role) == (K8S_JOB_PODS, Role.TOPOLOGY)
                nodes = sig.attrs["nodes"]
                assert isinstance(nodes, list)
                out.append((key, nodes))
        return out


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def _collector(
    sink: MemorySink, tmp_path: Any, signals_job: str | None = "signals-job"
) -> KubeWatchCollector:
    topics = Topics("raw", "topo-node", "topo-jobs", signals_job)
    return KubeWatchCollector(None, sink, topics, Offsets(tmp_path / "o.json"), cluster="c1", clock=Clock())  # type: ignore[arg-type]


def _pod(uid: str, node: str, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "uid": uid,
        "namespace": "llm",
        "name": f"pretrain-{uid}",
        "labels": {"training.kubeflow.org/job-name": "pretrain"},
        "creationTimestamp": "2026-11-29T03:00:00Z",
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T03:05:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def _snapshot(nodes: list[str], at: datetime, job: str = "pretrain") -> Signal:
    return Signal(
        signal_id=f"k8s-{at.timestamp()}-{len(nodes)}",
        rule=K8S_JOB_PODS,
        role=Role.TOPOLOGY,
        summary="placement",
        event_time=at,
        observed_time=at,
        job_id=job,
        attrs={"nodes": nodes},
        text="placement",
        source=SourceRef(kind="scheduler"),
    )


def test_watch_publishes_the_nodes_of_a_jobs_live_pods_each_time_they_change(tmp_path):
    sink = MemorySink()
    collector = _collector(sink, tmp_path)
    for i, node in enumerate(NODES):
        collector.on_pod("ADDED", _pod(f"u{i}", node))
    collector.on_pod("MODIFIED", _pod("u0", NODES[0]))  # a status change: same placement, nothing new
    for i, node in enumerate(NODES):
        collector.on_pod("MODIFIED", _pod(f"u{i}", node, deleting=True))  # the adapter's restart
    collector.on_pod("ADDED", _pod("u9", "gpu-05"))  # the operator's new pod

    placements = sink.placements()
    assert [nodes for _, nodes in placements] == [
        ["gpu-01"],
        ["gpu-01", "gpu-02"],
        ["gpu-01", "gpu-02", "gpu-03"],
        NODES,
        ["gpu-02", "gpu-03", "gpu-04"],
        ["gpu-03", "gpu-04"],
        ["gpu-04"],
        [],
        ["gpu-05"],
    ]
    assert {key for key, _ in placements} == {b"pretrain"}  # keyed by job: the correlator's partition


def test_watch_without_a_signals_topic_publishes_no_placement(tmp_path):
    sink = MemorySink()
    collector = _collector(sink, tmp_path, signals_job=None)
    collector.on_pod("ADDED", _pod("u0", "gpu-01"))
    assert sink.placements() == []
    assert [t for t, _, _ in sink.records] == ["topo-node", "raw"]


def test_a_resumed_watch_that_first_sees_a_pod_go_does_not_end_the_attempt(tmp_path):
    sink = MemorySink()
    collector = _collector(sink, tmp_path)  # nothing known: as after a restart from saved offsets
    collector.on_pod("DELETED", _pod("u0", "gpu-01"))
    assert sink.placements() == []


def test_pod_snapshots_make_one_attempt_per_incarnation_and_ignore_replays():
    topo: JobTopology | None = None
    for n in range(1, 5):
        topo, out = apply_topology(topo, _snapshot(NODES[:n], T0 + timedelta(seconds=n)), "c1")
        assert out == []  # the watch publishes per-pod assignments itself
    assert topo is not None
    assert (topo.attempt, topo.nodes, topo.ended_at) == (1, NODES, None)

    topo, _ = apply_topology(topo, _snapshot(NODES[1:], T0 + timedelta(seconds=10)), "c1")
    assert topo.nodes == NODES  # pods going one by one: the attempt's nodes stay
    end = T0 + timedelta(seconds=13)
    topo, _ = apply_topology(topo, _snapshot([], end), "c1")
    assert (topo.attempt, topo.ended_at, topo.end_state) == (1, end, "pods deleted")

    topo, _ = apply_topology(topo, _snapshot(NODES, T0 + timedelta(seconds=4)), "c1")  # a replay
    assert (topo.attempt, topo.ended_at) == (1, end)

    restarted = ["gpu-01", "gpu-02", "gpu-04", "gpu-05"]
    topo, _ = apply_topology(topo, _snapshot(restarted, T0 + timedelta(seconds=20)), "c1")
    assert (topo.attempt, topo.nodes, topo.ended_at) == (2, restarted, None)
    topo, _ = apply_topology(topo, _snapshot([], end), "c1")  # the old end, redelivered
    assert (topo.attempt, topo.ended_at) == (2, None)


def test_kubernetes_incident_names_the_jobs_nodes_and_the_next_fault_after_a_restart_is_a_new_incident():
    topo: JobTopology | None = None
    topo, _ = apply_topology(topo, _snapshot(NODES, T0), "c1")
    now = T0 + timedelta(minutes=1)
    xid = one(kernel_xid("gpu-03", 79, now), offset=1).model_copy(
        update={"job_id": "pretrain", "routed": True}
    )
    window = add_signal(None, topo, xid, "c1", now)
    assert window is not None
    window, first = decide_now(window, topo, now, TIMING)
    assert first is not None
    assert (first.attempt, first.job_nodes) == (1, NODES)
    assert "scheduler" in first.coverage

    topo, _ = apply_topology(topo, _snapshot([], now + timedelta(seconds=2)), "c1")  # pods deleted
    window, last = tick(window, topo, now + timedelta(seconds=10), TIMING)
    assert window.closed and last is not None and last.incident_id == first.incident_id

    topo, _ = apply_topology(
        topo, _snapshot(["gpu-01", "gpu-02", "gpu-04", "gpu-05"], now + timedelta(seconds=30)), "c1"
    )
    later = now + timedelta(minutes=2)
    again = one(kernel_xid("gpu-05", 79, later), offset=2).model_copy(
        update={"job_id": "pretrain", "routed": True}
    )
    window2 = add_signal(window, topo, again, "c1", later)
    assert window2 is not None
    window2, second = decide_now(window2, topo, later, TIMING)
    assert second is not None and second.incident_id != first.incident_id
    assert second.attempt == 2
    assert second.culprit is not None and second.culprit.node == "gpu-05"
