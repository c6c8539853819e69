"""Straggler detection: pure functions over per-GPU and per-rank pace.

A synchronous data-parallel job runs at the pace of its slowest rank, so one GPU that
throttles costs the whole job 20 to 40 % without a single error line. We compare like with
like at the same moment:

- **GPU telemetry** (per node, per GPU): the median of the GPU's last ``WINDOW`` SM-clock
  samples against the best such median among its peers on the node (and its own best, when it
  has no peers). Higher is better, so ``score = current median / best median``.
- **step times** (per job, per rank, from training lines that carry per-rank timings):
  ``score = best median / current median`` (lower is better).

A score below ``threshold`` (0.75 by default) for ``min_samples`` samples and ``sustain_s``
seconds of event time is a straggler; below ``throttled_threshold`` (0.9) when the GPU reports a
hardware throttle reason, since then the cause is known. The clock-throttle-reasons bitmask (DCGM field
``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS``, NVML's ``nvmlClocksThrottleReason*``) says why: a
thermal or hardware power-brake bit makes it a GPU hardware fault (decisive: the GPU is
measurably slow and the GPU says why); a bare software power cap or no reason stays
``unknown``. An idle GPU (bit 0x1, or utilisation 0) is never a straggler.
A straggler is reported once per episode; recovery (the score back above the threshold plus
``recover_margin``) re-arms.

**Early warning.** The sustain window keeps a passing throttle from draining a node, but it also
holds back what an operator wants to know at once: the first sample in which a GPU runs below
``throttled_threshold`` of its peers *and* reports a hardware throttle reason is published as a
*provisional* straggler (``STRAGGLER_EARLY_RULE``, ``attrs["provisional"]``). The correlator
shows it as a provisional incident and the decide step does not act on it; the sustained
finding, or nothing when the GPU recovers, follows. One early warning per episode.
"""

from __future__ import annotations

import hashlib
import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from schemas.base import UtcDatetime
from schemas.incidents import Category
from schemas.signals import AttrValue, Role, Signal, SourceRef
from schemas.telemetry import GpuTelemetry

WINDOW = 5
STRAGGLER_GPU_RULE = "straggler.gpu_slow"
STRAGGLER_EARLY_RULE = "straggler.gpu_throttled"  # the provisional early warning
STRAGGLER_RANK_RULE = "straggler.rank_slow"

SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
THROTTLE = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
POWER = "DCGM_FI_DEV_POWER_USAGE"
TEMP = "DCGM_FI_DEV_GPU_TEMP"
UTIL = "DCGM_FI_DEV_GPU_UTIL"
PACE_METRICS = (SM_CLOCK, THROTTLE, POWER, TEMP, UTIL)

# nvmlClocksThrottleReasons bits (DCGM reports the same mask)
THROTTLE_IDLE = 0x1
THROTTLE_SW_POWER_CAP = 0x4
THROTTLE_HW_SLOWDOWN = 0x8
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_THERMAL = 0x40
THROTTLE_HW_POWER_BRAKE = 0x80
THERMAL_BITS = THROTTLE_SW_THERMAL | THROTTLE_HW_THERMAL
POWER_BITS = THROTTLE_HW_POWER_BRAKE


@dataclass(frozen=True)
class StragglerConfig:
    threshold: float = 0.75
    sustain_s: float = 120.0
    min_samples: int = 3
    # With a hardware throttle reason on the GPU the cause is known, so a smaller deficit counts:
    # a job runs at its slowest GPU's pace, and a thermally capped A100 at 1.2 GHz (85 % of its
    # peers) costs the whole job 15 %.
    throttled_threshold: float = 0.9
    recover_margin: float = 0.05  # back above threshold + margin ends the episode (no flapping)
    early_warning: bool = True  # the provisional first-sample warning (GPUs with a HW throttle reason)

    def bar(self, throttle: int) -> float:
        return max(self.threshold, self.throttled_threshold) if classify(throttle)[1] else self.threshold


