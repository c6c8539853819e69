"""``torch.distributed.monitored_barrier`` names the rank that never arrived; the verdict follows it.

Rank 0 coordinates the barrier and logs the failure, so the line's own rank is the one that waited.
The culprit is the rank the message names (placed on its node when NCCL's init lines show where it
ran); the cause stays unknown, since a missing rank may have hung or died, and a restart is the
recovery. The other ranks' "successfully reached monitoredBarrier" lines are victims of rank 0.
The messages are PyTorch's (ProcessGroupGloo.cpp ``monitoredBarrier``)."""

from __future__ import annotations

from tests.diagnose.logs import verdict_and_culprit

BARRIER = [
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "/workspace/train.py", line 88, in <module>',
    "[rank0]:     dist.monitored_barrier(timeout=timedelta(seconds=30))",
    "[rank0]: RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier in 30000 ms",
    "[rank0]:  Original exception: ",
    "[rank0]: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 30000ms "
    "for recv operation to complete",
]
INIT = [
    "node-a:1201:1201 [0] NCCL INFO comm 0x55d0c0 rank 0 nranks 2 cudaDev 0 busId 1b000 commId 0x3f1 - Init COMPLETE",
    "node-b:2202:2202 [0] NCCL INFO comm 0x55d0c8 rank 1 nranks 2 cudaDev 0 busId 1b000 commId 0x3f1 - Init COMPLETE",
]


def test_the_rank_that_missed_the_barrier_is_the_culprit_not_rank_zero_that_logged_it(tmp_path):
    assert verdict_and_culprit(tmp_path, BARRIER) == (
        "nccl.monitored_barrier_missed",
        "unknown",
        True,
        [],
        "rank 1",
    )


def test_the_missing_rank_is_placed_on_the_node_its_nccl_init_line_names(tmp_path):
    rule, category, restartable, isolate, culprit = verdict_and_culprit(tmp_path, [*INIT, *BARRIER])
    assert (rule, category, restartable, isolate) == ("nccl.monitored_barrier_missed", "unknown", True, [])
    assert isinstance(culprit, str) and culprit.startswith("node-b")


def test_ranks_that_reached_the_barrier_point_at_rank_zeros_own_failure(tmp_path):
    lines = [
        "[rank0]: wandb.errors.errors.UsageError: No API key configured. Use `wandb login` to log in.",
        "[rank1]: RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors while "
        "waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.",
        "[rank2]: RuntimeError: Rank 2 successfully reached monitoredBarrier, but received errors while "
        "waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.",
    ]
    assert verdict_and_culprit(tmp_path, lines) == ("framework.exception", "application", False, [], "rank 0")


def test_ranks_that_reached_the_barrier_alone_name_no_culprit_of_their_own(tmp_path):
    lines = [
        "[rank1]: RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors while "
        "waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.",
    ]
    assert verdict_and_culprit(tmp_path, lines) == (
        "nccl.monitored_barrier_lost_coordinator",
        "unknown",
        True,
        [],
        None,
    )
