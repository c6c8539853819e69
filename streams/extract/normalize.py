"""Turn one raw Kafka record, in whatever shape a log shipper wrote it, into a :class:`LogLine`.

Shapes are told apart by their keys, never by topic name (ecosystem.md §1.6):
``log`` → Fluent Bit, ``message`` → Vector, ``line`` + ``schema_version`` →
sickbay's own collector, anything not starting with ``{`` → a plain text line
(rsyslog ``omkafka``). A record that cannot be read raises :class:`BadRecord`
with a short reason, so the agent can dead-letter it and keep going.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from schemas import codec
from schemas.raw import FluentBitRecord, LogLine, SickbayLineRecord, VectorRecord

MAX_RECORD_BYTES = 1 << 20

_CRI_PREFIX = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d) (stdout|stderr) [FP] "
)
_SLURM_OUTPUT = re.compile(r"slurm-(\d+)(?:_\d+)?(?:\.\d+)?\.(?:out|err|log)$")
_JOB_ID_KEYS = ("job_id", "slurm_job_id", "SLURM_JOB_ID", "jobid")
_JOB_LABELS = (
    "training.kubeflow.org/job-name",
    "trainer.kubeflow.org/trainjob-name",
    "batch.kubernetes.io/job-name",
    "job-name",
)


class BadRecord(ValueError):
    """A record the extractor cannot read; ``reason`` is a stable, short code for the DLQ."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _epoch_or_datetime(value: float | datetime | None) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromtimestamp(float(value), tz=UTC)


def _strip_cri(text: str) -> tuple[str, str | None]:
    m = _CRI_PREFIX.match(text)
    if m:
        return text[m.end() :], m.group(1)
    return text, None


def job_id_from_path(path: str | None) -> str | None:
    """Slurm's default output name ``slurm-<jobid>.out`` (and array ``slurm-<id>_<task>.out``)."""
    if not path:
        return None
    m = _SLURM_OUTPUT.search(path)
    return m.group(1) if m else None


def _job_id_from_fields(extra: dict[str, Any], labels: dict[str, Any]) -> str | None:
    for key in _JOB_ID_KEYS:
        if extra.get(key) not in (None, ""):
            return str(extra[key])
    for key in _JOB_LABELS:
        if labels.get(key):
            return str(labels[key])
    return None


def _from_fluentbit(rec: FluentBitRecord) -> LogLine:
    text, cri_stream = _strip_cri(rec.log.rstrip("\n"))
    k8s = rec.kubernetes
    path = rec.filename or rec.file
    extra = rec.model_extra or {}
    labels = k8s.labels if k8s else {}
    return LogLine(
        text=text,
        adapter="fluentbit",
        host=(k8s.host if k8s and k8s.host else None) or rec.hostname or rec.host,
        event_time=_epoch_or_datetime(rec.timestamp if rec.timestamp is not None else rec.time),
        job_id=_job_id_from_fields(extra, labels) or job_id_from_path(path),
        file=path,
        stream=rec.stream or cri_stream,
        pod=k8s.pod_name if k8s else None,
        namespace=k8s.namespace_name if k8s else None,
        container=k8s.container_name if k8s else None,
    )


def _from_vector(rec: VectorRecord) -> LogLine:
    text, cri_stream = _strip_cri(rec.message.rstrip("\n"))
    k8s = rec.kubernetes
    extra = rec.model_extra or {}
    labels = k8s.pod_labels if k8s else {}
    return LogLine(
        text=text,
        adapter="vector",
        host=(k8s.pod_node_name if k8s and k8s.pod_node_name else None) or rec.host,
        event_time=rec.timestamp,
        job_id=_job_id_from_fields(extra, labels) or job_id_from_path(rec.file),
        file=rec.file,
        stream=rec.stream or cri_stream,
        pod=k8s.pod_name if k8s else None,
        namespace=k8s.pod_namespace if k8s else None,
        container=k8s.container_name if k8s else None,
    )


def _from_sickbay(rec: SickbayLineRecord) -> LogLine:
    return LogLine(
        text=rec.line.rstrip("\n"),
        adapter="sickbay",
        host=rec.host,
        event_time=rec.time,
        job_id=rec.job_id or job_id_from_path(rec.file),
        file=rec.file,
    )


def _validate(model: type[BaseModel], obj: dict[str, Any]) -> Any:
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise BadRecord("invalid_record", f"{model.__name__}: {exc.errors()[0]['msg']}") from exc


def normalize(value: bytes, key_host: str | None = None) -> LogLine:
    """Read one record; ``key_host`` (the Kafka key) is the host of last resort."""
    if not value or not value.strip():
        raise BadRecord("empty", "record has no content")
    if len(value) > MAX_RECORD_BYTES:
        raise BadRecord("too_large", f"{len(value)} bytes > {MAX_RECORD_BYTES}")
    head = value.lstrip()[:1]
    if head == b"{":
        try:
            obj = codec.loads(value)
        except codec.JSONDecodeError as exc:
            raise BadRecord("invalid_json", str(exc)) from exc
        if not isinstance(obj, dict):
            raise BadRecord("unknown_shape", "JSON value is not an object")
        line = _from_json(obj)
    else:
        if b"\x00" in value:
            raise BadRecord("binary", "record contains NUL bytes: not a text line")
        # A kernel or job log may carry stray bytes; keep the line, mark them.
        text = value.decode("utf-8", errors="replace").rstrip("\r\n")
        line = LogLine(text=text, adapter="plain")
    if line.host is None and key_host:
        line = line.model_copy(update={"host": key_host})
    return line


def _from_json(obj: dict[str, Any]) -> LogLine:
    if isinstance(obj.get("log"), str):
        return _from_fluentbit(_validate(FluentBitRecord, obj))
    if isinstance(obj.get("line"), str) and "schema_version" in obj:
        return _from_sickbay(_validate(SickbayLineRecord, obj))
    if isinstance(obj.get("message"), str):
        return _from_vector(_validate(VectorRecord, obj))
    keys = ", ".join(sorted(obj)[:8])
    raise BadRecord("unknown_shape", f"no log/message/line field (keys: {keys})")
