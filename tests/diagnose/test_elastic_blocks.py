"""torchelastic's failure block names the host of each failed rank (failure-signatures.md §4.5):
``sickbay diagnose`` reads ``host :`` then ``rank :`` at the start of a line, and nothing else."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from streams.diagnose.driver import Diagnoser

NOW = datetime(2026, 1, 1, tzinfo=UTC)
BLOCK = """Root Cause (first observed failure):
[0]:
  time      : 2026-01-01_00:00:00
  host      : gpu-07
  rank      : 5 (local_rank: 1)
  exitcode  : 1 (pid: 42)
  error_file: <N/A>
"""


def _diagnose(tmp_path: Path, text: str):
    path = tmp_path / "job.log"
    path.write_text(text)
    return Diagnoser().run([str(path)], NOW)


def test_a_failure_block_maps_its_rank_to_its_host(tmp_path: Path):
    d = _diagnose(tmp_path, "training\n" + BLOCK)
    assert d.rank_hosts == {5: "gpu-07"}


def test_keys_inside_a_line_and_ranks_that_are_no_number_are_not_a_block(tmp_path: Path):
    text = (
        "host: gpu-01\n"
        "rank: zero\n"  # a log's own key, not a block's: read before this fix, it crashed diagnose
        "the job's rank: 3 config says host: gpu-02\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    d = _diagnose(tmp_path, text)
    assert d.rank_hosts == {}
    assert d.verdict is not None and d.verdict.root.rule == "cuda.error"
