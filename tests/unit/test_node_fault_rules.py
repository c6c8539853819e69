"""Verdicts on a node's own faults as its kernel and the launchers around a job report them: a local
NVMe drive the driver gives up on, a Mellanox NIC whose firmware failed, MUNGE refusing credentials
between hosts, Open MPI losing a node's daemon, an InfiniBand port that cannot link, NCCL finding no
path back in the node's topology. Each rule's examples sit beside it in the catalog;
these tests pin down what attribution makes of the lines beside the cascade they cause (Linux
drivers/nvme/host/pci.c and mlx5 health.c messages, Slurm's auth_munge, Open MPI's ORTE help text)."""

from __future__ import annotations

from schemas.incidents import Category
from tests.factories import outcome, output_signals, output_verdict

WATCHDOG = (
    "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600123 milliseconds before timing out."
)
NVME_GONE = "Mar  1 10:00:00 gpu-01 kernel: nvme nvme1: Removing after probe failure status: -19"
NVME_ONE_TIMEOUT = "Mar  1 10:00:00 gpu-01 kernel: nvme nvme1: I/O 258 (I/O Cmd) QID 4 timeout, aborting"
MLX5_UNLOADED = (
    "Mar  1 10:00:00 gpu-01 kernel: mlx5_core 0000:3b:00.0: mlx5_fw_fatal_reporter_err_work:691:(pid 12): "
    "Driver is in error state. Unloading"
)
MLX5_HEALTH = (
    "Mar  1 09:59:58 gpu-01 kernel: mlx5_core 0000:3b:00.0: print_health_info:424:(pid 0): "
    "Health issue observed, firmware internal error, severity(3) ERROR:"
)
MUNGE = "slurmstepd: error: Munge decode failed: Expired credential"
ORTE_LOST = "ORTE has lost communication with a remote daemon."
MPIRUN_NOTICED = "mpirun noticed that process rank 3 with PID 0 on node gpu-07 exited on signal 9 (Killed)."


def test_an_nvme_drive_the_driver_removed_is_the_root_of_the_timeouts_after_it():
    v = output_verdict(NVME_GONE, WATCHDOG)
    assert outcome(v) == ("host.nvme_controller_failed", Category.INFRASTRUCTURE, True)
    assert v.isolate == ["gpu-01"]


def test_one_nvme_command_timeout_is_no_signal_at_all():
    assert output_signals(NVME_ONE_TIMEOUT) == []


def test_a_nic_whose_firmware_failed_is_the_root_and_its_health_report_supports_it():
    v = output_verdict(MLX5_HEALTH, MLX5_UNLOADED, WATCHDOG)
    assert (v.category, v.root.rule) == (Category.HARDWARE_NETWORK, "network.mlx5_fatal")
    assert v.isolate == ["gpu-01"]
    assert any(s.rule == "network.mlx5_health_issue" for s in v.supporting)


def test_a_nic_health_report_alone_names_the_nic():
    v = output_verdict(MLX5_HEALTH, WATCHDOG)
    assert (v.category, v.root.rule) == (Category.HARDWARE_NETWORK, "network.mlx5_health_issue")
    assert "firmware internal error" in v.root.summary


def test_munge_refusing_credentials_is_infrastructure_a_retry_does_not_fix():
    v = output_verdict(MUNGE, "srun: error: gpu-01: task 0: Exited with exit code 1")
    assert (v.category, v.restartable, v.isolate) == (Category.INFRASTRUCTURE, False, [])


def test_open_mpi_losing_a_daemon_blames_the_host_not_the_rank_that_was_killed():
    v = output_verdict(MPIRUN_NOTICED, ORTE_LOST)
    assert outcome(v) == ("framework.mpi_daemon_lost", Category.HARDWARE_HOST, True)


RDMA_POLLING = (
    "link mlx5_7/1 subnet_prefix fe80:0000:0000:0000 lid 3403 sm_lid 1 lmc 0 "
    "state DOWN physical_state POLLING"
)
NCCL_RETRY_EXCEEDED = (
    "gpu-01:2042:2101 [3] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<44120> with error 12, "
    "opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.0.0.1 remoteGids::ffff:10.0.0.2"
)


def test_a_port_listed_as_polling_is_a_network_root_that_drains_nothing():
    """rccl#1423: mlx5_7 flapping between DOWN/POLLING and ACTIVE under a job's collectives. A spare
    port nobody cabled reads the same, so the link is named and no node is drained."""
    v = output_verdict(RDMA_POLLING, WATCHDOG)
    assert outcome(v) == ("network.ib_port_not_linked", Category.HARDWARE_NETWORK, True)
    assert v.isolate == []


def test_a_port_listing_loses_to_the_transport_error_it_sits_beside():
    v = output_verdict("\t\tPhysical state: Polling", NCCL_RETRY_EXCEEDED, WATCHDOG)
    assert outcome(v)[0] == "network.ib_retry_exceeded"


OLD_INTERNAL = (
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
    "internal error, NCCL version 2.14.3"
)
NO_REVERSE_PATH = "[rank2]: Failed to find reverse path from remNode 0/5f000 nlinks 4 to node 0/cb000"


def test_nccl_finding_no_path_back_in_the_topology_is_the_node_s_software_not_worth_a_restart():
    """milabench#183 (NCCL 2.14.3 on H100), nccl#1253 (a driver that misreports NVLink): the same
    topology meets the same NCCL on a rerun."""
    v = output_verdict(OLD_INTERNAL, "[rank2]: ncclInternalError: Internal check failed.", NO_REVERSE_PATH)
    assert outcome(v)[1:] == (Category.SYSTEM_SOFTWARE, False)  # the internal error line leads
    assert v.isolate == []
    alone = output_verdict(NO_REVERSE_PATH)  # nccl#1253 posted only this line
    assert outcome(alone) == ("nccl.topology_no_reverse_path", Category.SYSTEM_SOFTWARE, False)


