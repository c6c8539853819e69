"""Context that comes before the incident: the latest hint of a few kinds per rank, per job.

An incident window opens at the first initiating signal, so a hint that came earlier is lost to
it. Some hints only mean something in that earlier light: a rank printing a dataset-preparation
bar for twenty minutes while every other rank sat in a collective until its watchdog fired is the
whole explanation of those timeouts. The correlator keeps the latest such hint per rank (a handful
per job, rewritten at most once a minute per rank) and folds them into the window it opens.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from schemas.signals import Signal

LOOKBACK_RULES = frozenset({"progress.rank_local_work_bar"})
MAX_RANKS = 8  # per job: the ranks that do rank-local work are few (usually rank 0)
REWRITE_AFTER = timedelta(seconds=60)  # a bar refreshes every second; its latest minute is enough
NO_RANK = "-"


def remember(held: dict[str, Any] | None, signal: Signal) -> dict[str, Any] | None:
    """The job's look-back with ``signal`` in it, or None when nothing worth a write changed."""
    held = dict(held or {})
    key = NO_RANK if signal.rank is None else str(signal.rank)
    old = held.get(key)
    if old is not None:
        # only its time is needed: no validation of the whole kept signal for every bar line
        if signal.event_time - datetime.fromisoformat(old["event_time"]) < REWRITE_AFTER:
            return None
    elif len(held) >= MAX_RANKS:
        oldest = min(held, key=lambda k: str(held[k].get("event_time", "")))
        held.pop(oldest)
    held[key] = signal.model_dump(mode="json")
    return held


def recall(held: dict[str, Any] | None) -> list[Signal]:
    """The held hints, oldest first."""
    signals = [Signal.model_validate(v) for v in (held or {}).values()]
    return sorted(signals, key=lambda s: s.event_time)
