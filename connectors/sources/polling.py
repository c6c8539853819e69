"""The loop of a polling collector: one round every ``interval_s``, stoppable between rounds.

Shared by the collectors that ask a source on a timer (Prometheus/dcgm-exporter, Loki, NVML); the
stop check runs every 0.2 s while waiting, so SIGTERM ends a long interval promptly.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def poll_loop(
    step: Callable[[], object],
    interval_s: float,
    stop: Callable[[], bool],
    *,
    on_tick: Callable[[], None] | None = None,
    stop_after_s: float | None = None,
    wait: Callable[[float], None] | None = None,
) -> None:
    """``wait(left_s)`` fills the time between rounds in short slices (the NVML agent takes Xid events
    there); by default the loop sleeps 0.2 s at a time."""
    started = time.monotonic()
    while not stop():
        t0 = time.monotonic()
        step()
        if on_tick is not None:
            on_tick()
        if stop_after_s is not None and time.monotonic() - started >= stop_after_s:
            break
        while not stop() and (left := interval_s - (time.monotonic() - t0)) > 0:
            if wait is not None:
                wait(left)
            else:
                time.sleep(min(0.2, interval_s))
