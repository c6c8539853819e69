"""The stream reads watchdog timeouts of different sizes as `sickbay diagnose` does: ranks in
different collectives are the application's, and the decide step gets a verdict that is not
restartable. Each node ships its own ranks' lines here, as a live fleet does."""

from __future__ import annotations

from datetime import timedelta

from schemas.incidents import Category
from tests.factories import T0, job_output, verdict


def _timeout(node: str, rank: int, numel: int) -> bytes:
    line = (
        f"[rank{rank}]:[E1129 03:10:00.426415540 ProcessGroupNCCL.cpp:629] [PG ID 0 PG GUID 0(default_pg) "
        f"Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7219, OpType=BROADCAST, "
        f"NumelIn={numel}, NumelOut={numel}, Timeout(ms)=600000) ran for 600081 milliseconds before timing out."
    )
    return job_output(node, "7", T0 + timedelta(seconds=rank), line)


def test_watchdog_timeouts_of_different_sizes_are_a_mismatched_collective_not_a_restart():
    v = verdict(_timeout("gpu-01", 0, 64), _timeout("gpu-01", 1, 64), _timeout("gpu-02", 2, 24084544))
    assert (v.category, v.restartable, v.isolate) == (Category.APPLICATION, False, [])
    assert v.culprit is not None and (v.culprit.node, v.culprit.rank) == ("gpu-02", 2)


def test_watchdog_timeouts_of_one_size_stay_a_cascade_worth_a_restart():
    v = verdict(_timeout("gpu-01", 0, 64), _timeout("gpu-01", 1, 64), _timeout("gpu-02", 2, 64))
    assert (v.category, v.restartable) == (Category.UNKNOWN, True)