class Pace(BaseModel):
    """One GPU's (or rank's) recent pace and its straggler episode."""

    model_config = ConfigDict(extra="forbid")

    values: list[float] = Field(default_factory=list)  # last WINDOW samples
    best: float | None = None  # its own best median so far
    last_time: UtcDatetime | None = None
    throttle: int = 0  # last clock-throttle-reasons mask
    throttle_time: UtcDatetime | None = None
    temp: float | None = None
    power: float | None = None
    util: float | None = None
    below_since: UtcDatetime | None = None
    below_samples: int = 0
    reported: bool = False
    warned: bool = False  # the early warning of this episode went out
    node: str | None = None  # ranks: where the rank runs
    gpu_id: str | None = None  # PCI bus id (or uuid) when the telemetry names it

    def median(self) -> float | None:
        return float(statistics.median(self.values)) if self.values else None


class PaceBoard(BaseModel):
    """All GPUs of one node (telemetry) or all ranks of one job (step times)."""

    model_config = ConfigDict(extra="forbid")

    key: str  # node name or job id
    entries: dict[str, Pace] = Field(default_factory=dict)


@dataclass(frozen=True)
class Straggler:
    key: str  # node (telemetry) or job (step times)
    entry: str  # gpu index or rank
    score: float
    current: float
    best: float
    since: datetime
    at: datetime
    throttle: int
    category: Category
    decisive: bool
    node: str | None
    gpu_id: str | None
    temp: float | None
    power: float | None
    early: bool = False  # the provisional early warning, not the sustained finding


def throttle_reasons(mask: int) -> list[str]:
    names = {
        THROTTLE_IDLE: "idle",
        0x2: "applications_clocks",
        THROTTLE_SW_POWER_CAP: "sw_power_cap",
        THROTTLE_HW_SLOWDOWN: "hw_slowdown",
        0x10: "sync_boost",
        THROTTLE_SW_THERMAL: "sw_thermal",
        THROTTLE_HW_THERMAL: "hw_thermal",
        THROTTLE_HW_POWER_BRAKE: "hw_power_brake",
        0x100: "display_clocks",
    }
    return [n for bit, n in names.items() if mask & bit]


def classify(throttle: int) -> tuple[Category, bool]:
    """(category, decisive) from the throttle mask of the slow GPU."""
    if throttle & (THERMAL_BITS | POWER_BITS | THROTTLE_HW_SLOWDOWN):
        return Category.HARDWARE_GPU, True
    return Category.UNKNOWN, False


def _push(p: Pace, value: float, at: datetime) -> Pace:
    values = [*p.values, value][-WINDOW:]
    med = float(statistics.median(values))
    full = len(values) >= min(WINDOW, 3)
    best = max(p.best or 0.0, med) if full else p.best
    return p.model_copy(update={"values": values, "last_time": at, "best": best})


def observe_telemetry(board: PaceBoard | None, sample: GpuTelemetry) -> PaceBoard:
    """Fold one telemetry sample (any subset of metrics) into the node's board."""
    board = board or PaceBoard(key=sample.node)
    gpu = str(sample.gpu) if sample.gpu is not None else (sample.uuid or sample.pci_bus_id or "?")
    p = board.entries.get(gpu) or Pace(node=sample.node)
    m = sample.metrics
    update: dict[str, object] = {}
    if THROTTLE in m:
        update.update(throttle=int(m[THROTTLE]), throttle_time=sample.time)
    if TEMP in m:
        update["temp"] = m[TEMP]
    if POWER in m:
        update["power"] = m[POWER]
    if UTIL in m:
        update["util"] = m[UTIL]
    gpu_id = sample.pci_bus_id or sample.uuid
    if gpu_id:
        update["gpu_id"] = gpu_id
    p = p.model_copy(update=update)
    if SM_CLOCK in m and m[SM_CLOCK] > 0:
        p = _push(p, float(m[SM_CLOCK]), sample.time)
    return board.model_copy(update={"entries": {**board.entries, gpu: p}})


