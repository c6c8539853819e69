"""Launches that never reached the training code, read as the setup problem they are, and the other
formats the thread set's rounds 18 and 19 taught (a fabric state, NaN columns, NVML, a scheduler
checkpoint check, an NCCL plugin).

A Slurm job whose container would not start (pyxis printing enroot's log), an MPI launch whose ssh
key or PMIx setup was refused, and Gloo peers that cannot find each other all end in the launcher's
generic exit lines. The line that says why is the root; the exits are what followed. The shapes are
those of real threads (pyxis#61, enroot#234, SlinkyProject/containers#2, kubeflow/trainer#2716,
NVIDIA/pyxis#88, pytorch#15592, NVIDIA/nvshmem#40, NVIDIA-NeMo/Automodel#1883, and round 19's threads
named at each test below)."""

from __future__ import annotations

import pytest

from tests.diagnose.logs import verdict

PYXIS = [
    "[2025-07-18T15:06:29.684] error: pyxis: container start failed with error code: 1",
    "[2025-07-18T15:06:29.684] error: pyxis: printing enroot log file:",
    "[2025-07-18T15:06:29.684] error: pyxis:     nvidia-container-cli: ldcache error: process "
    "/usr/sbin/ldconfig.real failed with error code: 1",
    "[2025-07-18T15:06:29.684] error: pyxis:     [ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with "
    "return code 1",
    "[2025-07-18T15:06:29.684] error: pyxis: couldn't start container",
    "[2025-07-18T15:06:29.684] error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1",
    "[2025-07-18T15:06:29.684] error: Failed to invoke spank plugin stack",
    "srun: error: gpu-1-0: task 0: Exited with exit code 1",
]
SSH_KEY = [
    "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@",
    "@         WARNING: UNPROTECTED PRIVATE KEY FILE!          @",
    "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@",
    "Permissions 0644 for '/root/.ssh/id_rsa' are too open.",
    "This private key will be ignored.",
    'Unable to load host key "/root/.ssh/id_rsa": bad permissions',
    "sshd: no hostkeys available -- exiting.",
]
PMIX = [
    "It looks like pmix_init failed for some reason; your parallel process is",
    "likely to abort.  There are many reasons that a parallel process can",
    "  pmix_psec_base_open failed",
    "  --> Returned value -46 instead of PMIX_SUCCESS",
    "[pgp0202:12255] PMIX ERROR: NOT-FOUND in file server/pmix_server.c at line 229",
    "srun: error: pgp0202: task 0: Exited with exit code 1",
]
GLOO_LOOPBACK = [
    "terminate called after throwing an instance of 'gloo::IoException'",
    "  what():  [/opt/conda/conda-bld/pytorch_1544084119927/work/third_party/gloo/gloo/transport/tcp/"
    "pair.cc:724] connect [127.0.1.1]:3210: Connection refused",
    "Aborted (core dumped)",
]
FABRIC = [
    "/src/host/team/team_internal_nvls.cpp:254: non-zero status: 401 cuMemMap failed to map 274877906944 "
    "bytes handle at address: 0x1320000000 offset 0 on device 7",
    "[1891044.581319] NVRM: nvCheckOkFailedNoLog: Check failed: NVLink fabric state cached by the driver "
    "is out of sync [NV_ERR_FABRIC_STATE_OUT_OF_SYNC] (0x00000087) returned from status @ "
    "mem_multicast_fabric.c:2917",
]


def test_a_container_that_did_not_start_is_the_setup_not_the_task_exit(tmp_path):
    assert verdict(tmp_path, PYXIS) == (
        "infra.container_start_failed",
        "infrastructure",
        False,
        [],
    )


def test_an_ssh_key_others_can_read_stops_the_mpi_launch(tmp_path):
    assert verdict(tmp_path, SSH_KEY) == ("infra.ssh_key_rejected", "infrastructure", False, [])


def test_pmix_that_could_not_initialise_is_the_launch_configuration(tmp_path):
    assert verdict(tmp_path, PMIX) == ("infra.mpi_init_failed", "infrastructure", False, [])


def test_a_gloo_peer_on_a_loopback_address_is_interface_selection_not_a_dead_peer(tmp_path):
    assert verdict(tmp_path, GLOO_LOOPBACK) == ("infra.gloo_connect_failed", "infrastructure", False, [])


def test_a_fabric_state_out_of_sync_takes_the_node_out_like_a_fabric_manager_down(tmp_path):
    lines = [
        "Linux p5en-07 6.8.0-1015-aws #16-Ubuntu SMP Mon Aug 19 19:38:17 UTC 2024 x86_64 GNU/Linux",
        *FABRIC,
    ]
    assert verdict(tmp_path, lines) == (
        "gpu.fabric_state_out_of_sync",
        "system_software",
        True,
        ["p5en-07"],
    )


