"""Nodes of one job with and without an NCCL network plugin (``attribution.plugin_skew``): the
nodes' software stacks differ, and ranks that pick different transports cannot talk. The given
corpus's nccl-1634 is two such lines from a job that hung whenever it mixed the nodes."""

from __future__ import annotations

from pathlib import Path

from streams.diagnose.driver import summary
from tests.diagnose.logs import diagnosed

MISSING = "HGX-H100-11:18226:18274 [5] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin."
LOADED = "HGX-H100-04:589474:589541 [0] NCCL INFO Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so"
LOADED_BY_NAME = (
    "HGX-H100-05:589474:589541 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)"
)
TIMEOUT = (
    "[rank3]:[E ProcessGroupNCCL.cpp:563] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=2481, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600031 "
    "milliseconds before timing out."
)


def test_a_node_without_the_plugin_others_load_is_the_software_stacks_fault(tmp_path: Path):
    v = summary(diagnosed(tmp_path, [MISSING, LOADED]))
    assert (v["category"], v["restartable"], v["isolate"], v["culprit"]) == (
        "system_software",
        False,
        [],
        "HGX-H100-11",
    )
    assert "HGX-H100-04" in str(v["root_cause"]["summary"])  # type: ignore[index]


def test_the_skew_explains_the_timeouts_it_caused(tmp_path: Path):
    v = summary(diagnosed(tmp_path, [MISSING, LOADED_BY_NAME, TIMEOUT]))
    assert (v["category"], v["restartable"]) == ("system_software", False)


def test_every_node_on_the_internal_plugin_is_no_skew(tmp_path: Path):
    other = MISSING.replace("HGX-H100-11", "HGX-H100-04")
    assert summary(diagnosed(tmp_path, [MISSING, other]))["category"] == "unknown"
    # and the timeouts stay the cascade they are
    v = summary(diagnosed(tmp_path, [MISSING, other, TIMEOUT]))
    assert v["category"] == "unknown"


def test_a_real_root_beats_the_skew(tmp_path: Path):
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert summary(diagnosed(tmp_path, [MISSING, LOADED, oom]))["category"] == "application"
