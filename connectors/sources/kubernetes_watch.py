"""``sickbay collect kubernetes``: watch the API server and put what matters for attribution on Kafka.

Watched: core/v1 Events, Pods (phase, status reasons, container terminations and restarts, node
assignment), Nodes (conditions, cordon, taints), and the training workloads (PyTorchJob, TrainJob,
Kueue Workload; a kind whose CRD is not installed is reported in the coverage and skipped).

Output, in shapes the pipeline already reads:

- ``raw-logs``: one Fluent Bit-shaped record per change, the way an event exporter ships events: ``log``
  holds one JSON line (an ``events.k8s.io/v1`` Event for Events — the simulator's shape — and a compact
  status line for Pods, Nodes and workloads), ``kubernetes.host`` is the node the line is about and
  ``job_id`` the training job, so the extractor's Kubernetes rules (``reason":"OOMKilled"``, ...) fire
  and the signal is routed to its node and job.
- ``topology.node``: a :class:`JobNodeAssignment` when a job's pod is bound to a node and when it
  ends or is deleted, so the correlator learns Kubernetes job→node topology as it does from Slurm.
  ``attempt`` is the pod's creation time in epoch seconds: unique per pod incarnation on a node.
- ``signals.job``: a ``kubernetes.job_pods`` topology signal when the nodes of a job's live pods change,
  so the correlator knows the job's nodes and attempts (all pods gone ends an attempt; new pods start the
  next) the way slurmctld's allocation and requeue lines tell it for Slurm.
- ``topology.jobs``: a :class:`JobInfo` per PyTorchJob/TrainJob/Workload (namespace, kind, annotations
  for the per-job APS policy override).

Resume: the last resourceVersion per watched kind is saved to an offsets file, *after* the producer
has flushed the records up to it, so a restart continues where delivery ended (at-least-once; a 410
Gone from an expired version falls back to a full re-list, which re-emits current state).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx2
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.types import OnErrorAction, OnErrorResult

from connectors.actuators.kubernetes_client import KueueWorkload, PyTorchJob, TrainJob, as_dict, load_config
from schemas import codec
from schemas.jobs import JobInfo
from schemas.signals import JobNodeAssignment, Role, Signal, SourceRef
from streams.correlate.correlator import K8S_JOB_PODS

log = logging.getLogger("sickbay.collect.kubernetes")

JOB_LABELS = (
    "training.kubeflow.org/job-name",
    "trainer.kubeflow.org/trainjob-name",
    "jobset.sigs.k8s.io/jobset-name",
    "kueue.x-k8s.io/job-name",
    "batch.kubernetes.io/job-name",
    "job-name",
)
COLLECTOR_CONTAINER = "sickbay-kube-watch"


class Sink(Protocol):
    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> object: ...

    def flush(self, timeout_s: float = 30.0) -> int: ...


@dataclass(frozen=True)
class Watched:
    name: str
    resource: Any
    kind: str
    workload_kind: str | None = None


WATCHED = (
    Watched("events", Event, "Event"),
    Watched("pods", Pod, "Pod"),
    Watched("nodes", Node, "Node"),
    Watched("pytorchjobs", PyTorchJob, "PyTorchJob", "pytorchjob"),
    Watched("trainjobs", TrainJob, "TrainJob", "trainjob"),
    Watched("workloads", KueueWorkload, "Workload", "kueue_workload"),
)


@dataclass
class Topics:
    raw_logs: str
    topology_node: str
    topology_jobs: str
    signals_job: str | None = None  # job placement snapshots for the correlator (None: not published)


@dataclass
class Coverage:
    """What the collector could reach: per kind, ``watching`` / ``not installed`` / the error."""

    kinds: dict[str, str] = field(default_factory=dict)
    records: int = 0
    assignments: int = 0
    jobs: int = 0


class Offsets:
    """resourceVersion per watched kind, in a small JSON file written atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.versions: dict[str, str] = {}
        if path.is_file():
            try:
                data = codec.loads(path.read_bytes())
            except ValueError as exc:
                raise ValueError(f"offsets file {path} is not JSON ({exc}); delete it to re-list") from exc
            if isinstance(data, dict):
                self.versions = {str(k): str(v) for k, v in data.items()}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_bytes(codec.dumps(self.versions))
        os.replace(tmp, self.path)


