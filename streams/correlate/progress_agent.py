"""The progress step (keyed by job) and the ``hang_watch`` timer.

The step sees every job signal: the correlate agent hands it each record of its job inbox
(``signals.job`` and ``control.progress-ticks``), after its own step, validated once. It keeps,
per job, the progress state of :mod:`streams.correlate.progress` and the per-rank pace of
:mod:`streams.correlate.straggler` in the ``job-progress`` table. Its findings (a hang, a
slow rank) go back onto ``signals.job`` as root-candidate signals with deterministic ids,
so the one attribution engine in the correlate agent builds the incident, next to whatever
else the job's window holds (NCCL watchdog timeouts, a late Xid).

Faust tables change only inside a stream, so the ``hang_watch`` timer reads the table, and
for each job whose silence is due sends a tick (``{"tick": "progress"}``) on
``control.progress-ticks``, which reaches this step through the correlate agent; the tick
re-checks the job and reports.

It was an agent of its own on the same records until bench-stream's profile showed what that
cost: every ``signals.job`` record fetched, decoded and dispatched twice, and most validated
twice (the correlate step validates every signal it keeps; this step every signal of a job it
watches).

The detector's clock: ``wall`` (production) compares silence against the wall clock and
stamps progress with max(event time, processing time), so a backlog never looks like a hang;
``event`` (replays faster than real time) runs each job on its own event clock: the newest event
time of any of its signals, advanced by the wall clock since (a global watermark would mix jobs
that a replay keeps minutes apart).
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.base import utcnow
from schemas.jobs import JobInfo
from schemas.signals import Role, Signal
from schemas.topics import TABLE_JOB_PROGRESS
from streams.correlate import progress, straggler
from streams.correlate.table_cache import DeferredWrites
from streams.pipeline import Pipeline, key_str

log = logging.getLogger("sickbay.progress")
IGNORED_ROLES = frozenset({Role.HINT, Role.CONFIRMATION})
# the value of a progress tick's "tick" field; the correlate step's own ticks say ``True``
PROGRESS_TICK = "progress"
MAX_CACHED = 20_000


class JobWatch(BaseModel):
    """The ``job-progress`` table's value: hang state plus per-rank pace."""

    model_config = ConfigDict(extra="forbid")

    progress: progress.JobProgress
    pace: straggler.PaceBoard | None = None
    stragglers: list[str] = Field(default_factory=list)  # signal ids already sent


