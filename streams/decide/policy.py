"""Recovery policy: pure, so every decision can be unit-tested and replayed.

For an incident revision, a job's effective :class:`JobPolicy`, the mode in force
and the job's recovery history, :func:`plan` proposes:

1. **isolation** of each implicated node (Slurm cannot exclude a single GPU, so a
   GPU-scoped verdict drains its node with the GPU named in the reason), capped per
   incident; these go to the per-cluster gate (:mod:`streams.decide.gate`) which
   applies the fleet-wide valves. Isolation never delays the restart;
2. **restart** (requeue) excluding the implicated nodes, when the root cause is
   restartable and the job's budget allows: at most ``max_requeue_times`` failures
   since the last checkpoint, with exponential backoff after the first;
3. **stop** when the budget is spent, or when a non-restartable root cause repeats
   after one confirmation retry (optionally cancelling the job).

Guards that hold everything back: stale/replayed incidents, and a decision
deadline — if attribution took longer than the deadline, the scheduler's normal
path has already run and sickbay does not restart on top of it (fail open).

Every action is keyed by an idempotency key (cluster, kind, incident, target), so a
refined revision with the same culprit proposes nothing new, and a replayed incident
is recognised by the adapter.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.actions import Action, ActionKind, IsolationRequest, Mode, WorkloadKind
from schemas.incidents import Category, Incident, IncidentKind
from schemas.jobs import JobInfo
from streams.correlate.attribution import UNKNOWN_NODE
from streams.decide.policy_config import JobPolicy

ISOLATING_CATEGORIES = {
    Category.HARDWARE_GPU,
    Category.HARDWARE_NETWORK,
    Category.HARDWARE_HOST,
    Category.SYSTEM_SOFTWARE,
}
NODE_JOB_PREFIX = "node:"  # incidents on a node no job was using (correlator's pseudo-job)
MAX_FAILURES_KEPT = 64


class Failure(BaseModel):
    model_config = ConfigDict(extra="forbid")

    incident_id: str
    attempt: int
    at: datetime  # first decision time
    restartable: bool


class JobRecord(BaseModel):
    """What the decide step remembers per job: scheduler facts and the failures it decided on."""

    model_config = ConfigDict(extra="forbid")

    info: JobInfo | None = None
    failures: list[Failure] = Field(default_factory=list)

    def failure(self, incident_id: str) -> Failure | None:
        return next((f for f in self.failures if f.incident_id == incident_id), None)

    def since_checkpoint(self) -> list[Failure]:
        ckpt = self.info.last_checkpoint_at if self.info else None
        return [f for f in self.failures if ckpt is None or f.at > ckpt]

    def remember(self, incident: Incident, now: datetime) -> Failure:
        known = self.failure(incident.incident_id)
        if known is not None:
            return known
        fresh = Failure(
            incident_id=incident.incident_id,
            attempt=incident.attempt,
            at=now,
            restartable=incident.restartable,
        )
        self.failures = [*self.failures, fresh][-MAX_FAILURES_KEPT:]
        return fresh


@dataclass
class Plan:
    """The advice for one revision: job actions now, isolations for the gate, and why."""

    rule: str
    actions: list[Action] = field(default_factory=list)
    isolations: list[IsolationRequest] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    budget: dict[str, Any] = field(default_factory=dict)


def _key(cluster: str, kind: ActionKind, incident_id: str, target: str) -> str:
    return f"{cluster}:{kind.value}:{incident_id}:{target}"


def action_id(key: str) -> str:
    return "act-" + hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


def nodes_to_isolate(incident: Incident) -> list[str]:
    """Node names from ``isolate`` entries (``node`` or ``node:gpu``), order kept, no repeats.

    Entries that name no node (``gpu:<pci>``, ``unknown-node``) cannot be drained and are skipped.
    """
    nodes: list[str] = []
    for item in incident.isolate:
        node = item.split(":", 1)[0]
        if node in ("gpu", UNKNOWN_NODE):
            continue
        if node not in nodes:
            nodes.append(node)
    return nodes


def _gpu_of(incident: Incident, node: str) -> str | None:
    for item in incident.isolate:
        name, _, gpu = item.partition(":")
        if name == node and gpu:
            return gpu
    return None


def backoff_s(policy: JobPolicy, failures_since_checkpoint: int) -> float:
    """No wait for the first restart; then base, 2 x base, 4 x base ... capped."""
    if failures_since_checkpoint <= 1 or policy.backoff_base_s == 0:
        return 0.0
    return float(min(policy.backoff_base_s * 2 ** (failures_since_checkpoint - 2), policy.backoff_max_s))


def _scheduler(info: JobInfo | None) -> str:
    return "kubernetes" if info is not None and info.scheduler == "kubernetes" else "slurm"


def _workload(info: JobInfo | None) -> WorkloadKind | None:
    if info is None or not info.workload_kind:
        return None
    try:
        return WorkloadKind(info.workload_kind)
    except ValueError:
        return None


def _isolations(
    incident: Incident,
    policy: JobPolicy,
    mode: Mode,
    scheduler: str,
    info: JobInfo | None,
    reason: str,
    now: datetime,
    notes: list[str],
) -> list[IsolationRequest]:
    """Isolation requests for the gate (nodes implicated by a confident hardware verdict), capped."""
    isolate: list[str] = []
    if incident.category in ISOLATING_CATEGORIES and incident.confidence >= policy.min_confidence_to_isolate:
        isolate = nodes_to_isolate(incident)
        if not policy.isolate:
            if isolate:
                notes.append("not isolating: isolation is off for this job's policy")
            isolate = []
        elif len(isolate) > policy.max_isolate_per_incident:
            notes.append(
                f"blast radius: {len(isolate)} nodes implicated, cap {policy.max_isolate_per_incident} "
                "per incident; isolating none"
            )
            isolate = []
    elif incident.isolate:
        notes.append(
            f"not isolating: category {incident.category.value} / confidence {incident.confidence:.2f} "
            f"below {policy.min_confidence_to_isolate}"
        )
    expires = now + timedelta(seconds=policy.drain_expiry_s)
    partition = info.partition if info else None
    requests = []
    for node in isolate:
        key = _key(incident.cluster, ActionKind.DRAIN_NODE, incident.incident_id, node)
        requests.append(
            IsolationRequest(
                request_id=action_id(key),
                cluster=incident.cluster,
                node=node,
                partition=partition,
                incident_id=incident.incident_id,
                incident_revision=incident.revision,
                job_id=incident.job_id,
                gpu=_gpu_of(incident, node),
                category=incident.category,
                mode=mode,
                reason=reason,
                expires_at=expires,
                policy_rule="isolate",
                scheduler=scheduler,
                time=now,
            )
        )
    return requests


def plan(
    incident: Incident,
    policy: JobPolicy,
    mode: Mode,
    record: JobRecord,
    now: datetime,
) -> Plan:
    """Advice for one incident revision. ``record`` is updated in place (failure bookkeeping)."""
    if now - incident.first_signal_time > timedelta(seconds=policy.max_incident_age_s):
        return Plan(
            rule="stale",
            notes=[f"stale: incident evidence is older than {policy.max_incident_age_s:.0f}s; not acting"],
        )

    if incident.provisional:
        return Plan(
            rule="provisional",
            notes=[
                "holding: a provisional verdict (cascades only inside the root grace, or an early warning "
                "not yet sustained); acting on the final revision"
            ],
        )

    info = record.info
    scheduler = _scheduler(info)
    dry_run = mode != Mode.ACT
    reason = f"sickbay: {incident.root_cause.summary} [{incident.incident_id}]"[:256]
    out = Plan(rule="")

    def make(kind: ActionKind, target: str, rule: str, **fields: Any) -> Action:
        key = _key(incident.cluster, kind, incident.incident_id, target)
        return Action(
            action_id=action_id(key),
            idempotency_key=key,
            kind=kind,
            mode=mode,
            dry_run=dry_run,
            scheduler=scheduler,
            cluster=incident.cluster,
            incident_id=incident.incident_id,
            incident_revision=incident.revision,
            job_id=incident.job_id,
            reason=reason,
            created_at=now,
            namespace=info.namespace if info else None,
            workload_kind=_workload(info),
            policy_rule=rule,
            **fields,
        )

    out.isolations = _isolations(incident, policy, mode, scheduler, info, reason, now, out.notes)

    # -- pre-emptive and performance incidents ----------------------------------------------------
    if incident.kind == IncidentKind.DEGRADING:
        return _degrading(incident, policy, out, mode, scheduler, info, reason, now)
    if incident.kind == IncidentKind.STRAGGLER and not policy.restart_stragglers:
        out.rule = "straggler-isolate-only" if out.isolations else "straggler-no-action"
        out.notes.append("not restarting: a straggler slows the job but has not stopped it")
        return out

    # -- restart or stop ------------------------------------------------------------------------
    if incident.job_id.startswith(NODE_JOB_PREFIX):
        out.rule = "isolate-node" if out.isolations else "node-no-action"
        return out  # a fault on a node no job was using: nothing to restart

    return _restart_or_stop(incident, policy, record, out, make, now)


def _restart_or_stop(
    incident: Incident,
    policy: JobPolicy,
    record: JobRecord,
    out: Plan,
    make: Callable[..., Action],
    now: datetime,
) -> Plan:
    """The job half of the advice: restart (with backoff), or stop and say why."""
    info = record.info
    failure = record.remember(incident, now)
    recent = record.since_checkpoint()
    out.budget = {
        "failures_since_checkpoint": len(recent),
        "max_requeue_times": policy.max_requeue_times,
        "last_checkpoint_at": info.last_checkpoint_at.isoformat()
        if info and info.last_checkpoint_at
        else None,
    }

    if policy.auto_resume_mode == "off":
        out.rule = "no-auto-resume"
        out.notes.append("not restarting: auto_resume_mode is off for this job")
        return out
    decided_after = (failure.at - incident.opened_at).total_seconds()
    if decided_after > policy.decision_deadline_s:
        out.rule = "fail-open"
        out.notes.append(
            f"not restarting: attribution took {decided_after:.0f}s, over the "
            f"{policy.decision_deadline_s:.0f}s deadline; the scheduler's own recovery applies"
        )
        return out

    stop_reason: str | None = None
    isolate = [r.node for r in out.isolations]
    rule = "restart-excluding" if isolate else "restart"
    if not incident.restartable:
        repeats = sum(1 for f in recent if not f.restartable)
        if policy.confirm_non_restartable and repeats <= 1:
            rule = "confirm-retry"
            out.notes.append(
                f"root cause {incident.root_cause.rule} is not restartable; one confirmation retry"
            )
        else:
            stop_reason = f"root cause {incident.root_cause.rule} is not restartable"
            rule = "stop-not-restartable"
    elif len(recent) > policy.max_requeue_times:
        stop_reason = f"{len(recent)} failures without a new checkpoint (budget {policy.max_requeue_times})"
        rule = "stop-budget"

    if stop_reason is None and rule == "restart" and not _stops_the_job(incident, policy):
        # No culprit to exclude and a root that does not say the job is dead or stuck (a lone Xid 13,
        # a user's scancel): restarting a job that may still be running would make things worse.
        out.rule = "no-restart-without-culprit"
        out.notes.append(
            f"not restarting: root cause {incident.root_cause.rule} names no culprit "
            "and does not stop the job"
        )
        return out

    out.rule = rule
    if stop_reason is not None:
        out.notes.append(f"not restarting: {stop_reason}")
        if policy.on_budget_exhausted == "cancel":
            out.actions.append(make(ActionKind.CANCEL_JOB, incident.job_id, rule))
        return out

    wait = backoff_s(policy, len(recent))
    out.budget["backoff_s"] = wait
    out.actions.append(
        make(ActionKind.REQUEUE_JOB, incident.job_id, rule, exclude_nodes=isolate, backoff_s=wait)
    )
    return out


def _stops_the_job(incident: Incident, policy: JobPolicy) -> bool:
    """Whether the root cause means the job is dead or stuck (hang, NCCL watchdog) on its own."""
    return incident.kind == IncidentKind.HANG or any(
        incident.root_cause.rule.startswith(prefix) for prefix in policy.restart_in_place_rules
    )


def _degrading(
    incident: Incident,
    policy: JobPolicy,
    out: Plan,
    mode: Mode,
    scheduler: str,
    info: JobInfo | None,
    reason: str,
    now: datetime,
) -> Plan:
    """A node getting worse before any job failed: drain it (a Slurm drain lets running jobs finish;
    a Kubernetes cordon evicts nothing), never restart anything."""
    out.rule = "drain-degrading"
    if not policy.isolate_degrading:
        out.rule = "degrading-observe-only"
        out.notes.append("not isolating: isolate_degrading is off")
        return out
    if out.isolations:
        return out
    node = incident.culprit.node if incident.culprit and incident.culprit.node else None
    node = node or incident.job_id.removeprefix(NODE_JOB_PREFIX)
    if not node or node == UNKNOWN_NODE:
        out.notes.append("degrading incident names no node; nothing to isolate")
        return out
    proxy = incident.model_copy(
        update={"isolate": [node], "confidence": max(incident.confidence, policy.min_confidence_to_isolate)}
    )
    out.isolations = [
        req.model_copy(update={"policy_rule": "drain-degrading"})
        for req in _isolations(proxy, policy, mode, scheduler, info, reason, now, out.notes)
    ]
    return out


def drain_action(req: IsolationRequest, now: datetime) -> Action:
    """The drain the gate approved, with the same idempotency key the plan gave the request."""
    key = _key(req.cluster, ActionKind.DRAIN_NODE, req.incident_id, req.node)
    return Action(
        action_id=action_id(key),
        idempotency_key=key,
        kind=ActionKind.DRAIN_NODE,
        mode=req.mode,
        dry_run=req.mode != Mode.ACT,
        scheduler=req.scheduler,
        cluster=req.cluster,
        incident_id=req.incident_id,
        incident_revision=req.incident_revision,
        job_id=req.job_id,
        node=req.node,
        gpu=req.gpu,
        reason=req.reason,
        created_at=now,
        expires_at=req.expires_at,
        policy_rule=req.policy_rule,
    )


@dataclass(frozen=True)
class PolicyConfig:
    """One-incident view for tools that have no stream (diagnose scoring, seeds, expectations)."""

    mode: Mode = Mode.OBSERVE
    max_isolate: int = 2
    min_confidence_to_isolate: float = 0.8
    max_incident_age_s: float = 3600.0


def advise(incident: Incident, cfg: PolicyConfig, now: datetime) -> tuple[list[Action], list[str]]:
    """What the stream would do for this incident alone, with no job history and no other incidents:
    drains (as if the gate approved them) followed by the job action."""
    policy = JobPolicy(
        max_isolate_per_incident=cfg.max_isolate,
        min_confidence_to_isolate=cfg.min_confidence_to_isolate,
        max_incident_age_s=cfg.max_incident_age_s,
        decision_deadline_s=max(cfg.max_incident_age_s, JobPolicy().decision_deadline_s),
    )
    result = plan(incident, policy, cfg.mode, JobRecord(), now)
    drains = [drain_action(req, now) for req in result.isolations]
    return [*drains, *result.actions], result.notes
