"""When the survivors' timeouts and remote errors are all a log has, PyTorch's own naming of the rank the
failure started from is the culprit to look at: its watchdog's "remote error detected from rank: N"
(ProcessGroupNCCL.cpp, 2.6 on) and TORCH_NCCL_DESYNC_DEBUG's report of the lagging ranks
(TraceUtils.h). A suspect, never a verdict: the category stays the cascade's and nothing is drained."""

from __future__ import annotations

from tests.diagnose.logs import verdict_and_culprit

PREFIX = "[rank{r}]:[E1204 10:11:12.123456789 ProcessGroupNCCL.cpp:{line}] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "


def _remote_error(rank: int, source: int) -> list[str]:
    return [
        PREFIX.format(r=rank, line=2061) + f" remote error detected from rank: {source}",
        PREFIX.format(r=rank, line=1895)
        + "Process group watchdog thread terminated with exception: NCCL error: "
        "remote process exited or there was a network error, NCCL version 2.21.5",
    ]


def test_the_rank_every_survivor_heard_the_remote_error_from_is_the_culprit(tmp_path):
    lines = [*_remote_error(3, 5), *_remote_error(1, 5), *_remote_error(0, 5)]
    assert verdict_and_culprit(tmp_path, lines) == ("nccl.remote_error", "unknown", True, [], "rank 5")


def test_survivors_that_name_different_ranks_name_no_culprit(tmp_path):
    lines = [*_remote_error(3, 5), *_remote_error(1, 6)]
    assert verdict_and_culprit(tmp_path, lines)[4] is None


def test_the_one_rank_a_desync_report_says_lagged_is_the_culprit_of_the_timeout(tmp_path):
    lines = [
        "[rank0]:[E1204 10:41:12.123456789 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=41207, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) "
        "ran for 600041 milliseconds before timing out.",
        "\t - [0] Timeout at collective: ALLREDUCE, #41207",
        "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:",
        "\t   - [47] joined but didn't finish collective #41207 (count from 1)",
        "\t     [0, 1, 2] finished collective #41207, but didn't join collective #41208 (count from 1)",
    ]
    assert verdict_and_culprit(tmp_path, lines) == ("nccl.watchdog_timeout", "unknown", True, [], "rank 47")


def test_a_desync_report_of_several_lagging_ranks_names_none(tmp_path):
    lines = [
        "[rank0]:[E1204 10:41:12.123456789 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600041 "
        "milliseconds before timing out.",
        "\t - To our best knowledge, ranks [6, 7] are the lagging ranks that caused this timeout. They never joined any "
        "collectives",
    ]
    assert verdict_and_culprit(tmp_path, lines)[4] is None


def test_a_rank_whose_own_error_is_in_the_log_stays_the_root_and_the_naming_changes_nothing(tmp_path):
    lines = [
        "[rank5]: RuntimeError: CUDA error: an illegal memory access was encountered",
        *_remote_error(3, 5),
    ]
    assert verdict_and_culprit(tmp_path, lines) == ("cuda.error", "application", True, [], "rank 5")


def test_a_remote_error_in_a_sub_groups_numbering_names_no_rank_of_the_job(tmp_path):
    lines = [
        "[rank9]:[E1204 10:11:12.123456789 ProcessGroupNCCL.cpp:2061] [PG ID 2 PG GUID 5(TP) Rank 1]  remote error "
        "detected from rank: 3",
        "[rank9]:[E1204 10:11:12.223456789 ProcessGroupNCCL.cpp:1895] [PG ID 2 PG GUID 5(TP) Rank 1] Process group "
        "watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error",
    ]
    assert verdict_and_culprit(tmp_path, lines)[4] is None
