"""Formats rounds 31 to 35 of the thread set taught: a GPU index the launch never mapped, the kubelet
refusing a GPU pod at admission (and the dead GPU behind such a refusal), a stack dump of a hung job,
Cray MPICH's CUDA IPC under per-task GPU binding and its CXI queue running out, an MPI component the
image lacks, JAX 0.4.26's backend asking a GPU before cuInit, a node without GPUDirect's peer-memory
module, and UCX naming the queue memlock kept it from making.

The lines are the threads' own (ACEsuit/mace#435, zai-org/ChatGLM3#898, Lightning-AI#1540,
kubernetes/kubernetes#130145 and #125579, NVIDIA/k8s-device-plugin#2038, pytorch/ci-infra#1057,
deepspeedai/DeepSpeed#1969, shankar1729/jdftx#252, glotzerlab/software#120, NVIDIA/pyxis#88, jax-ml/jax#20711,
deepseek-ai/DeepEP#151, NVIDIA/nccl#1939, openucx/ucx#8229, Hi-PACE/hipace#1185);
the verdict is what each settled, except where a test says the rule reads the
line otherwise."""

from __future__ import annotations

import pytest

from tests.diagnose.logs import verdict


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: CUDA error: invalid device ordinal",
        "THCudaCheck FAIL file=/pytorch/torch/csrc/cuda/Module.cpp line=59 error=101 : invalid device ordinal",
    ],
)
def test_an_invalid_device_ordinal_is_the_launchs_mapping_and_fails_again(tmp_path, line):
    lines = ["#SBATCH --gpus-per-task=1", line]
    assert verdict(tmp_path, lines) == ("cuda.invalid_device_ordinal", "application", False, [])


def test_a_gpu_that_fell_off_the_bus_outranks_the_invalid_ordinal_it_causes(tmp_path):
    lines = [
        "[Tue Mar  4 10:01:02 2025] NVRM: Xid (PCI:0000:ca:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.",
        "RuntimeError: CUDA error: invalid device ordinal",
    ]
    rule, category, restartable, _ = verdict(tmp_path, lines)
    assert (rule, category, restartable) == ("gpu.xid", "hardware_gpu", True)


@pytest.mark.parametrize(
    "line",
    [
        "Message:         Pod Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. "
        "Requested:1, Available: 0, which is unexpected",
        "  Warning  UnexpectedAdmissionError  84s                kubelet            Allocate failed due to no "
        "healthy devices present; cannot allocate unhealthy devices xxx, which is unexpected",
    ],
)
def test_a_gpu_pod_refused_at_admission_is_the_clusters_and_worth_rescheduling(tmp_path, line):
    lines = ["Status:              Failed", "Reason:            UnexpectedAdmissionError", line]
    assert verdict(tmp_path, lines) == ("scheduler.k8s_device_admission_failed", "infrastructure", True, [])


def test_a_refusal_because_the_device_plugin_lost_a_gpu_is_that_gpu_even_when_it_comes_second(tmp_path):
    """The refusal is the catch-all of a short device count; the lost GPU after it is the root."""
    lines = [
        "Allocate failed due to device plugin GetPreferredAllocation rpc failed with err:",
        "rpc error: code = Unknown desc = error getting list of preferred allocation devices:",
        "unable to get device link information: error getting NVLink for devices (0, 1):",
        "failed to get nvlink remote pci info: failed to get nvlink state: GPU is lost,",
        "which is unexpected",
    ]
    rule, category, restartable, _ = verdict(tmp_path, lines)
    assert (rule, category, restartable) == ("gpu.device_plugin_link_info_failed", "hardware_gpu", True)


def test_a_py_bt_dump_of_a_hung_job_is_a_hang_worth_a_restart_not_an_application_error(tmp_path):
    """Its frames look like a traceback's; "most recent call first" says nothing was raised."""
    lines = [
        "(gdb) py-bt",
        "Traceback (most recent call first):",
        "  <built-in method allreduce of PyCapsule object at remote 0x7fb3b12c3f90>",
        '  File "/opt/conda/lib/python3.8/site-packages/torch/distributed/distributed_c10d.py", line 1209, '
        "in all_reduce",
        "    work = group.allreduce([tensor], opts)",
    ]
    assert verdict(tmp_path, lines) == ("framework.stack_dump", "unknown", True, [])


