"""A node fault that names no node, in a job that ran on one node, is that node's
(``attribution.on_the_only_node``): cBio's PBS mail (cbio#187 in the given set) names the one host
in ``Exec host:`` and the failure as "job preempted (node failure)". The rule still decides what is
drained: nothing, on a mail, whose shipper is not the node."""

from __future__ import annotations

from pathlib import Path

from streams.diagnose.driver import summary
from tests.diagnose.logs import diagnosed

MAIL = [
    "PBS Job Id: 2600365.mskcc-fe1.local",
    "Job Name:   STDIN",
    "Exec host:  gpu-2-17/5",
    "job deleted",
    "Job deleted at request of root@mskcc-fe1.local",
    "job preempted (node failure)",
]


def _verdict(tmp_path: Path, lines: list[str]) -> dict[str, object]:
    return summary(diagnosed(tmp_path, lines, "mail.txt"))


def test_a_pbs_node_failure_of_a_one_host_job_names_that_host(tmp_path: Path):
    v = _verdict(tmp_path, MAIL)
    assert (v["category"], v["culprit"], v["isolate"]) == ("hardware_host", "gpu-2-17", [])


def test_a_job_on_several_hosts_leaves_the_node_open(tmp_path: Path):
    v = _verdict(tmp_path, [line.replace("gpu-2-17/5", "gpu-2-17/5+gpu-2-18/0") for line in MAIL])
    assert (v["category"], v["culprit"], v["isolate"]) == ("hardware_host", None, [])


def test_a_fault_of_no_node_stays_without_one(tmp_path: Path):
    # an application error in a one-host job: nothing to isolate, whatever the job ran on
    v = _verdict(
        tmp_path, [*MAIL[:3], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    )
    assert (v["category"], v["isolate"]) == ("application", [])


def test_a_slurm_allocation_of_one_node_names_the_gpu_s_node(tmp_path: Path):
    lines = [
        "[2026-11-29T18:40:01.123] sched: Allocate JobId=25 NodeList=gpu-07 #CPUs=8 Partition=gpu",
        "[Sat Feb 13 22:40:04 2021] NVRM: Xid (PCI:0000:db:00): 79, pid=0, GPU has fallen off the bus.",
    ]
    v = _verdict(tmp_path, lines)
    assert (v["category"], v["culprit"], v["isolate"]) == (
        "hardware_gpu",
        "gpu-07 GPU 0000:db:00",
        ["gpu-07"],
    )