def observe_step(
    board: PaceBoard | None,
    job_id: str,
    rank: int,
    node: str | None,
    value: float,
    at: datetime,
    higher_is_better: bool,
) -> PaceBoard:
    """Fold one per-rank timing (step time, or throughput when ``higher_is_better``) in.

    Values are stored so that higher is better (step times as their inverse)."""
    board = board or PaceBoard(key=job_id)
    key = str(rank)
    p = board.entries.get(key) or Pace(node=node)
    pace = value if higher_is_better else (1.0 / value if value > 0 else 0.0)
    if pace <= 0:
        return board
    p = _push(p.model_copy(update={"node": node or p.node}), pace, at)
    return board.model_copy(update={"entries": {**board.entries, key: p}})


def _reference(board: PaceBoard, entry: str) -> float | None:
    """Best current median among the entry's peers; its own best when it has none."""
    peers = [
        med
        for k, p in board.entries.items()
        if k != entry and not _idle(p) and (med := p.median()) is not None and len(p.values) >= 2
    ]
    if peers:
        return max(peers)
    return board.entries[entry].best


def _idle(p: Pace) -> bool:
    return bool(p.throttle & THROTTLE_IDLE) or p.util == 0.0


def score(board: PaceBoard, entry: str) -> float | None:
    p = board.entries.get(entry)
    if p is None or _idle(p):
        return None
    cur, ref = p.median(), _reference(board, entry)
    if cur is None or ref is None or ref <= 0:
        return None
    return min(1.0, cur / ref)


def latest_score(board: PaceBoard, entry: str) -> float | None:
    """The newest sample alone against the peers' reference (the early warning's measure)."""
    p = board.entries.get(entry)
    if p is None or _idle(p) or not p.values:
        return None
    ref = _reference(board, entry)
    if ref is None or ref <= 0:
        return None
    return min(1.0, p.values[-1] / ref)


def _found(
    board: PaceBoard, entry: str, p: Pace, s: float, current: float, since: datetime, early: bool
) -> Straggler:
    category, decisive = classify(p.throttle)
    return Straggler(
        key=board.key,
        entry=entry,
        score=round(s, 3),
        current=current,
        best=_reference(board, entry) or 0.0,
        since=since,
        at=p.last_time or since,
        throttle=p.throttle,
        category=category,
        decisive=decisive and not early,
        node=p.node,
        gpu_id=p.gpu_id,
        temp=p.temp,
        power=p.power,
        early=early,
    )


def _early_warning(
    board: PaceBoard, entry: str, p: Pace, at: datetime, cfg: StragglerConfig
) -> tuple[Pace, Straggler | None]:
    """The first sample below the throttled bar with a hardware throttle reason (once per episode)."""
    if not cfg.early_warning or p.warned or p.reported or not classify(p.throttle)[1]:
        return p, None
    raw = latest_score(board, entry)
    if raw is None or raw >= cfg.bar(p.throttle):
        return p, None
    warned = p.model_copy(update={"warned": True})
    return warned, _found(board, entry, warned, raw, p.values[-1], p.below_since or at, early=True)


def evaluate(board: PaceBoard, entry: str, cfg: StragglerConfig) -> tuple[PaceBoard, Straggler | None]:
    """Update the entry's episode after a new sample: the sustained straggler, or its early warning."""
    p = board.entries.get(entry)
    if p is None or p.last_time is None:
        return board, None
    at: datetime = p.last_time
    s = score(board, entry)
    bar = cfg.bar(p.throttle)
    if s is None or s >= bar:
        p, early = _early_warning(board, entry, p, at, cfg)
        if early is not None:
            return board.model_copy(update={"entries": {**board.entries, entry: p}}), early
        if p.below_since is None and not p.reported and not p.warned:
            return board, None
        if s is not None and s < bar + cfg.recover_margin and (p.reported or p.warned):
            return board, None  # hovering just above the bar: the episode goes on
        raw = latest_score(board, entry)
        if p.warned and not p.reported and p.below_since is None and raw is not None and raw < bar:
            return board, None  # still below on the newest sample: the median has not caught up yet
        p = p.model_copy(update={"below_since": None, "below_samples": 0, "reported": False, "warned": False})
        return board.model_copy(update={"entries": {**board.entries, entry: p}}), None
    since = p.below_since or at
    p = p.model_copy(update={"below_since": since, "below_samples": p.below_samples + 1})
    found: Straggler | None = None
    sustained = (at - since) >= timedelta(seconds=cfg.sustain_s)
    if not p.reported and sustained and p.below_samples >= cfg.min_samples:
        found = _found(board, entry, p, s, p.median() or 0.0, since, early=False)
        p = p.model_copy(update={"reported": True})
    else:
        p, found = _early_warning(board, entry, p, at, cfg)
    return board.model_copy(update={"entries": {**board.entries, entry: p}}), found


