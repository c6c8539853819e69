"""Formats the thread set's rounds 27 to 30 taught: a Slurm client that got no answer, fabric
set-ups that disagree between nodes or with the cloud's security group, ranks that share a GPU or
submit different tensors, a PyTorch without NCCL, ROCm's faults and missing kernels, SageMaker
without capacity, and ranks that see no GPU.

The lines are the threads' own (ai-dynamo/nixl#2085 and #2253, gardener-extension-provider-aws#1832,
NVIDIA/nccl-tests#188, NVIDIA/cudf-spark#7632, horovod#100, whwu95/Cap4Video#37, ROCm/aiter#1143,
ROCm/rocm-systems#2805, SemiAnalysisAI/InferenceX#1498, BUTSpeechFIT/safe_gpu#1,
aws/deep-learning-containers#1075, determined-ai/determined#4297); the verdict is what each settled,
except where a test says the rule reads the line otherwise."""

from __future__ import annotations

import pytest

from tests.diagnose.logs import verdict


@pytest.mark.parametrize(
    "line",
    [
        "srun: error: Unable to confirm allocation for job 1905624: Socket timed out on send/recv operation",
        "salloc: error: Unable to allocate resources: Connection timed out",
        "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
    ],
)
def test_a_slurm_client_without_an_answer_is_the_clusters_and_worth_resubmitting(tmp_path, line):
    lines = ["salloc: job 2206168 queued and waiting for resources", line]
    assert verdict(tmp_path, lines) == ("scheduler.slurm_controller_unreachable", "infrastructure", True, [])


def test_a_request_slurm_refuses_stays_the_jobs_own(tmp_path):
    lines = ["srun: error: Unable to allocate resources: Requested node configuration is not available"]
    assert verdict(tmp_path, lines)[:3] == ("scheduler.slurm_request_rejected", "application", False)


def test_efas_failed_handshake_is_the_security_group_even_inside_nccls_request_error(tmp_path):
    """The request error alone is a cascade; quoting the handshake, it names the cause."""
    line = (
        "ip-10-1-2-3:412:498 [3] ofi_process_cq:1039 NCCL WARN NET/OFI Request 0x7f0a completed with error. "
        "RC: 112. Error: 4126 (Unresponsive receiver (reachable by EFA device but handshake failed)). "
        "Completed length: 0"
    )
    assert verdict(tmp_path, [line]) == ("network.efa_handshake_failed", "infrastructure", False, [])


def test_nccl_peers_on_different_socket_types_are_the_nodes_network_set_up(tmp_path):
    lines = [
        "user:16899:16949 [0] NCCL INFO Channel 01/0 : 9[1] -> 0[0] [receive] via NET/Socket/0",
        "user:16899:16961 [0] misc/socket.cc:441 NCCL WARN socketFinalizeAccept: wrong type 4 != 3",
        "user:16899:16961 [0] NCCL INFO misc/socket.cc:561 -> 3",
    ]
    assert verdict(tmp_path, lines) == ("infra.nccl_socket_type_mismatch", "infrastructure", False, [])


def test_ucx_unable_to_create_a_completion_queue_is_the_memlock_limit(tmp_path):
    lines = ["ERROR mlx5_0: ibv_create_cq() failed: Cannot allocate memory."]
    assert verdict(tmp_path, lines) == ("infra.memlock_limit", "infrastructure", False, [])


def test_horovods_stall_warning_read_from_its_second_line_is_the_programs(tmp_path):
    lines = [
        "This may indicate that different ranks are trying to submit different tensors or that only subset "
        "of ranks is submitting tensors, which will cause deadlock.",
        "Stalled ops: ",
        "model/model/DistributedAdamOptimizer_Allreduce/HorovodAllgather_model_model_gradients_concat_0 "
        "[ready ranks: 1], ",
    ]
    assert verdict(tmp_path, lines) == ("framework.horovod_stall", "application", False, [])


def test_two_ranks_on_one_gpu_are_read_without_nccls_prefix_too(tmp_path):
    lines = ["Error: rank 27 and rank 19 both on CUDA device 53000 (PCI 53:00.0)"]
    assert verdict(tmp_path, lines) == ("nccl.duplicate_gpu", "application", False, [])


def test_a_pytorch_without_nccl_is_the_install_not_the_program(tmp_path):
    lines = ["RuntimeError: Distributed package doesn't have NCCL built in"]
    assert verdict(tmp_path, lines) == ("nccl.torch_built_without_nccl", "system_software", False, [])


def test_a_busy_gpu_in_exclusive_mode_is_the_jobs_placement(tmp_path):
    lines = [
        "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable",
        "CUDA kernel errors might be asynchronously reported at some other API call,so the stacktrace below "
        "might be incorrect.",
    ]
    assert verdict(tmp_path, lines) == ("cuda.device_busy", "application", False, [])


def test_rocm_aborting_a_faulted_kernels_queue_is_read_as_cudas_illegal_access(tmp_path):
    """The program's, and worth one restart, as ``cuda.error`` reads an illegal memory access."""
    lines = [
        ":0:rocdevice.cpp            :3675: 2139490044663 us:  Callback: Queue 0x7ee7b4200000 aborting with "
        "error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the "
        "largest legal address. code: 0x29",
        "Kernel Name: _ZN5aiter50fmoe_bf16_blockscaleFp8_g1u1_vs_silu_1tg_ps_32x256E",
    ]
    assert verdict(tmp_path, lines) == ("cuda.hsa_queue_abort", "application", True, [])


def test_hip_error_218_is_a_library_built_without_the_gpus_target(tmp_path):
    lines = [
        ":0:/longer_pathname/hipamd/src/hip_platform.cpp:110 : 3010170007 us: Cannot retrieve Static function, "
        "error: 218",
        "Aborted (core dumped)",
    ]
    assert verdict(tmp_path, lines) == ("cuda.version_mismatch", "system_software", False, [])


def test_pyxis_unable_to_create_the_container_file_system_is_the_nodes_container_set_up(tmp_path):
    lines = ["slurmstepd: error: pyxis: failed to create container filesystem"]
    assert verdict(tmp_path, lines) == ("infra.container_start_failed", "infrastructure", False, [])


def test_sagemaker_without_capacity_is_the_regions_and_worth_a_retry(tmp_path):
    """The SageMaker SDK wraps the reason in an exception line that the generic rule would read as the
    program's (aws/deep-learning-containers#1075)."""
    lines = [
        "E           sagemaker.exceptions.UnexpectedStatusException: Error for Training job "
        "test-tf-smdataparallel-1619652004-96b6: Failed. Reason: CapacityError: Unable to provision requested ML "
        "compute capacity. Please retry using a different ML instance type."
    ]
    assert verdict(tmp_path, lines) == ("infra.sagemaker_capacity", "infrastructure", True, [])


def test_an_nccl_group_where_no_gpu_is_visible_is_the_launchers_environment(tmp_path):
    """determined-ai/determined#4297: the launcher did not pass LD_LIBRARY_PATH on to DeepSpeed's ranks."""
    lines = ["[rank=0] RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!"]
    assert verdict(tmp_path, lines) == ("infra.nccl_no_gpu_visible", "infrastructure", False, [])
