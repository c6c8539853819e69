"""The loop of a polling collector: one round every ``interval_s``, stoppable between rounds.

Shared by the collectors that ask a source on a timer (Prometheus/dcgm-exporter, Loki); the
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
) -> None:
    started = time.monotonic()
    while not stop():
        t0 = time.monotonic()
        step()
        if on_tick is not None:
            on_tick()
        if stop_after_s is not None and time.monotonic() - started >= stop_after_s:
            break
        while not stop() and time.monotonic() - t0 < interval_s:
            time.sleep(min(0.2, interval_s))
