"""The audit trail: who decided or did what, when, and why."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from schemas.base import Contract, UtcDatetime


class AuditRecord(Contract):
    audit_id: str
    time: UtcDatetime
    actor: str  # the component, e.g. "decide" or "adapter.slurm"
    event: str  # e.g. "action.proposed", "action.executed", "mode.changed"
    cluster: str
    incident_id: str | None = None
    action_id: str | None = None
    mode: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)
