"""The verdicts behind the rules of the thread set's rounds 5 to 14 (tests/corpus/README.md): each
rule's own examples sit beside it in the catalog; these pin what attribution makes of the lines
together, as real logs show them."""

from __future__ import annotations

from schemas.incidents import Category
from tests.factories import outcome, output_verdict

SIGKILLED = (
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 "
    "(pid: 2410412) of binary: /data/zjt/anaconda3/envs/cai/bin/python"
)
CLOSING = (
    "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 2410413 closing signal SIGTERM"
)
EXIT_1 = (
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 "
    "(pid: 1234) of binary: /usr/bin/python3"
)
CUDA_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
BUSY = "'CUDA-capable device(s) is/are busy or unavailable'"
RESET = (
    " [Sun Jan 11 09:52:01 2026] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required "
    "[NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874 "
)
UCX_BUS = "[8d6bf97c3bf4:3039 :0:3095] Caught signal 7 (Bus error: nonexistent physical address)"
CHILD_FAILED = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"
TOPO = "2a8874e7d1e6:2196:2275 [1] graph/xml.h:101 NCCL WARN Attribute arch of node cpu not found"


def _outcome(*lines: str) -> tuple[str | None, Category, bool, list[str]]:
    """The root's rule, the category, restartable and what to isolate."""
    v = output_verdict(*lines)
    return (*outcome(v), v.isolate)


def test_a_worker_sigkilled_with_nothing_else_said_reads_as_outgrowing_host_memory():
    assert _outcome(CLOSING, SIGKILLED) == (
        "framework.elastic_worker_failed",
        Category.APPLICATION,
        False,
        [],
    )


def test_a_specific_root_beats_the_sigkill_of_a_worker():
    v = output_verdict(CUDA_OOM, CLOSING, SIGKILLED)
    assert v.root.rule != "framework.elastic_worker_failed"
    assert v.category == Category.APPLICATION


def test_other_exit_codes_stay_a_cascade():
    v = output_verdict(CLOSING, EXIT_1)
    assert v.category == Category.UNKNOWN
    assert v.restartable is True


def test_a_gpu_that_needs_a_reset_explains_the_busy_device_printed_before_it():
    v = output_verdict(BUSY, RESET)
    assert (v.root.rule, v.category) == ("gpu.reset_required", Category.HARDWARE_GPU)
    assert v.isolate  # the node, as the rule says


def test_ucx_bus_error_in_a_container_is_the_shared_memory_limit():
    assert _outcome(UCX_BUS, CHILD_FAILED) == ("framework.native_crash", Category.INFRASTRUCTURE, False, [])


def test_an_nccl_topology_attribute_missing_is_system_software_not_worth_a_restart():
    assert _outcome(TOPO) == ("nccl.topo_attribute_missing", Category.SYSTEM_SOFTWARE, False, [])


EFA_EQ = (
    "Unable to write to EQ: Missing or unavailable event queue. err: Input/output error (5) "
    "prov_errno: Unknown error -114 (-114) prov/rxr/src/rxr.h:1042 "
)
OFI_REQUEST = (
    "nccl-tests-worker-1:35:89 [5] ofi_process_cq:1039 NCCL WARN NET/OFI Request 0x7fbb944701b8 completed "
    "with error. RC: 20. Error: unknown error. Completed length: 0"
)
NCCL_CLASS_AND_DETAIL = (
    "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1169, unhandled system error, NCCL "
    "version 21.0.3 ncclSystemError: System call (socket, malloc, munmap, etc) failed."
)


def test_the_efa_providers_event_queue_failure_is_system_software_not_worth_a_restart():
    assert _outcome(EFA_EQ) == ("network.efa_event_queue", Category.SYSTEM_SOFTWARE, False, [])


def test_an_efa_request_error_is_a_cascade_that_keeps_the_job_restartable():
    assert _outcome(OFI_REQUEST) == ("network.ofi_request_error", Category.UNKNOWN, True, [])
    assert output_verdict(OFI_REQUEST, EFA_EQ).root.rule == "network.efa_event_queue"


def test_an_nccl_error_class_printed_with_its_detail_is_read_by_the_class_rule():
    v = output_verdict(NCCL_CLASS_AND_DETAIL)
    assert (v.root.rule, v.category) == ("nccl.system_error", Category.INFRASTRUCTURE)


