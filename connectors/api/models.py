"""What the API returns and accepts: pydantic models (the OpenAPI spec is generated from them)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from schemas.actions import ActionKind, ActionStatus, Mode
from schemas.base import UtcDatetime
from schemas.incidents import Category, Evidence, IncidentStatus, Symptom

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:+\-]{0,127}$"
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
Reason = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]

NodeState = Literal[
    "ok", "advised", "isolating", "isolated", "isolation_failed", "restoring", "restore_failed"
]


class View(BaseModel):
    model_config = ConfigDict(frozen=True)


class RootView(View):
    rule: str
    summary: str
    node: str | None
    gpu: str | None
    code: int | None
    text: str


class IncidentSummary(View):
    incident_id: str
    revision: int
    cluster: str
    job_id: str
    attempt: int
    status: IncidentStatus
    category: Category
    root_rule: str
    root_summary: str
    root_code: int | None
    culprit_node: str | None
    culprit_gpu: str | None
    isolate: list[str]
    restartable: bool
    confidence: float
    job_size: int
    first_signal_time: UtcDatetime
    opened_at: UtcDatetime
    updated_at: UtcDatetime
    provisional: bool = False  # a cascade-only verdict inside the root grace; nothing acted on it yet


class ActionView(View):
    action_id: str
    idempotency_key: str
    kind: ActionKind
    mode: Mode
    dry_run: bool
    cluster: str
    incident_id: str
    incident_revision: int
    job_id: str | None
    node: str | None
    exclude_nodes: list[str]
    reason: str
    created_at: UtcDatetime
    status: ActionStatus | None = Field(description="the adapter's latest result; null while pending")
    detail: str | None
    finished_at: UtcDatetime | None
    commands: list[dict[str, Any]] = Field(default_factory=list)


class AuditView(View):
    audit_id: str
    time: UtcDatetime
    actor: str
    event: str
    cluster: str
    incident_id: str | None
    action_id: str | None
    mode: str | None
    details: dict[str, Any]


class Latency(View):
    detect_s: float | None = Field(description="first signal (event time) to the incident's first revision")
    act_s: float | None = Field(description="first signal to the first action result (dry runs count)")
    gpu_hours_lost: float | None
    recovered_by: str | None


class CollectorView(View):
    """The latest report of one collector on one host at the time of an incident."""

    collector: str
    host: str
    time: UtcDatetime
    broker_reachable: bool
    producer_mode: str
    spool_depth: int
    unreachable: list[str]
    unmatched: list[str]


class IncidentDetail(IncidentSummary):
    root_cause: RootView
    supporting: list[Symptom]
    evidence: list[Evidence]
    coverage: list[str]
    job_nodes: list[str]
    latency: Latency
    actions: list[ActionView]
    audit: list[AuditView]
    collectors: list[
        CollectorView
    ] = []  # what each collector on the job's nodes (and cluster-wide) could reach


class IncidentPage(View):
    items: list[IncidentSummary]
    limit: int
    offset: int


class AttemptView(View):
    attempt: int
    nodes: list[str]
    started_at: UtcDatetime | None
    ended_at: UtcDatetime | None
    run_h: float
    incidents: list[IncidentSummary]


class JobSummary(View):
    cluster: str
    job_id: str
    attempts: int
    job_size: int
    first_start: UtcDatetime | None
    last_start: UtcDatetime | None
    incidents: int
    gpu_hours_lost: float


class JobDetail(View):
    cluster: str
    job_id: str
    attempts: list[AttemptView]
    actions: list[ActionView]
    gpu_hours_lost: float


class NodeSummary(View):
    cluster: str
    node: str
    partition: str | None
    gpu_model: str | None
    driver_version: str | None
    gpus: int | None
    state: NodeState
    state_since: UtcDatetime | None
    incidents: int
    last_incident_at: UtcDatetime | None
    last_root_cause: str | None
    last_action_id: str | None


class HealthEvent(View):
    time: UtcDatetime
    event: str
    incident_id: str | None
    action_id: str | None
    category: str | None
    detail: str


class NodeDetail(NodeSummary):
    health: list[HealthEvent]
    recent_incidents: list[IncidentSummary]
    actions: list[ActionView]


class ModeView(View):
    scope: str
    cluster: str
    partition: str | None
    category: Category | None
    mode: Mode
    actor: str
    reason: str
    time: UtcDatetime | None
    source: Literal["settings", "operator"]


class ModeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Mode
    reason: Reason
    cluster: Name | None = Field(default=None, description="default: this installation's cluster")
    partition: Name | None = None
    category: Category | None = None


class IsolateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Reason
    incident_id: Name | None = Field(default=None, description="the incident this isolation answers, if any")
    cluster: Name | None = None
    dry_run: bool = Field(
        default=False, description="publish as advice only (the adapter validates, runs nothing)"
    )


class RestoreRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Reason
    cluster: Name | None = None
    dry_run: bool = False


class ApproveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Reason = "approved by an operator"


class Published(View):
    """A mutation's answer: the intent as published (the pipeline carries it out asynchronously)."""

    topic: str
    key: str
    record: dict[str, Any]
    audit_id: str


class CountRow(View):
    key: str
    count: int


class DailyRow(View):
    day: str
    category: str
    incidents: int


class TopNode(View):
    cluster: str
    node: str
    incidents: int
    categories: list[str]
    last_incident: UtcDatetime
    last_root_cause: str
    gpu_hours_lost: float
    mtbf_h: float | None


class Quantiles(View):
    count: int
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None


class LatencyStats(View):
    detect_s: Quantiles
    act_s: Quantiles


class GpuModelRow(View):
    gpu_model: str
    driver_version: str
    incidents: int
    nodes: int


class ShadowRow(View):
    """Observe mode's record for one (action kind, category): what sickbay proposed and what followed."""

    kind: str
    category: str
    proposed: int  # dry-run actions
    failed_again: int  # drains: the node was the culprit of a later incident (draining would have spared it)
    restarted_by_scheduler: int  # requeues: the scheduler (or someone) restarted the job anyway
    stayed_down: int  # requeues: nothing restarted the job within the horizon (sickbay would have)
    median_restart_delay_s: float | None  # requeues restarted anyway: how long after sickbay's proposal


class ShadowReport(View):
    horizon_h: float
    rows: list[ShadowRow]


class FleetSummary(View):
    failures_daily: list[DailyRow]
    failure_mix: list[CountRow]
    top_nodes: list[TopNode]
    by_gpu: list[GpuModelRow]
    latency: LatencyStats
    gpu_hours_lost: float
    action_outcomes: list[CountRow]


class ErrorBody(View):
    error: str = Field(description="a short machine-readable code")
    detail: Any = Field(description="what was wrong, for a person")
