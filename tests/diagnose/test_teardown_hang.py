"""A job whose NCCL watchdog got stuck after its ranks had begun to exit hung in teardown
(streams/diagnose/teardown.py). The shape is modelscope/ms-swift#7992's: training ended, ranks
warned that destroy_process_group() was never called, and ten minutes later an expert-parallel
group's watchdog was stuck."""

from __future__ import annotations

from tests.diagnose.logs import verdict

EXIT_WARNING = (
    "[rank{rank}]:[W205 {time}.953145631 ProcessGroupNCCL.cpp:1538] Warning: WARNING: destroy_process_group() "
    "was not called before program exit, which can leak resources. For more info, please see "
    "https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())"
)
STUCK = (
    "[rank4]:[E205 18:11:06.375750231 ProcessGroupNCCL.cpp:1870] [PG ID 12 PG GUID 99(EXPERT_MODEL_PARALLEL_GROUP) "
    "Rank 4] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
    "collectives."
)
TIMEOUT = (
    "[rank4]:[E205 18:10:35.933527530 ProcessGroupNCCL.cpp:632] [Rank 4] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=493, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600044 "
    "milliseconds before timing out."
)
FINISHED = "18:00:31.711 [INFO:swift] End time of running main: 2026-02-05 18:00:31.710947"


def test_a_watchdog_stuck_after_ranks_began_to_exit_is_the_programs_teardown(tmp_path):
    lines = [
        FINISHED,
        EXIT_WARNING.format(rank=0, time="18:00:34"),
        EXIT_WARNING.format(rank=2, time="18:00:35"),
        STUCK,
    ]
    assert verdict(tmp_path, lines) == (
        "framework.exit_without_destroy_process_group",
        "application",
        False,
        [],
    )


def test_a_stuck_watchdog_with_no_exit_warning_before_it_stays_an_unexplained_hang(tmp_path):
    """NVIDIA/Fuser#3055: the same hang at teardown from an NCCL regression, with no warning."""
    assert verdict(tmp_path, [STUCK, EXIT_WARNING.format(rank=4, time="18:19:06")])[:2] == (
        "nccl.watchdog_hang",
        "unknown",
    )


def test_ranks_timing_out_in_a_collective_were_waiting_on_one_that_left_mid_training(tmp_path):
    """The rank that exited early warns too; the others time out in a collective, not in teardown."""
    lines = [EXIT_WARNING.format(rank=0, time="18:00:34"), TIMEOUT, STUCK]
    assert verdict(tmp_path, lines)[0] != "framework.exit_without_destroy_process_group"


def test_a_blocking_wait_timeout_is_a_collective_timeout_too(tmp_path):
    blocking = (
        "[rank4]:[E205 18:10:35.933527530 ProcessGroupNCCL.cpp:632] [Rank 4] Work WorkNCCL(SeqNum=493, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) timed out in blocking wait"
    )
    lines = [EXIT_WARNING.format(rank=0, time="18:00:34"), blocking, STUCK]
    assert verdict(tmp_path, lines)[0] != "framework.exit_without_destroy_process_group"


def test_any_root_of_its_own_speaks_before_the_exit_warning(tmp_path):
    oom = "[rank4]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    lines = [EXIT_WARNING.format(rank=0, time="18:00:34"), oom, STUCK]
    assert verdict(tmp_path, lines)[:2] == ("cuda.out_of_memory", "application")


def test_the_exit_warning_alone_is_no_failure(tmp_path):
    assert verdict(tmp_path, [FINISHED, EXIT_WARNING.format(rank=0, time="18:00:34")])[0] is None
