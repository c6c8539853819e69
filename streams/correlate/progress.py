"""Hang detection from progress signals: pure functions over one job's progress state.

A hung job prints nothing: no error, often no NCCL timeout for minutes (the default
collective timeout is 10 to 30 minutes). What it stops printing is progress: iteration
lines, aidot ``training_iterations`` events, completed checkpoint saves. So per job we keep

- the recent iteration *period*: the median of the last ``PERIOD_SAMPLES`` intervals between
  progress lines whose step advanced, per source (rank, else node), in event time. A median,
  not a mean, so a checkpoint save or an evaluation pause does not stretch it for long;
- per source (rank, else node, else the job) the last time it made progress.

The job is hung when no source made progress for ``multiple`` x the period, and never before
``floor_s`` (a job logging every 30 s is not hung after 2.5 minutes of a slow checkpoint). With
one progress line only, the period is bounded by the time from the job's start to that line;
with no start known either, the floor is multiplied instead.

Sources that went silent first are culprit candidates: a rank stuck in a kernel or a data
loader stops first, the others stop a step later waiting for it in a collective. When every
source stopped within one period of the first, nobody is singled out.

A job whose failure is already explained (a root-candidate signal since its last progress)
or that ended is not reported as hung. A hang is reported once per silence: new progress
re-arms the detector. The report is a :class:`HangFinding`; ``hang_signal`` turns it into a
root-candidate signal for the correlator, whose id is deterministic from (job, attempt,
"hang", the first silent time bucket), so the incident id is too.
"""

from __future__ import annotations

import hashlib
import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from schemas.base import UtcDatetime
from schemas.incidents import Category
from schemas.signals import Role, Signal, SourceRef

PERIOD_SAMPLES = 8
MAX_SOURCES = 512
MAX_NCCL_RANKS = 64
MAX_NCCL_COUNT = 100_000
HANG_RULE = "hang.no_progress"
OWN_RULES = ("hang.", "straggler.")
NCCL_TIMEOUT_RULES = (
    "nccl.watchdog_timeout",
    "nccl.watchdog_exception",
    "nccl.watchdog_terminated",
    "nccl.watchdog_setup_barrier_timeout",
    "nccl.blocking_wait_timeout",
)
JOB_ENDING_RULES = ("slurm.job_complete", "slurm.job_requeued")
JOB_STARTING_RULES = ("slurm.job_allocated", "slurm.job_started_backfill", "scheduler.pbs_exec_host")


def is_checkpoint_save(signal: Signal) -> bool:
    """A completed checkpoint save (Megatron, HF, Lightning, DeepSpeed, aidot)."""
    return signal.role == Role.PROGRESS and "checkpoint_saved" in signal.rule


# the framework says training is over (rules in progress_frameworks.toml)
FINISHED_RULES = (
    "progress.lightning_fit_stopped",
    "progress.hf_training_completed",
    "progress.megatron_training_done",
    "progress.torchtitan_training_completed",
)


@dataclass(frozen=True)
class HangConfig:
    multiple: float = 5.0
    floor_s: float = 300.0
    bucket_s: float = 60.0  # the incident id is stable for a silence that starts within one bucket


class SourceProgress(BaseModel):
    """One rank's (or node's) progress."""

    model_config = ConfigDict(extra="forbid")

    node: str | None = None
    rank: int | None = None
    last_at: UtcDatetime  # on the detector's clock (see ``stamp``)
    last_event_time: UtcDatetime
    last_step: int | None = None
    step_event_time: UtcDatetime | None = None  # event time of the last line whose step advanced
    intervals: list[float] = Field(default_factory=list)  # event-time seconds between advancing steps