class DetectorClock:
    """``now`` and a signal's stamp on the configured clock (see the module docstring)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def now(self, state: progress.JobProgress) -> datetime:
        wall = utcnow()
        return state.event_now(wall) if self.mode == "event" else wall

    def stamp(self, signal: Signal) -> datetime:
        if self.mode == "event":
            return signal.event_time
        return max(signal.event_time, signal.observed_time)


class ProgressStage:
    def __init__(self, pipe: Pipeline) -> None:
        s = pipe.settings
        self.t = pipe.topics
        self.hang_cfg = progress.HangConfig(multiple=s.hang_multiple, floor_s=s.hang_floor_s)
        self.strag_cfg = straggler.StragglerConfig(
            threshold=s.straggler_threshold,
            sustain_s=s.straggler_sustain_s,
            min_samples=s.straggler_min_samples,
            throttled_threshold=s.straggler_throttled_threshold,
        )
        self.clock = DetectorClock(s.detector_clock)
        self.table = pipe.app.Table(TABLE_JOB_PROGRESS, default=None, partitions=s.partitions)
        # Parsed copies of what this worker last wrote: validating a many-rank state from the
        # table's JSON on every signal costs more than the detection itself. Cleared whenever
        # partitions move (the table, restored from its changelog, is the truth).
        self.cache: dict[str, JobWatch] = {}
        self._held: DeferredWrites[JobWatch] = DeferredWrites(self._write)
        pipe.app.on_partitions_revoked.connect(self.forget)
        pipe.app.on_partitions_assigned.connect(self.forget)

    def load(self, job_id: str) -> JobWatch | None:
        """The job's state: the parsed copy this worker wrote last, else the table's."""
        held = self._held.pending
        if held is not None and held.get(job_id) is not None:
            return held[job_id]
        cached = self.cache.get(job_id)
        if cached is not None:
            return cached
        raw = self.table.get(job_id)
        return JobWatch.model_validate(raw) if raw else None

    def save(self, job_id: str, watch: JobWatch) -> None:
        if not self._held.hold(job_id, watch):
            self._write(job_id, watch)
        if len(self.cache) >= MAX_CACHED and job_id not in self.cache:
            self.cache.clear()
        self.cache[job_id] = watch

    def _write(self, job_id: str, watch: JobWatch | None) -> None:
        if watch is not None:
            self.table[job_id] = watch.model_dump(mode="json")

    def deferred_saves(self) -> AbstractContextManager[None]:
        """Around one batch of a job's signals: the job's state is written once, at the batch's end,
        not once per iteration line (a packed read holds many); see ``DeferredWrites``."""
        return self._held.around()

    async def forget(self, *_: Any, **__: Any) -> None:
        """Partitions moved: parsed copies may be stale, the table is the truth again."""
        self.cache.clear()

    async def on_tick_for(self, job_id: str) -> None:
        """A tick from ``hang_watch``: re-check the job's silence."""
        watch = self.load(job_id)
        if watch is not None:
            await self.on_tick(job_id, watch)

    async def on_signal(self, job_id: str, signal: Signal) -> None:
        """One validated signal of the job."""
        if signal.role in IGNORED_ROLES:
            return  # a hint or confirmation never changes progress: skip loading the job's state
        watch = self.load(job_id)
        if watch is None and signal.role not in (Role.PROGRESS, Role.TOPOLOGY):
            return  # most of signals.job: nothing to fold into a job not watched yet
        if progress.is_checkpoint_save(signal):
            # The decide step counts failures since the last checkpoint: tell it one was written.
            info = JobInfo(job_id=job_id, last_checkpoint_at=signal.event_time, time=utcnow())
            await self.t.topology_jobs.send(key=job_id.encode(), value=info)
        new = self.fold(watch, signal)
        if new is not None:
            new = await self.check_rank_pace(new, signal)
            if new is not watch:
                self.save(job_id, new)

    def fold(self, watch: JobWatch | None, signal: Signal) -> JobWatch | None:
        old = watch.progress if watch else None
        state = progress.observe(
            old, signal, self.clock.stamp(signal), utcnow(), track_clock=self.clock.mode == "event"
        )
        if state is None:
            return None
        if state is old:
            return watch  # nothing changed: no table write
        if watch is None:
            return JobWatch(progress=state)
        if state.attempt != watch.progress.attempt:
            return JobWatch(progress=state)  # a new attempt: ranks start over
        return watch.model_copy(update={"progress": state})

    async def check_rank_pace(self, watch: JobWatch, signal: Signal) -> JobWatch:
        """Per-rank timings (aidot per-rank events and the like) → a slow-rank signal."""
        if signal.role != Role.PROGRESS or signal.rank is None:
            return watch
        timing = straggler.step_timing(signal)
        if timing is None:
            return watch
        value, higher = timing
        board = straggler.observe_step(
            watch.pace, watch.progress.job_id, signal.rank, signal.node, value, signal.event_time, higher
        )
        board, found = straggler.evaluate(board, str(signal.rank), self.strag_cfg)
        watch = watch.model_copy(update={"pace": board})
        if found is not None:
            out = straggler.rank_straggler_signal(found, utcnow())
            if out.signal_id not in watch.stragglers:
                await self.t.signals_job.send(key=watch.progress.job_id.encode(), value=out)
                watch = watch.model_copy(update={"stragglers": [*watch.stragglers, out.signal_id][-16:]})
        return watch

    async def on_tick(self, job_id: str, watch: JobWatch) -> None:
        finding = progress.check(watch.progress, self.clock.now(watch.progress), self.hang_cfg)
        if finding is None:
            return
        signal = progress.hang_signal(finding, utcnow())
        await self.t.signals_job.send(key=job_id.encode(), value=signal)
        log.info("hang: job %s %s", job_id, signal.summary)
        watch = watch.model_copy(update={"progress": progress.mark_reported(watch.progress, finding)})
        self.save(job_id, watch)

    async def send_ticks(self) -> None:
        """Timer body (reads only): a tick for each job whose silence is due."""
        for job_id, raw in list(self.table.items()):
            if not raw:
                continue
            try:
                state = progress.JobProgress.model_validate(raw["progress"])
            except (ValidationError, KeyError, TypeError):
                continue
            due = progress.due_at(state, self.hang_cfg)
            now = self.clock.now(state)
            if due is not None and now >= due:
                await self.t.ticks_progress.send(
                    key=(key_str(job_id) or "?").encode(), value={"tick": PROGRESS_TICK, "at": now}
                )


def register(pipe: Pipeline) -> None:
    """The step's table and timer; the correlate agent, registered after it, drives the step."""
    app = pipe.app
    stage = ProgressStage(pipe)
    pipe.tables["job_progress"] = stage.table
    pipe.services["progress"] = stage

    @app.timer(interval=pipe.settings.hang_check_interval_s, name="hang_watch")  # type: ignore[untyped-decorator]
    async def hang_watch() -> None:
        await stage.send_ticks()

    pipe.agents.update({"hang_watch": hang_watch, "progress_stage": stage})
