"""Ranks that timed out in the same collective with different input sizes were in different
collectives: the program's, not a hung rank's, so no restart and nothing drained.

The watchdog's line carries the collective's process group, sequence number, type and NumelIn.
ms-swift#10183's ranks timed out in one DDP buffer broadcast (SeqNum 7219) with 64 and 24,084,544
elements: a code path only one rank took."""

from __future__ import annotations

from tests.diagnose.logs import verdict_and_culprit


def _timeout(rank: int, numel: int, seq: int = 7219, op: str = "BROADCAST", pg: int | None = None) -> str:
    who = f"[PG ID {pg} PG GUID {pg}(default_pg) Rank {rank}]" if pg is not None else f"[Rank {rank}]"
    return (
        f"[rank{rank}]:[E918 19:29:24.436955737 ProcessGroupNCCL.cpp:689] {who} Watchdog caught collective "
        f"operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, "
        "Timeout(ms)=3000000) ran for 3000074 milliseconds before timing out."
    )


def test_two_ranks_in_one_collective_with_different_sizes_are_the_programs(tmp_path):
    lines = [_timeout(3, 64), _timeout(2, 24084544)]
    assert verdict_and_culprit(tmp_path, lines) == ("nccl.watchdog_timeout", "application", False, [], None)


def test_the_one_rank_of_another_size_is_the_suspect_when_the_others_agree(tmp_path):
    lines = [_timeout(0, 64), _timeout(1, 64), _timeout(2, 24084544), _timeout(3, 64)]
    assert verdict_and_culprit(tmp_path, lines) == (
        "nccl.watchdog_timeout",
        "application",
        False,
        [],
        "rank 2",
    )


def test_the_same_size_everywhere_is_a_plain_cascade(tmp_path):
    lines = [_timeout(0, 64), _timeout(1, 64), _timeout(3, 64)]
    assert verdict_and_culprit(tmp_path, lines)[1:3] == ("unknown", True)


def test_the_same_sequence_number_in_two_process_groups_is_no_mismatch(tmp_path):
    lines = [_timeout(0, 64, pg=0), _timeout(1, 24084544, pg=1)]
    assert verdict_and_culprit(tmp_path, lines)[1:3] == ("unknown", True)


def test_all_to_all_sizes_may_differ_by_design(tmp_path):
    lines = [_timeout(0, 4096, op="ALLTOALL_BASE"), _timeout(1, 8192, op="ALLTOALL_BASE")]
    assert verdict_and_culprit(tmp_path, lines)[1:3] == ("unknown", True)
