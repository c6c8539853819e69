from __future__ import annotations

from datetime import timedelta

from schemas.incidents import Category
from schemas.signals import Role
from tests.factories import (
    T0,
    cuda_error,
    kernel_xid,
    nccl_timeout,
    one,
    signals,
    slurmctld_allocate,
    slurmctld_line,
)


def test_xid_79_is_a_decisive_hardware_root_isolating_the_node_with_the_catalog_meaning():
    s = one(kernel_xid("gpu-03", 79, T0))
    assert (s.rule, s.role, s.category) == ("gpu.xid", Role.ROOT_CANDIDATE, Category.HARDWARE_GPU)
    assert (s.node, s.gpu, s.isolation, s.decisive) == ("gpu-03", "0000:06:00", "node", True)
    assert s.attrs["code"] == 79
    assert s.attrs["vendor_action"] == "RESTART_BM"
    assert s.summary == "Xid 79 (GPU fallen off the bus) on GPU 0000:06:00"
    assert s.source.kind == "kernel"


def test_xid_13_is_an_application_root_that_isolates_nothing():
    s = one(
        kernel_xid(
            "gpu-01", 13, T0, text="Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address"
        )
    )
    assert (s.category, s.isolation, s.decisive) == (Category.APPLICATION, "none", False)


def test_xid_45_is_a_cascade_never_a_root():
    s = one(kernel_xid("gpu-01", 45, T0, text="pid=1, Ch 00000010"))
    assert s.role == Role.CASCADE


def test_event_time_comes_from_the_line_prefix_before_the_shipper_timestamp():
    at = T0 + timedelta(minutes=5)
    s = one(kernel_xid("gpu-03", 79, at))
    assert s.event_time == at.replace(microsecond=0)


def test_nccl_watchdog_timeout_carries_rank_job_and_seqnum_and_is_a_cascade():
    s = one(nccl_timeout("gpu-01", 5, "77", T0, seq=96120))
    assert (s.rule, s.role, s.rank, s.job_id, s.node) == (
        "nccl.watchdog_timeout",
        Role.CASCADE,
        5,
        "77",
        "gpu-01",
    )
    assert s.attrs["seq"] == 96120
    assert s.attrs["op"] == "ALLREDUCE"


def test_slurm_allocation_expands_the_hostlist():
    s = one(slurmctld_allocate("12", "gpu-[01-04]", T0))
    assert s.role == Role.TOPOLOGY
    assert s.job_id == "12"
    assert s.attrs["nodes"] == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    assert s.summary == "job 12 allocated on gpu-[01-04]"


def test_only_the_most_specific_cuda_rule_fires_for_one_line():
    s = one(cuda_error("gpu-02", "5", T0, message="uncorrectable ECC error encountered"))
    assert s.rule == "cuda.uncorrectable_ecc"
    assert s.category == Category.HARDWARE_GPU


def test_signal_id_is_stable_for_the_same_record_position_and_differs_across_positions():
    raw = kernel_xid("gpu-03", 79, T0)
    assert one(raw, offset=7).signal_id == one(raw, offset=7).signal_id
    assert one(raw, offset=7).signal_id != one(raw, offset=8).signal_id


def test_lines_matching_no_rule_give_no_signal():
    assert signals(b"iteration 100/1000 | loss 2.31 | tokens/s 41234") == []


def test_nccl_debug_lines_name_their_host_when_the_record_does_not():
    line = (
        "2024-01-01 10:00:00 node-2:5776:5902 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion "
        "from peer 10.2.0.5<33092> with error 12, opcode 0, len 0, vendor err 129 (Recv)"
    )
    [s] = [s for s in signals(line.encode()) if s.rule.startswith("network.")]
    assert s.node == "node-2"


def test_a_controller_line_about_a_node_makes_that_node_the_subject_and_names_it_in_the_summary():
    s = one(slurmctld_line("error: Nodes gpu-0131 not responding, setting DOWN", T0))
    assert (s.rule, s.node) == ("host.node_not_responding", "gpu-0131")
    assert s.summary == "slurmctld: gpu-0131 not responding, set DOWN"
    killed = one(slurmctld_line("Killing JobId=9 on failed node gpu-0131", T0))
    assert (killed.node, killed.summary) == ("gpu-0131", "job 9 killed: node gpu-0131 failed")


def test_several_nodes_not_responding_name_no_single_subject():
    s = one(slurmctld_line("error: Nodes gpu-[01-03] not responding, setting DOWN", T0))
    assert s.rule == "host.nodes_not_responding"
    assert s.attrs["nodes"] == "gpu-[01-03]"
    assert s.summary == "slurmctld: gpu-[01-03] not responding, set DOWN"


def test_a_sigterm_reaching_the_torchelastic_agent_is_a_stop_from_outside_not_to_be_restarted():
    line = (
        b"WARNING:torch.distributed.elastic.agent.server.api:Received 15 death signal, shutting down workers"
    )
    s = one(line)
    assert (s.rule, s.role, s.restartable) == ("framework.elastic_death_signal", Role.CASCADE, False)
    teardown = one(
        b"W0605 12:00:01.000000 140 torch/distributed/elastic/multiprocessing/api.py:897] "
        b"Sending process 4194 closing signal SIGTERM"
    )
    assert teardown.restartable is not False  # the agent tearing its workers down says nothing
