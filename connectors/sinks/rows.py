"""Flatten each contract into the column order of its ClickHouse table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schemas import codec
from schemas.actions import Action, ActionResult
from schemas.audit import AuditRecord
from schemas.deadletter import DeadLetter
from schemas.incidents import Incident
from schemas.signals import Signal


def _json(obj: Any) -> str:
    return codec.dumps(obj).decode()


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
    return [
        s.signal_id,
        s.rule,
        s.role.value,
        s.category.value if s.category else "",
        s.summary,
        s.event_time,
        s.observed_time,
        s.node or "",
        s.job_id or "",
        s.rank,
        s.gpu or "",
        _json(s.attrs),
        s.isolation,
        int(s.decisive),
        s.text,
        s.source.kind,
        s.source.adapter or "",
        s.source.topic or "",
        s.source.partition,
        s.source.offset,
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
]


def incident_row(i: Incident) -> list[Any]:
    r = i.root_cause
    return [
        i.incident_id,
        i.revision,
        i.cluster,
        i.job_id,
        i.attempt,
        i.status.value,
        i.category.value,
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
        _json(i.supporting),
        _json(i.evidence),
        i.coverage,
        i.job_nodes,
        i.opened_at,
        i.updated_at,
        i.first_signal_time,
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
        a.kind.value,
        a.mode.value,
        int(a.dry_run),
        a.scheduler,
        a.cluster,
        a.incident_id,
        a.incident_revision,
        a.job_id or "",
        a.node or "",
        a.exclude_nodes,
        a.reason,
        a.created_at,
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
        r.kind.value,
        r.status.value,
        r.adapter,
        r.cluster,
        r.incident_id,
        r.started_at,
        r.finished_at,
        _json(r.commands),
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
        a.time,
        a.actor,
        a.event,
        a.cluster,
        a.incident_id or "",
        a.action_id or "",
        a.mode or "",
        _json(a.details),
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
        d.time,
    ]


# table, model, columns, row function
TableMap = tuple[str, type[Any], list[str], Callable[[Any], list[Any]]]