# Round 7 (tests/corpus/README.md).
SRUN_REJECTED = (
    "srun: error: Unable to create step for job xxxxx: Requested node configuration is not available"
)
QP_ACCESS = (
    "ubuntu20-server-2:94639:94647 [0] transport/net_ib.cc:100 NCCL WARN NET/IB : mlx5_0:1 Got async event : "
    "local access violation work queue error"
)
FLUSHED = (
    "ubuntu20-server-2:94639:94652 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
    "192.168.1.2<57888> with status=5 opcode=1 len=0 vendor err 249 (Recv) localGid fe80::e61d:2dff:fef2:9c94"
)
HCA_FATAL = (
    "h100-28:238:1219 [0] transport/net_ib.cc:180 NCCL WARN NET/IB : mlx5_ib0:1 async fatal event: "
    "local catastrophic error"
)


def test_a_request_no_node_can_satisfy_is_the_jobs_own_and_not_worth_a_restart():
    """verl#548 (a launch script that put both hosts in one -w) and mlcommons/training#824 (8 GPUs
    asked of 4-GPU nodes): the request is the job's, so the verdict is application."""
    assert _outcome(SRUN_REJECTED) == ("scheduler.slurm_request_rejected", Category.APPLICATION, False, [])


def test_a_queue_pair_access_violation_is_the_rdma_settings_and_explains_the_flushed_completions():
    assert _outcome(QP_ACCESS, QP_ACCESS, FLUSHED) == (
        "network.ib_async_event",
        Category.INFRASTRUCTURE,
        False,
        [],
    )


def test_the_newer_fatal_event_form_of_an_hca_catastrophe_still_isolates_its_node():
    assert _outcome(HCA_FATAL) == (
        "network.ib_async_event",
        Category.HARDWARE_NETWORK,
        True,
        ["gpu-01"],
    )


# Round 8 (tests/corpus/README.md).
FM_MISMATCH = (
    "fabric manager NVIDIA GPU driver interface version 590.48.01 don't match with driver version 580.126.09."
)
FM_EXITED = (
    "Jun 13 06:54:02 dgx-03 systemd[1]: nvidia-fabricmanager.service: Main process exited, code=exited, "
    "status=1/FAILURE"
)
DCGM_FAIL = "|                           | Fail - GPU: 0                                  |"
UNKNOWN_DEVICE = "nvidia-container-cli: device error: 4: unknown device"
DRIVER_IN_IMAGE = (
    "nvidia-container-cli: mount error: file creation failed: /var/lib/docker/overlay2/bd4f/merged/usr/bin/"
    "nvidia-smi: file exists"
)
SLURMD_FATAL = "Feb 20 18:59:13 node2.int.rubberducky.calculquebec.cloud slurmd[57977]: fatal: gres.conf duplicate records for gpu"


def test_fabric_manager_built_apart_from_the_driver_is_not_worth_a_restart_but_its_crash_is():
    assert _outcome(FM_MISMATCH) == (
        "gpu.fabric_manager_version_mismatch",
        Category.SYSTEM_SOFTWARE,
        False,
        ["gpu-01"],
    )
    assert _outcome(FM_EXITED) == ("gpu.fabric_manager_failed", Category.SYSTEM_SOFTWARE, True, ["gpu-01"])


def test_a_gpu_that_fails_dcgms_diagnostic_is_taken_out_alone():
    assert _outcome(DCGM_FAIL) == ("gpu.dcgm_diag_failed", Category.HARDWARE_GPU, True, ["gpu-01:0"])


def test_a_container_asking_for_a_gpu_the_node_lacks_is_the_jobs_configuration():
    assert _outcome(UNKNOWN_DEVICE) == ("cuda.container_unknown_device", Category.INFRASTRUCTURE, False, [])


def test_an_image_that_ships_driver_files_must_be_rebuilt():
    assert _outcome(DRIVER_IN_IMAGE) == (
        "cuda.container_driver_files_in_image",
        Category.APPLICATION,
        False,
        [],
    )


def test_a_slurmd_that_will_not_start_is_the_nodes_configuration():
    assert _outcome(SLURMD_FATAL) == ("scheduler.slurmd_fatal", Category.INFRASTRUCTURE, False, [])


