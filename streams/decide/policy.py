"""Recovery policy: pure, so every decision can be unit-tested and replayed.

For an incident revision it proposes, in this order:

1. drain each implicated node (Slurm cannot exclude a single GPU, so a GPU-scoped
   isolation drains its node, with the GPU named in the reason), capped at
   ``max_isolate`` nodes per incident (blast radius);
2. requeue the job excluding those nodes, when the root cause is restartable.

Actions are keyed by an idempotency key (cluster, kind, incident, target), so a
refined revision with the same culprit proposes nothing new, and a replayed
incident is recognised by the adapter.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from schemas.actions import Action, ActionKind, Mode
from schemas.incidents import Category, Incident
from streams.correlate.attribution import UNKNOWN_NODE

ISOLATING_CATEGORIES = {
    Category.HARDWARE_GPU,
    Category.HARDWARE_NETWORK,
    Category.HARDWARE_HOST,
    Category.SYSTEM_SOFTWARE,
}


@dataclass(frozen=True)
class PolicyConfig:
    mode: Mode = Mode.OBSERVE
    max_isolate: int = 2
    min_confidence_to_isolate: float = 0.8
    max_incident_age_s: float = 3600.0  # stale guard: never act on old news


def _key(cluster: str, kind: ActionKind, incident_id: str, target: str) -> str:
    return f"{cluster}:{kind.value}:{incident_id}:{target}"


def _action_id(key: str) -> str:
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


def advise(incident: Incident, cfg: PolicyConfig, now: datetime) -> tuple[list[Action], list[str]]:
    """Actions for one revision, plus notes on anything the safety valves held back."""
    notes: list[str] = []
    if now - incident.first_signal_time > timedelta(seconds=cfg.max_incident_age_s):
        return [], [f"stale: incident evidence is older than {cfg.max_incident_age_s:.0f}s; not acting"]

    isolate: list[str] = []
    if incident.category in ISOLATING_CATEGORIES and incident.confidence >= cfg.min_confidence_to_isolate:
        isolate = nodes_to_isolate(incident)
        if len(isolate) > cfg.max_isolate:
            notes.append(
                f"blast radius: {len(isolate)} nodes implicated, cap {cfg.max_isolate}; isolating none"
            )
            isolate = []
    elif incident.isolate:
        notes.append(
            f"not isolating: category {incident.category.value} / confidence {incident.confidence:.2f} "
            f"below {cfg.min_confidence_to_isolate}"
        )

    dry_run = cfg.mode != Mode.ACT
    root = incident.root_cause
    reason = f"sickbay: {root.summary} [{incident.incident_id}]"[:256]
    actions: list[Action] = []

    def make(kind: ActionKind, target: str, **fields: object) -> Action:
        key = _key(incident.cluster, kind, incident.incident_id, target)
        return Action(
            action_id=_action_id(key),
            idempotency_key=key,
            kind=kind,
            mode=cfg.mode,
            dry_run=dry_run,
            cluster=incident.cluster,
            incident_id=incident.incident_id,
            incident_revision=incident.revision,
            job_id=incident.job_id,
            reason=reason,
            created_at=now,
            **fields,
        )

    actions.extend(make(ActionKind.DRAIN_NODE, node, node=node) for node in isolate)
    if incident.job_id.startswith("node:"):
        pass  # a fault on a node no job was using: nothing to restart
    elif incident.restartable and isolate:
        actions.append(make(ActionKind.REQUEUE_JOB, incident.job_id, exclude_nodes=isolate))
    elif not incident.restartable:
        notes.append(f"not restarting: root cause {root.rule} is not restartable")
    return actions, notes
