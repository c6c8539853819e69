"""The batched extract stage in a child process of the worker: its own interpreter, its own GIL.

Why: a worker is one Python process, and its stages share one GIL. Under ``make bench-stream``'s
sustained 10 k records/s the extract thread held the GIL for ~45 % of the samples, so the Faust
agents (route, correlate, decide) queued behind rule matching and an incident waited seconds for a
free interpreter. Extract shares no state with the agents (its own consumer group, its own offsets,
its repeat quieter), so it can run beside them in a process of its own and use a second core.

The child is started with ``spawn`` (never ``fork``: the worker has librdkafka, aiokafka and RocksDB
threads), gets the worker's :class:`~streams.settings.Settings`, and runs the same
:class:`~streams.extract.batched.BatchedExtract` loop. It has the thread's contract:

* **Stop:** the worker's stop sets an event; the child settles and commits its batch, leaves its
  group and exits 0. Terminal signals (SIGINT, SIGTERM) are the worker's to handle, so the child
  ignores them and stops with the worker, in order.
* **Die together:** a stage that dies crashes the worker (:meth:`ExtractProcess.error` says why), and
  a worker that dies (``kill -9``, OOM) takes the child with it (``PR_SET_PDEATHSIG``, and a check of
  the parent on every batch where that is not available): an orphan would keep reading ``raw.logs``
  as a member nobody watches. Either way at-least-once holds: an uncommitted batch is read again and
  its signals keep their ids.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from multiprocessing.synchronize import Event
from typing import Any

from streams.app import tune_the_gc
from streams.extract.batched import BatchedExtract
from streams.settings import Settings

log = logging.getLogger("sickbay.extract")

PR_SET_PDEATHSIG = 1  # linux/prctl.h
KILL_AFTER_S = 10.0  # how long to wait for a child killed for overstaying its stop


def _die_with(parent: int) -> None:
    """Ask the kernel to kill this process when its parent dies (Linux); elsewhere the loop checks."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the per-batch parent check still holds
            pass
    if os.getppid() != parent:  # the parent died before the request took
        os._exit(1)


def _child(
    settings: Settings,
    stop: Event,
    parent: int,
    errors: Any,
    make_stage: Callable[[Settings], BatchedExtract],
) -> None:
    """The child's body: the thread's loop (``BatchedExtract.run``), stopping on the event or when
    the worker is gone."""
    _die_with(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    stage = make_stage(settings)
    tune_the_gc()
    stage.run(lambda: stop.is_set() or os.getppid() != parent)
    if stage.error is not None:
        errors.put(f"{type(stage.error).__name__}: {stage.error}")
        raise SystemExit(1)


class ExtractProcess:
    """:class:`BatchedExtract`'s thread interface (start, stop, join, alive, error) over a child
    process."""

    def __init__(
        self, settings: Settings, make_stage: Callable[[Settings], BatchedExtract] = BatchedExtract
    ) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        self._errors = ctx.SimpleQueue()
        self._reason: str | None = None
        self.process = ctx.Process(
            target=_child,
            args=(settings, self._stop, os.getpid(), self._errors, make_stage),
            name="sickbay-extract",
            daemon=True,
        )

    def start(self) -> None:
        self.process.start()
        log.info("extract: running in process %d", self.process.pid)

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float | None = None) -> None:
        """Wait for the child to settle and leave; kill it when it overstays (its uncommitted batch is
        read again)."""
        self.process.join(timeout_s)
        if self.process.is_alive():
            log.warning("extract: process %d did not stop in time; killing it", self.process.pid)
            self.process.kill()
            self.process.join(KILL_AFTER_S)

    def alive(self) -> bool:
        return self.process.is_alive()

    @property
    def error(self) -> BaseException | None:
        """Why the child ended, when it was not asked to stop: its exception, or its exit code."""
        if self.process.is_alive() or self.process.exitcode is None:
            return None
        if self._reason is None and not self._errors.empty():
            self._reason = self._errors.get()
        if self._reason is not None:
            return RuntimeError(f"the extract process failed: {self._reason}")
        if self.process.exitcode != 0:
            return RuntimeError(f"the extract process ended with exit code {self.process.exitcode}")
        return None
