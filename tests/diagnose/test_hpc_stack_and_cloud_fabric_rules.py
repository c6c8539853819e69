"""Formats the thread set's round 25 taught: what HPE's MPI stack (Cray MPICH, Cray PMI, PALS,
Slingshot's cxi) prints when a job cannot start or run, containers that fail for a reason pyxis
prints after its own summary, and AWS's EFA stack seen from NCCL and Kubernetes.

The shapes are centres' known-issue pages and real threads' (OLCF's PyTorch on Frontier, ALCF's
Aurora, CSCS's Alps, LUMI; awslabs/awsome-distributed-ai#284, NVIDIA/aicr#2439,
aws/sagemaker-hyperpod-cli#367, aws/aws-ofi-nccl#803, aws/aws-parallelcluster#6777,
microsoft/superbenchmark#476, SemiAnalysisAI/InferenceX#1477); the verdict is what each settled,
except where a test says the rule reads the line otherwise."""

from __future__ import annotations

import pytest

from tests.diagnose.logs import verdict, verdict_and_culprit

PYXIS_START_FAILED = [
    "slurmstepd: error: pyxis: container start failed with error code: 1",
    "slurmstepd: error: pyxis: printing engine log file:",
]
PYXIS_GAVE_UP = [
    "slurmstepd: error: pyxis: couldn't start container",
    "slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1",
    "srun: error: nid001234: task 0: Exited with exit code 1",
]


def test_a_rank_bound_across_numa_domains_is_the_jobs_launch(tmp_path):
    lines = [
        "MPICH ERROR: Unable to use a NIC_POLICY of 'NUMA'. Rank 4 is not confined to a single NUMA node.  "
        "There are 4 numa_nodes detected (rc=0).",
        "MPICH ERROR [Rank 0] [job id 2853270.0] [Fri Dec 13 13:41:36 2024] [frontier05084] - Abort(2665871) "
        "(rank 0 in comm 0): Fatal error in PMPI_Init_thread: Other MPI error, error stack:",
    ]
    assert verdict(tmp_path, lines) == ("network.mpich_nic_policy_numa", "application", False, [])


def test_gpu_aware_mpi_without_the_gtl_library_is_the_jobs_build(tmp_path):
    lines = [
        "MPICH ERROR [Rank 0] [job id 410301.1] [Thu Feb 13 12:42:18 2025] [nid005414] - Abort(-1) (rank 0 in "
        "comm 0): MPIDI_CRAY_init: GPU_SUPPORT_ENABLED is requested, but GTL library is not linked",
    ]
    assert verdict(tmp_path, lines) == ("network.mpich_gtl_not_linked", "application", False, [])


@pytest.mark.parametrize(
    ("rule", "line"),
    [
        ("network.cxi_map_failed", "cxil_map: write error"),
        (
            "network.mpich_thread_mutex_assertion",
            "Assertion failed [...]: (&MPIR_THREAD_GLOBAL_ALLFUNC_MUTEX)->count == 0",
        ),
        ("network.cray_pmi_af_in_use", "[unset]:_pmi_set_af_in_use:PMI ERROR"),
    ],
)
def test_the_mpi_librarys_own_faults_are_system_software_and_drain_nothing(tmp_path, rule, line):
    assert verdict(tmp_path, [line]) == (rule, "system_software", False, [])


def test_a_node_pals_finds_rebooted_is_drained_and_the_job_restarted(tmp_path):
    lines = ["ping failed on x4616c0s4b0n0: Application 047a3c9f-fb41-4595-a2ad-4a4d0ec1b6c1 not found"]
    assert verdict_and_culprit(tmp_path, lines) == (
        "host.pals_node_rebooted",
        "hardware_host",
        True,
        ["x4616c0s4b0n0"],
        "x4616c0s4b0n0",
    )


def test_pals_out_of_vnis_is_the_launch_settings_not_the_node(tmp_path):
    lines = ["start failed on x4102c5s2b0n0: No VNIs available in internal allocator"]
    assert verdict(tmp_path, lines) == ("scheduler.pals_no_vnis", "infrastructure", False, [])


def test_a_network_nccl_has_no_plugin_for_explains_the_invalid_usage_that_follows(tmp_path):
    """NCCL's WARN comes before the caller's error in a real log (CSCS's page quotes them the other
    way round, and read in that order the invalid usage stays the root)."""
    lines = [
        "nid006352:34157:34217 [1] net.cc:626 NCCL WARN Error: network AWS Libfabric not found.",
        "nid006352: Test NCCL failure common.cu:958 'invalid usage (run with NCCL_DEBUG=WARN for details)",
    ]
    assert verdict(tmp_path, lines) == ("nccl.net_not_found", "system_software", False, [])