def test_a_nan_in_a_step_tables_columns_is_divergence(tmp_path):
    lines = [
        "step 10 | loss 2.6030 | grad_norm  9.9375",
        "step 11 | loss 2.3224 | grad_norm     nan",
        "step 12 | loss    nan | grad_norm     nan",
    ]
    assert verdict(tmp_path, lines) == ("framework.nan_loss", "application", False, [])


def test_a_finite_step_table_is_no_divergence(tmp_path):
    lines = ["step 10 | loss 2.6030 | grad_norm  9.9375", "step 11 | loss 2.3224 | grad_norm  0.8750"]
    assert verdict(tmp_path, lines)[0] is None


def test_an_older_nvml_library_or_nvidia_docker_1_reads_as_the_driver_mismatch(tmp_path):
    """NVIDIA/nvidia-docker#584: a package update left the libraries' symlinks on the old driver. The
    node is to be taken out though no line names it (the paste's ``$`` prompts carry no host)."""
    lines = [
        "$ nvidia-smi",
        "Failed to initialize NVML: Function Not Found",
        "$ sudo nvidia-docker run -it nvidia/cuda-ppc64le:8.0-cudnn6-devel-ubuntu16.04 nvidia-smi",
        "nvidia-docker | 2017/12/21 05:04:46 Error: nvml: Driver/library version mismatch",
    ]
    assert verdict(tmp_path, lines) == (
        "cuda.nvml_driver_mismatch",
        "system_software",
        False,
        ["unknown-node"],
    )


def test_a_container_toolkit_that_cannot_parse_the_hosts_imex_info_is_the_toolkit(tmp_path):
    """pytorch/test-infra#5852: nvidia-container-toolkit 1.17.0, pinned back to 1.16.2."""
    lines = [
        "docker: Error response from daemon: failed to create task for container: failed to create shim task: "
        "OCI runtime create failed: runc create failed: unable to start container process: error during "
        "container init: error running hook #0: error running hook: exit status 1, stdout: , stderr: "
        "Auto-detected mode as 'legacy'",
        "nvidia-container-cli: error parsing IMEX info: unsupported IMEX channel value: all: unknown.",
    ]
    assert verdict(tmp_path, lines) == ("cuda.container_cli_parse_error", "system_software", False, [])


def test_megatrons_lr_scheduler_against_its_checkpoint_is_the_jobs_configuration(tmp_path):
    lines = ["AnnealingLR: class input value 1e-05 and checkpointvalue 3e-05 for learning rate do not match"]
    assert verdict(tmp_path, lines) == ("framework.checkpoint_mismatch", "application", False, [])


def test_an_object_the_api_refuses_is_the_launchers_not_a_node(tmp_path):
    lines = [
        "metadata.labels: Invalid value:",
        '"iris-canary-mh-iris-canary-mh-cpu-erapids-20260317-2027-31f6be45":',
        "must be no more than 63 bytes",
    ]
    assert verdict(tmp_path, lines) == (
        "scheduler.k8s_object_invalid",
        "infrastructure",
        False,
        [],
    )


def test_an_nccl_plugin_that_cannot_load_its_libraries_is_the_image(tmp_path):
    """NVIDIA-NeMo/Megatron-Bridge#2824: the image's rdma-core shadows the one libefa needs."""
    lines = [
        "  NCCL INFO NET/Plugin: libnccl-net-ofi.so: /opt/rdma-core/build/lib/libibverbs.so.1: version "
        "`IBVERBS_PRIVATE_34' not found (required by",
        "  /usr/lib/x86_64-linux-gnu/libefa.so.1)",
        "  NCCL INFO NET/Plugin: Could not find: ofi",
    ]
    assert verdict(tmp_path, lines) == ("nccl.net_plugin_unloadable", "system_software", False, [])


def test_a_launcher_passing_an_argument_the_script_does_not_know_is_the_jobs_command_line(tmp_path):
    """FlagAI-Open/FlagAI#401: torch 2's launcher passes --local-rank, the script parses --local_rank."""
    lines = [
        "usage: aquila_chat.py [-h] [--local_rank LOCAL_RANK]",
        "aquila_chat.py: error: unrecognized arguments: --local-rank=1",
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 2) local_rank: 1 (pid: 4242) "
        "of binary: /usr/bin/python3",
    ]
    assert verdict(tmp_path, lines) == ("framework.argument_error", "application", False, [])


