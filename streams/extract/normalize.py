"""Turn one raw Kafka record, in whatever shape a log shipper wrote it, into :class:`LogLine` s.

Shapes are told apart by their keys, never by topic name (ecosystem.md §1.6; the
full table is docs/collectors.md):

- ``resourceLogs`` → OTLP JSON (OTel Collector / Grafana Alloy ``otelcol.exporter.kafka``
  with ``encoding = "otlp_json"``), one LogLine per ``logRecord``; their default ``otlp_proto``
  (a protobuf ``LogsData``) is read into the same JSON mapping first (``otlp_proto.py``);
- ``streams[].values`` → a Loki push body (what Alloy/Promtail send to ``loki.write``);
- ``log`` (a string) → Fluent Bit;
- ``lines`` / ``line`` + ``schema_version`` → sickbay's own collector;
- ``msg`` → rsyslog ``omkafka`` with a JSON template (``%jsonmesg%`` names), or with ``sequence``
  and ``sec`` beside it Fluent Bit's ``kmsg`` input;
- ``MESSAGE`` (or a lowercased ``message`` beside journal-only fields) → a systemd journal entry
  (Fluent Bit's ``systemd`` input, ``journalctl -o json``);
- ``message`` with ECS objects (``host.name``, ``log.file.path``, ``kubernetes.pod.name``)
  → Filebeat; ``message`` otherwise → Vector (its ``native_json`` codec's ``{"log": {...}}``
  read as the event inside);
- anything not starting with ``{`` → a plain text line (rsyslog ``omkafka`` text
  templates, RFC 5424 / RFC 3164 headers read for host and time).

Text fields may still carry CRI container-log prefixes
(``2024-01-01T00:00:00.123456789Z stdout F <line>``): they are stripped, and a text
holding several CRI lines is split with partial (``P``) pieces joined to the line that
ends them (``F``). A record that cannot be read raises :class:`BadRecord` with a
short reason, so the agent can dead-letter it and keep going.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from schemas import codec
from schemas.raw import (
    FilebeatRecord,
    FluentBitKmsgRecord,
    FluentBitRecord,
    JournaldRecord,
    LogLine,
    RsyslogJsonRecord,
    SickbayLineRecord,
    SickbayLinesRecord,
    VectorRecord,
)
from streams.extract.acceptance import Acceptance
from streams.extract.k8s_events import event_line, is_event, with_event_subject
from streams.extract.otlp_proto import looks_like_otlp_proto, otlp_proto_logs
from streams.extract.timeparse import parse_rfc3339

MAX_RECORD_BYTES = 1 << 20

_CRI_PREFIX = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d) (stdout|stderr) ([FP]) ?"
)
_SLURM_OUTPUT = re.compile(r"slurm-(\d+)(?:_\d+)?(?:\.\d+)?\.(?:out|err|log)$")
# RFC 5424: <PRI>VERSION TIMESTAMP HOSTNAME APP-NAME PROCID MSGID ...
_RFC5424 = re.compile(r"^<\d{1,3}>\d{1,2} (?P<ts>\S+) (?P<host>\S+) \S+ \S+ \S+ ")
# RFC 3164 and rsyslog's RSYSLOG_ForwardFormat (<PRI> + RFC 3339 time): <PRI>TIME HOST TAG: ...
_RFC3164 = re.compile(
    r"^(?:<\d{1,3}>)?(?:(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d))"
    r"|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d) "
    r"(?P<host>[A-Za-z0-9][\w.\-]*) [\w./\-]+(?:\[\d+\])?: "
)
_JOB_ID_KEYS = ("job_id", "slurm_job_id", "SLURM_JOB_ID", "jobid", "slurm.job.id", "slurm.job_id")
_JOB_LABELS = (
    "training.kubeflow.org/job-name",
    "trainer.kubeflow.org/trainjob-name",
    "batch.kubernetes.io/job-name",
    "job-name",
)
# Filebeat de-dots label keys by default (``labels.dedot: true``): ``training_kubeflow_org/job-name``.
_JOB_LABELS_ALL = _JOB_LABELS + tuple(k.replace(".", "_") for k in _JOB_LABELS if "." in k)


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


_parse_iso = parse_rfc3339


def _strip_cri(text: str) -> tuple[str, str | None]:
    m = _CRI_PREFIX.match(text)
    if m:
        return text[m.end() :], m.group(1)
    return text, None


def split_cri(text: str) -> list[tuple[str, str | None]]:
    """``(line, stream)`` pairs of a text. Several lines that all carry a CRI prefix are split,
    and partial (``P``) pieces are joined to the piece that ends them (``F``); any other text
    is one line, with a leading CRI prefix stripped."""
    text = text.rstrip("\r\n")
    if "\n" not in text or not _CRI_PREFIX.match(text):
        body, stream = _strip_cri(text)
        return [(body, stream)]
    rows = [r for r in text.split("\n") if r.strip()]
    matches = [_CRI_PREFIX.match(r) for r in rows]
    if not all(matches):
        body, stream = _strip_cri(text)  # a multi-line message that merely starts like CRI
        return [(body, stream)]
    out: list[tuple[str, str | None]] = []
    pending: dict[str, list[str]] = {}  # stdout and stderr interleave: join each on its own
    for row, m in zip(rows, matches, strict=True):
        if m is None:  # unreachable: all() above
            continue
        stream, flag, body = m.group(1), m.group(2), row[m.end() :].rstrip("\r")
        pending.setdefault(stream, []).append(body)
        if flag == "F":
            out.append(("".join(pending.pop(stream)), stream))
    for stream, parts in pending.items():  # a trailing partial with no end yet: keep it
        out.append(("".join(parts), stream))
    return out


def job_id_from_path(path: str | None) -> str | None:
    """Slurm's default output name ``slurm-<jobid>.out`` (and array ``slurm-<id>_<task>.out``)."""
    if not path:
        return None
    m = _SLURM_OUTPUT.search(path)
    return m.group(1) if m else None