def test_a_node_that_does_not_know_the_users_id_is_drained_behind_pyxiss_summary(tmp_path):
    lines = [
        *PYXIS_START_FAILED,
        "slurmstepd: error: pyxis:     id: cannot find name for user ID 42",
        *PYXIS_GAVE_UP,
    ]
    rule, category, restartable, isolate = verdict(tmp_path, lines)
    assert (rule, category, restartable) == ("infra.container_user_unknown_on_node", "infrastructure", True)
    assert len(isolate) == 1


def test_an_image_without_glibcs_ldconfig_is_the_jobs_image_behind_pyxiss_summary(tmp_path):
    lines = [
        *PYXIS_START_FAILED,
        "slurmstepd: error: pyxis:     [ERROR] Failed to refresh the dynamic linker cache",
        "slurmstepd: error: pyxis:     [ERROR] /etc/enroot/hooks.d/87-slurm.sh exited with return code 1",
        *PYXIS_GAVE_UP,
    ]
    assert verdict(tmp_path, lines) == ("infra.enroot_ldconfig_failed", "application", False, [])


def test_pyxiss_summary_alone_still_says_the_container_did_not_start(tmp_path):
    assert verdict(tmp_path, [*PYXIS_START_FAILED, *PYXIS_GAVE_UP])[:3] == (
        "infra.container_start_failed",
        "infrastructure",
        False,
    )


def test_a_node_where_enroot_cannot_set_capabilities_is_drained_and_the_job_rerun(tmp_path):
    """InferenceX#1467 and #1477: every job sent to one node failed so, the image fine elsewhere. The
    program's name in front of the line is not taken for the node; pdsh's is."""
    lines = ["chi-mi325x-pod1-121: enroot-aufs2ovlfs: failed to set capabilities: Operation not permitted"]
    assert verdict_and_culprit(tmp_path, lines) == (
        "infra.enroot_setcap_denied",
        "infrastructure",
        True,
        ["chi-mi325x-pod1-121"],
        "chi-mi325x-pod1-121",
    )


def test_a_prolog_that_hung_is_the_nodes_prolog(tmp_path):
    """aws-parallelcluster#6777 settled on a health check too slow for the prolog's timeout on every
    node (not restartable); the line alone reads as one node's prolog, as a failed one does."""
    lines = ["slurmstepd: error: Prolog hung on node queue1-st-p5-1"]
    assert verdict(tmp_path, lines)[:3] == ("scheduler.slurm_prolog_failure", "infrastructure", True)


@pytest.mark.parametrize(
    ("rule", "line", "category"),
    [
        (
            "network.ofi_gdr_unavailable",
            "ip-10-1-2-3:1234:1290 [0] NCCL WARN NET/OFI GDR disabled on GDR-supported instance type p5.48xlarge",
            "system_software",
        ),
        (
            "network.efa_device_plugin_no_devices",
            "2026/02/03 15:23:32 Error to get IB device: %v. No valid EFA devices found",
            "infrastructure",
        ),
        (
            "nccl.net_plugin_unloadable",
            "version `EFA_1.2' not found (required by /opt/amazon/efa/lib/libfabric.so.1) No plugin found "
            "(libnccl-net.so), using internal implementation",
            "system_software",
        ),
    ],
)
def test_efa_problems_read_as_the_node_stack_or_the_clusters_set_up(tmp_path, rule, line, category):
    assert verdict(tmp_path, [line]) == (rule, category, False, [])


def test_libfabrics_tcp_provider_is_only_a_lead(tmp_path):
    tcp = "6f2d8a82d208:1287:1328 [0] NCCL INFO NET/OFI Selected Provider is tcp (found 1 nics)"
    assert verdict(tmp_path, [tcp]) == ("network.ofi_tcp_provider", "infrastructure", False, [])
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert verdict(tmp_path, [tcp, oom], "oom.log")[0] == "cuda.out_of_memory"


def test_an_undefined_nccl_symbol_quoted_alone_is_a_library_mismatch(tmp_path):
    assert verdict(tmp_path, ["undefined symbol: ncclGetLastError"]) == (
        "framework.undefined_symbol",
        "system_software",
        False,
        [],
    )