class JobProgress(BaseModel):
    """One job attempt's progress, as kept in the ``job-progress`` table."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    attempt: int = 1
    started_at: UtcDatetime | None = None
    ended: bool = False
    sources: dict[str, SourceProgress] = Field(default_factory=dict)
    explained_at: UtcDatetime | None = None  # a root candidate arrived (clock time)
    nccl_timeouts: int = 0
    nccl_ranks: list[int] = Field(default_factory=list)
    reported: str | None = None  # signal id of the hang already reported for this silence
    latest_event: UtcDatetime | None = None  # newest event time of any signal of the job
    latest_seen: UtcDatetime | None = None  # processing time that newest event arrived

    def event_now(self, wall: datetime) -> datetime:
        """The job's own event clock: its newest event time, run on by the wall clock since.

        For replays faster than real time (``detector_clock = "event"``), where a global
        watermark would mix jobs that the replay keeps minutes apart. It runs on at wall speed
        only: a replay's records simply stop at its horizon, and extrapolating at the replay's
        rate would call every job whose records ended hung. So in a replay a hang shows when the
        job's own later records (NCCL watchdog timeouts, other ranks, the scheduler) prove the
        time passed."""
        if self.latest_event is None or self.latest_seen is None:
            return wall
        return self.latest_event + max(timedelta(0), wall - self.latest_seen)

    def last_progress_at(self) -> datetime | None:
        return max((s.last_at for s in self.sources.values()), default=None)

    def period_s(self) -> float | None:
        """Median of the recent intervals over all sources, or the start-to-first-line bound."""
        pooled = [i for s in self.sources.values() for i in s.intervals]
        if pooled:
            return float(statistics.median(pooled))
        if self.started_at is not None and self.sources:
            first = min(s.last_event_time for s in self.sources.values())
            bound = (first - self.started_at).total_seconds()
            return bound if bound > 0 else None
        return None


@dataclass(frozen=True)
class SilentSource:
    key: str
    node: str | None
    rank: int | None
    last_event_time: datetime


@dataclass(frozen=True)
class HangFinding:
    job_id: str
    attempt: int
    silence_s: float
    threshold_s: float
    period_s: float | None
    first_silent_time: datetime  # event time of the last progress of the first silent source(s)
    silent_first: list[SilentSource]
    last_step: int | None
    nccl_timeouts: int
    nccl_ranks: list[int]
    signal_id: str


def source_key(signal: Signal) -> str:
    if signal.rank is not None:
        return f"rank:{signal.rank}"
    if signal.node is not None:
        return f"node:{signal.node}"
    return "job"


def _step(signal: Signal) -> int | None:
    step = signal.attrs.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def new_attempt(state: JobProgress | None, job_id: str, started_at: datetime) -> JobProgress:
    """A (re)allocation: progress starts over; a replayed allocation changes nothing."""
    if state is not None and state.started_at is not None and started_at <= state.started_at:
        return state
    attempt = state.attempt + 1 if state is not None and state.started_at is not None else 1
    return JobProgress(job_id=job_id, attempt=attempt, started_at=started_at)


def observe(
    state: JobProgress | None,
    signal: Signal,
    at: datetime,
    wall: datetime | None = None,
    track_clock: bool = True,
) -> JobProgress | None:
    """Fold one job signal in. ``at`` is the signal's time on the detector's clock, ``wall``
    the processing time (for the job's event clock, :meth:`JobProgress.event_now`).

    Returns the new state, or ``None`` when the signal tells the detector nothing and there was
    no state (so the agent writes nothing)."""
    new = _observe(state, signal, at)
    if not track_clock or signal.rule.startswith(OWN_RULES):
        return new  # the detectors' own output does not move the job's clock
    if new is None or (new.latest_event is not None and signal.event_time <= new.latest_event):
        return new
    return new.model_copy(update={"latest_event": signal.event_time, "latest_seen": wall or at})


def _observe(state: JobProgress | None, signal: Signal, at: datetime) -> JobProgress | None:
    job_id = signal.job_id or "?"
    if signal.role == Role.TOPOLOGY:
        if signal.rule in JOB_STARTING_RULES:
            return new_attempt(state, job_id, signal.event_time)
        if signal.rule in JOB_ENDING_RULES and state is not None:
            return state.model_copy(update={"ended": True})
        return state
    if signal.rule.startswith(OWN_RULES):
        return state  # the detectors' own output coming back
    if signal.rule in FINISHED_RULES:
        return (state or JobProgress(job_id=job_id)).model_copy(update={"ended": True})
    if signal.role == Role.PROGRESS:
        return _progress(state or JobProgress(job_id=job_id), signal, at)
    if state is None:
        return None
    if signal.rule in NCCL_TIMEOUT_RULES:
        if state.nccl_timeouts >= MAX_NCCL_COUNT:
            return state
        ranks = state.nccl_ranks
        if signal.rank is not None and signal.rank not in ranks and len(ranks) < MAX_NCCL_RANKS:
            ranks = [*ranks, signal.rank]
        return state.model_copy(update={"nccl_timeouts": state.nccl_timeouts + 1, "nccl_ranks": ranks})
    if signal.role in (Role.ROOT_CANDIDATE, Role.CASCADE) and state.explained_at is None:
        return state.model_copy(update={"explained_at": at})  # a failure the correlator explains
    return state


def _progress(state: JobProgress, signal: Signal, at: datetime) -> JobProgress:
    key = source_key(signal)
    step = _step(signal)
    prev = state.sources.get(key)
    if prev is None:
        if len(state.sources) >= MAX_SOURCES:
            return state
        src = SourceProgress(
            node=signal.node,
            rank=signal.rank,
            last_at=at,
            last_event_time=signal.event_time,
            last_step=step,
            step_event_time=signal.event_time,
        )
    else:
        intervals = prev.intervals
        # a line without a step (HF Trainer's loss dict) is one logging interval on
        advanced = step is None or prev.last_step is None or step > prev.last_step
        if advanced and prev.step_event_time is not None:
            dt = (signal.event_time - prev.step_event_time).total_seconds()
            if dt > 0:
                intervals = [*intervals, dt][-PERIOD_SAMPLES:]
        src = prev.model_copy(
            update={
                "node": signal.node or prev.node,
                "last_at": max(prev.last_at, at),
                "last_event_time": max(prev.last_event_time, signal.event_time),
                "last_step": step if advanced and step is not None else prev.last_step,
                "step_event_time": signal.event_time if advanced else prev.step_event_time,
                "intervals": intervals,
            }
        )
    total = signal.attrs.get("total")
    finished = (  # Megatron's total is the run's train_iters (Lightning's is one epoch's batches)
        signal.rule == "progress.megatron_iteration"
        and isinstance(total, int)
        and step is not None
        and step >= total > 0
    )
    return state.model_copy(
        update={
            "ended": state.ended or finished,
            "sources": {**state.sources, key: src},
            "reported": None,  # progress re-arms the detector
            "explained_at": None,
        }
    )


def threshold_s(state: JobProgress, cfg: HangConfig) -> float:
    period = state.period_s()
    if period is None:
        return cfg.floor_s * cfg.multiple
    return max(cfg.floor_s, cfg.multiple * period)


def due_at(state: JobProgress, cfg: HangConfig) -> datetime | None:
    """When the job would count as hung if nothing new arrives; ``None``: nothing to watch."""
    last = state.last_progress_at()
    if last is None or state.ended or state.explained_at is not None or state.reported is not None:
        return None
    return last + timedelta(seconds=threshold_s(state, cfg))


def _silent_first(state: JobProgress, period: float | None) -> list[SilentSource]:
    srcs = sorted(state.sources.items(), key=lambda kv: (kv[1].last_at, kv[0]))
    if len(srcs) < 2:
        return []
    first_at, last_at = srcs[0][1].last_at, srcs[-1][1].last_at
    tolerance = timedelta(seconds=max(period or 0.0, 1.0))
    if last_at - first_at <= tolerance:
        return []  # everyone stopped together: nobody singled out
    return [
        SilentSource(key=k, node=s.node, rank=s.rank, last_event_time=s.last_event_time)
        for k, s in srcs
        if s.last_at - first_at <= tolerance
    ]


def hang_id(job_id: str, attempt: int, first_silent: datetime, bucket_s: float) -> str:
    bucket = int(first_silent.timestamp() // bucket_s)
    raw = f"{job_id}|{attempt}|hang|{bucket}"
    return "hang-" + hashlib.blake2b(raw.encode(), digest_size=10).hexdigest()


def check(state: JobProgress, now: datetime, cfg: HangConfig) -> HangFinding | None:
    """The hang, if the job is hung at ``now`` (on the detector's clock) and not yet reported."""
    due = due_at(state, cfg)
    last = state.last_progress_at()
    if due is None or last is None or now < due:
        return None
    period = state.period_s()
    silent = _silent_first(state, period)
    first_silent = (
        max(s.last_event_time for s in silent)
        if silent
        else max(s.last_event_time for s in state.sources.values())
    )
    steps = [s.last_step for s in state.sources.values() if s.last_step is not None]
    return HangFinding(
        job_id=state.job_id,
        attempt=state.attempt,
        silence_s=(now - last).total_seconds(),
        threshold_s=threshold_s(state, cfg),
        period_s=period,
        first_silent_time=first_silent,
        silent_first=silent,
        last_step=max(steps) if steps else None,
        nccl_timeouts=state.nccl_timeouts,
        nccl_ranks=sorted(state.nccl_ranks),
        signal_id=hang_id(state.job_id, state.attempt, first_silent, cfg.bucket_s),
    )


def mark_reported(state: JobProgress, finding: HangFinding) -> JobProgress:
    return state.model_copy(update={"reported": finding.signal_id})


def hang_signal(finding: HangFinding, observed: datetime) -> Signal:
    """The finding as a root candidate for the job's incident window.

    Category ``unknown``: silence alone does not say why. The summary says what the window
    holds besides (NCCL watchdog timeouts on other ranks point at the silent ones), the
    culprit is the first silent source when one went silent first."""
    culprit = finding.silent_first[0] if len(finding.silent_first) == 1 else None
    who = ", ".join(s.key for s in finding.silent_first) or "all ranks together"
    nccl = (
        f"; NCCL watchdog timeouts on {finding.nccl_timeouts} rank(s) {finding.nccl_ranks[:8]}"
        if finding.nccl_timeouts
        else ""
    )
    step = f" after step {finding.last_step}" if finding.last_step is not None else ""
    summary = f"no training progress for {finding.silence_s:.0f}s{step} (silent first: {who}){nccl}"
    attrs: dict[str, str | int | float | bool | list[str]] = {
        "silence_s": round(finding.silence_s, 1),
        "threshold_s": round(finding.threshold_s, 1),
        "silent_first": [s.key for s in finding.silent_first],
        "nccl_timeouts": finding.nccl_timeouts,
    }
    if finding.period_s is not None:
        attrs["period_s"] = round(finding.period_s, 3)
    if finding.last_step is not None:
        attrs["step"] = finding.last_step
    return Signal(
        signal_id=finding.signal_id,
        rule=HANG_RULE,
        role=Role.ROOT_CANDIDATE,
        category=Category.UNKNOWN,
        summary=summary,
        event_time=finding.first_silent_time + timedelta(seconds=finding.threshold_s),
        observed_time=observed,
        node=culprit.node if culprit else None,
        job_id=finding.job_id,
        rank=culprit.rank if culprit else None,
        attrs=attrs,
        restartable=True,
        isolation="none",
        decisive=False,
        weight=45,
        text=summary,
        source=SourceRef(kind="training", adapter="hang-detector"),
    )
