"""Vector metric events on raw.logs → GpuTelemetry on raw.telemetry.

Sites that ship dcgm-exporter through Vector (a ``prometheus_scrape`` source into the same
``kafka`` sink as the logs) put *metric* events on the log topic, one per series sample, in
Vector's JSON shape::

    {"name": "DCGM_FI_DEV_SM_CLOCK", "tags": {"gpu": "0", "UUID": "GPU-...", "Hostname": "gpu-01",
     "pci_bus_id": "00000000:3B:00.0", "modelName": "NVIDIA H100 80GB HBM3", "hpc_job": "4242"},
     "timestamp": "2026-11-29T03:00:00.000000Z", "kind": "absolute", "gauge": {"value": 1980.0}}

(``native_json`` wraps the same object as ``{"metric": {...}}``; both are read). They are not
log lines: the extract step used to dead-letter them, so telemetry never reached the detectors.
Each sample becomes one :class:`GpuTelemetry` with one metric; the straggler and node-health
detectors merge samples per GPU. A metric event that names no GPU (node_exporter and the like)
or has a value type other than gauge/counter is refused with a reason (dead-letter), not
guessed at.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from schemas import codec
from schemas.telemetry import GpuTelemetry
from streams.extract.normalize import BadRecord

VALUE_KINDS = ("gauge", "counter")
_NODE_TAGS = ("Hostname", "hostname", "host", "node", "instance")
_FRACTION = re.compile(r"(\.\d{6})\d+")


def parse_timestamp(text: str) -> datetime | None:
    """RFC 3339 as Vector writes it (nanoseconds, ``Z``); zone-less times are UTC."""
    try:
        dt = datetime.fromisoformat(_FRACTION.sub(r"\1", text.strip()))
    except ValueError:
        return None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def looks_like_metric(value: bytes) -> bool:
    """Cheap pre-check on the raw bytes, so log records pay (almost) nothing."""
    head = value[:1]
    if head not in (b"{", b" ", b"\n"):
        return False
    # find(), not ``in``: CPython's bytes ``in`` first tries the operand as an int and builds (then
    # drops) a TypeError, which cost more than the search on every record
    return value.find(b'"kind"') >= 0 and value.find(b'"tags"') >= 0 and value.find(b'"name"') >= 0


def _metric_obj(value: bytes) -> dict[str, Any] | None:
    try:
        obj = codec.loads(value)
    except codec.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    inner = obj.get("metric")
    found: dict[str, Any] = inner if isinstance(inner, dict) else obj
    if "message" in found or "log" in found or "name" not in found or "tags" not in found:
        return None
    return found


def _node(tags: dict[str, Any], key_host: str | None) -> str | None:
    for name in _NODE_TAGS:
        v = tags.get(name)
        if isinstance(v, str) and v:
            return v.rsplit(":", 1)[0] if name == "instance" else v
    return key_host


def parse_metric(value: bytes, key_host: str | None = None) -> GpuTelemetry | None:
    """The GPU sample in a Vector metric event; ``None`` when the record is no metric event.

    Raises :class:`BadRecord` for a metric event that cannot become a GPU sample."""
    if not looks_like_metric(value):
        return None
    obj = _metric_obj(value)
    if obj is None:
        return None
    name, tags = obj.get("name"), obj.get("tags")
    if not isinstance(name, str) or not isinstance(tags, dict):
        raise BadRecord("bad_metric", "metric event without a string name and a tags map")
    kind = next((k for k in VALUE_KINDS if isinstance(obj.get(k), dict)), None)
    if kind is None:
        raise BadRecord("unsupported_metric", f"{name}: only gauge and counter samples are read")
    raw_value = obj[kind].get("value")
    if not isinstance(raw_value, (int, float)) or isinstance(raw_value, bool) or not math.isfinite(raw_value):
        raise BadRecord("bad_metric", f"{name}: value {raw_value!r} is not a finite number")
    gpu_tag = tags.get("gpu")
    if gpu_tag is None and "UUID" not in tags:
        raise BadRecord("not_gpu_metric", f"{name}: no gpu or UUID tag (not a GPU series)")
    node = _node(tags, key_host)
    if not node:
        raise BadRecord("no_host", f"{name}: no Hostname/host/instance tag and no record key")
    stamp = obj.get("timestamp")
    when = parse_timestamp(stamp) if isinstance(stamp, str) else None
    if when is None:
        raise BadRecord("bad_timestamp", f"{name}: timestamp {stamp!r} is not RFC 3339")
    try:
        gpu = int(gpu_tag) if gpu_tag is not None else None
        return GpuTelemetry(
            time=when,
            node=node,
            gpu=gpu,
            uuid=tags.get("UUID"),
            pci_bus_id=tags.get("pci_bus_id"),
            model=tags.get("modelName"),
            driver=tags.get("DCGM_FI_DRIVER_VERSION"),
            job_id=tags.get("hpc_job") or None,
            source="dcgm-exporter" if name.startswith("DCGM_") else "prometheus",
            metrics={name: float(raw_value)},
        )
    except (ValueError, ValidationError) as exc:
        raise BadRecord("bad_metric", f"{name}: {exc}") from exc
