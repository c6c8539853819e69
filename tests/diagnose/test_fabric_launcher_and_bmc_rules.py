"""Formats the thread set's round 24 taught: InfiniBand retries running out as the other MPI stacks
word it, Slingshot's NIC queues, a node the launcher cannot reach, the BMC's DIMM events, and the
scheduler's side of a job that asked for what it cannot have.

The shapes are real threads' and centres' pages (users@open-mpi.org, openucx/ucx#844, NCAR's
Cheyenne bulletin, ALCF's Aurora known issues, NERSC's Perlmutter network page,
openstreetmap/operations#1364, NVIDIA/pyxis#127, cBio/cbio-cluster#251, mlcommons/training#824,
open-edge-platform/geti_v2#436); the verdict is what each settled, except where a test says the rule
reads the line otherwise."""

from __future__ import annotations

from tests.diagnose.logs import verdict, verdict_and_culprit

OPENIB = [
    "[[51298,1],2][btl_openib_component.c:3496:handle_wc] from ib7-bc2qq42-be01p02 to: 3 error polling LP CQ "
    "with status RETRY EXCEEDED ERROR status number 12 for wr_id 217ce00 opcode 0  vendor error 129 qp_idx 0",
    "--------------------------------------------------------------------------",
    "The InfiniBand retry count between two MPI processes has been",
    'exceeded.  "Retry count" is defined in the InfiniBand spec 1.2',
]
PYXIS_FAILED = [
    "slurmstepd: error: pyxis: child 10028 failed with error code: 1",
    "slurmstepd: error: pyxis: failed to import docker image",
    "slurmstepd: error: pyxis: couldn't start container",
    "slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1",
]


def test_open_mpis_openib_retry_exhaustion_is_the_fabric_and_names_the_host_that_saw_it(tmp_path):
    """A link or switch between two hosts: worth a restart, and no node is drained for it."""
    assert verdict_and_culprit(tmp_path, OPENIB) == (
        "network.openib_retry_exceeded",
        "hardware_network",
        True,
        [],
        "ib7-bc2qq42-be01p02",
    )


def test_a_flushed_work_request_after_the_retries_is_not_a_second_cause(tmp_path):
    flushed = (
        "[[51298,1],2][btl_openib_component.c:3496:handle_wc] from ib7-bc2qq42-be01p02 to: 3 error polling HP CQ "
        "with status WORK REQUEST FLUSHED ERROR status number 5 for wr_id 2c3d opcode 0  vendor error 244 qp_idx 0"
    )
    assert verdict(tmp_path, [*OPENIB, flushed])[0] == "network.openib_retry_exceeded"


def test_ucx_verbs_and_hpe_mpt_word_the_same_retry_exhaustion(tmp_path):
    """openucx/ucx#844 settled on a UCX teardown bug; the line alone reads as the fabric, which is
    what it means far more often (NCAR: two failed switches)."""
    ucx = [
        "Wed Jun 22 15:48:08 2016[1,43]<stdout>:[1466599688.714393] [vegas30:25196:0] rc_verbs_iface.c:47   "
        "UCX  ERROR Send completion with error: transport retry counter exceeded"
    ]
    mpt = ["Transport retry count exceeded on mlx5_0:1/IB"]
    assert verdict(tmp_path, ucx) == ("network.ucx_verbs_retry_exceeded", "hardware_network", True, [])
    assert verdict(tmp_path, mpt, "mpt.log") == ("network.mlx5_retry_exceeded", "hardware_network", True, [])


def test_slingshot_queue_overflow_is_the_providers_settings_and_drains_nothing(tmp_path):
    """The line names the host whose NIC overflowed; the fix is FI_CXI_* settings for every run."""
    lines = [
        "libfabric:16642:1701636928::cxi:core:cxip_cq_eq_progress():531<warn> x4204c1s3b0n0: "
        "Cassini Event Queue overflow detected.",
        "MPICH ERROR [Rank 0] [job id 1] [Mon Dec  4 10:15:28 2023] [x4204c1s3b0n0] - Abort(1) (rank 0 in comm 0): "
        "application called MPI_Abort(MPI_COMM_WORLD, 1) - process 0",
    ]
    assert verdict(tmp_path, lines) == ("network.cxi_resources_exhausted", "system_software", False, [])


