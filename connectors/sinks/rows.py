"""Flatten each contract into the column order of its ClickHouse table, encoded for one insert format.

Rows are written as ``JSONCompactEachRow`` (one JSON array per row, in column
order): the same bytes work on chdb and on a server, orjson encodes them in well
about half a microsecond, and a buffered row is one ``bytes`` object (which the
garbage collector never has to walk). Datetimes travel as epoch seconds (exact
to the millisecond the columns keep); nested objects and lists are sent as JSON
values and stored as their JSON text in ``String`` columns
(:data:`INSERT_SETTINGS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from schemas import codec
from schemas.actions import Action, ActionResult, ModeChange
from schemas.audit import AuditRecord
from schemas.collector import CollectorReport
from schemas.deadletter import DeadLetter
from schemas.health import NodeHealth
from schemas.incidents import Category, Incident
from schemas.signals import JobNodeAssignment, Role, Signal

INSERT_FORMAT = "JSONCompactEachRow"
INSERT_SETTINGS = {
    # JSON objects/arrays bound for String columns are kept as their JSON text.
    "input_format_json_read_objects_as_strings": 1,
    "input_format_json_read_arrays_as_strings": 1,
    # ReplacingMergeTree collapses duplicates at merge time and under FINAL; sorting each inserted
    # block for an early collapse only slows the insert down.
    "optimize_on_insert": 0,
}


def encode(row: list[Any]) -> bytes:
    """One ``JSONCompactEachRow`` line (without the newline), through the project's one JSON seam."""
    return codec.dumps(row)


def ts(value: datetime) -> float:
    """A timezone-aware datetime as epoch seconds (contracts hold UTC-aware datetimes only)."""
    return value.timestamp()


SIGNAL_COLUMNS = [
    "signal_id",
    "rule",
    "role",
    "category",
    "summary",
    "event_time",
    "observed_time",
    "node",
    "job_id",
    "rank",
    "gpu",
    "attrs",
    "isolation",
    "decisive",
    "text",
    "source_kind",
    "adapter",
    "topic",
    "partition",
    "offset",
]


def signal_row(s: Signal) -> list[Any]:
    src = s.source
    return [
        s.signal_id,
        s.rule,
        s.role,
        s.category or "",
        s.summary,
        s.event_time.timestamp(),
        s.observed_time.timestamp(),
        s.node or "",
        s.job_id or "",
        s.rank,
        s.gpu or "",
        s.attrs,
        s.isolation,
        int(s.decisive),
        s.text,
        src.kind,
        src.adapter or "",
        src.topic or "",
        src.partition,
        src.offset,
    ]


class RowError(ValueError):
    """A record the sink cannot store as a row (its reason is the dead letter's error)."""


_ROLES = frozenset(r.value for r in Role)
_CATEGORIES = frozenset(c.value for c in Category)
_ISOLATIONS = frozenset({"none", "gpu", "node", "link"})
_SOURCE_KINDS = frozenset({"kernel", "training", "scheduler", "telemetry", "other"})
SKIP = None  # what a fast row builder returns for a record the sink deliberately does not store


def _text(d: dict[str, Any], key: str, limit: int = 65536) -> str:
    v = d[key]
    if type(v) is not str or len(v) > limit:
        raise RowError(f"{key}: expected a string of at most {limit} characters")
    return v


def _opt_text(d: dict[str, Any], key: str) -> str:
    v = d.get(key)
    if v is None:
        return ""
    if type(v) is not str:
        raise RowError(f"{key}: expected a string or null")
    return v


def _opt_int(d: dict[str, Any], key: str) -> int | None:
    v = d.get(key)
    if v is None or (type(v) is int):
        return v
    raise RowError(f"{key}: expected an integer or null")


def _epoch(d: dict[str, Any], key: str) -> float:
    v = d[key]
    if type(v) is not str:
        raise RowError(f"{key}: expected an ISO 8601 time")
    t = datetime.fromisoformat(v)
    if t.tzinfo is None:  # naive times are UTC, as the contracts read them
        t = t.replace(tzinfo=UTC)
    return t.timestamp()


