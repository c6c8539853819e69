"""Faust agent ``decide``: incidents → action intents (observe mode by default) and audit records."""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime
from typing import Any

from schemas.actions import Action
from schemas.audit import AuditRecord
from schemas.base import utcnow
from schemas.incidents import Incident
from schemas.topics import TABLE_DECIDE_ISSUED
from streams.deadletters import dead_letter_event
from streams.decide.policy import PolicyConfig, advise
from streams.pipeline import Pipeline, key_str

log = logging.getLogger("sickbay.decide")
MAX_KEYS_PER_JOB = 256


def audit_id(*parts: str) -> str:
    return "aud-" + hashlib.blake2b("|".join(parts).encode(), digest_size=8).hexdigest()


def _proposed(incident: Incident, action: Action, now: datetime) -> AuditRecord:
    return AuditRecord(
        audit_id=audit_id("proposed", action.action_id),
        time=now,
        actor="decide",
        event="action.proposed",
        cluster=incident.cluster,
        incident_id=incident.incident_id,
        action_id=action.action_id,
        mode=action.mode.value,
        details={
            "kind": action.kind.value,
            "node": action.node,
            "job_id": action.job_id,
            "exclude_nodes": action.exclude_nodes,
            "dry_run": action.dry_run,
            "revision": incident.revision,
            "reason": action.reason,
        },
    )


def _held(incident: Incident, note: str, cfg: PolicyConfig, now: datetime) -> AuditRecord:
    return AuditRecord(
        audit_id=audit_id("held", incident.incident_id, str(incident.revision), note),
        time=now,
        actor="decide",
        event="action.held",
        cluster=incident.cluster,
        incident_id=incident.incident_id,
        mode=cfg.mode.value,
        details={"note": note, "revision": incident.revision},
    )


def register(pipe: Pipeline) -> None:
    app, t, settings = pipe.app, pipe.topics, pipe.settings
    cfg = PolicyConfig(mode=settings.mode, max_isolate=settings.max_isolate_per_incident)
    issued = app.Table(TABLE_DECIDE_ISSUED, default=None, partitions=settings.partitions)
    pipe.tables["issued"] = issued

    async def handle(job_id: str, incident: Incident) -> None:
        now = utcnow()
        actions, notes = advise(incident, cfg, now)
        seen: list[str] = list(issued.get(job_id) or [])
        for action in actions:
            if action.idempotency_key in seen:
                continue  # proposed for an earlier revision already
            await t.actions.send(key=job_id.encode(), value=action)
            seen.append(action.idempotency_key)
            await t.audit.send(key=incident.incident_id.encode(), value=_proposed(incident, action, now))
            log.info(
                "proposed %s %s (%s)",
                action.kind.value,
                action.node or action.job_id,
                "dry-run" if action.dry_run else "act",
            )
        for note in notes:
            await t.audit.send(key=incident.incident_id.encode(), value=_held(incident, note, cfg, now))
        issued[job_id] = seen[-MAX_KEYS_PER_JOB:]

    @app.agent(t.incidents, name="decide", concurrency=1)
    async def decide(stream: Any) -> None:
        async for event in stream.events():
            job_id = key_str(event.key) or "?"
            try:
                await handle(job_id, Incident.model_validate(event.value))
            except Exception as exc:  # invalid incident or a bug: dead-letter, keep the stream going
                log.exception("decide failed")
                await dead_letter_event(t.dlq, "decide", event, job_id, exc)

    pipe.agents["decide"] = decide