def test_a_node_the_launcher_cannot_reach_is_drained_by_its_short_name(tmp_path):
    lines = [
        "ping failed on x4304c1s6b0n0: No reply from x4307c2s6b0n0.hostmgmt2307.cm.aurora.alcf.anl.gov after 87s"
    ]
    assert verdict_and_culprit(tmp_path, lines) == (
        "host.pals_node_unreachable",
        "hardware_host",
        True,
        ["x4307c2s6b0n0"],
        "x4307c2s6b0n0",
    )


def test_the_bmcs_uncorrectable_dimm_event_drains_the_host_it_was_read_from(tmp_path):
    lines = ["Uncorrectable ECC / other uncorrectable memory error @P2-DIMMH2(CPU2) - Assertion"]
    rule, category, restartable, isolate = verdict(tmp_path, lines)
    assert (rule, category, restartable) == ("host.bmc_uncorrectable_memory", "hardware_host", True)
    assert len(isolate) == 1  # the file names no host: diagnose's stand-in for the one it came from


def test_the_bmcs_correctable_event_is_not_a_cause(tmp_path):
    lines = ["Correctable ECC / other correctable memory error @P1-DIMMA1 - Assertion"]
    assert verdict(tmp_path, lines)[0] != "host.bmc_uncorrectable_memory"


def test_a_squashfs_file_given_as_a_registry_image_is_the_jobs_command_line(tmp_path):
    lines = ["pyxis: importing docker image: hello-world.sqsh", *PYXIS_FAILED]
    assert verdict(tmp_path, lines) == ("infra.pyxis_squashfs_as_registry_image", "application", False, [])


def test_a_registry_image_that_fails_to_import_stays_the_container_stack(tmp_path):
    lines = ["pyxis: importing docker image: nvcr.io#nvidia/pytorch:24.01-py3", *PYXIS_FAILED]
    # pyxis's import failure comes before its "couldn't start container" and says more (2026-12-05)
    assert verdict(tmp_path, lines)[:3] == ("infra.pyxis_image_import_failed", "infrastructure", False)


def test_moabs_memory_kill_is_the_jobs_request_like_slurms(tmp_path):
    lines = ["job 3132467 exceeded MEM usage hard limit (2528 > 1126)"]
    assert verdict(tmp_path, lines) == ("scheduler.moab_memory_limit", "application", False, [])


def test_a_crash_looping_device_plugin_explains_the_pods_that_find_no_gpu(tmp_path):
    lines = [
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available: 1 No "
        "preemption victims found for incoming pod.",
        "back-off 5m0s restarting failed container=nvidia-device-plugin-ctr "
        "pod=nvidia-device-plugin-daemonset-wqst8_kube-system(441ce715-5913-4726-a37b-66da4a839703)",
    ]
    assert verdict(tmp_path, lines) == ("scheduler.k8s_gpu_stack_pod_crashing", "system_software", False, [])


def test_a_training_pod_in_back_off_is_not_the_gpu_stack(tmp_path):
    lines = [
        "  Warning  BackOff    3m (x12 over 10m)  kubelet  Back-off restarting failed container pytorch in pod "
        "train-worker-0_default(0c1d)"
    ]
    assert verdict(tmp_path, lines)[0] != "scheduler.k8s_gpu_stack_pod_crashing"


def test_asking_for_a_node_no_partition_has_is_the_jobs_request(tmp_path):
    """mlcommons/training#824: a launcher that asked 4-GPU GB200 nodes for 8 GPUs each."""
    lines = ["sbatch: error: Batch job submission failed: Requested node configuration is not available"]
    assert verdict(tmp_path, lines) == ("scheduler.slurm_request_rejected", "application", False, [])