def signal_row_json(value: bytes) -> list[Any] | None:
    """The ``signals`` row straight from the JSON the worker published, without building a ``Signal``.

    The sink's hot path (signals are most of its rows). The worker validated each signal
    against the contract when it made it; here the sink checks what it stores — every column's
    type and the enumerations — so a bad record is dead-lettered instead of failing a whole
    insert. ``tests/unit/test_sink_fast_rows.py`` holds it to the contract path: same rows for
    valid records, a refusal for records the contract refuses in a stored column.
    """
    d = codec.loads(value)
    if type(d) is not dict:
        raise RowError("a signal must be a JSON object")
    if d.get("schema_version", 1) != 1:
        raise RowError(f"schema_version {d.get('schema_version')!r} is not 1")
    if d.get("routed") is True:
        return SKIP  # a copy re-keyed onto a job: the original is stored from signals.node
    role = d["role"]
    if role not in _ROLES:
        raise RowError(f"role: {role!r} is not a known role")
    isolation = d.get("isolation", "none")
    if isolation not in _ISOLATIONS:
        raise RowError(f"isolation: {isolation!r} is not none/gpu/node/link")
    category = d.get("category")
    if category is not None and category not in _CATEGORIES:
        raise RowError(f"category: {category!r} is not a known category")
    attrs = d.get("attrs", {})
    if type(attrs) is not dict:
        raise RowError("attrs: expected an object")
    decisive = d.get("decisive", False)
    if type(decisive) is not bool:
        raise RowError("decisive: expected a boolean")
    src = d.get("source") or {}
    if type(src) is not dict or src.get("kind", "other") not in _SOURCE_KINDS:
        raise RowError("source: expected an object with a known kind")
    return [
        _text(d, "signal_id", 256),
        _text(d, "rule", 256),
        role,
        category or "",
        _text(d, "summary"),
        _epoch(d, "event_time"),
        _epoch(d, "observed_time"),
        _opt_text(d, "node"),
        _opt_text(d, "job_id"),
        _opt_int(d, "rank"),
        _opt_text(d, "gpu"),
        attrs,
        isolation,
        int(decisive),
        _text(d, "text", 4096),
        src.get("kind", "other"),
        _opt_text(src, "adapter"),
        _opt_text(src, "topic"),
        _opt_int(src, "partition"),
        _opt_int(src, "offset"),
    ]


INCIDENT_COLUMNS = [
    "incident_id",
    "revision",
    "cluster",
    "job_id",
    "attempt",
    "status",
    "category",
    "root_rule",
    "root_summary",
    "root_node",
    "root_gpu",
    "root_code",
    "root_text",
    "culprit_node",
    "culprit_gpu",
    "isolate",
    "restartable",
    "confidence",
    "supporting",
    "evidence",
    "coverage",
    "job_nodes",
    "opened_at",
    "updated_at",
    "first_signal_time",
    "provisional",
]


def incident_row(i: Incident) -> list[Any]:
    r = i.root_cause
    return [
        i.incident_id,
        i.revision,
        i.cluster,
        i.job_id,
        i.attempt,
        i.status,
        i.category,
        r.rule,
        r.summary,
        r.node or "",
        r.gpu or "",
        r.code,
        r.text,
        (i.culprit.node if i.culprit else None) or "",
        (i.culprit.gpu if i.culprit else None) or "",
        i.isolate,
        int(i.restartable),
        i.confidence,
        i.supporting,
        i.evidence,
        i.coverage,
        i.job_nodes,
        ts(i.opened_at),
        ts(i.updated_at),
        ts(i.first_signal_time),
        int(i.provisional),
    ]


ACTION_COLUMNS = [
    "action_id",
    "idempotency_key",
    "kind",
    "mode",
    "dry_run",
    "scheduler",
    "cluster",
    "incident_id",
    "incident_revision",
    "job_id",
    "node",
    "exclude_nodes",
    "reason",
    "created_at",
]


