"""Events as the log shippers operators run write them to Kafka (ecosystem.md §1).

- Fluent Bit ``kafka`` output, ``format json``: ``@timestamp`` (epoch float), ``log``, a
  ``hostname``/``host`` from ``record_modifier``, ``filename`` from ``Path_Key``; on
  Kubernetes the ``kubernetes`` map, and the CRI prefix left in ``log`` when no CRI parser ran.
- Vector ``kafka`` sink, json codec: ``message``, RFC 3339 ``timestamp``, ``host``,
  ``source_type`` (file, journald, kubernetes_logs with its ``kubernetes`` map); dcgm-exporter
  samples as Vector metric events (``prometheus_scrape``).
- rsyslog ``omkafka``: plain syslog text, traditional or RFC 3339 forward format.

Which shipper carries which source on which host is fixed by the seed, so one scenario
mixes all three shapes the way a real fleet does. The Kafka key is the host.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from connectors.sources.simulator.events import Metric, SimEvent
from connectors.sources.simulator.kernel import syslog_stamp
from connectors.sources.simulator.rand import rng
from schemas import codec

Shipper = Literal["fluentbit", "vector", "plain"]
Choice = tuple[Shipper, str]
IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


def rfc3339(t: datetime) -> str:
    return f"{t:%Y-%m-%dT%H:%M:%S}.{t.microsecond:06d}Z"


def _rfc3339_offset(t: datetime) -> str:
    return f"{t:%Y-%m-%dT%H:%M:%S}.{t.microsecond:06d}+00:00"


class Shipping:
    """The shipper (and its variant) on each host for each source kind, fixed by the seed."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._choice: dict[tuple[str, str, bool], Choice] = {}

    def choose(self, ev: SimEvent) -> Choice:
        key = (ev.ship_host, ev.kind, ev.path == "/var/log/kern.log")
        got = self._choice.get(key)
        if got is None:
            r = rng(self.seed, "shipper", *key)
            options: list[tuple[Choice, float]]
            if ev.kind == "telemetry":
                options = [(("vector", "metric"), 1.0)]
            elif ev.kind == "kernel" and ev.path == "/var/log/kern.log":
                options = [
                    (("fluentbit", "tail"), 0.4),
                    (("vector", "file"), 0.2),
                    (("plain", "traditional"), 0.2),
                    (("plain", "rfc3339"), 0.2),
                ]
            elif ev.kind == "kernel":
                options = [(("vector", "journald"), 0.6), (("plain", "traditional"), 0.4)]
            elif ev.k8s is not None:
                options = [
                    (("fluentbit", "k8s"), 0.3),
                    (("fluentbit", "k8s_cri"), 0.2),
                    (("vector", "k8s"), 0.5),
                ]
            elif ev.tag.startswith("slurmctld"):
                options = [
                    (("fluentbit", "tail"), 0.3),
                    (("vector", "file"), 0.3),
                    (("plain", "traditional"), 0.4),
                ]
            else:
                options = [(("fluentbit", "tail"), 0.5), (("vector", "file"), 0.5)]
            shipper, variant = r.weighted(options)
            if shipper == "fluentbit" and r.chance(0.3):
                variant += "+host"
            got = (shipper, variant)
            self._choice[key] = got
        return got

    def record(self, ev: SimEvent) -> bytes:
        shipper, variant = self.choose(ev)
        if shipper == "plain":
            return plain(ev, rfc=variant == "rfc3339")
        if shipper == "vector":
            return vector(ev, variant)
        return fluentbit(ev, variant)


def plain(ev: SimEvent, rfc: bool = False) -> bytes:
    """rsyslog ``omkafka`` with ``RSYSLOG_TraditionalForwardFormat`` or ``RSYSLOG_ForwardFormat``."""
    if ev.kind == "kernel":
        pri = 4
        tag = "kernel"
    else:
        pri = 3 * 8 + (3 if "error" in ev.msg else 6)
        tag = ev.tag or "slurmctld"
    stamp = _rfc3339_offset(ev.time) if rfc else syslog_stamp(ev.time, False)
    return f"<{pri}>{stamp} {ev.origin} {tag}: {ev.body}".encode()


def fluentbit(ev: SimEvent, variant: str) -> bytes:
    k8s = ev.k8s
    rec: dict[str, Any] = {"@timestamp": round(ev.time.timestamp(), 6)}
    if k8s is not None:
        if variant.startswith("k8s_cri"):
            rec["log"] = f"{rfc3339(ev.time)} stdout F {ev.line}"
        else:
            rec["time"] = rfc3339(ev.time)
            rec["stream"] = "stdout"
            rec["_p"] = "F"
            rec["log"] = ev.line
        rec["kubernetes"] = {
            "pod_name": k8s.pod,
            "namespace_name": k8s.namespace,
            "pod_id": k8s.uid,
            "labels": k8s.labels,
            "host": k8s.node,
            "container_name": k8s.container,
            "docker_id": k8s.uid.replace("-", "") * 2,
            "container_image": IMAGE,
        }
        return codec.dumps(rec)
    rec["log"] = ev.line
    rec["host" if variant.endswith("+host") else "hostname"] = ev.ship_host
    rec["filename"] = ev.path
    return codec.dumps(rec)


def vector(ev: SimEvent, variant: str) -> bytes:
    if variant == "metric" and ev.metric is not None:
        return ev.line.encode()
    k8s = ev.k8s
    if k8s is not None:
        return codec.dumps(
            {
                "file": ev.path,
                "kubernetes": {
                    "container_image": IMAGE,
                    "container_name": k8s.container,
                    "pod_labels": k8s.labels,
                    "pod_name": k8s.pod,
                    "pod_namespace": k8s.namespace,
                    "pod_node_name": k8s.node,
                    "pod_uid": k8s.uid,
                },
                "message": ev.line,
                "source_type": "kubernetes_logs",
                "stream": "stdout",
                "timestamp": rfc3339(ev.time),
            }
        )
    if variant == "journald":
        return codec.dumps(
            {
                "PRIORITY": "4",
                "SYSLOG_IDENTIFIER": "kernel",
                "_TRANSPORT": "kernel",
                "host": ev.ship_host,
                "message": ev.msg,
                "source_type": "journald",
                "timestamp": rfc3339(ev.time),
            }
        )
    return codec.dumps(
        {
            "file": ev.path,
            "host": ev.ship_host,
            "message": ev.line,
            "source_type": "file",
            "timestamp": rfc3339(ev.time),
        }
    )


def metric_event(m: Metric, host: str, t: datetime) -> dict[str, Any]:
    """A dcgm-exporter series sample as Vector's ``prometheus_scrape`` source emits it."""
    tags: dict[str, str] = {
        "gpu": str(m.gpu),
        "UUID": m.uuid,
        "pci_bus_id": m.pci_bus_id,
        "device": f"nvidia{m.gpu}",
        "modelName": m.model,
        "Hostname": host,
        "DCGM_FI_DRIVER_VERSION": m.driver,
    }
    if m.hpc_job:
        tags["hpc_job"] = m.hpc_job
    if m.pod:
        tags.update({"container": "pytorch", "namespace": m.namespace or "", "pod": m.pod})
    return {
        "name": m.name,
        "tags": tags,
        "timestamp": rfc3339(t),
        "kind": "absolute",
        m.kind: {"value": m.value},
    }
