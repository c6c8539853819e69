"""The batched extract stage as a service of the worker, in a thread or a child process: a stage that
dies takes the worker down, and a worker that dies takes its extract process with it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams.app import create_app
from streams.extract.batched import BatchedExtract, register
from streams.pipeline import Pipeline, build
from streams.settings import Settings


class DyingStage(BatchedExtract):
    """Its thread fails at once, as one would on a fatal consumer error."""

    def _open(self) -> None:
        raise RuntimeError("fatal: the broker refused this consumer")

    def _close(self) -> None:
        pass


class IdleStage(BatchedExtract):
    def _open(self) -> None:
        pass

    def step(self) -> int:
        self._stop.wait(0.05)
        return 0

    def _close(self) -> None:
        pass


def _pipe(tmp_path, in_process: bool) -> Pipeline:
    settings = Settings(
        app_id="svc-test", topic_prefix="svc", partitions=1, state_dir=tmp_path, extract_process=in_process
    )
    return build(create_app(settings, store="memory://"), settings)


IN = pytest.mark.parametrize("in_process", [True, False], ids=["process", "thread"])


@IN
async def test_a_stage_that_dies_crashes_its_service_with_the_reason(tmp_path, in_process: bool):
    service_cls = register(_pipe(tmp_path, in_process), DyingStage)
    service = service_cls(loop=asyncio.get_running_loop())
    await service.start()
    for _ in range(100):  # a process first imports the stage (about a second)
        if service.crashed:
            break
        await asyncio.sleep(0.1)
    assert service.crashed
    assert "broker refused" in str(service.crash_reason)
    await service.stop()


@IN
async def test_a_healthy_stage_runs_until_the_service_stops_and_then_ends(tmp_path, in_process: bool):
    service_cls = register(_pipe(tmp_path, in_process), IdleStage)
    service = service_cls(loop=asyncio.get_running_loop())
    await service.start()
    await asyncio.sleep(1.5)  # past one watch interval
    assert not service.crashed and service.stage.alive()
    await service.stop()
    assert not service.stage.alive() and service.stage.error is None
    if in_process:
        assert service.stage.process.exitcode == 0  # settled and left, not killed


WORKER = """
import sys, time
from streams.extract.process import ExtractProcess
from streams.settings import Settings
from tests.agents.test_extract_service import IdleStage
stage = ExtractProcess(Settings(app_id="svc-test", topic_prefix="svc", state_dir=sys.argv[1]), IdleStage)
stage.start()
print(stage.process.pid, flush=True)
time.sleep(120)
"""


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _wait_ignoring(pid: int, *signals: signal.Signals, timeout_s: float = 30.0) -> None:
    """Until the process ignores ``signals`` (its ``SigIgn`` mask in /proc): a slow host can take
    more than a second to start a child, and a signal sent before it set SIG_IGN would kill it."""
    want = sum(1 << (s - 1) for s in signals)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status").read_text()
        ignored = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigIgn:")), 16)
        if ignored & want == want:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not come to ignore {signals} within {timeout_s} s")


def test_an_extract_process_dies_with_its_worker_and_ignores_the_terminals_signals(tmp_path):
    """A ``kill -9``'d worker must not leave its extract process reading ``raw.logs`` as an orphan; a
    Ctrl-C or SIGTERM to the worker's group is the worker's to handle (it stops the child in order)."""
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # its multiprocessing helper outlives it and reports the kill
        text=True,
        start_new_session=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert worker.stdout is not None
        child = int(worker.stdout.readline())
        _wait_ignoring(child, signal.SIGINT, signal.SIGTERM)  # past its start-up
        for sig in (signal.SIGINT, signal.SIGTERM):
            os.kill(child, sig)
        time.sleep(0.5)
        assert _running(child)
        worker.kill()
        worker.wait(10)
        deadline = time.monotonic() + 10
        while _running(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(child)
    finally:
        if worker.poll() is None:
            worker.kill()