def test_a_faulthandler_dump_after_a_segfault_is_the_segfaults(tmp_path):
    lines = [
        "Fatal Python error: Segmentation fault",
        "",
        "Current thread 0x00007fd8c1d1b740 (most recent call first):",
        '  File "/usr/lib/python3.10/site-packages/torch/cuda/__init__.py", line 302 in _lazy_init',
    ]
    assert verdict(tmp_path, lines)[:3] == ("framework.native_crash", "application", True)


def test_cray_mpichs_failed_cuda_ipc_is_the_jobs_per_task_gpu_binding(tmp_path):
    lines = [
        "(GTL DEBUG: 1) cuIpcOpenMemHandle: invalid argument, CUDA_ERROR_INVALID_VALUE, line no 272",
        "MPICH ERROR [Rank 1] [job id 3246040.0] [Fri Sep 23 17:26:26 2022] [nid001616] - Abort(475555330) (rank 1 "
        "in comm 0): Fatal error in MPIR_CRAY_Bcast_Tree: Invalid count, error stack:",
    ]
    assert verdict(tmp_path, lines)[:3] == ("network.mpich_gtl_cuda_ipc_failed", "application", False)


def test_an_mpi_component_the_image_lacks_is_its_software(tmp_path):
    lines = [
        "A requested component was not found, or was unable to be opened.  This",
        "means that this component is either not installed or is unable to be",
        "Host:      exp-2-60",
        "Framework: btl",
        "Component: openib",
    ]
    assert verdict(tmp_path, lines)[:3] == ("infra.mpi_component_missing", "system_software", False)


def test_a_missing_component_gives_way_to_the_pmix_init_failure_it_explains(tmp_path):
    lines = [
        "A requested component was not found, or was unable to be opened.  This",
        "It looks like pmix_init failed for some reason; your parallel process is",
    ]
    assert verdict(tmp_path, lines)[:3] == ("infra.mpi_init_failed", "infrastructure", False)


def test_jax_0_4_26s_backend_queried_before_cuinit_is_the_frameworks(tmp_path):
    line = (
        "CUDA backend failed to initialize: jaxlib/cuda/versions_helpers.cc:90: operation gpuDeviceGetAttribute( "
        "&major, GPU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) failed: CUDA_ERROR_NOT_INITIALIZED (Set "
        "TF_CPP_MIN_LOG_LEVEL=0 and rerun for more info.)"
    )
    lines = [line, "Process 2: Global devices: [CpuDevice(id=0), CpuDevice(id=1)]"]
    assert verdict(tmp_path, lines) == ("cuda.jax_backend_not_initialized", "application", False, [])


@pytest.mark.parametrize(
    "line",
    [
        "neither nv_peer_mem, or nvidia_peermem detected. Skipping transport.",
        "cat: /sys/kernel/mm/memory_peers/nv_mem_nc/version: No such file or directory",
    ],
)
def test_a_node_without_the_gpudirect_peer_memory_module_is_its_driver_stack(tmp_path, line):
    lines = [line, "gpu-01:2330:2658 [2] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'"]
    assert verdict(tmp_path, lines)[:3] == ("gpu.peermem_module_missing", "system_software", False)


def test_ucxs_queue_that_memlock_kept_from_being_made_is_the_memlock_limit_with_its_size_named(tmp_path):
    lines = [
        "[1652739463.054681] [cn0022:4071024:0]        ib_iface.c:1035 UCX  ERROR ibv_create_cq(cqe=4096) failed: "
        "Cannot allocate memory",
        "[cn0022:4071024] pml_ucx.c:309  Error: Failed to create UCP worker",
    ]
    assert verdict(tmp_path, lines)[:3] == ("infra.memlock_limit", "infrastructure", False)


def test_cray_mpichs_completion_queue_exhaustion_is_the_jobs_cxi_setting(tmp_path):
    line = (
        "PE 4: MPICH WARNING: OFI is failing to make progress on posting a receive. MPICH suspects a hang due to "
        "completion queue exhaustion. Setting environment variable FI_CXI_DEFAULT_CQ_SIZE to a higher number might "
        "circumvent this scenario. OFI retry continuing..."
    )
    assert verdict(tmp_path, [line]) == ("network.mpich_cxi_cq_exhaustion", "application", False, [])
