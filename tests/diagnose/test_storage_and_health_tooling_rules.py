"""Formats the thread set's round 26 taught: storage that cannot take a checkpoint or a call, GPU
health tooling that reports its own set-up rather than the GPUs, and lines as web pages quote them.

The shapes are real threads' (mozilla/DeepSpeech#374, huggingface/pytorch-image-models#340,
pesser/edflow#92, JarodMica/StyleTTS-WebUI#18, Azure/az-hop#1796, aws/eks-node-monitoring-agent#63,
NVIDIA/aicr#2641, aws/containers-roadmap#2555, leptonai/gpud#80, NVIDIA/nvtrust#55,
EvolvingLMMs-Lab/open-r1-multimodal#7, a CSDN post on an overheated BlueField-2); the verdict is what
each settled, except where a test says the rule reads the line otherwise. LNet's errors and the
errno values of an evicted or unreachable network file system are read from their sources' own
texts, not a thread."""

from __future__ import annotations

import pytest

from tests.diagnose.logs import verdict


@pytest.mark.parametrize(
    ("rule", "line"),
    [
        (
            "infra.tf_checkpoint_write_exhausted",
            "InternalError (see above for traceback): Error writing (tmp) checkpoint file: "
            "/home/u/.local/share/ckpt/model.ckpt-6.tempstate97: Resource exhausted: "
            "/home/u/.local/share/ckpt/model.ckpt-6.tempstate97",
        ),
        (
            "framework.checkpoint_write_failed",
            "enforce fail at inline_container.cc_595] . unexpected pos 1457862912 vs 1457862800",
        ),
    ],
)
def test_a_checkpoint_that_no_longer_fits_is_the_file_system_and_not_worth_a_rerun(tmp_path, rule, line):
    assert verdict(tmp_path, [line]) == (rule, "infrastructure", False, [])


def test_storage_without_the_call_the_job_made_fails_every_rerun(tmp_path):
    lines = [
        "    os.link(last_save_path, save_path)",
        "OSError: [Errno 38] Function not implemented: './output/train/last.pth.tar' -> "
        "'./output/train/checkpoint-0.pth.tar'",
    ]
    assert verdict(tmp_path, lines) == ("infra.filesystem_call_unsupported", "infrastructure", False, [])


def test_network_storages_remote_io_error_is_worth_a_rerun(tmp_path):
    lines = [
        "    all_files = sorted(os.listdir(ckpt_root))",
        "OSError: [Errno 121] Remote I/O error: 'logs/2019-07-01T17:49:45_pretrain/train/checkpoints'",
    ]
    assert verdict(tmp_path, lines) == ("infra.remote_io_error", "infrastructure", True, [])


def test_a_health_check_that_could_not_run_drains_nothing(tmp_path):
    """NHC's nvidia-smi check would drain the node as a GPU fault; exit 127 says it never ran."""
    lines = [
        "ERROR : Node Health Checks failed - viz3d-1 - AMS081063509028 - Check check_nvsmi_healthmon returned 127"
    ]
    assert verdict(tmp_path, lines) == ("host.health_check_not_runnable", "infrastructure", False, [])


def test_dcgm_reporting_imex_not_ready_is_the_nodes_set_up_not_its_gpus(tmp_path):
    lines = [
        "GpuNvlinkWatch = True   reason=GpuNvlinkWatchIsNotHealthy",
        "  ErrorCode:DCGM_FR_IMEX_UNHEALTHY GPU:0 PCI:0000:9d:00.0",
        "  GPU_UUID:GPU-bb3e1419-... IMEX daemon status is -3 (not READY)",
    ]
    assert verdict(tmp_path, lines) == ("host.dcgm_imex_not_ready", "infrastructure", False, [])


def test_a_health_agent_that_cannot_reach_dcgm_drains_nothing(tmp_path):
    lines = [
        '{"level":"error","ts":"2025-03-04T07:57:23Z","msg":"failed to reconcile DCGM state","hostname":'
        '"ip-10-10-15-1.eu-west-1.compute.internal","monitor":"nvidia","error":"failed to initialize DCGM: '
        'Error connecting to nv-hostengine: Host engine connection invalid/disconnected"'
    ]
    assert verdict(tmp_path, lines) == ("host.dcgm_hostengine_unreachable", "infrastructure", False, [])


