"""The whole path on real components: collector → Kafka → Faust worker → Slurm adapter → ClickHouse.

Runs ``sickbay demo`` as an operator would (separate processes for every role),
once in act mode and once in observe mode, and reads its verdict from the JSON
last line.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from schemas import codec
from streams.settings import REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def _demo(mode: str, kafka_bootstrap: str) -> tuple[int, str, dict[str, object]]:
    env = {**os.environ, "SICKBAY_KAFKA_BOOTSTRAP": kafka_bootstrap}
    proc = subprocess.run(
        [sys.executable, "-m", "streams.cli.main", "demo", "--mode", mode],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=400,
        check=False,
    )
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "{}"
    try:
        summary = codec.loads(last)
    except ValueError:
        summary = {}
    return proc.returncode, proc.stdout + proc.stderr, summary


def test_xid79_with_nccl_timeouts_drains_the_node_and_requeues_the_job_excluding_it(
    kafka_bootstrap, slurm_conf
):
    rc, output, summary = _demo("act", kafka_bootstrap)
    assert rc == 0, output[-6000:]
    assert summary["demo"] == "ok"
    assert isinstance(summary["fault_to_drain_s"], float)
    for line in (
        "[ok] culprit gpu-03",
        "[ok] sinfo -R shows the drain with sickbay's reason",
        "[ok] scontrol shows the requeue with ExcNodeList",
        "[ok] incident stored in ClickHouse",
        "[ok] malformed record dead-lettered with its reason",
    ):
        assert line in output


def test_observe_mode_records_dry_runs_and_leaves_the_cluster_alone(kafka_bootstrap, slurm_conf):
    rc, output, summary = _demo("observe", kafka_bootstrap)
    assert rc == 0, output[-6000:]
    assert summary["demo"] == "ok"
    assert "[ok] observe mode: the node was not drained" in output
    assert "[ok] observe mode: the job was not requeued" in output
