"""Faust agents of the decide step.

    incidents ─[decide]─> actions (requeue / cancel), audit
      (job)       └─> decide.isolations (keyed by cluster) ─[isolation-gate]─> actions (drain), audit
    topology.jobs ─[job-info]  (same job keys and partitions as incidents: one table, co-partitioned)
    control.modes ─ followed whole by every worker (streams.decide.modes), not an agent

Restarts go out at once; isolations pass the per-cluster gate, which applies the
fleet-wide valves (blast radius, partition fraction, flapping). Observe mode is the
default; the mode in force is resolved per (cluster, partition, category) for every
decision and written into the audit record with the scope that set it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from datetime import datetime
from typing import Any

from schemas.actions import Action, IsolationRequest, Mode
from schemas.audit import AuditRecord
from schemas.base import utcnow
from schemas.incidents import Incident
from schemas.jobs import JobInfo
from schemas.topics import TABLE_DECIDE_GATE, TABLE_DECIDE_ISSUED, TABLE_DECIDE_JOBS
from streams.deadletters import dead_letter_event
from streams.decide.gate import GateState, admit
from streams.decide.modes import ModeFollower, ModeRegistry
from streams.decide.policy import JobRecord, Plan, drain_action, plan
from streams.decide.policy_config import JobPolicy, PolicyFile
from streams.pipeline import Pipeline, key_str
from streams.settings import Settings

log = logging.getLogger("sickbay.decide")
MAX_KEYS_PER_JOB = 256


def audit_id(*parts: str) -> str:
    return "aud-" + hashlib.blake2b("|".join(parts).encode(), digest_size=8).hexdigest()


def load_policy(settings: Settings) -> PolicyFile:
    """The operator's policy file, or the defaults with the per-incident cap from settings."""
    if settings.policy_file is not None:
        return PolicyFile.load(settings.policy_file)
    return PolicyFile(defaults=JobPolicy(max_isolate_per_incident=settings.max_isolate_per_incident))


def _proposed(action: Action, now: datetime, event: str = "action.proposed") -> AuditRecord:
    return AuditRecord(
        audit_id=audit_id("proposed", action.action_id),
        time=now,
        actor="decide",
        event=event,
        cluster=action.cluster,
        incident_id=action.incident_id,
        action_id=action.action_id,
        mode=action.mode.value,
        details={
            "kind": action.kind.value,
            "node": action.node,
            "job_id": action.job_id,
            "exclude_nodes": action.exclude_nodes,
            "dry_run": action.dry_run,
            "revision": action.incident_revision,
            "reason": action.reason,
            "policy_rule": action.policy_rule,
            "idempotency_key": action.idempotency_key,
            "backoff_s": action.backoff_s,
            "expires_at": action.expires_at.isoformat() if action.expires_at else None,
        },
    )


def _held(cluster: str, incident_id: str, revision: int, note: str, mode: Mode, now: datetime) -> AuditRecord:
    return AuditRecord(
        audit_id=audit_id("held", incident_id, str(revision), note),
        time=now,
        actor="decide",
        event="action.held",
        cluster=cluster,
        incident_id=incident_id,
        mode=mode.value,
        details={"note": note, "revision": revision},
    )


def _decision(
    incident: Incident, result: Plan, mode: Mode, mode_source: str, policy_notes: list[str], now: datetime
) -> AuditRecord:
    """One record per incident revision: what was known, which rule and budget, what was advised."""
    root = incident.root_cause
    return AuditRecord(
        audit_id=audit_id("decision", incident.incident_id, str(incident.revision)),
        time=now,
        actor="decide",
        event="decision",
        cluster=incident.cluster,
        incident_id=incident.incident_id,
        mode=mode.value,
        details={
            "revision": incident.revision,
            "job_id": incident.job_id,
            "attempt": incident.attempt,
            "category": incident.category.value,
            "confidence": incident.confidence,
            "root_rule": root.rule,
            "root_summary": root.summary,
            "culprit": incident.culprit.model_dump(mode="json") if incident.culprit else None,
            "evidence_lines": len(incident.evidence),
            "policy_rule": result.rule,
            "budget": result.budget,
            "advice": [f"{a.kind.value} {a.node or a.job_id}" for a in result.actions]
            + [f"isolate {r.node}" for r in result.isolations],
            "mode_source": mode_source,
            "notes": [*policy_notes, *result.notes],
            "decision_latency_s": round((now - incident.first_signal_time).total_seconds(), 3),
        },
    )