def _ts(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def _rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _status(exc: Exception) -> int | None:
    """The HTTP status of a watch failure (lightkube raises ApiError or, mid-stream, httpx's error)."""
    if isinstance(exc, ApiError):
        return exc.status.code
    if isinstance(exc, httpx2.HTTPStatusError):
        return exc.response.status_code
    return None


def job_of(labels: dict[str, str]) -> str | None:
    for key in JOB_LABELS:
        if labels.get(key):
            return labels[key]
    return None


def _conditions(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {k: c.get(k) for k in ("type", "status", "reason", "message") if c.get(k) is not None}
        for c in (obj.get("status") or {}).get("conditions") or []
    ]


def _container(cs: dict[str, Any]) -> dict[str, Any]:
    """A containerStatus in the API's own shape (``lastState.terminated.reason`` ...), minus timestamps and
    ids that change without meaning anything, so the line reads like ``kubectl get pod -o json``."""
    out: dict[str, Any] = {"name": cs.get("name"), "restartCount": cs.get("restartCount", 0)}
    for key in ("state", "lastState"):
        for phase, detail in (cs.get(key) or {}).items():
            if detail:
                kept = {k: detail[k] for k in ("reason", "exitCode", "signal") if detail.get(k) is not None}
                out[key] = {phase: kept}
    return out


class KubeWatchCollector:
    """One watch task per kind; records go to ``sink``; offsets saved after each delivered batch."""

    def __init__(
        self,
        client: AsyncClient,
        sink: Sink,
        topics: Topics,
        offsets: Offsets,
        *,
        cluster: str = "default",
        namespace: str | None = None,
        kinds: tuple[Watched, ...] = WATCHED,
        flush_every_s: float = 1.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.sink = sink
        self.topics = topics
        self.offsets = offsets
        self.cluster = cluster
        self.namespace = namespace
        self.kinds = kinds
        self.flush_every_s = flush_every_s
        self.clock = clock
        self.coverage = Coverage()
        self._seen: dict[str, str] = {}  # uid -> digest of the last line emitted (emit changes only)
        self._pods: dict[tuple[str, str], tuple[str | None, str | None]] = {}  # (ns, name) -> node, job
        self._bound: dict[str, tuple[str, str, int]] = {}  # pod uid -> node, job, attempt (assigned)
        self._pending: dict[str, str] = {}  # kind -> resourceVersion not yet flushed
        self._released: set[str] = set()  # pod uids whose release was published
        self._expired: set[str] = set()  # kinds whose watch ended with 410 Gone
        self._placed: dict[str, list[str]] = {}  # job -> nodes of its live pods, as last published
        self._last_event = time.monotonic()

    # -- output -------------------------------------------------------------------------------------

    def _line(
        self,
        line: dict[str, Any],
        *,
        when: datetime,
        host: str | None,
        job: str | None,
        ns: str | None,
        pod: str | None,
        labels: dict[str, str],
    ) -> None:
        rec: dict[str, Any] = {
            "@timestamp": round(when.timestamp(), 6),
            "time": _rfc3339(when),
            "stream": "stdout",
            "log": codec.dumps(line).decode(),
            "kubernetes": {
                "pod_name": pod or COLLECTOR_CONTAINER,
                "namespace_name": ns,
                "host": host,
                "container_name": COLLECTOR_CONTAINER,
                "labels": labels,
            },
        }
        if job:
            rec["job_id"] = job
        self.sink.produce(self.topics.raw_logs, codec.dumps(rec), key=(host or "").encode() or None)
        self.coverage.records += 1

    def _changed(self, uid: str, line: dict[str, Any]) -> bool:
        digest = hashlib.blake2b(codec.dumps(line), digest_size=12).hexdigest()
        if self._seen.get(uid) == digest:
            return False
        self._seen[uid] = digest
        return True

    def _assign(
        self,
        uid: str,
        node: str,
        job: str,
        attempt: int,
        state: Literal["assigned", "released"],
        when: datetime,
    ) -> None:
        a = JobNodeAssignment(
            node=node, job_id=job, attempt=max(attempt, 1), state=state, event_time=when, cluster=self.cluster
        )
        self.sink.produce(self.topics.topology_node, codec.dumps(a), key=node.encode())
        self.coverage.assignments += 1

    def _placement(self, job: str, when: datetime) -> None:
        """Publish the nodes of the job's live pods when they change (``kubernetes.job_pods`` on
        signals.job): the correlator's job topology — which nodes an attempt ran on, when it ended —
        that Slurm gives with its allocation and requeue lines and Kubernetes does not."""
        if self.topics.signals_job is None:
            return
        nodes = sorted({n for n, j, _ in self._bound.values() if j == job})
        known = self._placed.get(job)
        if nodes == known or (not nodes and not known):
            return  # unchanged; an empty set never seen filled (a resumed watch) says nothing
        self._placed[job] = nodes
        digest = hashlib.blake2b(f"{self.cluster}|{job}|{nodes}|{when.isoformat()}".encode(), digest_size=10)
        sig = Signal(
            signal_id=f"k8s-{digest.hexdigest()}",
            rule=K8S_JOB_PODS,
            role=Role.TOPOLOGY,
            summary=f"{job}: live pods on {len(nodes)} nodes",
            event_time=when,
            observed_time=self.clock(),
            job_id=job,
            attrs={"nodes": nodes},
            text=f"kubernetes job {job} has live pods on {', '.join(nodes) or 'no node'}",
            source=SourceRef(kind="scheduler", adapter="kubernetes-watch"),
        )
        self.sink.produce(self.topics.signals_job, codec.dumps(sig), key=job.encode())

    # -- per kind -----------------------------------------------------------------------------------

    def on_event(self, typ: str, ev: dict[str, Any]) -> None:
        if typ == "DELETED":
            return  # an event expiring from the API is not news
        meta = ev.get("metadata") or {}
        inv = ev.get("involvedObject") or {}
        when = (
            _ts(ev.get("eventTime"))
            or _ts(ev.get("lastTimestamp"))
            or _ts(ev.get("firstTimestamp"))
            or self.clock()
        )
        node, job = None, None
        if inv.get("kind") == "Node":
            node = inv.get("name")
        elif inv.get("kind") == "Pod":
            node, job = self._pods.get((inv.get("namespace") or "", inv.get("name") or ""), (None, None))
        line = {
            "kind": "Event",
            "apiVersion": "events.k8s.io/v1",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
            "eventTime": _rfc3339(when),
            "reportingController": ev.get("reportingComponent") or (ev.get("source") or {}).get("component"),
            "reportingInstance": ev.get("reportingInstance") or (ev.get("source") or {}).get("host"),
            "action": ev.get("action") or ev.get("reason"),
            "reason": ev.get("reason"),
            "regarding": {k: inv.get(k) for k in ("kind", "namespace", "name", "uid") if inv.get(k)},
            "note": ev.get("message"),
            "type": ev.get("type"),
            "deprecatedCount": ev.get("count"),
        }
        if not self._changed(meta.get("uid") or meta.get("name") or "", line):
            return
        self._line(line, when=when, host=node, job=job, ns=inv.get("namespace"), pod=None, labels={})

    def on_pod(self, typ: str, pod: dict[str, Any]) -> None:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        uid, ns, name = meta.get("uid") or "", meta.get("namespace") or "", meta.get("name") or ""
        labels = meta.get("labels") or {}
        node, job = spec.get("nodeName"), job_of(labels)
        self._pods[(ns, name)] = (node, job)
        when = self.clock()
        created = _ts(meta.get("creationTimestamp"))
        attempt = int(created.timestamp()) if created else 1
        ended = (
            typ == "DELETED"
            or status.get("phase") in ("Succeeded", "Failed")
            or bool(meta.get("deletionTimestamp"))
        )
        # attempt is derived from the pod itself, so a release after a collector restart (nothing in
        # _bound) still names the assignment the earlier run published.
        if node and job and not ended and uid not in self._bound:
            self._bound[uid] = (node, job, attempt)
            self._assign(uid, node, job, attempt, "assigned", created or when)
        elif node and job and ended and uid not in self._released:
            self._bound.pop(uid, None)
            self._released.add(uid)
            self._assign(uid, node, job, attempt, "released", when)
        if job:
            self._placement(job, when)
        line = {
            "kind": "Pod",
            "metadata": {"namespace": ns, "name": name, "uid": uid},
            "node": node,
            "phase": "Deleted" if typ == "DELETED" else status.get("phase"),
            "reason": status.get("reason"),
            "message": status.get("message"),
            "restarts": sum(int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or []),
            "containers": [_container(c) for c in status.get("containerStatuses") or []],
            "conditions": [c for c in _conditions(pod) if c.get("status") != "True" or c.get("reason")],
        }
        line = {k: v for k, v in line.items() if v not in (None, [], "")}
        if typ == "DELETED":
            self._pods.pop((ns, name), None)
            self._seen.pop(uid, None)
        elif not self._changed(uid, line):
            return
        self._line(line, when=when, host=node, job=job, ns=ns, pod=name, labels=labels)

    def on_node(self, typ: str, node: dict[str, Any]) -> None:
        meta, spec = node.get("metadata") or {}, node.get("spec") or {}
        name = meta.get("name") or ""
        line = {
            "kind": "Node",
            "metadata": {"name": name, "uid": meta.get("uid")},
            "deleted": typ == "DELETED" or None,
            "unschedulable": bool(spec.get("unschedulable")),
            "taints": [
                f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}" for t in spec.get("taints") or []
            ],
            "conditions": _conditions(node),
        }
        line = {k: v for k, v in line.items() if v is not None}
        if not self._changed(meta.get("uid") or name, line):
            return
        self._line(line, when=self.clock(), host=name, job=None, ns=None, pod=None, labels={})

    def on_workload(self, w: Watched, typ: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        ns, name = meta.get("namespace"), meta.get("name") or ""
        owners = [o.get("name") for o in meta.get("ownerReferences") or [] if o.get("controller")]
        job = (owners[0] if w.kind == "Workload" and owners else None) or name
        when = self.clock()
        line = {
            "kind": w.kind,
            "metadata": {"namespace": ns, "name": name, "uid": meta.get("uid")},
            "deleted": typ == "DELETED" or None,
            "suspend": (obj.get("spec") or {}).get("suspend"),
            "active": (obj.get("spec") or {}).get("active"),
            "conditions": _conditions(obj),
        }
        line = {k: v for k, v in line.items() if v is not None}
        if not self._changed(meta.get("uid") or name, line):
            return
        self._line(line, when=when, host=None, job=job, ns=ns, pod=None, labels=meta.get("labels") or {})
        if typ != "DELETED" and w.kind != "Workload":
            info = JobInfo(
                job_id=job,
                cluster=self.cluster,
                scheduler="kubernetes",
                partition=ns,
                namespace=ns,
                workload_kind=w.workload_kind,
                annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
                time=when,
            )
            self.sink.produce(self.topics.topology_jobs, codec.dumps(info), key=job.encode())
            self.coverage.jobs += 1

    def dispatch(self, w: Watched, typ: str, obj: dict[str, Any]) -> None:
        if w.kind == "Event":
            self.on_event(typ, obj)
        elif w.kind == "Pod":
            self.on_pod(typ, obj)
        elif w.kind == "Node":
            self.on_node(typ, obj)
        else:
            self.on_workload(w, typ, obj)
        self._last_event = time.monotonic()

    # -- loop ---------------------------------------------------------------------------------------

    def commit(self) -> None:
        """Flush the producer, then save the versions the delivered records came from."""
        if not self._pending:
            return
        left = self.sink.flush(30.0)
        if left:
            raise RuntimeError(f"{left} Kubernetes records not delivered; offsets not advanced")
        self.offsets.versions.update(self._pending)
        self._pending.clear()
        self.offsets.save()

    def _on_error(self, w: Watched) -> Callable[[Exception, int], OnErrorResult]:
        def handle(exc: Exception, count: int) -> OnErrorResult:
            code = _status(exc)
            if code == 404:
                self.coverage.kinds[w.name] = "not installed (no such resource)"
                return OnErrorResult(OnErrorAction.STOP)
            if code in (401, 403):
                self.coverage.kinds[w.name] = f"forbidden (HTTP {code})"
                return OnErrorResult(OnErrorAction.STOP)
            if code == 410:
                log.warning("%s: resourceVersion expired; re-listing", w.name)
                self._expired.add(w.name)
                return OnErrorResult(OnErrorAction.STOP)
            else:
                log.warning("%s watch error (try %d): %s", w.name, count, exc)
            self.coverage.kinds[w.name] = f"retrying: {exc}"
            return OnErrorResult(OnErrorAction.RETRY, sleep=min(0.2 * 2**count, 10.0))

        return handle

    async def _learn_pod(self, inv: dict[str, Any]) -> None:
        """An event about a pod the pod watch has not shown yet (the watches run concurrently): read the
        pod once, so the event still carries its node and job. A pod already gone stays unknown."""
        key = (inv.get("namespace") or "", inv.get("name") or "")
        if inv.get("kind") != "Pod" or not all(key) or key in self._pods:
            return
        try:
            pod = as_dict(await self.client.get(Pod, key[1], namespace=key[0]))
        except (ApiError, httpx2.HTTPError):
            self._pods[key] = (None, None)
            return
        labels = (pod.get("metadata") or {}).get("labels") or {}
        self._pods[key] = ((pod.get("spec") or {}).get("nodeName"), job_of(labels))

    async def _watch(self, w: Watched) -> None:
        """List then watch from the list's version (or resume from the saved one); again after a 410.

        A watch started without a version replays current objects in key order, each with its own
        version, so the last one seen is not a safe resume point; a list's version is.
        """
        ns: dict[str, Any] = {} if w.kind == "Node" else {"namespace": self.namespace or "*"}
        self.coverage.kinds[w.name] = "watching"
        rv = self.offsets.versions.get(w.name)
        while True:
            if rv is None:
                items = self.client.list(w.resource, chunk_size=500, **ns)
                try:
                    async for obj in items:
                        await self._handle(w, "ADDED", as_dict(obj), track=False)
                    rv = items.resourceVersion
                except (ApiError, httpx2.HTTPError) as exc:
                    result = self._on_error(w)(exc, 1)
                    if result.action is OnErrorAction.STOP:
                        return
                    await asyncio.sleep(result.sleep)
                    continue
                self._pending[w.name] = rv
            self._expired.discard(w.name)
            async for typ, obj in self.client.watch(
                w.resource, resource_version=rv, on_error=self._on_error(w), **ns
            ):
                rv = await self._handle(w, typ, as_dict(obj), track=True) or rv
            if w.name not in self._expired:
                return  # stopped for good (not installed, forbidden)
            rv = None  # 410 Gone: the saved version is too old; list again

    async def _handle(self, w: Watched, typ: str, data: dict[str, Any], *, track: bool) -> str | None:
        if w.kind == "Event":
            await self._learn_pod(data.get("involvedObject") or {})
        self.dispatch(w, typ, data)
        if self.coverage.kinds.get(w.name, "").startswith("retrying"):
            self.coverage.kinds[w.name] = "watching"
        rv = (data.get("metadata") or {}).get("resourceVersion")
        if track and rv:
            self._pending[w.name] = str(rv)
            return str(rv)
        return None

    async def run(
        self,
        *,
        stop_after_s: float | None = None,
        idle_exit_s: float | None = None,
        stop: asyncio.Event | None = None,
    ) -> Coverage:
        tasks = [asyncio.create_task(self._watch(w), name=f"watch-{w.name}") for w in self.kinds]
        started = time.monotonic()
        try:
            while True:
                await asyncio.sleep(self.flush_every_s)
                self.commit()
                now = time.monotonic()
                failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None]
                if failed:
                    raise RuntimeError(f"watch {failed[0].get_name()} failed: {failed[0].exception()}")
                if stop is not None and stop.is_set():
                    break
                if stop_after_s is not None and now - started >= stop_after_s:
                    break
                if idle_exit_s is not None and now - self._last_event >= idle_exit_s:
                    break
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.commit()
        return self.coverage


def make_async_client(path: str | None = None, timeout_s: float = 30.0) -> AsyncClient:
    return AsyncClient(config=load_config(path), timeout=httpx2.Timeout(timeout_s))