def straggler_id(rule: str, key: str, entry: str, since: datetime, bucket_s: float = 300.0) -> str:
    raw = f"{rule}|{key}|{entry}|{int(since.timestamp() // bucket_s)}"
    return "strag-" + hashlib.blake2b(raw.encode(), digest_size=10).hexdigest()


def gpu_straggler_signal(found: Straggler, observed: datetime) -> Signal:
    """A slow GPU as a node fact: the route step hands it to the jobs the node served."""
    reasons = throttle_reasons(found.throttle)
    why = f", throttled: {'+'.join(reasons)}" if reasons else ""
    temp = f", {found.temp:.0f} C" if found.temp is not None else ""
    summary = (
        f"GPU {found.entry} on {found.key} runs at {found.score:.0%} of its peers' SM clock "
        f"({found.current:.0f} vs {found.best:.0f} MHz{temp}{why})"
    )
    if found.early:
        summary += "; watching whether it lasts before acting"
    rule = STRAGGLER_EARLY_RULE if found.early else STRAGGLER_GPU_RULE
    attrs: dict[str, AttrValue] = {
        "score": found.score,
        "gpu_index": found.entry,
        "sm_clock_mhz": found.current,
        "peer_sm_clock_mhz": found.best,
        "throttle_reasons": reasons,
        "throttle_mask": found.throttle,
    }
    if found.temp is not None:
        attrs["temp_c"] = found.temp
    if found.power is not None:
        attrs["power_w"] = found.power
    if found.early:
        attrs["provisional"] = True
    return Signal(
        signal_id=straggler_id(rule, found.key, found.entry, found.since),
        rule=rule,
        role=Role.ROOT_CANDIDATE,
        category=found.category,
        summary=summary,
        event_time=found.at,
        observed_time=observed,
        node=found.key,
        gpu=found.gpu_id or f"gpu{found.entry}",
        attrs=attrs,
        restartable=True,
        isolation="gpu" if found.decisive else "none",
        decisive=found.decisive,
        weight=50 if found.early else 60,
        text=summary,
        source=SourceRef(kind="telemetry", adapter="straggler-detector"),
    )


def rank_straggler_signal(found: Straggler, observed: datetime) -> Signal:
    """A slow rank from step times: where it runs, not why (category ``unknown``)."""
    summary = f"rank {found.entry} runs at {found.score:.0%} of the fastest rank's pace" + (
        f" on {found.node}" if found.node else ""
    )
    return Signal(
        signal_id=straggler_id(STRAGGLER_RANK_RULE, found.key, found.entry, found.since),
        rule=STRAGGLER_RANK_RULE,
        role=Role.ROOT_CANDIDATE,
        category=Category.UNKNOWN,
        summary=summary,
        event_time=found.at,
        observed_time=observed,
        node=found.node,
        job_id=found.key,
        rank=int(found.entry),
        attrs={"score": found.score},
        restartable=True,
        isolation="none",
        decisive=False,
        weight=40,
        text=summary,
        source=SourceRef(kind="training", adapter="straggler-detector"),
    )


STEP_TIME_ATTRS = ("iteration_ms", "step_time_s", "iteration_time_s")
THROUGHPUT_ATTRS = ("tokens_per_second", "tokens_per_sec_per_gpu", "tps", "samples_per_s")


def step_timing(signal: Signal) -> tuple[float, bool] | None:
    """(value, higher_is_better) from a progress signal that carries a per-rank timing."""
    for name in THROUGHPUT_ATTRS:
        v = signal.attrs.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return float(v), True
    for name in STEP_TIME_ATTRS:
        v = signal.attrs.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return float(v), False
    return None
