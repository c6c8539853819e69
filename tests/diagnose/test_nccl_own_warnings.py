"""NCCL's own warnings, in the words its source prints them (src/init.cc, graph/paths.cc, os/linux.cc,
misc/nvmlwrap.cc, include/checks.h, enqueue.cc, transport/p2p.cc of NCCL 2.2x-2.29): read against the
catalog, most of them gave no signal, and a job that died on one was left to its traceback's cascade.

The prefix is NCCL's `host:pid:tid [dev] file:line NCCL WARN`; the other lines are what PyTorch prints
after such a failure, so each test shows the NCCL line deciding the verdict over the cascade."""

from __future__ import annotations

import pytest

from tests.diagnose.logs import verdict, verdict_and_culprit

CASCADE = [
    "[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
    "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3",
    "[rank3]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
]


def test_nvlink_gpus_without_p2p_are_the_nodes_gpu_hardware_and_drain_it(tmp_path):
    lines = [
        "gpu-12:4411:4490 [0] graph/paths.cc:320 NCCL WARN P2P is disabled between NVLINK connected GPUs 0 and 1. "
        "This should not be the case given their connectivity, and is probably due to a hardware issue. If you "
        "still want to proceed, you can set NCCL_IGNORE_DISABLED_P2P=1.",
        *CASCADE,
    ]
    rule, category, restartable, isolate, culprit = verdict_and_culprit(tmp_path, lines)
    assert (rule, category, restartable) == ("gpu.nvlink_p2p_disabled", "hardware_gpu", True)
    assert isolate == ["gpu-12"] and culprit == "gpu-12"


def test_p2p_disabled_between_pcie_gpus_is_not_a_hardware_verdict(tmp_path):
    lines = [
        "gpu-12:4411:4490 [0] graph/paths.cc:330 NCCL WARN P2P is disabled between connected GPUs 0 and 1. You can "
        "repress this message with NCCL_IGNORE_DISABLED_P2P=1.",
        *CASCADE,
    ]
    assert verdict(tmp_path, lines)[1] != "hardware_gpu"


def test_ranks_that_see_different_nic_counts_point_at_a_node_that_lost_nics(tmp_path):
    lines = [
        "gpu-03:2211:2290 [0] init.cc:1500 NCCL WARN Detected mixed local Net device counts across ranks (min 4, "
        "max 8). Set NCCL_IGNORE_NET_MISMATCH=1 to continue.",
        *CASCADE,
    ]
    assert verdict(tmp_path, lines) == ("nccl.net_device_count_mismatch", "hardware_network", True, [])


@pytest.mark.parametrize(
    ("line", "rule", "category"),
    [
        (
            "gpu-07:41235:41290 [3] misc/nvmlwrap.cc:120 NCCL WARN nvmlInit_v2() failed: Driver/library version "
            "mismatch",
            "cuda.nvml_driver_mismatch",
            "system_software",
        ),
        (
            "trainer-0:77:120 [0] misc/nvmlwrap.cc:80 NCCL WARN Failed to open libnvidia-ml.so.1",
            "infra.nvml_library_missing",
            "infrastructure",
        ),
        (
            "gpu-02:1001:1001 [5] include/checks.h:30 NCCL WARN Thread creation failed: Resource temporarily "
            "unavailable",
            "infra.thread_limit",
            "infrastructure",
        ),
        (
            "gpu-05:311:390 [1] transport/p2p.cc:270 NCCL WARN failed to peer with device 1(=1b000): 217 peer access "
            "is not supported between these two devices",
            "nccl.peer_access_unsupported",
            "infrastructure",
        ),
        (
            "gpu-3:5776:5902 [0] os/linux.cc:484 NCCL WARN ncclOsSocketStartConnect: connect to 10.2.0.5<33092> "
            "failed : No route to host",
            "infra.nccl_connect_failed",
            "infrastructure",
        ),
        (
            "gpu-01:2330:2658 [2] transport/net_socket.cc:120 NCCL WARN NET/Socket : no interface found",
            "infra.nccl_no_interface",
            "infrastructure",
        ),
        (
            "node-2:5776:5902 [0] init.cc:800 NCCL WARN Multiple Ranks are using the same GPU/Partition. Set "
            "NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration.",
            "nccl.duplicate_gpu",
            "application",
        ),
        (
            "gpu-01:101:180 [0] enqueue.cc:300 NCCL WARN Error : no algorithm/protocol available for function "
            "AllReduce with datatype ncclBfloat16. NCCL_ALGO was set to NVLS.",
            "nccl.no_algorithm",
            "application",
        ),
    ],
)
def test_an_nccl_setup_failure_in_its_own_words_is_not_worth_a_blind_restart(tmp_path, line, rule, category):
    got_rule, got_category, restartable, _ = verdict(tmp_path, [line, *CASCADE])
    assert (got_rule, got_category, restartable) == (rule, category, False)


def test_a_port_error_nccl_carried_on_through_still_reads_as_the_links(tmp_path):
    lines = [
        "gpu-04:2211:2290 [0] transport/net_ib/common.cc:100 NCCL WARN NET/IB : mlx5_0:1 Got non-fatal async "
        "event: port error(10)",
        *CASCADE,
    ]
    rule, category, restartable, _ = verdict(tmp_path, lines)
    assert (rule, category, restartable) == ("network.ib_async_event", "hardware_network", True)