def test_an_older_torch_s_nccl_internal_error_reads_like_the_newer_one():
    assert outcome(output_verdict(OLD_INTERNAL)) == ("nccl.internal_error", Category.SYSTEM_SOFTWARE, False)


AMD_UE = "[ 8812.123456] amdgpu 0000:c1:00.0: amdgpu: 2 uncorrectable hardware errors detected in umc block"


def test_an_amd_gpu_s_uncorrectable_hbm_errors_are_the_gpu_and_take_it_out():
    """amdgpu's RAS counts, as MI250X/MI300 nodes print them: the GPU behind the timeouts."""
    v = output_verdict(AMD_UE, NCCL_RETRY_EXCEEDED, WATCHDOG)
    assert outcome(v) == ("gpu.amd_ras_uncorrectable", Category.HARDWARE_GPU, True)
    assert v.root.gpu == "0000:c1:00.0"
    assert v.isolate


def test_amdgpu_s_all_clear_poll_is_no_error():
    clear = "amdgpu 0000:c3:00.0: amdgpu: no uncorrectable hardware errors detected in umc block"
    assert output_signals(clear) == []


def test_rocm_s_memory_access_fault_reads_like_cuda_s_illegal_access_and_drains_nothing():
    fault = (
        "Memory access fault by GPU node-2 (Agent handle: 0x55d5e5f0f0f0) on address 0x7f1234560000. "
        "Reason: Page not present or supervisor privilege."
    )
    v = output_verdict(fault)
    assert outcome(v) == ("cuda.rocm_memory_access_fault", Category.APPLICATION, True)
    assert v.isolate == []


def test_a_hip_binary_without_code_for_this_gpu_is_the_build():
    no_code = (
        "RuntimeError: HIP error: hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"
    )
    assert outcome(output_verdict(no_code)) == ("cuda.version_mismatch", Category.SYSTEM_SOFTWARE, False)


def test_a_gpu_nvidia_smi_can_no_longer_read_is_named_and_taken_out():
    row = "|   5  ERR!                On   | 00000000:91:00.0 Off |                 ERR! |"
    v = output_verdict(row, WATCHDOG)
    assert outcome(v) == ("gpu.smi_gpu_err", Category.HARDWARE_GPU, True)
    assert v.root.gpu == "00000000:91:00.0"
    assert v.isolate


def test_a_lone_err_in_the_utilisation_column_is_no_fault():
    """Some drivers and WSL print it for healthy GPUs."""
    util = "| N/A   43C    P8    11W /  N/A |    466MiB /  6144MiB |    ERR!      Default |"
    assert output_signals(util) == []


def test_nccl_s_allocator_warning_is_an_oom_only_when_the_cuda_failure_before_it_says_so():
    """NCCL's allocator warns alike for any failed allocation; the Cuda failure line names the cause."""
    calloc = "node1:123:456 [0] include/alloc.h:105 NCCL WARN Failed to CUDA calloc async 4194304 bytes"
    assert output_signals(calloc) == []
    oom = "node1:123:456 [0] include/alloc.h:103 NCCL WARN Cuda failure 'out of memory'"
    assert outcome(output_verdict(oom)) == ("nccl.cuda_oom", Category.APPLICATION, False)


def test_nccl_s_socket_giving_up_after_its_retries_is_a_refusal_counted_out():
    for gave_up in (
        "node1:123:456 [0] misc/socket.cc:564 NCCL WARN socketStartConnect: exceeded retries (20000)",
        "node1:123:456 [0] misc/socket.cc:580 NCCL WARN socketStartConnect: exceeded timeouts (20)",
    ):
        assert outcome(output_verdict(gave_up)) == ("infra.connection_refused", Category.INFRASTRUCTURE, True)


def test_rocm_s_memory_fault_from_the_gpu_s_ecc_is_the_gpu_not_the_program():
    ecc = (
        "Memory access fault by GPU node-3 (Agent handle: 0x1f2e3d0) on address 0x7ff000000000. "
        "Reason: DRAM ECC failure."
    )
    v = output_verdict(ecc)
    assert outcome(v) == ("cuda.rocm_memory_access_fault", Category.HARDWARE_GPU, True)
    assert v.isolate  # the HSA node number names no GPU: the node


def test_nvsentinel_s_xid_condition_names_the_gpu_by_its_pci_entity():
    condition = (
        "  SysLogsXIDError   True   Tue, 03 Dec 2026 10:00:00 +0000   SysLogsXIDErrorIsNotHealthy   "
        "ErrorCode:48 PCI:0000:3b:00 GPU_UUID:GPU-5e2b6f1c Double Bit ECC Error; Resolution: RESET_GPU "
        "Recommended Action=COMPONENT_RESET;"
    )
    v = output_verdict(condition)
    assert outcome(v) == ("gpu.nvsentinel_xid", Category.HARDWARE_GPU, True)
    assert v.root.gpu == "0000:3b:00"


def test_the_cuda_driver_s_error_names_in_xla_and_tensorflow_logs_read_like_the_runtime_s_messages():
    illegal = (
        "2024-01-01 00:00:00.000000: E tensorflow/stream_executor/cuda/cuda_event.cc:29] Error polling for "
        "event status: failed to query event: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"
    )
    assert outcome(output_verdict(illegal)) == ("cuda.driver_api_error", Category.APPLICATION, True)
    no_code = "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Could not find the corresponding function: CUDA_ERROR_NO_BINARY_FOR_GPU"
    assert outcome(output_verdict(no_code)) == ("cuda.driver_api_error", Category.SYSTEM_SOFTWARE, False)