# Round 9 (tests/corpus/README.md).
XID_ELIDED = (
    "kernel: NVRM: Xid (PCI:XXXX:XX:XX): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)


def test_an_xid_whose_poster_hid_the_address_still_reads_as_the_gpu_and_isolates_the_node():
    assert _outcome(XID_ELIDED) == ("gpu.xid", Category.HARDWARE_GPU, True, ["gpu-01"])


INVALID_DEVICE_FUNCTION = (
    "THCudaCheck FAIL file=/gpfsnyu/home/ks3286/pytorch/torch/lib/THC/generated/../generic/"
    "THCTensorMathPointwise.cu line=247 error=8 : invalid device function"
)
SUBMITIT_PREEMPTED = "submitit WARNING (2021-04-01 02:26:27,643) - Caught signal SIGUSR1 on learnfair4096: this job is preempted."
MLX5_PROBE = "mlx5_core: probe of 0000:69:01.0 failed with error -22"


def test_a_binary_without_code_for_this_gpu_is_the_software_stack_not_the_job():
    assert _outcome(INVALID_DEVICE_FUNCTION) == ("cuda.version_mismatch", Category.SYSTEM_SOFTWARE, False, [])


def test_a_preemption_submitit_caught_is_the_scheduler_and_worth_a_restart():
    assert _outcome(SUBMITIT_PREEMPTED) == ("scheduler.submitit_preempted", Category.INFRASTRUCTURE, True, [])


def test_a_nic_the_kernel_cannot_bring_up_takes_its_node_out():
    assert _outcome(MLX5_PROBE) == ("network.mlx5_probe_failed", Category.HARDWARE_NETWORK, True, ["gpu-01"])


def test_a_node_s_reason_text_shipped_from_another_host_drains_nothing():
    """`Reason=gres/gpu count reported lower than configured (3 < 4)` as scontrol prints it on a
    login node: a GPU is gone, but the line's host is not the node; slurmctld's own line names it."""
    from datetime import UTC, datetime

    from schemas.raw import LogLine
    from streams.extract.extractor import Extractor

    now = datetime(2026, 1, 1, tzinfo=UTC)
    ex = Extractor()
    reason = "   Reason=gres/gpu count reported lower than configured (3 < 4) [slurm@2026-07-28T17:13:24]"
    (sig,) = ex.extract(LogLine(text=reason, adapter="plain", host="login01"), now)
    assert (sig.rule, sig.category, sig.isolation) == (
        "scheduler.slurm_gpu_count_low_reason",
        "hardware_gpu",
        "none",
    )
    ctld = "error: Setting node gpu-07 state to INVAL with reason:gres/gpu count reported lower than configured (7 < 8)"
    (sig,) = ex.extract(LogLine(text=ctld, adapter="plain", host="slurmctl01"), now)
    assert (sig.rule, sig.node, sig.isolation) == ("scheduler.slurm_gpu_count_low", "gpu-07", "node")


def test_a_tensorflow_path_not_found_is_the_storage_and_a_missing_checkpoint_key_the_program():
    """tensorflow/ecosystem#28: each pod's own train_dir, so the chief cannot merge the shards."""
    shards = (
        "NotFoundError (see above for traceback): /train_dir/model.ckpt-0_temp_5fcd/part-00000-of-00002.index"
    )
    assert outcome(output_verdict(shards)) == ("infra.tf_path_not_found", Category.INFRASTRUCTURE, False)
    key = "tensorflow.python.framework.errors_impl.NotFoundError: Key dense/kernel not found in checkpoint"
    assert output_verdict(key).category != Category.INFRASTRUCTURE


def test_ddp_s_list_of_parameters_without_a_gradient_is_the_model_code_not_worth_a_restart():
    """Round 11: lucidrains/imagen-pytorch#75 and Project-MONAI/GenerativeModels#402 posted only the
    list the reducer adds to its error; the rank it names is where the list was printed."""
    names = "Parameters which did not receive grad for rank 14: final_res_block.time_mlp.1.bias, norm_mid_cond.weight"
    v = output_verdict(names)
    assert outcome(v) == ("framework.ddp_unused_parameters", Category.APPLICATION, False)
    assert v.root.rank == 14
    assert v.isolate == []
    indices = "[rank3]: Parameter indices which did not receive grad for rank 3: 149 150 151 152"
    assert outcome(output_verdict(indices))[0] == "framework.ddp_unused_parameters"


def test_a_program_the_shell_reports_killed_outgrew_its_memory_unless_something_says_otherwise():
    """IBM/FfDL#127: a learner pod's script reported its python killed and exit 137; the pod's memory
    was too small. A specific root, here Slurm's time limit, wins over the weak SIGKILL reading."""
    script = (
        "/usr/local/bin/train.sh: line 18:    36 Killed                  python3 convolutional_network.py"
    )
    assert outcome(output_verdict(script, "Job exited with error code 137")) == (
        "framework.shell_killed",
        Category.APPLICATION,
        False,
    )
    limit = "slurmstepd: error: *** JOB 4242 ON gpu-01 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***"
    assert outcome(output_verdict(limit, "Killed"))[0] != "framework.shell_killed"


def test_slurm_s_client_refusing_a_gres_it_cannot_parse_is_the_request_not_a_transient():
    """awsome-distributed-ai#196: sbatch checks the GRES itself and prints the reason alone."""
    refused = "sbatch: error: Invalid generic resource (gres) specification"
    assert outcome(output_verdict(refused)) == (
        "scheduler.slurm_request_rejected",
        Category.INFRASTRUCTURE,
        False,
    )


def test_kernels_built_for_another_compute_capability_are_the_build_not_the_gpu():
    """trilinos/Trilinos#7498: jobs moved to nodes of a newer GPU than the build targeted."""
    kokkos = (
        "Kokkos::Cuda::initialize ERROR: running kernels compiled for compute capability 3.7 on device "
        "with compute capability 6.0 is not supported by CUDA!"
    )
    v = output_verdict(kokkos)
    assert outcome(v) == ("cuda.version_mismatch", Category.SYSTEM_SOFTWARE, False)
    assert v.isolate == []


def test_an_older_torch_s_nccl_invalid_usage_reads_like_the_newer_one():
    """facebookresearch/fairseq#2924 (torch 1.6, NCCL 2.6.3): the class without NCCL_DEBUG's hint."""
    old = "RuntimeError: NCCL error in: ../torch/lib/c10d/ProcessGroupNCCL.cpp:514, invalid usage, NCCL version 2.6.3"
    v = output_verdict(old)
    assert outcome(v) == ("nccl.invalid_usage", Category.APPLICATION, False)
    assert v.root.attrs["nccl_version"] == "2.6.3"


def test_vllm_s_allocator_running_out_of_gpu_memory_is_the_job_s_memory():
    """TideDra/lmm-r1#42: the rollout engine's sleep-mode allocator, retyped by the poster."""
    oom = "Cuda Error: out of memory at /workspave/scrc/cumem_allocator.cpp: 62"
    assert outcome(output_verdict(oom)) == ("cuda.out_of_memory", Category.APPLICATION, False)


def test_a_batch_job_held_after_its_launch_failed_is_the_node_s_set_up_and_worth_a_restart():
    """ArjunaCluster/ArjunaUsers#63, c3nl_cluster#24: squeue's reason for a job Slurm requeued and
    held when its node could not start it; the line names no node, so nothing is drained."""
    v = output_verdict(
        "  4242     gpu   train.sh    alice PD       0:00      1 (launch failed requeued held)"
    )
    assert outcome(v) == ("scheduler.slurm_launch_failed_held", Category.INFRASTRUCTURE, True)
    assert v.isolate == []


def test_a_read_only_mount_is_the_node_s_storage_and_a_rerun_fails_the_same_way():
    ro = "OSError: [Errno 30] Read-only file system: '/scratch/ckpt/step_1000'"
    assert outcome(output_verdict(ro)) == ("infra.read_only_filesystem", Category.INFRASTRUCTURE, False)


def test_a_fuse_mount_whose_daemon_died_is_the_node_s_mount_and_worth_a_restart():
    gone = "OSError: [Errno 107] Transport endpoint is not connected: '/mnt/gcs/data'"
    assert outcome(output_verdict(gone)) == ("infra.mount_disconnected", Category.INFRASTRUCTURE, True)
