"""Errors a job went on after: in a finished log, not the failure that ended it.

A whole job's log holds every error it printed, and some it lived through: a Hub request throttled
and retried, a compile cache that could not be written and fell back, a warning-level exception a
library caught. Attribution takes the earliest specific root, which in a live window is right (the
window opens on the failure), but over a whole log the earliest may be one the job survived, while
the error that ended it comes after hours of training.

The log says which: training progress (Megatron's iteration lines, Hugging Face Trainer's loss
dicts, checkpoint saves, ``progress.*`` rules) printed after an error means the job went on. Such
an error is kept as evidence but is no root when a specific root candidate of another rule follows
that progress in the same file and the same attempt. The same error again after progress is a
restart that failed the same way (``driver.restart_loop``'s reading), not survival. Only the same
file counts (another rank's file says nothing about this one's process), ``MIN_PROGRESS_AFTER``
progress lines are needed (after a rank dies the others may still log the step that was in
flight), and hardware faults and decisive roots are never set aside: an Xid the job outlived still
says the GPU is failing.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from datetime import datetime

from schemas.signals import Role, Signal
from streams.correlate.attribution import GENERIC_WEIGHT, HARDWARE
from streams.correlate.progress import JOB_STARTING_RULES

MIN_PROGRESS_AFTER = 2
SURVIVED = "survived"  # the attribute set on an error the job went on after


def _line(s: Signal) -> int | None:
    return s.source.line if s.source.file is not None else None


def _may_be_set_aside(s: Signal) -> bool:
    return s.role == Role.ROOT_CANDIDATE and not s.decisive and s.category not in HARDWARE


def _went_on(
    s: Signal, line: int, progress: list[int], later: list[tuple[int, Signal]], starts: list[datetime]
) -> bool:
    """Whether ``MIN_PROGRESS_AFTER`` progress lines (sorted) follow ``line`` and a specific root
    candidate of another rule follows them in the same attempt (no job start between)."""
    k = bisect.bisect_right(progress, line) + MIN_PROGRESS_AFTER - 1
    if k >= len(progress):
        return False
    for at, other in later:
        if at > progress[k] and other.rule != s.rule:
            return not any(s.event_time < t < other.event_time for t in starts)
    return False


def set_aside_survived(signals: list[Signal]) -> list[Signal]:
    """``signals`` with each root candidate the job went on after turned into a hint that says so."""
    progress: dict[str, list[int]] = defaultdict(list)
    specific: dict[str, list[tuple[int, Signal]]] = defaultdict(list)
    starts = [s.event_time for s in signals if s.role == Role.TOPOLOGY and s.rule in JOB_STARTING_RULES]
    for s in signals:
        line, source = _line(s), s.source.file
        if line is None or source is None:
            continue
        if s.role == Role.PROGRESS:
            progress[source].append(line)
        elif s.role == Role.ROOT_CANDIDATE and s.weight >= GENERIC_WEIGHT:  # a catch-all sets none aside
            specific[source].append((line, s))
    if not progress:
        return signals
    for lines in progress.values():
        lines.sort()
    for roots in specific.values():
        roots.sort(key=lambda r: r[0])
    out: list[Signal] = []
    for s in signals:
        line, source = _line(s), s.source.file
        if (
            line is None
            or source is None
            or not _may_be_set_aside(s)
            or not _went_on(s, line, progress.get(source, []), specific.get(source, []), starts)
        ):
            out.append(s)
            continue
        out.append(
            s.model_copy(
                update={
                    "role": Role.HINT,
                    "summary": f"{s.summary} (the job went on training after it)",
                    "attrs": {**s.attrs, SURVIVED: True},
                }
            )
        )
    return out
