"""PyTorch's distributed stack in its own words (ProcessGroupNCCL.cpp, TCPStore.cpp, socket.cpp,
torchelastic): 211 of its failure messages, rendered from PyTorch 2.2-2.7 source, were read against
the catalog on 2026-12-05. Most were read already or are teardown chatter; these tests pin the
wordings that were not: older and newer spellings of the watchdog's timeout and of its heartbeat
monitor, the store's newer timeout wording, and a store socket failing mid-run.
"""

from __future__ import annotations

import pytest

from tests.diagnose.logs import verdict

OOM_ON_RANK0 = (
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity "
    "of 79.10 GiB of which 2.06 GiB is free."
)


@pytest.mark.parametrize(
    "line",
    [
        # 2.3
        "[rank3]:[E1205 10:21:12.123456 4420 ProcessGroupNCCL.cpp:1709] [PG 0 Rank 3] Timeout at NCCL work: 48213, "
        "last enqueued NCCL work: 48215, last completed NCCL work: 48212.",
        # 2.4-2.5
        "[rank3]:[E1205 10:21:12.123456 4420 ProcessGroupNCCL.cpp:1590] [PG 0 Rank 3] Exception (either an error or "
        "timeout) detected by watchdog at work: 48213, last enqueued NCCL work: 48215, last completed NCCL work: 48212.",
        # 2.6+
        "[rank3]:[E1205 10:21:12.123456 4420 ProcessGroupNCCL.cpp:2395] [PG ID 0 PG GUID 0(default_pg) Rank 3]  "
        "failure detected by watchdog at work sequence id: 48213 PG status: last enqueued work: 48215, last "
        "completed work: 48212",
    ],
    ids=["2.3", "2.4", "2.6"],
)
def test_each_wording_of_the_watchdogs_failed_work_is_a_cascade_behind_the_root(tmp_path, line):
    assert verdict(tmp_path, [line])[0] == "nccl.watchdog_exception"
    assert verdict(tmp_path, [line, OOM_ON_RANK0])[:3] == ("cuda.out_of_memory", "application", False)


@pytest.mark.parametrize(
    "line",
    [
        "[rank3]:[E1205 10:11:12.123456 4411 ProcessGroupNCCL.cpp:951] No PGNCCL's watchdog heartbeat detected, so "
        "we are dumping debug info.",
        "[rank3]:[F1205 10:21:12.123456 4420 ProcessGroupNCCL.cpp:964] [Rank 3] NCCL monitor thread timeout. "
        "Basically, this could be due to CUDA or NCCL calls being unexpectedly blocking, especially when your program "
        "enters a deadlock state in watchdog or destructors.",
        "[rank3]:[E1205 10:11:12.123456 4411 ProcessGroupNCCL.cpp:1010] [Rank 3] monitoring thread detects no "
        "heartbeat and will finally kill the process! terminateProcessGroup_0 collectiveDebugInfoMode_1",
    ],
)
def test_the_heartbeat_monitors_older_wordings_read_as_a_hung_watchdog(tmp_path, line):
    assert verdict(tmp_path, [line])[0] == "nccl.watchdog_hang"


@pytest.mark.parametrize(
    "line",
    [
        "[rank3]: torch.distributed.DistStoreError: wait timeout after 600000ms, keys: /default_pg/0//cuda//0",
        "torch.distributed.DistStoreError: Timed out waiting on barrier on rank 2, for key prefix: "
        "torchelastic/agent/terminal_state (world_size=4, missing_ranks=[<check rank 0 (0) for missing rank info>], "
        "timeout=0:05:00)",
    ],
)
def test_the_stores_newer_timeout_wordings_read_like_its_socket_timeout(tmp_path, line):
    old = verdict(tmp_path, ["[rank3]: torch.distributed.DistStoreError: Socket Timeout"])
    assert verdict(tmp_path, [line]) == old
    assert old[:2] == ("infra.rendezvous_timeout", "infrastructure")


@pytest.mark.parametrize(
    "line",
    [
        "[rank3]: torch.distributed.DistNetworkError: Broken pipe",
        "torch.distributed.DistNetworkError: Interrupted system call",
        "torch.distributed.DistNetworkError: The socket is not initialized.",
    ],
)
def test_a_store_socket_failing_mid_run_is_not_the_programs_fault(tmp_path, line):
    rule, category, restartable, _ = verdict(tmp_path, [line])
    assert (rule, category, restartable) == ("infra.store_server_gone", "unknown", True)
    assert verdict(tmp_path, [line, OOM_ON_RANK0])[0] == "cuda.out_of_memory"


def test_a_rendezvous_whose_state_cannot_be_read_is_the_store_like_a_lost_connection(tmp_path):
    state = (
        "torch.distributed.elastic.rendezvous.api.RendezvousStateError: The state of the rendezvous could not be "
        "determined."
    )
    connection = (
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has "
        "failed. See inner exception for details."
    )
    assert verdict(tmp_path, [state]) == verdict(tmp_path, [connection])


def test_a_rendezvous_another_agent_closed_is_a_cascade_behind_that_nodes_failure(tmp_path):
    closed = "torch.distributed.elastic.rendezvous.api.RendezvousClosedError"
    assert verdict(tmp_path, [closed]) == ("framework.rendezvous_closed", "unknown", True, [])
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert verdict(tmp_path, [oom, closed])[0] == "cuda.out_of_memory"
