"""``sickbay collect prometheus``: GPU telemetry from dcgm-exporter ``/metrics`` or PromQL queries.

Both paths reduce to samples ``(metric, labels, value)`` and then to one
:class:`schemas.telemetry.GpuTelemetry` per GPU per scrape on ``raw.telemetry``
(key: node). dcgm-exporter's labels say where a sample belongs: ``Hostname`` →
node, ``gpu`` → index, ``UUID``, ``pci_bus_id``, ``modelName``,
``DCGM_FI_DRIVER_VERSION`` → driver, ``hpc_job`` (Slurm job mapping) or ``pod``
(Kubernetes pod mapping) → job. Prometheus's own ``job`` label is the *scrape*
job (``dcgm-exporter``), never a training job, and is ignored.

Fault counters that moved between two scrapes of a GPU (last Xid, volatile DBE,
row-remap flags) also go to ``raw.logs`` as the kernel/DCGM line for that fault
(:mod:`connectors.sources.nvml.lines`), so the existing rules attribute them.

The exposition parser is our own and line-oriented: one malformed line is
counted and reported, the rest of the scrape is kept (prometheus_client's parser
gives up on the whole text at the first bad line).
"""

from __future__ import annotations

import http.client
import logging
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from connectors.sources.nvml.lines import change_lines
from connectors.sources.polling import poll_loop
from schemas import codec
from schemas.base import utcnow
from schemas.collector import Reach, TargetKind
from schemas.raw import SickbayLineRecord
from schemas.telemetry import GpuTelemetry

log = logging.getLogger("sickbay.collect.prometheus")

MAX_PROBLEMS = 20
_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+(?P<ts>-?\d+))?\s*$"
)
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
NODE_LABELS = ("Hostname", "hostname", "node", "kubernetes_node", "nodename")
JOB_LABELS = ("hpc_job", "pod")
DRIVER_LABELS = ("DCGM_FI_DRIVER_VERSION", "driver_version")


class RecordSink(Protocol):
    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> None: ...


Fetch = Callable[[str, float], bytes]


def http_get(url: str, timeout_s: float, headers: dict[str, str] | None = None) -> bytes:
    """GET ``url``; raises ``OSError`` (``URLError``/``HTTPError``) with the reason on any failure."""
    req = urllib.request.Request(url, headers={"Accept": "text/plain, application/json", **(headers or {})})  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - operator-given URL
            data: bytes = resp.read()
            return data
    except http.client.HTTPException as exc:  # a truncated or garbled answer
        raise OSError(f"bad HTTP answer from {url}: {exc!r}") from exc


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    time: datetime | None = None