def _job_id_from_fields(extra: dict[str, Any], labels: dict[str, Any]) -> str | None:
    for key in _JOB_ID_KEYS:
        value = extra.get(key)
        if value not in (None, "") and isinstance(value, (str, int)):
            return str(value)
    for key in _JOB_LABELS_ALL:
        if labels.get(key):
            return str(labels[key])
    return None


def _lines(text: str, stream: str | None, **meta: Any) -> list[LogLine]:
    return [LogLine(text=t, stream=stream or s, **meta) for t, s in split_cri(text)]


def _from_fluentbit(rec: FluentBitRecord) -> list[LogLine]:
    k8s = rec.kubernetes
    path = rec.filename or rec.file
    extra = rec.model_extra or {}
    labels = k8s.labels if k8s else {}
    return _lines(
        rec.log,
        rec.stream,
        adapter="fluentbit",
        host=(k8s.host if k8s and k8s.host else None) or rec.hostname or rec.host,
        event_time=_epoch_or_datetime(rec.timestamp if rec.timestamp is not None else rec.time),
        job_id=_job_id_from_fields(extra, labels) or job_id_from_path(path),
        file=path,
        pod=k8s.pod_name if k8s else None,
        namespace=k8s.namespace_name if k8s else None,
        container=k8s.container_name if k8s else None,
    )


def _from_vector(rec: VectorRecord) -> list[LogLine]:
    k8s = rec.kubernetes
    extra = rec.model_extra or {}
    labels = k8s.pod_labels if k8s else {}
    return _lines(
        rec.message,
        rec.stream,
        adapter="vector",
        host=(k8s.pod_node_name if k8s and k8s.pod_node_name else None) or rec.host,
        event_time=rec.timestamp,
        job_id=_job_id_from_fields(extra, labels) or job_id_from_path(rec.file),
        file=rec.file,
        pod=k8s.pod_name if k8s else None,
        namespace=k8s.pod_namespace if k8s else None,
        container=k8s.container_name if k8s else None,
    )


