"""``sickbay collect kubernetes`` against a real kube-apiserver: records the extractor reads, topology, resume."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Event, Pod

from connectors.actuators.kubernetes_client import PyTorchJob
from connectors.sources.kubernetes_watch import (
    WATCHED,
    KubeWatchCollector,
    Offsets,
    Topics,
    make_async_client,
)
from schemas import codec
from schemas.jobs import JobInfo
from schemas.signals import JobNodeAssignment
from streams.extract.extractor import Extractor
from streams.extract.normalize import normalize
from tests.kubernetes.conftest import pod

pytestmark = [pytest.mark.integration, pytest.mark.timeout(5400)]
TOPICS = Topics("raw", "topo-node", "topo-jobs")


class MemorySink:
    """Stands in for the Kafka producer: the collector's output is what is under test here."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes]] = []
        self.flushes = 0

    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> int:
        self.records.append((topic, key, value))
        return len(self.records)

    def flush(self, timeout_s: float = 30.0) -> int:
        self.flushes += 1
        return 0

    def on(self, topic: str) -> list[dict[str, Any]]:
        return [codec.loads(v) for t, _, v in self.records if t == topic]


def _collect(kubeconfig: Path, offsets: Path, ns: str) -> tuple[MemorySink, KubeWatchCollector]:
    sink = MemorySink()

    async def go() -> KubeWatchCollector:
        client = make_async_client(str(kubeconfig))
        collector = KubeWatchCollector(
            client, sink, TOPICS, Offsets(offsets), cluster="it", namespace=ns, flush_every_s=0.3
        )
        await collector.run(idle_exit_s=2.0, stop_after_s=30)
        await client.close()
        return collector

    return sink, asyncio.run(go())


def _event(ns: str, pod_name: str, reason: str, message: str) -> Event:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Event.from_dict(
        {
            "metadata": {"name": f"{pod_name}.{reason.lower()}", "namespace": ns},
            "involvedObject": {"kind": "Pod", "namespace": ns, "name": pod_name, "apiVersion": "v1"},
            "reason": reason,
            "message": message,
            "type": "Warning",
            "source": {"component": "kubelet"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
    )


def test_watch_emits_extractable_records_and_topology_then_resumes_from_resource_version(
    kube: Client, kubeconfig: Path, namespace: str, make_node: Callable[..., str], uid: str, tmp_path: Path
):
    node = make_node(f"gpu-{uid}-w")
    job = f"bert-{uid}"
    labels = {"training.kubeflow.org/job-name": job}
    kube.create(
        PyTorchJob.from_dict(
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {
                    "name": job,
                    "namespace": namespace,
                    "annotations": {"APS": '{"max_requeue_times": 2}'},
                },
                "spec": {"pytorchReplicaSpecs": {}},
            }
        )
    )
    kube.create(pod(f"{job}-worker-0", namespace, node, labels))
    oom = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "trainer",
                "restartCount": 3,
                "ready": False,
                "image": "example.invalid/trainer:1",
                "imageID": "",
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
            }
        ],
    }
    worker1 = kube.create(pod(f"{job}-worker-1", namespace, node, labels))
    kube.patch(Pod.Status, worker1.metadata.name, {"status": oom}, namespace=namespace)  # type: ignore[union-attr]
    kube.create(
        _event(namespace, f"{job}-worker-1", "BackOff", "Back-off restarting failed container trainer")
    )
    offsets = tmp_path / "kube-offsets.json"

    sink, first = _collect(kubeconfig, offsets, namespace)

    assert first.coverage.kinds["pods"] == "watching" and first.coverage.kinds["workloads"] == "watching"
    raw = [(k, v) for t, k, v in sink.records if t == "raw"]
    lines = [normalize(v, k.decode() if k else None) for k, v in raw]
    ours = [ln for ln in lines if ln.job_id == job]
    assert {ln.host for ln in ours if ln.pod and ln.pod.startswith(job)} == {node}
    signals = [s for ln in ours for s in Extractor().extract(ln, datetime.now(UTC))]
    assert "scheduler.k8s_reason" in {s.rule for s in signals}
    assert any(s.attrs.get("reason") == "OOMKilled" for s in signals)
    events = [codec.loads(ln.text) for ln in ours if '"kind":"Event"' in ln.text]
    assert [(e["reason"], e["regarding"]["name"], e["apiVersion"]) for e in events] == [
        ("BackOff", f"{job}-worker-1", "events.k8s.io/v1")
    ]
    assigned = [JobNodeAssignment.model_validate(a) for a in sink.on("topo-node")]
    assert sorted((a.node, a.job_id, a.state) for a in assigned) == [(node, job, "assigned")] * 2
    infos = [JobInfo.model_validate(j) for j in sink.on("topo-jobs")]
    assert [(i.job_id, i.namespace, i.workload_kind, i.annotations.get("APS")) for i in infos] == [
        (job, namespace, "pytorchjob", '{"max_requeue_times": 2}')
    ]
    saved = codec.loads(offsets.read_bytes())
    assert {"pods", "events", "pytorchjobs"} <= set(saved)

    # Changes made while the collector is down: only these come out on the next run.
    kube.delete(Pod, f"{job}-worker-0", namespace=namespace, grace_period=0)
    kube.create(_event(namespace, f"{job}-worker-1", "Evicted", "The node was low on resource: memory."))

    sink2, _ = _collect(kubeconfig, offsets, namespace)

    texts = [normalize(v, None).text for t, _, v in sink2.records if t == "raw"]
    assert not any('"BackOff"' in t for t in texts), "an event from before the restart was emitted again"
    assert not any(f'"{job}-worker-1"' in t and t.startswith('{"kind":"Pod"') for t in texts)
    assert any('"reason":"Evicted"' in t for t in texts)
    assert any(f'"{job}-worker-0"' in t and '"phase":"Deleted"' in t for t in texts)
    released = [JobNodeAssignment.model_validate(a) for a in sink2.on("topo-node")]
    assert [(a.node, a.job_id, a.state) for a in released] == [(node, job, "released")]
    assert int(codec.loads(offsets.read_bytes())["events"]) > int(saved["events"])


def test_watch_reports_kinds_whose_crd_is_missing_and_keeps_going(kubeconfig: Path, tmp_path: Path):
    from lightkube.generic_resource import create_namespaced_resource

    from connectors.sources.kubernetes_watch import Watched

    missing = Watched(
        "ghosts", create_namespaced_resource("example.invalid", "v1", "Ghost", "ghosts"), "Ghost", "ghost"
    )
    sink = MemorySink()

    async def go() -> KubeWatchCollector:
        client = make_async_client(str(kubeconfig))
        nodes = next(w for w in WATCHED if w.name == "nodes")
        collector = KubeWatchCollector(
            client, sink, TOPICS, Offsets(tmp_path / "o.json"), kinds=(nodes, missing), flush_every_s=0.3
        )
        await collector.run(idle_exit_s=1.5, stop_after_s=20)
        await client.close()
        return collector

    collector = asyncio.run(go())
    assert collector.coverage.kinds == {"nodes": "watching", "ghosts": "not installed (no such resource)"}
