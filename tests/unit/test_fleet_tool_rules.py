"""Verdicts on lines that the tools and services around a training job write: UCX (MPI over
InfiniBand), NVIDIA's Kubernetes device plugin, systemd's view of Fabric Manager and the Hugging Face
Hub's client on a node with no way out, and an object store's client. Each rule's examples sit beside it in the catalog. These
tests pin down what attribution makes of the lines when they come together, as they do in real logs
(openucx/ucx#5199, #9590; k8s-device-plugin health.go; gpu-operator#610; transformers#10067,
diffusion-pipe#325)."""

from __future__ import annotations

from schemas.incidents import Category
from tests.factories import outcome, output_signals, output_verdict

UCX_RETRY = (
    "[lxbk1127:2330856:0:2330856] ib_mlx5_log.c:177  Transport retry count exceeded on mlx5_0:1/IB "
    "(synd 0x15 vend 0x81 hw_synd 0/0)"
)
SEGV = "Segmentation fault (core dumped)"
PLUGIN_XID_79 = (
    "I0523 10:11:12.345678       1 health.go:151] XidCriticalError: Xid=79 on Device="
    "GPU-5e2b6f1c-8d3a-4c1e-9b7f-0a1d2c3e4f50; marking device as unhealthy."
)
DCGM_XID_79 = "Detected XID 79 for GPU 3"
NVSENTINEL_XID_48 = (
    "Warning  SysLogsXIDErrorIsNotHealthy  node/gpu-node-17  ErrorCode:48 PCI:0000:3b:00 GPU_UUID:GPU-5e2b6f1c "
    "Double Bit ECC Error; Resolution: RESET_GPU Recommended Action=COMPONENT_RESET;"
)
NVSENTINEL_XID_13 = (
    "SysLogsXIDError  True  SysLogsXIDErrorIsNotHealthy  ErrorCode:13 PCI:0000:3b:00 GPU_UUID:GPU-5e2b6f1c "
    "Graphics Engine Exception; Resolution: IGNORE Recommended Action=NONE;"
)
QUOTED_XID_149 = "Xid 149, NETIR_LINK_DOWN Fatal XC0 i0 Link 14"
GDR_OFF = "learn01:2228637:2230195 [3] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'"
PLUGIN_XID_13 = (
    "I0523 10:11:12.345678       1 health.go:151] XidCriticalError: Xid=13 on Device=GPU-5e2b6f1c; "
    "marking device as unhealthy."
)
WATCHDOG = (
    "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600123 milliseconds before timing out."
)
FM_CONTROL = (
    "Nov 15 14:15:47 dgx-03 systemd[1]: nvidia-fabricmanager.service: Control process exited, "
    "code=exited, status=1/FAILURE"
)
NOT_READY = "RuntimeError: CUDA error: system not yet initialized"
HUB_NOT_CACHED = (
    "[rank0]: huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate "
    "the file on the Hub and we cannot find the requested files in the local cache. Please check your "
    "connection and try again or make sure your Internet connection is on."
)
HUB_OSERROR = (
    "[rank0]: OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find "
    "it in the cached files and it looks like meta-llama/Llama-2-7b-hf is not the path to a directory "
    "containing a file named config.json."
)
HUB_NO_DNS = (
    "[rank0]: requests.exceptions.ConnectionError: (MaxRetryError('HTTPSConnectionPool(host=\\'huggingface.co"
    "\\', port=443): Max retries exceeded with url: /api/models/x/y (Caused by NameResolutionError(\"<urllib3"
    ".connection.HTTPSConnection object at 0x7f>: Failed to resolve \\'huggingface.co\\' ([Errno -3] "
    "Temporary failure in name resolution)\"))')"
)
S3_THROTTLED = (
    "botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the PutObject operation "
    "(reached max retries: 4): Please reduce your request rate."
)
S3_EXPIRED = (
    "upload failed: ./ckpt/iter_0001000/model.pt to s3://runs/ckpt/iter_0001000/model.pt An error "
    "occurred (ExpiredToken) when calling the UploadPart operation: The provided token has expired."
)
CHECKPOINT_FAILED = "RuntimeError: checkpoint save failed at iteration 1000"
MASTER_NO_DNS = "socket.gaierror: [Errno -2] Name or service not known"
LAUNCHER_EXIT = (
    "[2025-07-18 13:36:48,710] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', "
    "'train.py'] exits with return code = 1"
)


def _outcome(*lines: str) -> tuple[str | None, Category, bool]:
    """The root's rule, the category and whether a restart is the recovery."""
    return outcome(output_verdict(*lines))


def test_ucx_running_out_of_transport_retries_is_the_link_not_the_crash_it_causes():
    v = output_verdict(UCX_RETRY, SEGV)
    assert v.root.rule == "network.ucx_ib_retry_exceeded"
    assert v.category == Category.HARDWARE_NETWORK
    assert v.restartable
    assert v.isolate == []  # a link: the fabric team's, not a node to drain


def test_ucx_names_the_host_that_saw_the_retries_run_out():
    v = output_verdict(UCX_RETRY)
    assert v.root.node == "lxbk1127"