def _from_filebeat(rec: FilebeatRecord) -> list[LogLine]:
    k8s = rec.kubernetes
    path = rec.log.file.path if rec.log and rec.log.file else None
    extra = rec.model_extra or {}
    labels = k8s.labels if k8s else {}
    node = k8s.node.name if k8s and k8s.node else None
    container = (k8s.container.name if k8s and k8s.container else None) or (
        (rec.container.name or rec.container.id) if rec.container else None
    )
    return _lines(
        rec.message,
        rec.stream,
        adapter="filebeat",
        host=node or (rec.host.name if rec.host else None),
        event_time=rec.timestamp,
        job_id=_job_id_from_fields(extra, labels) or job_id_from_path(path),
        file=path,
        pod=k8s.pod.name if k8s and k8s.pod else None,
        namespace=k8s.namespace if k8s else None,
        container=container,
    )


def _from_rsyslog(rec: RsyslogJsonRecord) -> list[LogLine]:
    extra = rec.model_extra or {}
    return _lines(
        rec.msg.lstrip(" "),  # rsyslog's msg property keeps the space after "tag:"
        None,
        adapter="rsyslog",
        host=rec.hostname or rec.fromhost,
        event_time=rec.timereported or rec.timegenerated,
        job_id=_job_id_from_fields(extra, {}),
    )


def _from_kmsg(rec: FluentBitKmsgRecord) -> list[LogLine]:
    """A kernel line as Fluent Bit's ``kmsg`` input reads it: the message alone, at Fluent Bit's
    wall-clock stamp (``sec`` counts from boot)."""
    return _lines(
        rec.msg,
        None,
        adapter="fluentbit",
        host=rec.hostname or rec.host,
        event_time=_epoch_or_datetime(rec.timestamp),
    )


def _from_journald(rec: JournaldRecord) -> list[LogLine]:
    """The entry's text as the journal holds it: a kernel line is the kernel's message alone
    (``NVRM: Xid ...``), as Vector's journald source gives it too. Its time is when it was
    written (``_SOURCE_REALTIME_TIMESTAMP``), else when the journal received it."""
    text = rec.message
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8", errors="replace")
    if rec.source_time is not None:
        when: datetime | None = _from_micros(rec.source_time)
    elif rec.timestamp is not None:
        when = _epoch_or_datetime(rec.timestamp)
    else:
        when = None if rec.journal_time is None else _from_micros(rec.journal_time)
    return _lines(
        text,
        None,
        adapter="journald",
        host=rec.hostname,
        event_time=when,
        job_id=_job_id_from_fields(rec.model_extra or {}, {}),
    )


def _from_micros(micros: int) -> datetime:
    return datetime.fromtimestamp(micros / 1_000_000, tz=UTC)


def _from_sickbay(rec: SickbayLineRecord) -> list[LogLine]:
    return _lines(
        rec.line,
        None,
        adapter="sickbay",
        host=rec.host,
        event_time=rec.time,
        job_id=rec.job_id or job_id_from_path(rec.file),
        file=rec.file,
    )


def _from_sickbay_batch(rec: SickbayLinesRecord) -> list[LogLine]:
    meta: dict[str, Any] = {
        "adapter": "sickbay",
        "host": rec.host,
        "event_time": rec.time,
        "job_id": rec.job_id or job_id_from_path(rec.file),
        "file": rec.file,
    }
    return [ln for text in rec.lines for ln in _lines(text, None, **meta)]


# --- OTLP JSON (protobuf JSON mapping: camelCase keys, int64 as strings, AnyValue wrappers) ----------