def action_row(a: Action) -> list[Any]:
    return [
        a.action_id,
        a.idempotency_key,
        a.kind,
        a.mode,
        int(a.dry_run),
        a.scheduler,
        a.cluster,
        a.incident_id,
        a.incident_revision,
        a.job_id or "",
        a.node or "",
        a.exclude_nodes,
        a.reason,
        ts(a.created_at),
    ]


RESULT_COLUMNS = [
    "action_id",
    "idempotency_key",
    "kind",
    "status",
    "adapter",
    "cluster",
    "incident_id",
    "started_at",
    "finished_at",
    "commands",
    "detail",
]


def result_row(r: ActionResult) -> list[Any]:
    return [
        r.action_id,
        r.idempotency_key,
        r.kind,
        r.status,
        r.adapter,
        r.cluster,
        r.incident_id,
        ts(r.started_at),
        ts(r.finished_at),
        r.commands,
        r.detail,
    ]


AUDIT_COLUMNS = [
    "audit_id",
    "time",
    "actor",
    "event",
    "cluster",
    "incident_id",
    "action_id",
    "mode",
    "details",
]


def audit_row(a: AuditRecord) -> list[Any]:
    return [
        a.audit_id,
        ts(a.time),
        a.actor,
        a.event,
        a.cluster,
        a.incident_id or "",
        a.action_id or "",
        a.mode or "",
        a.details,
    ]


DLQ_COLUMNS = ["stage", "reason", "error", "topic", "partition", "offset", "key", "original_b64", "time"]


def dlq_row(d: DeadLetter) -> list[Any]:
    return [
        d.stage,
        d.reason,
        d.error,
        d.topic or "",
        d.partition,
        d.offset,
        d.key or "",
        d.original_b64,
        ts(d.time),
    ]


ASSIGNMENT_COLUMNS = ["cluster", "job_id", "attempt", "node", "state", "event_time"]


def assignment_row(a: JobNodeAssignment) -> list[Any]:
    return [a.cluster, a.job_id, a.attempt, a.node, a.state, ts(a.event_time)]


MODE_COLUMNS = ["change_id", "time", "scope", "cluster", "partition", "category", "mode", "actor", "reason"]


def mode_row(m: ModeChange) -> list[Any]:
    return [
        m.change_id,
        ts(m.time),
        m.scope.key(),
        m.scope.cluster,
        m.scope.partition or "",
        m.scope.category or "",
        m.mode,
        m.actor,
        m.reason,
    ]


REPORT_COLUMNS = [
    "collector",
    "host",
    "time",
    "started",
    "final",
    "broker_reachable",
    "producer_mode",
    "spool_depth",
    "spool_bytes",
    "unreachable",
    "unmatched",
    "reached",
    "counts",
]


def report_row(r: CollectorReport) -> list[Any]:
    return [
        r.collector,
        r.host or "",
        ts(r.time),
        ts(r.started),
        int(r.final),
        int(r.broker_reachable),
        r.producer_mode,
        r.spool_depth,
        r.spool_bytes,
        [f"{x.kind}:{x.target}" for x in r.unreachable],
        r.unmatched,
        [x.model_dump(mode="json") for x in r.reached],
        r.counts,
    ]


HEALTH_COLUMNS = ["cluster", "node", "time", "score", "degrading", "worst_gpu", "events", "components"]


def health_row(h: NodeHealth) -> list[Any]:
    return [
        h.cluster,
        h.node,
        ts(h.time),
        h.score,
        int(h.degrading),
        h.worst_gpu or "",
        h.events,
        h.components,
    ]


@dataclass(frozen=True)
class TableMap:
    """Where one topic's records go: the table, the contract that validates them, the flattening."""

    table: str
    model: type[BaseModel]
    columns: list[str]
    row: Callable[[Any], list[Any]]
    fast: Callable[[bytes], list[Any] | None] | None = None  # JSON → row without the model (hot tables)