def _labels(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if m is None:
            raise ValueError(f"bad label set near {text[pos : pos + 40]!r}")
        out[m.group(1)] = re.sub(r"\\[\\\"n]", lambda e: _UNESCAPE[e.group(0)], m.group(2))
        pos = m.end()
    return out


def parse_exposition(text: str) -> tuple[list[Sample], list[str]]:
    """Samples of a Prometheus text exposition; each line that cannot be read is one problem."""
    samples: list[Sample] = []
    problems: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _SAMPLE.match(line)
        try:
            if m is None:
                raise ValueError("not a sample line")
            labels = _labels(m.group("labels") or "")
            value = float(m.group("value"))
        except ValueError as exc:
            problems.append(f"line {n}: {exc}: {line[:120]!r}")
            continue
        ts = m.group("ts")
        at = datetime.fromtimestamp(int(ts) / 1000, tz=UTC) if ts else None
        samples.append(Sample(m.group("name"), labels, value, at))
    return samples, problems


def parse_query_response(raw: bytes, query: str) -> list[Sample]:
    """An ``/api/v1/query`` instant-vector answer; raises ``ValueError`` for errors and other result types."""
    doc = codec.loads(raw)
    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error") if isinstance(doc, dict) else None
        raise ValueError(f"query {query!r} failed: {err or 'no status=success'}")
    data = doc.get("data") or {}
    if data.get("resultType") != "vector":
        raise ValueError(f"query {query!r} returned {data.get('resultType')!r}, not an instant vector")
    out: list[Sample] = []
    for item in data.get("result") or []:
        metric = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
        ts, value = item["value"]
        out.append(
            Sample(
                metric.pop("__name__", query), metric, float(value), datetime.fromtimestamp(float(ts), tz=UTC)
            )
        )
    return out


def _first(labels: dict[str, str], keys: tuple[str, ...]) -> str | None:
    return next((labels[k] for k in keys if labels.get(k)), None)


def _instance_host(labels: dict[str, str], fallback: str | None) -> str | None:
    inst = labels.get("instance")
    if inst:
        return urllib.parse.urlsplit(f"//{inst}").hostname or inst
    return fallback


def to_telemetry(
    samples: list[Sample], at: datetime, source: str, cluster: str | None, fallback_node: str | None
) -> tuple[list[GpuTelemetry], int, list[str]]:
    """Group per-GPU samples into records; returns (records, samples without a GPU, problems)."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    non_gpu = 0
    problems: list[str] = []
    for s in samples:
        lab = s.labels
        if "gpu" not in lab and "UUID" not in lab:
            non_gpu += 1
            continue
        if not math.isfinite(s.value):
            continue  # NaN/Inf: no reading this scrape (JSON cannot carry it either)
        node = _first(lab, NODE_LABELS) or _instance_host(lab, fallback_node)
        if not node:
            problems.append(f"{s.name}: no Hostname/instance label to name the node")
            continue
        key = (node, lab.get("UUID") or lab.get("gpu", ""))
        g = groups.setdefault(key, {"node": node, "metrics": {}, "time": s.time or at})
        g.setdefault("gpu", lab.get("gpu"))
        g.setdefault("uuid", lab.get("UUID"))
        g.setdefault("pci_bus_id", lab.get("pci_bus_id"))
        g.setdefault("model", lab.get("modelName"))
        g.setdefault("driver", _first(lab, DRIVER_LABELS))
        if g.get("job_id") is None:
            g["job_id"] = _first(lab, JOB_LABELS)
        g["metrics"][s.name] = s.value
    out: list[GpuTelemetry] = []
    for g in groups.values():
        gpu = g.get("gpu")
        try:
            out.append(
                GpuTelemetry(
                    time=g["time"],
                    node=g["node"],
                    gpu=int(gpu) if gpu not in (None, "") else None,
                    uuid=g.get("uuid"),
                    pci_bus_id=g.get("pci_bus_id"),
                    model=g.get("model"),
                    driver=g.get("driver"),
                    job_id=g.get("job_id"),
                    cluster=cluster,
                    source=source,
                    metrics=g["metrics"],
                )
            )
        except (ValidationError, ValueError) as exc:
            problems.append(f"GPU {g['node']}/{gpu}: {str(exc).splitlines()[0]}")
    return out, non_gpu, problems


@dataclass
class TargetReach:
    kind: TargetKind
    ok: int = 0
    failed: int = 0
    last_error: str | None = None  # of the last attempt; None when it answered
    gpus: int = 0


@dataclass
class PrometheusCoverage:
    targets: dict[str, TargetReach] = field(default_factory=dict)
    telemetry_records: int = 0
    fault_lines: int = 0
    non_gpu_samples: int = 0
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        log.warning("%s", text)
        self.problems = [*self.problems[-(MAX_PROBLEMS - 1) :], text]

    def reached(self) -> list[Reach]:
        return [
            Reach(
                kind=t.kind,
                target=target,
                ok=t.ok > 0 and t.last_error is None,
                state=f"{t.gpus} GPUs; {t.ok} ok, {t.failed} failed",
                detail=t.last_error,
            )
            for target, t in self.targets.items()
        ]

    def unmatched(self) -> list[str]:
        """Targets that answered but named no GPU (a wrong URL, an exporter without GPUs)."""
        return [target for target, t in self.targets.items() if t.ok and t.gpus == 0]

    def counts(self) -> dict[str, int]:
        return {
            "telemetry_records": self.telemetry_records,
            "fault_lines": self.fault_lines,
            "non_gpu_samples": self.non_gpu_samples,
            "problems": len(self.problems),
        }


class PrometheusCollector:
    """Scrapes every target once per :meth:`scrape_once`; keeps each GPU's last sample for fault lines."""

    def __init__(
        self,
        sink: RecordSink,
        telemetry_topic: str,
        logs_topic: str,
        *,
        metrics_urls: list[str] | None = None,
        prometheus_url: str | None = None,
        queries: list[str] | None = None,
        cluster: str | None = None,
        timeout_s: float = 10.0,
        fetch: Fetch = http_get,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        if not metrics_urls and not (prometheus_url and queries):
            raise ValueError("give at least one /metrics URL, or a Prometheus URL and a PromQL query")
        self.sink = sink
        self.telemetry_topic = telemetry_topic
        self.logs_topic = logs_topic
        self.metrics_urls = list(metrics_urls or [])
        self.prometheus_url = (prometheus_url or "").rstrip("/")
        self.queries = list(queries or []) if prometheus_url else []
        self.cluster = cluster
        self.timeout_s = timeout_s
        self.fetch = fetch
        self.clock = clock
        self.coverage = PrometheusCoverage()
        self._last: dict[tuple[str, str], GpuTelemetry] = {}

    def _reach(self, target: str, kind: TargetKind = "exporter") -> TargetReach:
        return self.coverage.targets.setdefault(target, TargetReach(kind))

    def _ok(self, target: str, kind: TargetKind) -> None:
        r = self._reach(target, kind)
        r.ok += 1
        r.last_error = None

    def _failed(self, target: str, exc: Exception, kind: TargetKind = "exporter") -> None:
        r = self._reach(target, kind)
        r.failed += 1
        r.last_error = str(exc)
        self.coverage.problem(f"{target}: {exc}")

    def _samples(self) -> list[tuple[str, str, list[Sample]]]:
        """(target, source name, samples) per target that answered this round."""
        got: list[tuple[str, str, list[Sample]]] = []
        for url in self.metrics_urls:
            try:
                text = self.fetch(url, self.timeout_s).decode("utf-8", errors="replace")
            except OSError as exc:
                self._failed(url, exc)
                continue
            samples, problems = parse_exposition(text)
            for p in problems:
                self.coverage.problem(f"{url}: {p}")
            self._ok(url, "exporter")
            got.append((url, "dcgm-exporter", samples))
        for q in self.queries:
            url = f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": q})
            target = f"{self.prometheus_url} {q}"
            try:
                samples = parse_query_response(self.fetch(url, self.timeout_s), q)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                self._failed(target, exc, "api")
                continue
            self._ok(target, "api")
            got.append((target, "prometheus", samples))
        return got

    def scrape_once(self) -> int:
        """One round over every target; returns the number of telemetry records produced."""
        now = self.clock()
        records: dict[tuple[str, str], GpuTelemetry] = {}
        for target, source, samples in self._samples():
            fallback = urllib.parse.urlsplit(target.split(" ")[0]).hostname
            recs, non_gpu, problems = to_telemetry(samples, now, source, self.cluster, fallback)
            self.coverage.non_gpu_samples += non_gpu
            for p in problems:
                self.coverage.problem(f"{target}: {p}")
            self._reach(target).gpus = len(recs)
            for rec in recs:
                key = (rec.node, rec.uuid or str(rec.gpu))
                prev = records.get(key)
                # several queries about one GPU: one record per GPU per round
                records[key] = (
                    rec
                    if prev is None
                    else prev.model_copy(update={"metrics": {**prev.metrics, **rec.metrics}})
                )
        for key, rec in records.items():
            self.sink.produce(self.telemetry_topic, codec.dumps(rec), key=rec.node.encode())
            self.coverage.telemetry_records += 1
            for line in change_lines(self._last.get(key), rec):
                out = SickbayLineRecord(
                    line=line,
                    host=rec.node,
                    file=f"{rec.source}:{rec.uuid or rec.gpu}",
                    time=rec.time,
                    job_id=rec.job_id,
                )
                self.sink.produce(self.logs_topic, codec.dumps(out), key=rec.node.encode())
                self.coverage.fault_lines += 1
            self._last[key] = rec
        return len(records)

    def run(
        self,
        interval_s: float,
        stop: Callable[[], bool],
        *,
        on_tick: Callable[[], None] | None = None,
        stop_after_s: float | None = None,
    ) -> None:
        poll_loop(self.scrape_once, interval_s, stop, on_tick=on_tick, stop_after_s=stop_after_s)