def test_pending_row_remaps_in_nvidia_smi_take_the_gpu_out_until_it_is_reset(tmp_path):
    lines = [
        "    Remapped Rows",
        "        Correctable Error                 : 0",
        "        Uncorrectable Error               : 4",
        "        Pending                           : Yes",
        "        Remapping Failure Occurred        : No",
    ]
    rule, category, restartable, isolate = verdict(tmp_path, lines)
    assert (rule, category, restartable) == ("gpu.row_remap_pending", "hardware_gpu", True)
    assert len(isolate) == 1


def test_the_mig_and_ecc_modes_pending_lines_are_not_row_remaps(tmp_path):
    lines = [
        "    MIG Mode",
        "        Current                           : Disabled",
        "        Pending                           : Disabled",
    ]
    assert verdict(tmp_path, lines)[0] is None


def test_a_fabric_manager_mismatch_quoted_with_a_typographic_apostrophe_is_still_read(tmp_path):
    lines = [
        "fabric manager NVIDIA GPU driver interface version 550.90.07 don\u2019t match with driver version 550.107.02. "
        "Please update with matching NVIDIA driver package"
    ]
    rule, category, restartable, isolate = verdict(tmp_path, lines)
    assert (rule, category, restartable) == ("gpu.fabric_manager_version_mismatch", "system_software", False)
    assert len(isolate) == 1  # the given corpus's convention: the host cannot use NVLink until it matches


def test_mlx5s_health_line_without_its_device_prefix_still_drains_the_node(tmp_path):
    rule, category, restartable, isolate = verdict(
        tmp_path, ["poll_health:834:(pid 0): device\u2019s health compromised - reached miss count"]
    )
    assert (rule, category, restartable) == ("network.mlx5_fatal", "hardware_network", True)
    assert len(isolate) == 1


def test_the_last_error_under_ncclS_internal_error_names_the_cause(tmp_path):
    lines = [
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:2588, internal error - please report this issue to the NCCL developers, NCCL version 2.21.5",
        "[rank0]: ncclInternalError: Internal check failed.",
        "[rank0]: Last error:",
        "[rank0]: Bootstrap : no socket interface found",
    ]
    assert verdict(tmp_path, lines)[:3] == ("infra.nccl_no_interface", "infrastructure", False)


def test_ncclS_internal_error_alone_is_still_ncclS(tmp_path):
    lines = [
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, internal error - "
        "please report this issue to the NCCL developers, NCCL version 2.18.1"
    ]
    assert verdict(tmp_path, lines) == ("nccl.internal_error", "system_software", False, [])


def test_lnet_dropping_a_lustre_clients_traffic_is_the_storage_fabric_not_the_program(tmp_path):
    """LNet's errors end in "Error:" like a Python exception; they are the Lustre network's."""
    line = (
        "Jan 12 03:14:15 gpu-07 kernel: LNetError: 1234:0:(o2iblnd_cb.c:3420:kiblnd_check_conns()) Timed out RDMA "
        "with 10.0.0.5@o2ib (56): c: 0, oc: 0, rc: 8"
    )
    rule, category, restartable, _ = verdict(tmp_path, [line])
    assert (rule, category, restartable) == ("infra.lustre_error", "infrastructure", True)


@pytest.mark.parametrize(
    "line",
    [
        "OSError: [Errno 108] Cannot send after transport endpoint shutdown: '/lustre/scratch/ckpt/step_1000'",
        "OSError: [Errno 112] Host is down: '/mnt/cifs/data/shard-00017.tar'",
    ],
)
def test_an_evicted_or_unreachable_network_file_system_is_the_storage(tmp_path, line):
    assert verdict(tmp_path, [line]) == ("infra.remote_io_error", "infrastructure", True, [])