def test_the_device_plugins_critical_xid_is_the_gpu_fault_behind_the_timeouts():
    assert _outcome(WATCHDOG, PLUGIN_XID_79) == ("gpu.device_plugin_xid", Category.HARDWARE_GPU, True)


def test_an_application_xid_the_device_plugin_reports_stays_the_application():
    v = output_verdict(PLUGIN_XID_13)
    assert v.category == Category.APPLICATION
    assert v.isolate == []


def test_fabric_manager_failing_to_start_explains_cuda_not_being_ready():
    v = output_verdict(FM_CONTROL, NOT_READY)
    assert v.category == Category.SYSTEM_SOFTWARE
    assert v.root.rule in {"gpu.fabric_manager_failed", "cuda.system_not_ready"}


def test_a_node_that_cannot_reach_the_hub_with_nothing_cached_is_not_fixed_by_a_restart():
    v = output_verdict(HUB_NOT_CACHED, HUB_OSERROR, LAUNCHER_EXIT)
    assert (v.root.rule, v.category, v.restartable) == (
        "infra.external_endpoint_unreachable",
        Category.INFRASTRUCTURE,
        False,
    )
    assert v.isolate == []  # every node of such a cluster is the same


def test_dcgm_s_xid_report_is_the_gpu_fault_and_names_the_gpu_by_its_index():
    v = output_verdict(WATCHDOG, DCGM_XID_79)
    assert outcome(v) == ("gpu.dcgm_xid", Category.HARDWARE_GPU, True)
    assert v.root.gpu == "3"
    assert v.isolate  # an Xid 79: the GPU comes out of service


def test_nvsentinel_s_gpu_xid_condition_reads_through_the_xid_table():
    assert _outcome(WATCHDOG, NVSENTINEL_XID_48) == ("gpu.nvsentinel_xid", Category.HARDWARE_GPU, True)
    app = output_verdict(NVSENTINEL_XID_13)
    assert app.category == Category.APPLICATION  # Xid 13 once: the program's fault, whoever reports it
    assert app.isolate == []


def test_an_xid_quoted_without_its_kernel_head_still_gives_its_code_and_link():
    v = output_verdict(QUOTED_XID_149)
    assert outcome(v) == ("gpu.xid_quoted", Category.HARDWARE_GPU, True)
    assert v.root.attrs["link"] == 14


def test_prose_that_lists_xid_codes_is_no_xid():
    assert output_signals("We saw Xid 13, 31 and 43 on this cluster last week") == []


def test_gpudirect_rdma_disabled_alone_is_the_node_s_software_set_up():
    """NVIDIA/nccl#1676: no error, a job several times slower; nothing else in the log explains it."""
    v = output_verdict(GDR_OFF)
    assert outcome(v) == ("nccl.gdr_disabled", Category.SYSTEM_SOFTWARE, False)
    assert v.isolate == []


def test_gpudirect_rdma_disabled_loses_to_any_cascade():
    assert output_verdict(GDR_OFF, WATCHDOG).root.rule != "nccl.gdr_disabled"


def test_the_hubs_host_not_resolving_is_the_missing_way_out_not_a_dns_blip():
    assert _outcome(HUB_NO_DNS) == ("infra.external_endpoint_unreachable", Category.INFRASTRUCTURE, False)


def test_a_peer_name_that_does_not_resolve_stays_a_restartable_dns_failure():
    assert _outcome(MASTER_NO_DNS) == ("infra.dns_failure", Category.INFRASTRUCTURE, True)


def test_a_throttled_checkpoint_write_is_the_store_and_a_later_restart_goes_through():
    assert _outcome(S3_THROTTLED, CHECKPOINT_FAILED) == (
        "infra.object_store_error",
        Category.INFRASTRUCTURE,
        True,
    )


def test_expired_object_store_credentials_are_not_fixed_by_a_restart():
    assert _outcome(S3_EXPIRED) == ("infra.object_store_error", Category.INFRASTRUCTURE, False)


def test_a_pod_ended_by_its_node_s_shutdown_is_the_cluster_and_worth_a_restart():
    """The kubelet's graceful node shutdown (a reclaimed spot VM, maintenance): the message of today's
    kubelet and of 1.20-1.21's."""
    for message in (
        "  Message:      Pod was terminated in response to imminent node shutdown.",
        "  Message:      Node is shutting, evicting pods",
    ):
        assert _outcome(message) == ("scheduler.k8s_node_shutdown", Category.INFRASTRUCTURE, True)


def test_a_pod_refused_on_a_node_already_shutting_down_never_ran_and_is_no_failure():
    refused = "  Message:      Pod was rejected: Pod was rejected as the node is shutting down."
    assert output_signals(refused) == []


def test_the_taint_manager_deleting_a_pod_blames_its_node_without_draining_it_on_this_line():
    v = output_verdict(
        "  Warning  TaintManagerEviction  2m  taint-controller  Marking for deletion Pod default/trainer-0"
    )
    assert outcome(v) == ("scheduler.k8s_taint_eviction", Category.HARDWARE_HOST, True)
    assert v.isolate == []  # the event names the pod, not the node
    cancelled = (
        "  Normal   TaintManagerEviction  1m  taint-controller  Cancelling deletion Pod default/trainer-0"
    )
    assert output_signals(cancelled) == []
