"""Faust agents ``route`` and ``correlate`` and the ``refine`` timer.

``route`` (keyed by node) keeps which jobs each node serves and re-keys node
facts (a kernel Xid) onto every job the node served at that time. A node fact
that arrives before its job's topology waits in a small per-node buffer.

``correlate`` (keyed by job) keeps the job's topology and its incident window
and runs the pure correlator. Faust tables can only change inside a stream, so
the ``refine`` timer does not touch them: it sends a tick per open window into
``control.ticks``, which the correlate agent reads beside ``signals.job``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from connectors.kafka_partitioner import KeyPartitioner
from schemas.base import UtcDatetime, utcnow
from schemas.incidents import Incident
from schemas.signals import (
    RANK_PLACEMENT_RULE,
    JobNodeAssignment,
    PlacementBatch,
    RankPlacement,
    Role,
    Signal,
)
from schemas.topics import (
    TABLE_INCIDENT_WINDOWS,
    TABLE_JOB_LOOKBACK,
    TABLE_JOB_TOPOLOGY,
    TABLE_NODE_JOBS,
    TABLE_RANK_PLACES,
)
from streams.correlate.attribution import PlaceOf
from streams.correlate.backlog import BacklogProbe, topology_path
from streams.correlate.correlator import Timing, add_signal, apply_topology, decide_now, tick
from streams.correlate.lookback import LOOKBACK_RULES, recall, remember
from streams.correlate.node_agent import NodeStage
from streams.correlate.progress import is_checkpoint_save
from streams.correlate.progress_agent import PROGRESS_TICK, ProgressStage
from streams.correlate.restarts import remember_failure, saw_checkpoint
from streams.correlate.state import (
    RANKS_PER_BLOCK,
    IncidentWindow,
    JobTopology,
    RankBlock,
    RankPlace,
    newer_placement,
    placement_from,
    placement_of,
    sent_upto,
)
from streams.correlate.table_cache import TableCache
from streams.deadletters import dead_letter_event
from streams.faust_events import as_current, current
from streams.pipeline import Pipeline, key_str
from streams.signal_batches import (
    BadBatch,
    handle_each,
    is_assignment_batch,
    is_batch,
    is_placement_batch,
    pack_assignments,
    pack_partitions,
    pack_placements,
    unpack_assignments,
)

log = logging.getLogger("sickbay.correlate")
TICK_INDEX_REBUILD_S = 60.0
LONE_ROLES = frozenset({Role.HINT, Role.CONFIRMATION})  # roles that never open a window on their own
MAX_PENDING_PER_NODE = 256
MAX_CACHED_BLOCKS = 8_192  # of RANKS_PER_BLOCK ranks each: half a million ranks
MAX_CACHED_WINDOWS = 1_024  # parsed windows (tens of KB each as objects)
MAX_CACHED_STATES = 20_000  # parsed topologies and node states (small)


class NodeJob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str
    attempt: int
    assigned_at: UtcDatetime
    released_at: UtcDatetime | None = None


class NodeState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jobs: list[NodeJob] = Field(default_factory=list)
    pending: list[Signal] = Field(default_factory=list)
    # facts no job claimed in time, given to the node's own incident: kept for the lateness bound, so
    # a job whose topology arrives later (a collector down past the grace) still gets its root
    released: list[Signal] = Field(default_factory=list)


def jobs_at(state: NodeState, when: datetime, lateness: timedelta) -> list[NodeJob]:
    """Jobs the node served at ``when``, with ``lateness`` of clock skew either side."""
    return [
        j
        for j in state.jobs
        if j.assigned_at - lateness <= when and (j.released_at is None or when <= j.released_at + lateness)
    ]


def apply_assignment(state: NodeState, a: JobNodeAssignment, lateness: timedelta) -> NodeState:
    jobs = [j for j in state.jobs if not (j.job_id == a.job_id and j.attempt == a.attempt)]
    current = next((j for j in state.jobs if j.job_id == a.job_id and j.attempt == a.attempt), None)
    if a.state == "assigned":
        jobs.append(
            NodeJob(
                job_id=a.job_id,
                attempt=a.attempt,
                assigned_at=a.event_time,
                released_at=current.released_at if current else None,
            )
        )
    elif current is not None:
        jobs.append(current.model_copy(update={"released_at": a.event_time}))
    horizon = a.event_time - 4 * lateness - timedelta(hours=1)
    jobs = [j for j in jobs if j.released_at is None or j.released_at >= horizon]
    return state.model_copy(update={"jobs": jobs})


_NOT_TELEMETRY = ("signal_id", "tick", "kind", "job_id", "state")  # a node fact's, tick's, assignment's


def _block_key(job_id: str, block: int) -> str:
    return f"{job_id}|b{block}"


def _stale(built: float | None) -> bool:
    """A timer index never built, emptied by a rebalance, or older than its rebuild period."""
    return built is None or time.monotonic() - built > TICK_INDEX_REBUILD_S


class CorrelateStage:
    """The route and correlate steps over their tables; one method per kind of event."""

    def __init__(self, pipe: Pipeline) -> None:
        app, settings = pipe.app, pipe.settings
        self.app = app
        self.t = pipe.topics
        # the progress step runs on the same records (progress_agent.py); None without detectors
        self.progress: ProgressStage | None = pipe.services.get("progress")
        # and the gpu_health step on the route step's node facts and GPU telemetry (node_agent.py)
        self.gpu_health: NodeStage | None = pipe.services.get("gpu_health")
        cat = settings.topics
        self._telemetry_topic = cat.raw_telemetry.name
        self._node_topics = {cat.signals_node.name, cat.topology_node.name, cat.ticks_node.name}
        self.cluster = settings.cluster
        self.lateness = timedelta(seconds=settings.lateness_s)
        self.unclaimed_grace = timedelta(seconds=settings.unclaimed_grace_s)
        self.timing = Timing(
            root_grace_s=settings.root_grace_s,
            quiet_s=settings.incident_quiet_s,
            refine_interval_s=settings.refine_interval_s,
            provisional_after_s=settings.provisional_after_s,
        )
        self.node_jobs = app.Table(
            TABLE_NODE_JOBS, default=None, partitions=settings.partitions, value_type=bytes
        )
        self.job_topology = app.Table(
            TABLE_JOB_TOPOLOGY, default=None, partitions=settings.partitions, value_type=bytes
        )
        self.windows = app.Table(
            TABLE_INCIDENT_WINDOWS, default=None, partitions=settings.partitions, value_type=bytes
        )
        # one entry per block of 64 ranks ("job|b<n>"): a 4,000-rank job's placement is never one
        # value rewritten to the changelog per rank, and attribution reads only the blocks it needs
        self.rank_places = app.Table(
            TABLE_RANK_PLACES, default=None, partitions=settings.partitions, value_type=bytes
        )
        # Parsed copies of what this stage (each table's only writer) last read or wrote
        # (table_cache.py). Attribution asks for the same few ranks on every signal and tick of a
        # window (the root's rank, its block, the silent ranks); a window is re-read per signal.
        self.places = TableCache(self.rank_places, RankBlock, MAX_CACHED_BLOCKS)
        self.parsed_windows = TableCache(self.windows, IncidentWindow, MAX_CACHED_WINDOWS)
        self.topologies = TableCache(self.job_topology, JobTopology, MAX_CACHED_STATES)
        self.node_states = TableCache(self.node_jobs, NodeState, MAX_CACHED_STATES)
        # job -> the latest context hint per rank from before its incident (lookback.py)
        self.lookback = app.Table(TABLE_JOB_LOOKBACK, default=None, partitions=settings.partitions)
        app.on_partitions_revoked.connect(self.forget_caches)
        app.on_partitions_assigned.connect(self.forget_caches)
        # when this worker's streams last resumed (a rebalance's table recovery done, or the start):
        # an unclaimed fact's grace counts from then at the earliest (``release_unclaimed``)
        self._resumed_at: datetime | None = None
        app.on_rebalance_complete.connect(self.resumed)
        # and from the last time the broker said the topology path was behind (backlog.py): the
        # probe (set by ``register`` unless turned off) looks while facts wait, from the refine timer
        self.backlog: BacklogProbe | None = None
        self.held_at: datetime | None = None
        self._probe_every = settings.unclaimed_probe_s or 0.0
        self._probed_at = float("-inf")
        self._probe_task: asyncio.Task[None] | None = None
        self._probe_failing = False
        # partitions of signals.job this worker owns, and those it took over in the rebalance under way
        # (their windows' unsent revisions are sent again once their tables are recovered: ``resumed``)
        self._signals_job_topic = cat.signals_job.name
        self._owned_job_partitions: set[int] = set()
        self._taken_over: set[int] = set()
        app.on_partitions_assigned.connect(self.took_partitions)
        # a window's changelog write must be on the broker before the revision it holds is sent
        self.parsed_windows.track_acks()
        # job -> (closed, last_signal_at) of each window, for the refine timer: decoding every window
        # of the table each second cost more than the ticks. Kept by the writes below and rebuilt from
        # the table after a rebalance and once a minute (a recovery fills the table behind our back).
        self._tickable: dict[str, tuple[bool, datetime]] = {}
        self._tickable_built: float | None = None
        # nodes holding unclaimed facts, for the same timer (decoding all 10k node states each
        # second to find the few with pending facts cost more than the route step); same upkeep
        self._pending_nodes: set[str] = set()
        self._pending_built: float | None = None
        # ended jobs whose look-back and placements wait out the lateness bound (forget_after of
        # their topology), for the same timer; same upkeep, from the job-topology table
        self._forgettable: dict[str, datetime] = {}
        self._forgettable_built: float | None = None
        # jobs whose window took signals in the take being handled (None outside one)
        self._undecided: dict[str, Any] | None = None  # job -> the event it came with
        # job ↔ node assignments learnt in that take, sent packed per partition at its end
        self._assignments: list[JobNodeAssignment] | None = None
        self._node_partition = KeyPartitioner(settings.topics.topology_node.partitions)
        # node facts the route step forwards in a take, per job, sent packed at its end
        self._forwards: dict[bytes, list[Signal]] | None = None
        self._placement_forwards: dict[bytes, list[RankPlacement]] | None = None  # the same for placements
        # incident revisions decided in the take being handled, sent once their windows are durable
        self._outbox: list[tuple[Incident, Any]] | None = None  # each with the event it was decided under
        # job -> the revision this worker sent again after a takeover and saw on the broker: the
        # window lets go of it (``unsent``) when it is next written or ticked
        self._resent: dict[str, int] = {}
        self._job_partition = KeyPartitioner(settings.topics.signals_job.partitions)

    async def dead_letter(self, stage: str, event: Any, key: str, exc: Exception, item: Any = None) -> None:
        await dead_letter_event(self.t.dlq, stage, event, key, exc, item=item)

    # -- route: keyed by node -------------------------------------------------------------------

    async def forward(self, signal: Signal, job: NodeJob) -> None:
        routed = signal.model_copy(update={"job_id": job.job_id, "routed": True})
        if self._forwards is not None:  # inside a take: sent packed at its end
            self._forwards.setdefault(job.job_id.encode(), []).append(routed)
            return
        await self.t.signals_job.send(key=job.job_id.encode(), value=routed)

    async def on_node_events(self, events: Sequence[Any]) -> None:
        """A take of the node inbox, from any of the worker's partitions. The nodes' states reach
        ``node-jobs`` once, at the take's end, each under the event it came with (``faust_events``);
        the facts forwarded to jobs go out packed per partition of ``signals.job``
        (``pack_partitions``, as the extract stage sends them), so a busy fleet's node facts cost
        the correlate agent a message per partition per take, not one per fact and job. Faust
        acknowledges the take's events only after this returns: a crash replays the take whole, and
        the forwarded copies keep their signal ids, so the correlate step drops the repeats."""
        with self.node_states.deferred():
            self._forwards, self._placement_forwards = {}, {}
            try:
                await self._each_event(events, "route", self.on_node_event, "")
                # placements first: on each partition a job's ranks are placed before its errors
                await self.send_placements(self._placement_forwards)
                for partition, key, value in pack_partitions(self._forwards, self._job_partition):
                    await self.t.signals_job.send(key=key, value=value, partition=partition)
            finally:
                self._forwards, self._placement_forwards = None, None
            await self.delivered()

    async def send_placements(self, by_job: dict[bytes, list[RankPlacement]]) -> None:
        """Placements filed under their jobs, packed per partition of ``signals.job``."""
        for partition, key, value in pack_placements(by_job, self._job_partition, "job", utcnow()):
            await self.t.signals_job.send(key=key, value=value, partition=partition)

    async def on_placement_batch(self, event: Any, key: str) -> None:
        """Rank placements in their compact form (``PlacementBatch``, as the extract stage packs them
        per partition of ``signals.node``): each filed under the jobs its node serves at the line's
        time and sent on packed at the take's end, like a node fact. One on a node that serves no job
        then places nothing (its signal was dropped there too). A batch that does not validate is
        dead-lettered whole (its placements come from one read of one extract stage)."""
        try:
            batch = PlacementBatch.model_validate(event.value)
        except ValidationError as exc:
            await self.dead_letter("route", event, key, exc)
            return
        in_take = self._placement_forwards
        held: dict[bytes, list[RankPlacement]] = {} if in_take is None else in_take
        for placement in batch.placements:
            state = self.node_states.get(placement.node)
            if state is None:
                continue
            for job in jobs_at(state, placement.event_time, self.lateness):
                routed = placement.model_copy(update={"job_id": job.job_id, "routed": True})
                held.setdefault(job.job_id.encode(), []).append(routed)
        if in_take is None:  # outside a take: sent now
            await self.send_placements(held)

    async def on_node_event(self, event: Any) -> None:
        """One record of the node inbox: a node fact (route, then the gpu_health step, validated
        once), a job ↔ node assignment or a packed batch of them, a tick, or a GPU telemetry sample
        (the gpu_health step's alone)."""
        node = key_str(event.key) or "_unknown"
        value = event.value
        if self._is_telemetry(event.message.topic, value):
            if self.gpu_health is not None:
                await self.gpu_health.on_telemetry_value(event, node, value)
        elif isinstance(value, dict) and value.get("tick"):
            await self.on_node_tick(node)
        elif is_assignment_batch(value):
            await self.on_assignment_batch(event, node)
        elif is_placement_batch(value):
            await self.on_placement_batch(event, node)
        elif is_batch(value):
            await self.on_node_batch(event, node)
        else:
            await self.on_node_record(event, node, value)

    async def on_node_batch(self, event: Any, key: str) -> None:
        """Node facts the extract stage packed per partition of ``signals.node``: each handled under
        its own node, in order, as if it had come alone; a bad one is dead-lettered alone."""

        async def handle(value: Any, node: str) -> None:
            await self.on_node_record(event, node, value)

        await handle_each(event, key, "route", self.t.dlq, handle)

    async def on_node_tick(self, node: str) -> None:
        current = self.node_states.get(node)
        if current is not None:
            released = await self.release_unclaimed(node, current, utcnow())
            if released is not current:
                self._keep_node_state(node, released)

    async def on_node_record(self, event: Any, node: str, value: Any) -> None:
        """A node fact (alone or from a batch) or a lone assignment; a malformed one is dead-lettered
        with its own JSON."""
        try:
            if isinstance(value, dict) and "signal_id" in value:
                item: Signal | JobNodeAssignment = Signal.model_validate(value)
            else:
                item = JobNodeAssignment.model_validate(value)
        except ValidationError as exc:
            await self.dead_letter("route", event, node, exc, item=value)
            return
        state = self.node_states.get(node) or NodeState()
        if isinstance(item, JobNodeAssignment):
            new = await self.on_assignment(state, item)
        else:
            try:
                new = await self.on_node_signal(state, item)
            finally:  # a bug in one step must not keep the fact from the other
                if self.gpu_health is not None:
                    await self.gpu_health.on_signal(node, item)
        if new is not state:  # a fact forwarded at once leaves the node's state as it was
            self._keep_node_state(node, new)

    def _is_telemetry(self, topic: str, value: Any) -> bool:
        """By the record's topic. In-memory tests feed the agent without one; there a record with
        ``metrics``, or one that is none of the other kinds (no signal id, tick, batch kind, job or
        assignment state), is telemetry."""
        if topic == self._telemetry_topic:
            return True
        if topic in self._node_topics:
            return False
        if not isinstance(value, dict):
            return False
        return "metrics" in value or not any(k in value for k in _NOT_TELEMETRY)

    async def on_assignment_batch(self, event: Any, key: str) -> None:
        """A packed ``topology.node`` message: each assignment applied to its own node, in order, as if
        it had come alone; a malformed one is dead-lettered alone. The nodes' states are written once,
        at the take's end (``on_node_events`` defers them). An assignment for a node of another
        partition (a producer that did not hash like ``pack_assignments``) is sent on keyed by its
        node instead of being filed where that node's facts never arrive."""
        try:
            items = unpack_assignments(event.value)
        except BadBatch as exc:
            await self.dead_letter("route", event, key, exc)
            return
        here = event.message.partition
        for item in items:
            try:
                a = JobNodeAssignment.model_validate(item)
            except ValidationError as exc:
                node = item.get("node") if isinstance(item, dict) else None
                await self.dead_letter("route", event, node if isinstance(node, str) else key, exc, item=item)
                continue
            if here is not None and self._node_partition(a.node.encode()) != here:
                log.warning("route: assignment of %s came on partition %s; sent on by its key", a.node, here)
                await self.t.topology_node.send(key=a.node.encode(), value=a)
                continue
            state = self.node_states.get(a.node) or NodeState()
            new = await self.on_assignment(state, a)
            if new is not state:
                self._keep_node_state(a.node, new)

    def _keep_node_state(self, node: str, state: NodeState) -> None:
        self.node_states.put(node, state)
        if state.pending:
            self._pending_nodes.add(node)
        else:
            self._pending_nodes.discard(node)

    async def on_assignment(self, state: NodeState, item: JobNodeAssignment) -> NodeState:
        """Topology arrived: release node facts that were waiting for it. Facts already given to the
        node's own incident go to the job too when it served the node then: its incident gets its
        root, and the node's stays (the node is at fault either way; the decide step drains it once).
        For those only a job placed on the node before the fault counts, without the clock-skew
        allowance a waiting fact gets: a job the scheduler put on the faulty node a minute later has
        not failed from it (yet), and the node's incident already stands for the fault."""
        state = apply_assignment(state, item, self.lateness)
        still_pending: list[Signal] = []
        for sig in state.pending:
            matches = jobs_at(state, sig.event_time, self.lateness)
            for job in matches:
                await self.forward(sig, job)
            if not matches and sig.event_time >= item.event_time - 2 * self.lateness:
                still_pending.append(sig)
        released = self._unexpired(state.released, utcnow())
        if item.state == "assigned":
            for sig in released:
                if item.event_time > sig.event_time:
                    continue  # a job placed on the node after the fault (no skew allowance here)
                for job in jobs_at(state, sig.event_time, self.lateness):
                    if (job.job_id, job.attempt) == (item.job_id, item.attempt):
                        await self.forward(sig, job)
        return state.model_copy(update={"pending": still_pending, "released": released})

    def _unexpired(self, released: list[Signal], now: datetime) -> list[Signal]:
        """Released facts a job may still claim: observed within the lateness bound."""
        return [sig for sig in released if now - sig.observed_time < self.lateness]

    async def on_node_signal(self, state: NodeState, item: Signal) -> NodeState:
        matches = jobs_at(state, item.event_time, self.lateness)
        for job in matches:
            await self.forward(item, job)
        if not matches and item.role in (Role.ROOT_CANDIDATE, Role.CASCADE, Role.CONFIRMATION):
            pending = [*state.pending, item][-MAX_PENDING_PER_NODE:]
            state = state.model_copy(update={"pending": pending})
        elif not matches and item.rule in LOOKBACK_RULES:
            # a look-back hint (a rank's progress bar) that beat the job's topology here: only its
            # latest per rank waits, so a bar refreshing every second cannot push a root out
            kept = [p for p in state.pending if not (p.rule == item.rule and p.rank == item.rank)]
            state = state.model_copy(update={"pending": [*kept, item][-MAX_PENDING_PER_NODE:]})
        return state

    async def release_unclaimed(self, node: str, state: NodeState, now: datetime) -> NodeState:
        """Node facts no job claimed within the grace become the node's own incident (``node:<name>``).

        A GPU that falls off the bus on an idle node must still be drained. Only facts that
        implicate the node (a root candidate with an isolation scope) are released this way;
        the rest expire after the lateness bound (they stay in ClickHouse via signals.node).

        The grace runs from the fact's observation or, if later, from when this worker's streams
        last resumed (``resumed``): while a rebalance and its table recovery hold the streams, the
        job's topology cannot arrive either (its allocation line may sit on a dead worker's
        partition), and a grace spent waiting for a failover made a late-routed fault both its
        job's root and a second, node-level incident (the scale-out test's broker loss + kill -9,
        2026-12-03: ``node:dgx-v100-315`` beside job 300013's own incident). It runs, too, from
        the last time the backlog probe found the topology path behind (``held_at``, backlog.py): a
        peer that dies holds its partitions for a session timeout before the rebalance starts, and
        a backlog after a broker loss outlasts any fixed grace (the same incident again on
        2026-12-04). The lateness bound, from the observation or the resumption, caps the wait.
        """
        keep: list[Signal] = []
        released = self._unexpired(state.released, now)
        expired = len(released) < len(state.released)
        node_job = NodeJob(job_id=f"node:{node}", attempt=1, assigned_at=now)
        resumed, held = self._resumed_at, self.held_at
        for sig in state.pending:
            since = sig.observed_time if resumed is None else max(sig.observed_time, resumed)
            aged = now - since  # the lateness bound caps how long a backlog holds it
            waited = aged if held is None else now - max(since, held)
            if waited < self.unclaimed_grace and aged < self.lateness:
                keep.append(sig)
            elif sig.role == Role.ROOT_CANDIDATE and sig.isolation != "none":
                await self.forward(sig, node_job)
                released.append(sig)  # a job whose topology comes later still gets it (on_assignment)
            elif aged < self.lateness:
                keep.append(sig)
        if len(keep) == len(state.pending) and not expired:
            return state  # nothing released or expired: the caller writes nothing
        return state.model_copy(update={"pending": keep, "released": released[-MAX_PENDING_PER_NODE:]})

    # -- correlate: keyed by job ----------------------------------------------------------------

    async def publish(self, incident: Incident | None) -> None:
        """A revision decided: inside a take it waits in the outbox for the take's end (``send_outbox``:
        after the window that records it is on the broker); outside one it goes now."""
        if incident is None:
            return
        if not incident.provisional:
            self.remember_failure(incident)
        if self._outbox is not None:
            self._outbox.append((incident, current()))
            return
        await self.send_incident(incident)

    async def send_incident(self, incident: Incident) -> Any:
        """Send one revision; its delivery future (awaited by ``send_outbox``)."""
        delivery = await self.t.incidents.send(key=incident.job_id.encode(), value=incident)
        log.info(
            "incident %s rev %d: %s (%s, culprit %s)",
            incident.incident_id,
            incident.revision,
            incident.root_cause.summary,
            incident.category.value,
            incident.culprit.node if incident.culprit else "-",
        )
        return delivery

    def remember_failure(self, incident: Incident) -> None:
        """The job's topology keeps each attempt's root, so the next attempt's incident can tell a
        restart loop (restarts.py)."""
        topo = self.topologies.get(incident.job_id)
        if topo is not None and (kept := remember_failure(topo, incident)) is not topo:
            self.topologies.put(incident.job_id, kept)

    def saw_checkpoint(self, job_id: str, signal: Signal) -> None:
        """A checkpoint save: restarts since the job's last failure made progress (restarts.py)."""
        if not is_checkpoint_save(signal):
            return  # every progress line comes here: no topology load for the rest
        topo = self.topologies.get(job_id)
        if topo is None:
            return
        if (kept := saw_checkpoint(topo, signal.event_time)) is not topo:
            self.topologies.put(job_id, kept)

    async def on_job_events(self, events: Sequence[Any]) -> None:
        """A take of the job inbox (``signals.job``, ``control.ticks``, ``control.progress-ticks``),
        from any of the worker's partitions: signals, packed batches (each signal handled in order
        under its own job, a bad one dead-lettered alone) and ticks. Their jobs' windows, topologies,
        placements and progress reach the tables once, at the take's end, each under the event it
        came from (``faust_events``); each job whose window took signals gets one verdict, then; the
        job ↔ node assignments learnt go out packed per partition of ``topology.node``, and the
        incident revisions decided go out last, once the windows recording them are on the broker
        (``send_outbox``). Faust acknowledges the take's events only after this returns, so a crash
        replays the whole take and the signal ids make the replay a no-op."""
        outbox: list[tuple[Incident, Any]] = []
        with self._deferred_writes():
            self._undecided, self._assignments, self._outbox = {}, [], outbox
            try:
                await self._each_event(events, "correlate", self.on_job_event, "?")
                await self.decide_undecided()
                await self.send_assignments(self._assignments)
            finally:
                self._undecided, self._assignments, self._outbox = None, None, None
            await self.delivered()
        await self.send_outbox(outbox)

    async def send_outbox(self, outbox: list[tuple[Incident, Any]]) -> None:
        """The take's revisions: sent once the windows recording them are on the broker, then, once
        the revisions are too, let go of by their windows.

        The order keeps a revision number to one verdict across a crash. Sent before its window was
        durable, a revision could reach the broker while the window recording it was lost with the
        worker; the job's next owner replayed the take onto the older window, decided again on what
        it had by then (often more signals) and published the same revision number with another
        verdict, and the decide step, which acts once per revision, kept the first. Written first
        (the window holds the revision whole: ``IncidentWindow.unsent``), a crash before the send
        loses nothing: the worker that takes the job over sends it again (``resend_taken_over``).
        Once the broker has the revision the window lets go of it, so a takeover after a clean
        handover or a quiet spell sends nothing twice. The waits are for the window writes' and the
        revisions' own delivery (``TableCache.track_acks``), and a take writes its windows first
        (``_deferred_writes``): a flush of everything in flight, or windows queued behind the take's
        placements and progress, held the incidents back (bench-stream p99 0.5 s → 1.2-1.4 s). A
        take that decided no revision waits no more than before."""
        if not outbox:
            self.parsed_windows.forget_acks()
            return
        waits = self.app.producer.started  # in-memory tests mock every send and start no producer
        if waits:
            for exc in await self.parsed_windows.acked():
                log.error("correlate: an incident window's changelog write failed: %r", exc)
        else:
            self.parsed_windows.forget_acks()
        deliveries = [await self.send_incident(incident) for incident, _ in outbox]
        if waits:
            failed = [
                r
                for r in await asyncio.gather(*deliveries, return_exceptions=True)
                if isinstance(r, BaseException)
            ]
            if failed:  # the windows keep them: a takeover sends them again
                log.error("correlate: %d incident revisions were not delivered: %r", len(failed), failed[0])
                return
        latest = {incident.job_id: (incident.revision, event) for incident, event in outbox}
        for job_id, (revision, event) in latest.items():
            with as_current(event):  # the job's partition: its window's store and changelog
                window = self.parsed_windows.get(job_id)
                if window is not None and (sent := sent_upto(window, revision)) is not window:
                    self._keep_window(job_id, sent)

    async def delivered(self) -> None:
        """Wait until everything sent so far is on the broker; called at a take's end, before its table
        writes (and after them when the take decided revisions: ``send_outbox``). A window records
        the signal ids it took, a topology the nodes it announced, a node state the facts it
        released; if those writes reached the changelog while the sends they record were lost (a
        ``kill -9`` while the send waited for a partition leader that had gone with its broker), the
        replayed take would find its signals already seen and never send them again. Sent first, a
        crash can only repeat a send: the readers already take assignments and signal ids as the
        identity. Nothing to wait for when the producer never started (in-memory tests mock every
        send)."""
        producer = self.app.producer
        if producer.started:
            await producer.flush()

    async def _each_event(
        self, events: Sequence[Any], stage: str, handle: Callable[[Any], Awaitable[None]], keyless: str
    ) -> None:
        """Each event of a take, under its own partition (``as_current``); one whose handling raises
        is dead-lettered under its key (``keyless`` without one) and the take goes on."""
        for event in events:
            with as_current(event):
                try:
                    await handle(event)
                except Exception as exc:  # one bad event must not stop the take
                    log.exception("%s failed", stage)
                    await self.dead_letter(stage, event, key_str(event.key) or keyless, exc)

    async def on_job_event(self, event: Any) -> None:
        """One record of the job inbox: a signal, a packed batch (each signal under its own job) or a
        tick."""
        job_id = key_str(event.key) or "?"
        if is_placement_batch(event.value):
            await self.on_job_placements(event, job_id)
            return

        async def handle(value: Any, key: str) -> None:
            await self.on_job_value(event, key, value)

        await handle_each(event, job_id, "correlate", self.t.dlq, handle)

    async def on_job_placements(self, event: Any, key: str) -> None:
        """Rank placements filed under their jobs (``PlacementBatch`` keyed by job): each recorded in
        its job's placement block, as its ``nccl.rank_placement`` signal would be. A batch that does
        not validate is dead-lettered whole."""
        try:
            batch = PlacementBatch.model_validate(event.value)
        except ValidationError as exc:
            await self.dead_letter("correlate", event, key, exc)
            return
        if batch.keyed_by != "job":
            wrong = ValueError("placements on signals.job are keyed by job")
            await self.dead_letter("correlate", event, key, wrong)
            return
        for placement in batch.placements:
            if placement.job_id is not None:  # the contract holds every one of a job-keyed batch to it
                self.place(placement.job_id, placement.rank, placement_from(placement))

    async def send_assignments(self, assignments: list[JobNodeAssignment]) -> None:
        """Job ↔ node assignments to ``topology.node``, the nodes of each partition packed into one
        message on that partition (``pack_assignments``): a thousand jobs starting on ten thousand
        nodes are a few messages per take for the route step, not one per node. The partition is the
        catalog's count hashed the way Kafka hashes a key (``ensure_topics`` refuses a topic whose
        count differs), so each node's assignments meet its facts."""
        for partition, key, value in pack_assignments(assignments, self._node_partition):
            await self.t.topology_node.send(key=key, value=value, partition=partition)

    async def decide_undecided(self) -> None:
        """The end of a take: each job whose window took signals in it gets its verdict once,
        on all of them. Deciding after every signal ran attribution once per signal: a 4,000-rank
        job's watchdog timeouts came as 4,000 verdicts on a growing window, of which only the last
        mattered. A job whose decision fails is logged and decided on its window's next tick."""
        undecided, self._undecided = self._undecided or {}, None
        for job_id, event in undecided.items():
            window = self.parsed_windows.get(job_id)
            if window is None:
                continue
            try:
                with as_current(event):  # the job's partition, whichever event of the take came last
                    updated, incident = decide_now(
                        window, self.topologies.get(job_id), utcnow(), self.timing, self.place_of(job_id)
                    )
                    await self.publish(incident)
                    if updated is not window:
                        self._keep_window(job_id, updated)
            except Exception:
                log.exception("correlate: deciding job %s at the end of a take failed", job_id)

    @contextmanager
    def _deferred_writes(self) -> Iterator[None]:
        """The window, topology and placements (and progress state) of a take's jobs reach their
        tables once per take, at its end (``on_job_events`` enters it around every take). The windows
        are written first (entered last: an exit stack unwinds in reverse): table writes leave in the
        order they are made, and a take's revisions wait for its window writes (``send_outbox``), not
        for the placements and progress written behind them."""
        with ExitStack() as stack:
            if self.progress is not None:
                stack.enter_context(self.progress.deferred_saves())
            for cache in (self.places, self.topologies, self.parsed_windows):
                stack.enter_context(cache.deferred())
            yield

    async def on_job_value(self, event: Any, job_id: str, value: Any) -> None:
        """One plain record for a job: each of the job's steps (correlate, then progress) sees it,
        validated once; a malformed one is dead-lettered once."""
        if isinstance(value, dict) and (tick := value.get("tick")):
            if tick == PROGRESS_TICK:
                if self.progress is not None:
                    await self.progress.on_tick_for(job_id)
            elif (window := self.parsed_windows.get(job_id)) is not None:
                await self.on_tick(job_id, window, self.topologies.get(job_id), utcnow())
            else:
                self.on_forget_tick(job_id, self.topologies.get(job_id), utcnow())
            return
        try:
            signal = Signal.model_validate(value)
        except ValidationError as exc:
            await self.dead_letter("correlate", event, job_id, exc, item=value)
            return
        try:
            await self.on_job_signal(job_id, signal)
        finally:  # a bug in one step must not keep the record from the other
            if self.progress is not None:
                await self.progress.on_signal(job_id, signal)

    async def on_job_signal(self, job_id: str, signal: Signal) -> None:
        if signal.role == Role.PROGRESS:
            self.saw_checkpoint(job_id, signal)  # the rest is the progress step's
            return
        if signal.rule == RANK_PLACEMENT_RULE:
            self.record_place(job_id, signal)
            return
        window = self.parsed_windows.get(job_id)
        if self.settled_without_state(job_id, signal, window):
            return
        topo = self.topologies.get(job_id)
        now = utcnow()
        if signal.role == Role.TOPOLOGY:
            await self.on_topology(job_id, signal, window, topo, now)
        else:
            await self.on_signal(job_id, signal, window, topo, now)

    def settled_without_state(self, job_id: str, signal: Signal, window: IncidentWindow | None) -> bool:
        """Signals that need no job state: a look-back bar with no open window (kept for the window it
        will explain), a hint or confirmation with no window (it opens nothing)."""
        if signal.rule in LOOKBACK_RULES:
            # kept even while a window is open: that window may close before the one it explains
            held = remember(self.lookback.get(job_id), signal)
            if held is not None:
                self.lookback[job_id] = held
            return window is None or window.closed
        return window is None and signal.role in LONE_ROLES

    async def on_signal(
        self,
        job_id: str,
        signal: Signal,
        window: IncidentWindow | None,
        topo: JobTopology | None,
        now: datetime,
    ) -> None:
        updated = add_signal(window, topo, signal, self.cluster, now)
        if updated is None:
            return
        if updated.opening_signal_id == signal.signal_id and (window is None or window.closed):
            first = updated.first_signal_time  # stays the opening signal's: the hints came before
            for hint in recall(self.lookback.get(job_id)):  # a new window: what came before it
                updated = add_signal(updated, topo, hint, self.cluster, now) or updated
            updated = updated.model_copy(update={"first_signal_time": first})
        if self._undecided is not None:  # inside a take: decided once at its end
            self._undecided[job_id] = current()
            self._keep_window(job_id, updated)
            return
        updated, incident = decide_now(updated, topo, now, self.timing, self.place_of(job_id))
        await self.publish(incident)
        self._keep_window(job_id, updated)

    def probe_backlog(self) -> None:
        """Refine timer: while node facts wait for their jobs, a look at the topology path's backlog
        every ``unclaimed_probe_s`` (backlog.py), in a thread and in the background, so a slow
        broker delays no tick."""
        if self.backlog is None:
            return
        if not self._pending_nodes:
            self.backlog.forget()
            return
        running = self._probe_task is not None and not self._probe_task.done()
        if running or time.monotonic() - self._probed_at < self._probe_every:
            return
        self._probed_at = time.monotonic()
        self._probe_task = asyncio.get_running_loop().create_task(self.look_at_backlog(self.backlog))

    async def look_at_backlog(self, probe: BacklogProbe) -> None:
        """One look; a group behind its fence starts the unclaimed facts' grace again. A look that
        fails leaves the grace to the wall clock (said once, until a look succeeds again)."""
        try:
            late = await asyncio.to_thread(probe.look)
        except Exception as exc:
            if not self._probe_failing:
                log.warning(
                    "route: the topology path's backlog could not be read (%r); unclaimed node facts "
                    "wait out the grace alone",
                    exc,
                )
            self._probe_failing = True
            return
        self._probe_failing = False
        if late:
            if self.held_at is None or utcnow() - self.held_at > timedelta(seconds=2 * self._probe_every):
                group, topic, partition = late[0]
                log.info(
                    "route: %d partitions of the topology path are behind (first: group %s, %s[%d]); "
                    "unclaimed node facts wait for them",
                    len(late),
                    group,
                    topic,
                    partition,
                )
            self.held_at = utcnow()

    async def resumed(self, *_: Any, **__: Any) -> None:
        """The streams run again after a rebalance (Faust's ``on_rebalance_complete``: tables
        recovered): from now the topology the node facts wait for can arrive, and the windows of
        partitions taken over send their unsent revisions again (``resend_taken_over``)."""
        self._resumed_at = utcnow()
        await self.resend_taken_over()

    async def took_partitions(self, *args: Any, **__: Any) -> None:
        """A rebalance's assignment (Faust's ``on_partitions_assigned``, the whole new assignment):
        the partitions of ``signals.job`` this worker did not own before are taken over."""
        assigned = args[1] if len(args) > 1 else ()  # (sender, assigned)
        owned = {tp.partition for tp in assigned if tp.topic == self._signals_job_topic}
        self._taken_over |= owned - self._owned_job_partitions
        self._taken_over &= owned
        self._owned_job_partitions = owned

    async def resend_taken_over(self) -> None:
        """The revisions each window of the partitions this worker took over holds as not yet on the
        broker (``IncidentWindow.unsent``), sent again.

        Its previous owner wrote the window before sending the revision (``send_outbox``) and died
        before the broker had it: the copy is how a revision whose send was lost still reaches the
        decide step. One that did go out just before the crash arrives twice, the same verdict under
        the same (incident id, revision), which every reader already takes as one. A timer cannot
        write tables, so each window lets go of them when it is next written or ticked
        (``_keep_window``). Windows of partitions this worker kept through the rebalance are not
        sent: it sent their revisions itself."""
        parts, self._taken_over = self._taken_over, set()
        if not parts:
            return
        resent: dict[str, int] = {}
        for job_id, raw in self.parsed_windows.stored_items():
            if not raw.get("unsent") or self._job_partition(job_id.encode()) not in parts:
                continue
            for held in raw["unsent"]:
                try:
                    incident = Incident.model_validate(held)
                except ValidationError:
                    log.exception(
                        "correlate: job %s's window holds a revision that does not validate", job_id
                    )
                    continue
                await self.t.incidents.send(key=job_id.encode(), value=incident)
                resent[job_id] = max(resent.get(job_id, 0), incident.revision)
        if resent:
            await self.delivered()
            self._resent.update(resent)
            log.warning(
                "correlate: sent the unsent revisions of %d windows again (partitions %s taken over)",
                len(resent),
                sorted(parts),
            )

    async def forget_caches(self, *_: Any, **__: Any) -> None:
        """Partitions moved: parsed copies may be stale, the tables are the truth again."""
        for cache in (self.places, self.parsed_windows, self.topologies, self.node_states):
            cache.clear()
        self._tickable_built = None
        self._pending_built = None
        self._forgettable_built = None

    def _keep_window(self, job_id: str, window: IncidentWindow) -> None:
        if self._resent_already(job_id, window):
            window = sent_upto(window, self._resent.pop(job_id))
        self.parsed_windows.put(job_id, window)
        self._tickable[job_id] = (window.closed, window.last_signal_at)

    def _resent_already(self, job_id: str, window: IncidentWindow) -> bool:
        """The window holds unsent revisions this worker sent again and saw on the broker."""
        return job_id in self._resent and any(i.revision <= self._resent[job_id] for i in window.unsent)

    def _drop_window(self, job_id: str) -> None:
        self._resent.pop(job_id, None)
        self.parsed_windows.drop(job_id)
        self._tickable.pop(job_id, None)

    def record_place(self, job_id: str, signal: Signal) -> None:
        new = placement_of(signal)
        if new is None or signal.rank is None:
            return
        self.place(job_id, signal.rank, new)

    def place(self, job_id: str, rank: int, new: RankPlace) -> None:
        """Where ``rank`` of the job runs, kept in its block unless the block has it already or knows
        a newer placement (a replay, or a late line of an earlier attempt)."""
        key = _block_key(job_id, rank // RANKS_PER_BLOCK)
        block = self.places.get(key) or RankBlock()
        old = block.places.get(rank)
        if old != new and newer_placement(old, new):
            # the block's places are validated already: a new block, not a revalidation of its 64 ranks
            self.places.put(key, RankBlock.model_construct(places={**block.places, rank: new}))

    def drop_job_state(self, job_id: str) -> None:
        """Forget a finished job's look-back and placements: rank 0 is in every world communicator and
        says its size."""
        if self.lookback.get(job_id) is not None:
            self.lookback.pop(job_id, None)
        world = self.place_of(job_id)(0)
        if world is None:
            return
        for block in range((world.nranks + RANKS_PER_BLOCK - 1) // RANKS_PER_BLOCK):
            self.places.drop(_block_key(job_id, block))  # an absent block: no changelog write (Table.pop)

    def place_of(self, job_id: str) -> PlaceOf:
        def place(rank: int) -> RankPlace | None:
            block = self.places.get(_block_key(job_id, rank // RANKS_PER_BLOCK))
            return block.places.get(rank) if block is not None else None

        return place

    async def on_topology(
        self,
        job_id: str,
        signal: Signal,
        window: IncidentWindow | None,
        topo: JobTopology | None,
        now: datetime,
    ) -> None:
        new_topo, assignments = apply_topology(topo, signal, self.cluster)
        just_ended = new_topo.ended_at is not None and (topo is None or topo.ended_at is None)
        if just_ended and (window is None or window.closed):
            # No incident left to attribute (else: when its window goes), but evidence routed
            # through a node's logs may still be on its way: the state waits out the lateness bound
            forget_after = now + self.lateness
            new_topo = new_topo.model_copy(update={"forget_after": forget_after})
            self._forgettable[job_id] = forget_after
        elif topo is not None and topo.forget_after is not None and new_topo.attempt != topo.attempt:
            # a new attempt before the bound: the ended one's hints and placements are not its own
            self.drop_job_state(job_id)
            self._forgettable.pop(job_id, None)
        self.topologies.put(job_id, new_topo)
        if self._assignments is not None:  # inside a take: sent packed at its end
            self._assignments.extend(assignments)
        else:
            await self.send_assignments(assignments)
        if window is not None and not window.closed and new_topo.attempt != window.attempt:
            # A new attempt began: the old attempt's window closes now.
            window, incident = tick(
                window, topo, now + timedelta(seconds=self.timing.quiet_s), self.timing, self.place_of(job_id)
            )
            await self.publish(incident)
            self._keep_window(job_id, window)

    async def on_tick(
        self, job_id: str, window: IncidentWindow, topo: JobTopology | None, now: datetime
    ) -> None:
        after, incident = tick(window, topo, now, self.timing, self.place_of(job_id))
        await self.publish(incident)
        if after.closed and now - after.last_signal_at > self.lateness:
            self._drop_window(job_id)
            if topo is not None and topo.ended_at is not None:
                self._forget(job_id, topo)
        elif after is not window or self._resent_already(job_id, after):
            # ``tick`` hands back the same window when nothing changed, which is most ticks: every open
            # window is ticked each second, and rewriting its tens of KB to the store and the changelog
            # each time cost a few % of the worker and most of the changelog's volume
            self._keep_window(job_id, after)

    def on_forget_tick(self, job_id: str, topo: JobTopology | None, now: datetime) -> None:
        """A tick for an ended job with no window: past its bound, its look-back and placements go."""
        if topo is None or topo.forget_after is None:
            self._forgettable.pop(job_id, None)
        elif now >= topo.forget_after:
            self._forget(job_id, topo)

    def _forget(self, job_id: str, topo: JobTopology) -> None:
        self.drop_job_state(job_id)
        self._forgettable.pop(job_id, None)
        if topo.forget_after is not None:
            self.topologies.put(job_id, topo.model_copy(update={"forget_after": None}))

    async def send_ticks(self) -> None:
        """Timer body: it may not change tables, so it asks the streams to tick each live window
        and each node holding unclaimed facts."""
        now = utcnow()
        if _stale(self._pending_built):
            self._pending_nodes = {
                node for node, raw in self.node_states.stored_items() if raw.get("pending")
            }
            self._pending_built = time.monotonic()
        for node in list(self._pending_nodes):
            await self.t.ticks_node.send(key=node.encode(), value={"tick": True, "at": now})
        if _stale(self._tickable_built):
            self._tickable = {
                job_id: (bool(raw.get("closed")), IncidentWindow.model_validate(raw).last_signal_at)
                for job_id, raw in self.parsed_windows.stored_items()
            }
            self._tickable_built = time.monotonic()
        for job_id, (closed, last_signal_at) in list(self._tickable.items()):
            if not closed or now - last_signal_at > self.lateness:
                await self.t.ticks_job.send(key=job_id.encode(), value={"tick": True, "at": now})
        if _stale(self._forgettable_built):
            self._forgettable = {
                job_id: datetime.fromisoformat(raw["forget_after"])
                for job_id, raw in self.topologies.stored_items()
                if raw.get("forget_after")
            }
            self._forgettable_built = time.monotonic()
        for job_id, forget_after in list(self._forgettable.items()):
            if now >= forget_after and job_id not in self._tickable:  # a window's own tick forgets it
                await self.t.ticks_job.send(key=job_id.encode(), value={"tick": True, "at": now})


def register(pipe: Pipeline) -> None:
    app, t = pipe.app, pipe.topics
    stage = CorrelateStage(pipe)
    pipe.tables.update(
        {
            "node_jobs": stage.node_jobs,
            "job_topology": stage.job_topology,
            "windows": stage.windows,
            "rank_places": stage.rank_places,
            "lookback": stage.lookback,
        }
    )

    take_max, take_within = pipe.settings.take_max, pipe.settings.take_s

    def taking(name: str, on_events: Callable[[Sequence[Any]], Awaitable[None]]) -> Any:
        """The body of a stateful agent: takes of up to ``take_max`` messages (``Stream.take_events``,
        acknowledged after the take is handled), or Faust's event-by-event iteration for a take of
        one (the in-memory tests use it)."""

        async def handle_take(events: Sequence[Any]) -> None:
            try:
                await on_events(events)
            except Exception as exc:  # each event's own errors are caught; this is the take's end
                log.exception("%s failed at the end of a take of %d events", name, len(events))
                for event in events:  # acknowledged when this returns: not lost without a trace
                    await stage.dead_letter(name, event, key_str(event.key) or "", exc)

        async def agent(stream: Any) -> None:
            if take_max <= 1:
                async for event in stream.events():
                    await handle_take([event])
                return
            async for events in stream.take_events(take_max, within=take_within):
                await handle_take(events)

        return agent

    route = app.agent(t.node_inbox, name="route", concurrency=1)(taking("route", stage.on_node_events))
    correlate = app.agent(t.job_inbox, name="correlate", concurrency=1)(
        taking("correlate", stage.on_job_events)
    )

    @app.timer(interval=pipe.settings.refine_interval_s, name="refine")  # type: ignore[untyped-decorator]
    async def refine() -> None:
        await stage.send_ticks()
        stage.probe_backlog()

    if pipe.settings.unclaimed_probe_s is not None:
        stage.backlog = BacklogProbe(pipe.settings.kafka_bootstrap, topology_path(pipe.settings))

    pipe.agents.update({"route": route, "correlate": correlate, "refine": refine, "stage": stage})