class DecideStep:
    """The decide step's state and handlers; the Faust agents below only loop and dead-letter."""

    def __init__(self, pipe: Pipeline) -> None:
        app, settings = pipe.app, pipe.settings
        self.t = pipe.topics
        self.policy_file = load_policy(settings)
        self.registry = ModeRegistry(settings.mode)
        self.issued = app.Table(TABLE_DECIDE_ISSUED, default=None, partitions=settings.partitions)
        self.jobs = app.Table(TABLE_DECIDE_JOBS, default=None, partitions=settings.partitions)
        self.gate_state = app.Table(TABLE_DECIDE_GATE, default=None, partitions=settings.partitions)

    def record_of(self, job_id: str) -> JobRecord:
        raw = self.jobs.get(job_id)
        return JobRecord.model_validate(raw) if raw else JobRecord()

    async def incident(self, job_id: str, incident: Incident) -> None:
        t, now = self.t, utcnow()
        record = self.record_of(job_id)
        partition = record.info.partition if record.info else None
        policy, policy_notes = self.policy_file.resolve(incident.cluster, partition, record.info)
        mode, mode_source = self.registry.resolve(incident.cluster, partition, incident.category)
        result = plan(incident, policy, mode, record, now)
        self.jobs[job_id] = record.model_dump(mode="json")

        # A key goes into `issued` only once the broker holds what it stands for (_delivered). The
        # table's changelog and the actions topic are different partitions, often on different
        # brokers: written the other way round, a broker failover could deliver the mark and not
        # the action, and a worker killed then left its successor a mark for an action that never
        # was (the 3-broker fault test lost a requeue that way). This order's failure is a re-sent
        # action under the same idempotency key, which the adapters already skip.
        seen: list[str] = list(self.issued.get(job_id) or [])
        for action in result.actions:
            if action.idempotency_key in seen:
                continue  # proposed for an earlier revision already
            await _delivered(t.actions, job_id.encode(), action)
            seen.append(action.idempotency_key)
            await t.audit.send(key=incident.incident_id.encode(), value=_proposed(action, now))
            log.info("proposed %s %s (%s)", action.kind.value, action.job_id, _how(action))
        for req in result.isolations:
            gate_key = f"isolate:{req.request_id}"
            if gate_key in seen:
                continue
            await _delivered(t.isolation_requests, req.cluster.encode(), req)
            seen.append(gate_key)
        self.issued[job_id] = seen[-MAX_KEYS_PER_JOB:]
        for note in [*policy_notes, *result.notes]:
            held = _held(incident.cluster, incident.incident_id, incident.revision, note, mode, now)
            await t.audit.send(key=incident.incident_id.encode(), value=held)
        decision = _decision(incident, result, mode, mode_source, policy_notes, now)
        await t.audit.send(key=incident.incident_id.encode(), value=decision)

    def job_info(self, info: JobInfo) -> None:
        """Merge what this record says (its non-empty fields) onto what was known; checkpoints only
        move forward. Producers serialise every field, so "not said" is an empty value."""
        record = self.record_of(info.job_id)
        old = record.info
        if old is None:
            record.info = info
        else:
            newer = info.time >= old.time
            given = {k: v for k in JobInfo.model_fields if (v := getattr(info, k)) not in (None, {}, "")}
            update = {k: v for k, v in given.items() if newer or getattr(old, k) in (None, {}, "")}
            ckpts = [t for t in (old.last_checkpoint_at, info.last_checkpoint_at) if t is not None]
            update["last_checkpoint_at"] = max(ckpts) if ckpts else None
            update["time"] = max(old.time, info.time)
            record.info = old.model_copy(update=update)
        self.jobs[info.job_id] = record.model_dump(mode="json")

    async def isolation(self, req: IsolationRequest) -> None:
        t, now = self.t, utcnow()
        state_key = f"{req.cluster}|{req.mode.value}"
        raw = self.gate_state.get(state_key)
        state = GateState.model_validate(raw) if raw else GateState()
        verdict = admit(state, req, self.policy_file.valves_for(req.cluster), now)
        if verdict.approved and not (req.restore or verdict.replay):
            # The drain first, then the state that counts it (see `incident`): a lost state write
            # re-admits the request and re-sends the same drain, never the reverse.
            action = drain_action(req, now)
            await _delivered(t.actions, (req.job_id or req.node).encode(), action)
            self.gate_state[state_key] = state.model_dump(mode="json")
            await t.audit.send(key=req.incident_id.encode(), value=_proposed(action, now))
            log.info("isolating %s (%s)", req.node, _how(action))
            return
        self.gate_state[state_key] = state.model_dump(mode="json")
        if req.restore or verdict.replay:
            return
        audit = AuditRecord(
            audit_id=audit_id("gate", req.request_id, verdict.valve or ""),
            time=now,
            actor="decide.gate",
            event="valve.alert" if verdict.alert else "action.held",
            cluster=req.cluster,
            incident_id=req.incident_id,
            mode=req.mode.value,
            details={
                "note": verdict.note,
                "valve": verdict.valve,
                "node": req.node,
                "revision": req.incident_revision,
            },
        )
        await t.audit.send(key=req.incident_id.encode(), value=audit)
        if verdict.alert:
            log.warning("safety valve %s tripped: %s", verdict.valve, verdict.note)


