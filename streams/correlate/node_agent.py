"""The ``gpu_health`` step (keyed by node): slow GPUs and degrading nodes.

It is not an agent of its own: the route agent reads the node inbox (``signals.node``,
``topology.node``, ``control.node-ticks`` and ``raw.telemetry``) and hands this step every GPU
telemetry sample and every node fact, validated once, the way the correlate agent drives the
progress step. Two agents on ``signals.node`` cost every node fact two fetches, two decodes, two
dispatches and two validations. The step keeps two tables keyed by node:

- ``gpu-pace``: each GPU's recent SM clock and throttle reasons
  (:mod:`streams.correlate.straggler`). A GPU that stays slower than its peers becomes a
  root-candidate node fact on ``signals.node``; the route step hands it to the jobs the node
  served at that time and the correlate agent makes the incident (one attribution engine,
  deterministic ids), or, when no job claims it, a ``node:<name>`` incident.
- ``node-health``: the decaying degradation score (:mod:`streams.correlate.node_health`).
  Snapshots go to ``health.nodes``; a score below the threshold publishes a pre-emptive
  ``degrading`` incident (``job_id`` ``node:<name>``, ``kind`` degrading) straight to
  ``incidents``, since no job failed and there is nothing to correlate yet.

Everything here is driven by arriving evidence (event time), so it needs no timer.
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

from pydantic import ValidationError

from schemas.base import utcnow
from schemas.signals import Signal
from schemas.telemetry import GpuTelemetry
from schemas.topics import TABLE_GPU_PACE, TABLE_NODE_HEALTH
from streams.correlate import node_health, straggler
from streams.deadletters import dead_letter_event
from streams.pipeline import Pipeline

log = logging.getLogger("sickbay.gpu_health")
STAGE = "gpu_health"  # the dead letters' stage for unreadable telemetry
MAX_CACHED = 50_000
T = TypeVar("T")


def _remember(cache: dict[str, T], key: str, value: T) -> None:
    if len(cache) >= MAX_CACHED and key not in cache:
        cache.clear()
    cache[key] = value


class NodeStage:
    def __init__(self, pipe: Pipeline) -> None:
        s = pipe.settings
        self.t = pipe.topics
        self.cluster = s.cluster
        self.strag_cfg = straggler.StragglerConfig(
            threshold=s.straggler_threshold,
            sustain_s=s.straggler_sustain_s,
            min_samples=s.straggler_min_samples,
            throttled_threshold=s.straggler_throttled_threshold,
            early_warning=s.straggler_early_warning,
        )
        self.health_cfg = node_health.HealthConfig(
            threshold=s.node_health_threshold, half_life_s=s.node_health_half_life_s
        )
        self.pace = pipe.app.Table(TABLE_GPU_PACE, default=None, partitions=s.partitions)
        self.health = pipe.app.Table(TABLE_NODE_HEALTH, default=None, partitions=s.partitions)
        # Parsed copies of what this worker last wrote (telemetry is the busiest input); cleared
        # whenever partitions move, when the tables restored from their changelogs are the truth.
        self.pace_cache: dict[str, straggler.PaceBoard] = {}
        self.health_cache: dict[str, node_health.NodeHealthState] = {}
        pipe.app.on_partitions_revoked.connect(self.forget)
        pipe.app.on_partitions_assigned.connect(self.forget)

    async def on_telemetry_value(self, event: Any, node: str, value: Any) -> None:
        """A ``raw.telemetry`` record for this node; an unreadable one is dead-lettered (stage
        ``gpu_health``)."""
        try:
            sample = GpuTelemetry.model_validate(value)
        except ValidationError as exc:
            await dead_letter_event(self.t.dlq, STAGE, event, node, exc)
            return
        await self.on_telemetry(node, sample)
        if node_health.telemetry_relevant(sample):
            new = node_health.observe_telemetry(self.health_state(node), sample, self.health_cfg)
            if new is not None:
                await self.on_health(node, new)

    async def on_signal(self, node: str, signal: Signal) -> None:
        """A node fact the route step validated: degradation evidence moves the node's score."""
        if node_health.signal_kind(signal) is None:
            return  # not degradation evidence (this includes our own straggler signals)
        new = node_health.observe_signal(self.health_state(node), signal, self.health_cfg)
        if new is not None:
            await self.on_health(node, new)

    def health_state(self, node: str) -> node_health.NodeHealthState | None:
        cached = self.health_cache.get(node)
        if cached is not None:
            return cached
        raw = self.health.get(node)
        return node_health.NodeHealthState.model_validate(raw) if raw else None

    async def forget(self, *_: Any, **__: Any) -> None:
        """Partitions moved: parsed copies may be stale, the tables are the truth again."""
        self.pace_cache.clear()
        self.health_cache.clear()

    async def on_telemetry(self, node: str, sample: GpuTelemetry) -> None:
        if not any(k in sample.metrics for k in straggler.PACE_METRICS):
            return
        board = self.pace_cache.get(node)
        if board is None:
            raw = self.pace.get(node)
            board = straggler.PaceBoard.model_validate(raw) if raw else None
        board = straggler.observe_telemetry(board, sample)
        found = None
        if straggler.SM_CLOCK in sample.metrics:
            entry = str(sample.gpu) if sample.gpu is not None else (sample.uuid or sample.pci_bus_id or "?")
            board, found = straggler.evaluate(board, entry, self.strag_cfg)
        self.pace[node] = board.model_dump(mode="json")
        _remember(self.pace_cache, node, board)
        if found is not None:
            # a node fact without a job: the route step decides which jobs it concerns
            signal = straggler.gpu_straggler_signal(found, utcnow())
            await self.t.signals_node.send(key=node.encode(), value=signal)
            log.info("straggler: %s", signal.summary)

    async def on_health(self, node: str, state: node_health.NodeHealthState) -> None:
        state, incident = node_health.evaluate(state, self.cluster, utcnow(), self.health_cfg)
        if incident is not None:
            await self.t.incidents.send(key=incident.job_id.encode(), value=incident)
            log.info("node health: %s", incident.root_cause.summary)
        if node_health.snapshot_due(state, self.health_cfg):
            await self.t.health_nodes.send(key=node.encode(), value=node_health.snapshot(state, self.cluster))
            state = node_health.mark_published(state)
        self.health[node] = state.model_dump(mode="json")
        _remember(self.health_cache, node, state)


def register(pipe: Pipeline) -> None:
    """The step's tables; the route agent, registered after it, drives the step."""
    stage = NodeStage(pipe)
    pipe.tables.update({"gpu_pace": stage.pace, "node_health": stage.health})
    pipe.services["gpu_health"] = stage
    pipe.agents["node_stage"] = stage
