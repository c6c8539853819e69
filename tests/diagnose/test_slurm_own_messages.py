"""Slurm's and pyxis/enroot's own failure messages (slurmstepd, srun's step launch, the PMIx plugin,
slurmd/slurmctld, NVIDIA/pyxis and NVIDIA/enroot source), read against the catalog on 2026-12-05:
298 rendered, 236 gave no signal. Most of those are daemon-side detail that a job's log never shows or
that a following line explains; these tests pin the job-ending ones that now read.
"""

from __future__ import annotations

import pytest

from tests.diagnose.logs import verdict, verdict_and_culprit

OOM = (
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity "
    "of 79.10 GiB of which 1.06 GiB is free."
)


@pytest.mark.parametrize(
    "line",
    [
        "srun: error: step_launch_notify_io_failure: aborting, io error with slurmstepd on node 3",
        "srun: error: Aborting, io error and missing step on node 3",
        "srun: error: Step StepId=4242.0 missing from node(s) gpu-node-17",
        "srun: error: Cannot communicate with node 5.  Aborting job.",
    ],
)
def test_srun_losing_a_node_mid_step_reads_like_a_node_failure(tmp_path, line):
    got = verdict(tmp_path, [line])
    want = verdict(tmp_path, ["srun: error: Node failure on gpu-node-17"])
    assert got[0] == "scheduler.srun_lost_node"
    assert got[1:3] == want[1:3] == ("hardware_host", True)


def test_a_pmix_fence_timeout_is_the_launch_unless_a_rank_says_why_it_never_came(tmp_path):
    fence = (
        "slurmstepd: error:  mpi/pmix_v4: pmixp_coll_ring_reset_if_to: gpu-node-17 [1]: pmixp_coll_ring.c:742: "
        "0x1549a8003c10: collective timeout seq=0"
    )
    assert verdict(tmp_path, [fence])[:3] == ("infra.pmix_collective_timeout", "infrastructure", True)
    assert verdict(tmp_path, [fence, OOM])[0] == "cuda.out_of_memory"


@pytest.mark.parametrize(
    ("status", "restartable"),
    [
        ("401 Unauthorized", False),
        ("404 Not Found", False),
        ("429 Too Many Requests", True),
        ("503 Service Unavailable", True),
    ],
)
def test_enroots_registry_status_says_whether_the_image_import_is_worth_a_retry(
    tmp_path, status, restartable
):
    lines = [
        "slurmstepd: error: pyxis: failed to import docker image",
        "slurmstepd: error: pyxis: printing enroot log file:",
        f"slurmstepd: error: pyxis:     [ERROR] URL https://nvcr.io/v2/nvidia/pytorch/manifests/24.05-py3 returned "
        f"error code: {status}",
    ]
    assert verdict(tmp_path, lines)[:3] == ("infra.enroot_registry_error", "infrastructure", restartable)


def test_pyxis_alone_says_the_image_import_failed(tmp_path):
    assert verdict(tmp_path, ["slurmstepd: error: pyxis: failed to import docker image"])[:3] == (
        "infra.pyxis_image_import_failed",
        "infrastructure",
        False,
    )


def test_slurms_uncorrectable_memory_banner_is_the_nodes_ram(tmp_path):
    line = (
        "slurmstepd: error: *** JOB 4242 ON gpu-node-17 UNCORRECTABLE MEMORY ERROR AT 2026-12-05T10:11:12 ***"
    )
    rule, category, restartable, isolate = verdict(tmp_path, [line])
    assert (rule, category, restartable) == ("scheduler.slurm_uncorrectable_memory", "hardware_host", True)
    assert isolate


@pytest.mark.parametrize(
    "line",
    [
        "[2026-12-05T10:11:12.123] error: validate_node_specs: Prolog or job env setup failure on node gpu-node-17, "
        "draining the node",
        "[2026-12-05T10:11:12.123] error: Prolog failed on node gpu-node-17",
        "[2026-12-05T10:11:12.123] error: Waiting for JobId=4242 prolog has failed, giving up after 50 sec",
        "srun: error: srun prolog failed rc = 1. Aborting step.",
    ],
)
def test_each_daemons_record_of_a_failed_prolog_reads_as_the_prolog(tmp_path, line):
    assert verdict(tmp_path, [line])[:3] == ("scheduler.slurm_prolog_failure", "infrastructure", True)


def test_processes_the_cgroup_could_not_kill_read_like_stepd_terminated(tmp_path):
    line = "slurmstepd: error: Container 73120 in cgroup plugin has 5 processes, giving up after 63 sec"
    assert verdict(tmp_path, [line])[:3] == ("scheduler.slurm_kill_task_failed", "hardware_host", True)


@pytest.mark.parametrize("kind", ["memory", "virtual memory"])
def test_newer_slurms_stepid_memory_kill_is_the_jobs_request(tmp_path, kind):
    line = f"slurmstepd: error: StepId=4242.0 exceeded {kind} limit (34359738368 > 32212254720), being killed"
    assert verdict(tmp_path, [line])[:3] == ("host.slurm_memory_limit", "application", False)


def test_a_pmix_fence_timeout_names_the_one_node_it_was_still_waiting_for(tmp_path):
    """The stepd that logs the timeout is one that arrived: the suspect is the node the fence's
    ``wait contrib`` line names, and nobody when it names several (a hostlist) or none."""
    fence = (
        "slurmstepd: error:  mpi/pmix_v4: pmixp_coll_ring_reset_if_to: gpu-node-17 [1]: pmixp_coll_ring.c:742: "
        "0x1549a8003c10: collective timeout seq=0"
    )
    state = "slurmstepd: error:  mpi/pmix_v4: pmixp_coll_ring_log: gpu-node-17 [1]: pmixp_coll_ring.c:835: \t\t wait contrib: "
    got = verdict_and_culprit(tmp_path, [fence, state + "gpu-node-23"])
    assert got[:4] == ("infra.pmix_collective_timeout", "infrastructure", True, [])
    assert "gpu-node-23" in str(got[4])
    assert verdict_and_culprit(tmp_path, [fence, state + "gpu-node-[23-24]"])[4] is None
    assert verdict_and_culprit(tmp_path, [fence])[4] is None