async def _delivered(topic: Any, key: bytes, value: Any) -> None:
    """Send and wait for the broker's acknowledgement (Faust's send returns once the record is
    handed to the producer; the future it returns resolves on the ack)."""
    pending = await topic.send(key=key, value=value)
    await pending


def _how(action: Action) -> str:
    return "dry-run" if action.dry_run else "act"


def register(pipe: Pipeline) -> None:
    app, t, settings = pipe.app, pipe.topics, pipe.settings
    step = DecideStep(pipe)
    pipe.services.update(decide=step, modes=step.registry, policy=step.policy_file)
    pipe.tables.update(issued=step.issued, decide_jobs=step.jobs, gate=step.gate_state)

    @app.agent(t.incidents, name="decide", concurrency=1)
    async def decide(stream: Any) -> None:
        async for event in stream.events():
            job_id = key_str(event.key) or "?"
            try:
                await step.incident(job_id, Incident.model_validate(event.value))
            except Exception as exc:  # invalid incident or a bug: dead-letter, keep the stream going
                log.exception("decide failed")
                await dead_letter_event(t.dlq, "decide", event, job_id, exc)

    @app.agent(t.topology_jobs, name="job-info", concurrency=1)
    async def job_info(stream: Any) -> None:
        """Scheduler facts per job (partition, APS comment, checkpoint), co-partitioned with incidents."""
        async for event in stream.events():
            job_id = key_str(event.key) or "?"
            try:
                step.job_info(JobInfo.model_validate(event.value))
            except Exception as exc:
                log.exception("job-info failed")
                await dead_letter_event(t.dlq, "job-info", event, job_id, exc)

    @app.agent(t.isolation_requests, name="isolation-gate", concurrency=1)
    async def isolation_gate(stream: Any) -> None:
        """Serial per cluster: the only place that counts isolations across the whole fleet."""
        async for event in stream.events():
            cluster = key_str(event.key) or "?"
            try:
                await step.isolation(IsolationRequest.model_validate(event.value))
            except Exception as exc:
                log.exception("isolation gate failed")
                await dead_letter_event(t.dlq, "isolation-gate", event, cluster, exc)

    if settings.follow_modes:

        @app.task  # type: ignore[untyped-decorator]
        async def follow_modes() -> None:
            follower = ModeFollower(
                step.registry, settings.kafka_bootstrap, settings.topics.control_modes.name
            )
            await asyncio.get_running_loop().run_in_executor(None, follower.start)
            pipe.services["mode_follower"] = follower

    pipe.agents.update({"decide": decide, "job-info": job_info, "isolation-gate": isolation_gate})
