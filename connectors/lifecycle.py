"""Graceful stop for the long-running connector loops."""

from __future__ import annotations

import signal
from typing import Any


class StopFlag:
    """Becomes true on SIGTERM or SIGINT, so a loop finishes its batch, flushes and commits, then exits.

    Must be created in the main thread (Python delivers signals there only).
    """

    def __init__(self) -> None:
        self.stopping = False
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)

    def _stop(self, *_: Any) -> None:
        self.stopping = True

    def __bool__(self) -> bool:
        return self.stopping