def _any_value(value: Any) -> Any:
    """Unwrap an OTLP ``AnyValue`` into a plain Python value."""
    if not isinstance(value, dict):
        return value
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return str(value["intValue"])
    if "arrayValue" in value:
        arr = value["arrayValue"]
        return [_any_value(v) for v in (arr.get("values") or [])] if isinstance(arr, dict) else []
    if "kvlistValue" in value:
        kv = value["kvlistValue"]
        return _attributes(kv.get("values") if isinstance(kv, dict) else None)
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def _attributes(items: Any) -> dict[str, Any]:
    if not isinstance(items, list):
        return {}
    out: dict[str, Any] = {}
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            out[item["key"]] = _any_value(item.get("value"))
    return out


def _str(attrs: dict[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


def _nanos(value: Any) -> datetime | None:
    try:
        ns = int(value)
    except (TypeError, ValueError):
        return None
    if ns <= 0:
        return None
    try:
        return datetime.fromtimestamp(ns / 1e9, tz=UTC)
    except (OverflowError, ValueError, OSError):
        return None  # past any date (a fixed64 of noise): the line is kept, its time is not


def _otlp_labels(attrs: dict[str, Any]) -> dict[str, Any]:
    """Pod labels as the k8sattributes processor names them (``k8s.pod.label(s).<key>``)."""
    labels: dict[str, Any] = {}
    for key, value in attrs.items():
        for prefix in ("k8s.pod.label.", "k8s.pod.labels."):
            if key.startswith(prefix):
                labels[key[len(prefix) :]] = value
    return labels


def _otlp_records(obj: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    resource_logs = obj.get("resourceLogs")
    if not isinstance(resource_logs, list):
        raise BadRecord("invalid_record", "OTLP: resourceLogs is not a list")
    for rl in resource_logs:
        if not isinstance(rl, dict):
            raise BadRecord("invalid_record", "OTLP: a resourceLogs entry is not an object")
        resource = rl.get("resource")
        res_attrs = _attributes(resource.get("attributes") if isinstance(resource, dict) else None)
        scope_logs = rl.get("scopeLogs") or rl.get("instrumentationLibraryLogs") or []
        if not isinstance(scope_logs, list):
            raise BadRecord("invalid_record", "OTLP: scopeLogs is not a list")
        for sl in scope_logs:
            records = sl.get("logRecords") if isinstance(sl, dict) else None
            if not isinstance(records, list):
                raise BadRecord("invalid_record", "OTLP: logRecords is not a list")
            for lr in records:
                if not isinstance(lr, dict):
                    raise BadRecord("invalid_record", "OTLP: a logRecord is not an object")
                yield res_attrs, lr


def _from_otlp(obj: dict[str, Any]) -> list[LogLine]:
    out: list[LogLine] = []
    for res, lr in _otlp_records(obj):
        attrs = _attributes(lr.get("attributes"))
        both = {**res, **attrs}
        body = _any_value(lr.get("body"))
        if body is None:
            continue  # a record without a body carries no line (e.g. an event with attributes only)
        text = body if isinstance(body, str) else codec.dumps(body).decode()
        path = _str(both, "log.file.path", "log.file.name")
        out.extend(
            _lines(
                text,
                _str(both, "log.iostream"),
                adapter="otlp",
                host=_str(res, "k8s.node.name", "host.name") or _str(attrs, "k8s.node.name", "host.name"),
                event_time=_nanos(lr.get("timeUnixNano")) or _nanos(lr.get("observedTimeUnixNano")),
                job_id=_job_id_from_fields(both, _otlp_labels(both)) or job_id_from_path(path),
                file=path,
                pod=_str(both, "k8s.pod.name"),
                namespace=_str(both, "k8s.namespace.name"),
                container=_str(both, "k8s.container.name", "container.name", "container.id"),
            )
        )
    if not out:
        raise BadRecord("empty", "OTLP record holds no log record with a body")
    return out


def _from_loki(obj: dict[str, Any]) -> list[LogLine]:
    """Loki push API JSON: ``{"streams":[{"stream":{labels},"values":[["<ns>","<line>"], ...]}]}``.
    Loki's ``job`` label is the scrape job, never a batch job: it is not read as one."""
    out: list[LogLine] = []
    for entry in obj["streams"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("values"), list):
            raise BadRecord("invalid_record", "Loki push: a stream has no values list")
        stream_labels = entry.get("stream")
        labels: dict[str, Any] = stream_labels if isinstance(stream_labels, dict) else {}
        path = _str(labels, "filename", "file")
        for value in entry["values"]:
            if not (isinstance(value, list) and len(value) >= 2 and isinstance(value[1], str)):
                raise BadRecord("invalid_record", "Loki push: a value is not [timestamp, line]")
            out.extend(
                _lines(
                    value[1],
                    _str(labels, "stream"),
                    adapter="loki",
                    host=_str(labels, "node_name", "nodename", "host", "hostname", "instance"),
                    event_time=_nanos(value[0]),
                    job_id=_job_id_from_fields(labels, labels) or job_id_from_path(path),
                    file=path,
                    pod=_str(labels, "pod"),
                    namespace=_str(labels, "namespace"),
                    container=_str(labels, "container"),
                )
            )
    if not out:
        raise BadRecord("empty", "Loki push body holds no line")
    return out


def _validate(model: type[BaseModel], obj: dict[str, Any]) -> Any:
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise BadRecord("invalid_record", f"{model.__name__}: {exc.errors()[0]['msg']}") from exc


def _refuse_binary(value: bytes) -> None:
    """A plain record with NUL bytes is not a log line (a full read and a check refuse it alike)."""
    if value.find(b"\x00") >= 0:  # find(): see telemetry.looks_like_metric
        raise BadRecord("binary", "record contains NUL bytes: not a text line")


def _from_plain(value: bytes) -> list[LogLine]:
    _refuse_binary(value)
    # A kernel or job log may carry stray bytes; keep the line, mark them.
    text = value.decode("utf-8", errors="replace").rstrip("\r\n")
    out: list[LogLine] = []
    for body, stream in split_cri(text):
        host, when = _syslog_header(body)
        out.append(LogLine(text=body, adapter="plain", host=host, event_time=when, stream=stream))
    return out


def _syslog_header(text: str) -> tuple[str | None, datetime | None]:
    """Host (and time, when it has a year) from an RFC 5424 or RFC 3164 header; the text is kept
    whole so rules and the extractor still see the tag (``kernel:``, ``slurmctld[..]:``)."""
    if not text.startswith("<") and not text[:3].isalpha():
        return None, None
    m = _RFC5424.match(text)
    if m:
        host = m.group("host")
        return (None if host == "-" else host), _parse_iso(m.group("ts"))
    m = _RFC3164.match(text)
    if m:
        iso = m.group("iso")
        return m.group("host"), _parse_iso(iso) if iso else None
    return None, None


def normalize_all(value: bytes, key_host: str | None = None) -> list[LogLine]:
    """Read one record into its lines (one for most shapes; OTLP, Loki push, sickbay batches and
    CRI blobs carry several). ``key_host`` (the Kafka key) is the host of last resort."""
    obj = _load_record(value)
    lines = _from_plain(value) if obj is None else _from_json(obj)
    if key_host:
        lines = [ln if ln.host is not None else ln.model_copy(update={"host": key_host}) for ln in lines]
    # after the key's host: an Event shipped as an exporter's log is about its subject, not that node
    return [with_event_subject(ln) for ln in lines]


def normalize(value: bytes, key_host: str | None = None) -> LogLine:
    """Read a record that carries one line. A record with several lines raises
    ``BadRecord("multi_line_record")`` rather than dropping any: read those with :func:`normalize_all`."""
    lines = normalize_all(value, key_host)
    if len(lines) != 1:
        raise BadRecord("multi_line_record", f"record carries {len(lines)} lines: read it with normalize_all")
    return lines[0]


# fields only a journal entry has, under Fluent Bit's Lowercase (with or without Strip_Underscores)
_JOURNAL_MARKERS = (
    "_transport",
    "_boot_id",
    "_machine_id",
    "_source_realtime_timestamp",
    "__realtime_timestamp",
)
_JOURNAL_MARKERS_BARE = ("transport", "boot_id", "machine_id", "source_realtime_timestamp")


def _is_journal(obj: dict[str, Any]) -> bool:
    """A journal entry whose field names Fluent Bit lowercased: ``message`` with journal fields
    beside it, and none of Vector's (its journald source names the host ``host`` and keeps the
    journal's own upper-case names)."""
    if "source_type" in obj or "host" in obj:
        return False
    if any(key in obj for key in _JOURNAL_MARKERS):
        return True
    return "syslog_identifier" in obj and any(key in obj for key in _JOURNAL_MARKERS_BARE)


def _is_ecs(obj: dict[str, Any]) -> bool:
    k8s = obj.get("kubernetes")
    return (
        isinstance(obj.get("host"), dict)
        or isinstance(obj.get("ecs"), dict)
        or isinstance(obj.get("agent"), dict)
        or isinstance(obj.get("log"), dict)
        or isinstance(obj.get("container"), dict)
        or (isinstance(k8s, dict) and isinstance(k8s.get("pod"), dict))
    )


# A shipper shape read through one pydantic model: the model, and how its record becomes lines.
_Shape = tuple[type[BaseModel], Callable[[Any], list[LogLine]]]


def _model_shape(obj: dict[str, Any]) -> _Shape | None:
    """The one-model shape of a JSON record; None for the shapes read without one (a Kubernetes
    Event, OTLP, a Loki push). Raises ``BadRecord("unknown_shape")`` for none of them."""
    if is_event(obj) or "resourceLogs" in obj or isinstance(obj.get("streams"), list):
        return None  # an Event first: it has a "message" too
    if isinstance(obj.get("log"), str):
        return FluentBitRecord, _from_fluentbit
    if "schema_version" in obj and isinstance(obj.get("lines"), list):
        return SickbayLinesRecord, _from_sickbay_batch
    if isinstance(obj.get("line"), str) and "schema_version" in obj:
        return SickbayLineRecord, _from_sickbay
    if isinstance(obj.get("msg"), str) and not isinstance(obj.get("message"), str):
        if "sequence" in obj and "sec" in obj:
            return FluentBitKmsgRecord, _from_kmsg
        return RsyslogJsonRecord, _from_rsyslog
    message = obj.get("message")
    if "MESSAGE" in obj and "message" not in obj:
        return JournaldRecord, _from_journald  # the model refuses a MESSAGE that is no text
    if isinstance(message, (str, list)) and _is_journal(obj):
        return JournaldRecord, _from_journald  # names lowercased; a list: journalctl's byte array
    if isinstance(message, str):
        if _is_ecs(obj):
            return FilebeatRecord, _from_filebeat
        return VectorRecord, _from_vector
    keys = ", ".join(sorted(obj)[:8])
    raise BadRecord("unknown_shape", f"no log/message/msg/line/resourceLogs field (keys: {keys})")


def _from_json(obj: dict[str, Any]) -> list[LogLine]:
    shape = _model_shape(obj)
    if shape is not None:
        model, lines_of = shape
        return lines_of(_validate(model, obj))
    if is_event(obj):
        return [event_line(obj)]
    if "resourceLogs" in obj:
        return _from_otlp(obj)
    return _from_loki(obj)


def _load_record(value: bytes) -> dict[str, Any] | None:
    """The checks every record passes first; its JSON object (an OTLP protobuf record in OTLP's
    JSON mapping), or None for a plain text record."""
    if not value or not value.strip():
        raise BadRecord("empty", "record has no content")
    if len(value) > MAX_RECORD_BYTES:
        raise BadRecord("too_large", f"{len(value)} bytes > {MAX_RECORD_BYTES}")
    if looks_like_otlp_proto(value) and (otlp := otlp_proto_logs(value)) is not None:
        return otlp  # before the text checks: its bytes may hold NULs, a '{' or a newline anywhere
    if value.lstrip()[:1] != b"{":
        return None
    try:
        obj = codec.loads(value)
    except codec.JSONDecodeError as exc:
        raise BadRecord("invalid_json", str(exc)) from exc
    if not isinstance(obj, dict):
        raise BadRecord("unknown_shape", "JSON value is not an object")
    return _native_event(obj) or obj


def _native_event(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The log event inside Vector's ``native_json`` codec (``{"log": {"message": ...}}``); None
    for any other record (Filebeat's ``log`` map sits beside its ``message``)."""
    event = obj.get("log")
    if type(event) is not dict or len(obj) > 2 or "message" in obj:
        return None
    return event if isinstance(event.get("message"), str) else None


_CLOCK_TYPES = frozenset({float, int, type(None)})  # a Fluent Bit time the check reads from the record
# the shapes checked without building their model where their fields surely validate (acceptance.py)
_SURELY_VALID: dict[type[BaseModel], Acceptance] = {
    model: sure
    for model in (FluentBitRecord, VectorRecord, FilebeatRecord, RsyslogJsonRecord)
    if (sure := Acceptance.of(model)) is not None
}


def vet_without_lines(value: bytes) -> bool:
    """Check a record in whose bytes no rule literal occurs (``Prefilter.records_with_literals``),
    without building its lines: no rule can fire on them, so only the checks matter. Raises the
    same :class:`BadRecord` as :func:`normalize_all` for the same record (a bad record is
    dead-lettered either way) and returns True; returns False where the bytes cannot vouch for the
    lines and the caller must read them whole:

    - a backslash: a JSON escape (``\\"``, ``\\n``, ``\\u00e9``, ``\\/``) may hide a literal's
      bytes that the decoded text holds;
    - a newline inside a plain record: CRI partial pieces are joined across lines;
    - an escape byte: a terminal colour code may split a literal the lines hold once the extractor
      takes the colours off (``carriers.strip_colours``);
    - an Event, OTLP or a Loki push: their lines are composed or re-encoded from the JSON.

    On a fleet most records carry no literal, and the full read (models, CRI split, job id,
    line objects) was most of the extract stage's time on bench-stream's mix."""
    if value.find(b"\\") >= 0 or value.find(b"\x1b") >= 0:  # find(): see telemetry.looks_like_metric
        return False  # the full read checks it (and parses it only once)
    obj = _load_record(value)
    if obj is None:
        _refuse_binary(value)
        return value.rstrip(b"\r\n").find(b"\n") < 0
    shape = _model_shape(obj)
    if shape is None:
        return False
    model = shape[0]
    if model is JournaldRecord and not isinstance(obj.get("MESSAGE", obj.get("message")), str):
        return False  # a byte array: its literals are numbers in the record's bytes
    sure = _SURELY_VALID.get(model)
    if model is not FluentBitRecord:
        if sure is None or not sure.accepts(obj):
            _validate(model, obj)
        return True
    # Fluent Bit's time is the one conversion that can fail after validation; read from the record
    # where it is a number (alias first, as pydantic reads it), from the model otherwise
    stamp = obj["@timestamp"] if "@timestamp" in obj else obj.get("timestamp")
    if stamp is None:
        stamp = obj.get("time")
    if sure is None or type(stamp) not in _CLOCK_TYPES or not sure.accepts(obj):
        rec = _validate(model, obj)
        stamp = rec.timestamp if rec.timestamp is not None else rec.time
    _epoch_or_datetime(stamp)
    return True