def test_efa_out_of_locked_memory_is_the_memlock_limit(tmp_path):
    """awslabs/awsome-distributed-ai#647: 65536 bytes until `ulimit -l unlimited`."""
    lines = [
        "Libfabric EFA provider has encountered an internal error:",
        "Libfabric error: (-12) Cannot allocate memory",
        "EFA internal error: (4112) Failure to post internal receive buffers",
        "Your application will now abort().",
    ]
    assert verdict(tmp_path, lines) == ("infra.memlock_limit", "infrastructure", False, [])


def test_an_account_quota_is_not_worth_a_rerun_but_missing_capacity_is(tmp_path):
    quota = (
        "ResourceLimitExceeded: An error occurred (ResourceLimitExceeded) when calling the CreateTrainingJob "
        "operation: The account-level service limit 'ml.p3.2xlarge for training job usage' is 0 Instances"
    )
    capacity = (
        "An error occurred (InsufficientInstanceCapacity) when calling the RunInstances operation (reached max "
        "retries: 1): We currently do not have sufficient g4dn.xlarge capacity in the Availability Zone you requested"
    )
    got = [verdict(tmp_path, [quota], "quota.log"), verdict(tmp_path, [capacity], "capacity.log")]
    assert got == [
        ("infra.object_store_error", "infrastructure", False, []),
        ("infra.object_store_error", "infrastructure", True, []),
    ]


def test_aws_batch_losing_the_jobs_instance_is_a_reclaim_not_a_fault(tmp_path):
    assert verdict(tmp_path, ["Status Reason: Host EC2 (instance i-0f1e2d3c4b5a69788) terminated."]) == (
        "scheduler.cloud_preemption",
        "infrastructure",
        True,
        [],
    )


def test_an_external_service_throttling_the_start_is_worth_a_later_restart(tmp_path):
    lines = [
        "[rank5]: huggingface_hub.utils._errors.HfHubHTTPError: 429 Client Error: Too Many Requests for url: "
        "https://huggingface.co/api/models/meta-llama/Llama-2-7b-hf",
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 5 (pid: 4242) "
        "of binary: /usr/bin/python3",
    ]
    assert verdict(tmp_path, lines) == (
        "infra.external_service_throttled",
        "infrastructure",
        True,
        [],
    )


def test_a_container_whose_command_is_not_in_the_image_is_the_jobs_image(tmp_path):
    """runc's exec error, read from the runtime's own text (not a thread): the image or the job's
    command, which a rerun starts the same way; a driver tool missing is still the node's runtime."""
    exec_error = (
        'Error: failed to start container "pytorch": Error response from daemon: OCI runtime create failed: '
        'container_linux.go:349: starting container process caused "exec: \\"torchrun\\": executable file not found '
        'in $PATH": unknown'
    )
    assert verdict(tmp_path, [exec_error]) == (
        "framework.container_command_missing",
        "application",
        False,
        [],
    )
    tool = '"nvidia-smi": executable file not found in $PATH: unknown'
    assert verdict(tmp_path, [tool])[0] == "infra.container_driver_tools_missing"


def test_docker_without_the_nvidia_runtime_is_the_nodes_container_stack(tmp_path):
    line = 'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].'
    rule, category, restartable, _ = verdict(tmp_path, [line])
    assert (rule, category, restartable) == ("cuda.container_gpu_init_failed", "system_software", True)


@pytest.mark.parametrize(
    "wrapper",
    [
        "subprocess.CalledProcessError: Command '['/opt/conda/bin/python', '-m', 'torch.distributed.run', "
        "'--nproc_per_node', '8', 'train.py']' returned non-zero exit status 1.",
        "subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py', '--local_rank=0']' died with "
        "<Signals.SIGKILL: 9>.",
    ],
)
def test_a_launchers_subprocess_failure_is_a_cascade_like_childfailederror(tmp_path, wrapper):
    """Python's subprocess reporting that the training command it ran failed: the child's own error,
    printed above it, is the root; alone it says only that something failed."""
    assert verdict(tmp_path, [wrapper]) == ("framework.subprocess_failed", "unknown", True, [])
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert verdict(tmp_path, [oom, wrapper])[0] == "cuda.out_of_memory"


def test_a_spawned_worker_that_died_is_a_cascade_and_a_sigkill_alone_the_hosts_memory(tmp_path):
    """torch.multiprocessing.spawn's report of a child's end reads as torchelastic's exit code line:
    behind the child's own error, and a SIGKILL alone as the OOM killer's (acumen#4)."""
    exited = "torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with exit code 1"
    assert verdict(tmp_path, [exited]) == ("framework.worker_process_died", "unknown", True, [])
    killed = "torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with signal SIGKILL"
    assert verdict(tmp_path, [killed]) == ("framework.worker_process_died", "application", False, [])
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert verdict(tmp_path, [oom, killed])[0] == "cuda.out_of_memory"
