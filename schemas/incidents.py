"""Incidents: one per failure, with its root cause, cascade, culprit and evidence."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from schemas.base import Contract, UtcDatetime


class Category(StrEnum):
    """The seven verdict categories shared by `sickbay diagnose`, the stream and the simulator."""

    HARDWARE_GPU = "hardware_gpu"
    HARDWARE_NETWORK = "hardware_network"
    HARDWARE_HOST = "hardware_host"
    SYSTEM_SOFTWARE = "system_software"
    APPLICATION = "application"
    INFRASTRUCTURE = "infrastructure"
    UNKNOWN = "unknown"


class IncidentStatus(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


class IncidentKind(StrEnum):
    """What the incident reports. ``degrading`` is pre-emptive: no job failed yet, so the policy
    may drain the node after its jobs end instead of killing them; ``hang`` and ``straggler``
    come from the progress and telemetry detectors."""

    FAILURE = "failure"
    HANG = "hang"
    STRAGGLER = "straggler"
    DEGRADING = "degrading"


class Evidence(Contract):
    signal_id: str
    rule: str
    node: str | None = None
    rank: int | None = None
    event_time: UtcDatetime
    text: str
    source_kind: str = "other"


class RootCause(Contract):
    rule: str
    summary: str
    signal_id: str
    event_time: UtcDatetime
    node: str | None = None
    gpu: str | None = None
    rank: int | None = None
    code: int | None = None
    text: str


class Symptom(Contract):
    """A group of cascade signals (e.g. NCCL watchdog timeouts on the other ranks)."""

    rule: str
    summary: str
    count: int = Field(ge=1)
    nodes: list[str] = Field(default_factory=list)
    ranks: list[int] = Field(default_factory=list)
    first_seen: UtcDatetime
    sample: str


class Culprit(Contract):
    node: str | None = None
    gpu: str | None = None
    rank: int | None = None


class Incident(Contract):
    """A versioned verdict. ``incident_id`` is stable; ``revision`` only grows.

    Consumers keep the highest revision per id (ClickHouse: ReplacingMergeTree on
    ``revision``).
    """

    incident_id: str
    revision: int = Field(ge=1)
    cluster: str
    job_id: str
    attempt: int = Field(ge=1)
    status: IncidentStatus
    category: Category
    root_cause: RootCause
    supporting: list[Symptom] = Field(default_factory=list)
    culprit: Culprit | None = None
    isolate: list[str] = Field(default_factory=list)
    restartable: bool
    confidence: float = Field(ge=0.0, le=1.0)
    evidence: list[Evidence] = Field(default_factory=list)
    coverage: list[str] = Field(default_factory=list)
    job_nodes: list[str] = Field(default_factory=list)
    opened_at: UtcDatetime
    updated_at: UtcDatetime
    first_signal_time: UtcDatetime
    kind: IncidentKind = IncidentKind.FAILURE
    provisional: bool = Field(
        default=False,
        description=(
            "a verdict the decide step does not act on yet: cascade lines only (NCCL watchdog timeouts, "
            "peers closing) while the root grace still runs, since a kernel log or another shipper may yet "
            "bring the root; or an early warning (a GPU that just began throttling for a hardware reason) "
            "until it is sustained. The decide step acts only on a revision that is not provisional"
        ),
    )
