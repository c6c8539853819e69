"""What the surviving ranks say about the failing one: the peer host NCCL names when a connection
closes (where an unlabelled root came from) and the NCCL release PyTorch appends to every NCCL
error (a node that loads another release than the rest of the job)."""

from __future__ import annotations

from datetime import timedelta

from schemas.incidents import Category
from streams.correlate.attribution import attribute
from streams.correlate.correlator import apply_topology, window_from
from streams.correlate.state import JobTopology, placements
from tests.factories import T0, job_output, nccl_init, one, signals, slurmctld_allocate

BATCH = "gpu-01"  # srun gathers every rank's output here


def _topology() -> JobTopology:
    topo, _ = apply_topology(None, one(slurmctld_allocate("42", "gpu-[01-04]", T0)), "c1")
    return topo


def _lines(*texts: str, at_s: float = 0.0, host: str = BATCH) -> list:
    out = []
    for i, text in enumerate(texts):
        out += signals(job_output(host, "42", T0 + timedelta(seconds=at_s, milliseconds=i), text), offset=i)
    return out


def _peer_closed(peer: str, n: int = 3) -> list:
    return _lines(
        *[f"socketProgress: Connection closed by remote peer {peer}<4068{i}>" for i in range(n)], at_s=2
    )


ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"


def _verdict(sigs: list, topo: JobTopology | None):
    window = window_from(sigs, "c1", "42", T0)
    assert window is not None
    return attribute(window, topo)


def test_an_unlabelled_root_collected_on_the_batch_host_goes_to_the_peer_every_survivor_names():
    v = _verdict([*_lines(ECC), *_peer_closed("gpu-03")], _topology())
    assert v.category == Category.HARDWARE_GPU
    assert v.culprit.node == "gpu-03" and v.root.attrs["logged_on"] == BATCH
    assert v.isolate == ["gpu-03"]


def test_survivors_that_name_different_peers_or_a_host_outside_the_job_move_nothing():
    mixed = [
        *_peer_closed("gpu-03", 2),
        *_lines("socketProgress: Connection closed by remote peer gpu-04<1>"),
    ]
    assert _verdict([*_lines(ECC), *mixed], _topology()).culprit.node == BATCH
    assert _verdict([*_lines(ECC), *_peer_closed("login-7")], _topology()).culprit.node == BATCH


def test_a_root_placed_by_its_ranks_own_init_line_is_not_moved_by_the_peer_evidence():
    init = nccl_init("gpu-02", 5, 32, 5, "9a000")
    sigs = [*_lines(f"[rank5]:{ECC}"), *_peer_closed("gpu-03")]
    places = placements(_lines(init))
    window = window_from(sigs, "c1", "42", T0)
    assert window is not None
    v = attribute(window, _topology(), places.get)
    assert v.culprit.node == "gpu-02" and v.culprit.rank == 5


def _watchdog(task: int, rank: int) -> str:
    return (
        f"{task}: [E ProcessGroupNCCL.cpp:475] [Rank {rank}] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=66229, OpType=BROADCAST, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600190 "
        "milliseconds before timing out."
    )


def test_an_srun_task_is_placed_by_slurms_block_layout_once_labelled_lines_show_tasks_are_ranks():
    cascade = _lines(*[_watchdog(r, r) for r in range(32) if r != 24], at_s=600)
    v = _verdict([*_lines(f"24: {ECC}"), *cascade], _topology())
    assert v.culprit.node == "gpu-04" and v.isolate == ["gpu-04"]  # 32 ranks over 4 nodes: 24-31


def test_no_block_layout_when_task_ids_are_not_ranks_or_the_world_does_not_divide_over_the_nodes():
    one_per_node = _lines(*[_watchdog(r % 4, r) for r in range(32) if r != 24], at_s=600)
    assert _verdict([*_lines(f"24: {ECC}"), *one_per_node], _topology()).culprit.node == BATCH
    uneven = _lines(*[_watchdog(r, r) for r in range(30)], at_s=600)  # 30 ranks heard: not 4 x 8
    assert _verdict([*_lines(f"24: {ECC}"), *uneven], _topology()).culprit.node == BATCH


def _internal(version: str) -> str:
    return (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        f"ProcessGroupNCCL.cpp:2027, internal error - please report this issue to the NCCL developers, "
        f"NCCL version {version}"
    )


def _remote(rank: int, version: str) -> str:
    return (
        f"[rank{rank}]:[E1117 16:53:53.1 ProcessGroupNCCL.cpp:552] [Rank {rank}] Collective WorkNCCL(SeqNum=9, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) raised the following async exception: "
        f"NCCL error: remote process exited or there was a network error, NCCL version {version}"
    )


def test_a_node_that_loads_another_nccl_release_than_the_rest_of_the_job_is_excluded_and_the_job_restarts():
    sigs = [
        *_lines(_internal("2.18.1"), host="gpu-02"),
        *_lines(*[_remote(r, "2.21.5") for r in (9, 17, 25)]),
    ]
    v = _verdict(sigs, _topology())
    assert (v.category, v.restartable, v.isolate) == (Category.SYSTEM_SOFTWARE, True, ["gpu-02"])
    assert v.confidence >= 0.85 and "2.21.5" in v.root.summary


def test_an_internal_error_of_the_same_release_everywhere_is_not_the_nodes_fault():
    sigs = [
        *_lines(_internal("2.21.5"), host="gpu-02"),
        *_lines(*[_remote(r, "2.21.5") for r in (9, 17, 25)]),
    ]
    v = _verdict(sigs, _topology())
    assert (v.category, v.restartable, v.isolate) == (Category.SYSTEM_SOFTWARE, False, [])


def test_a_finished_log_of_victims_only_names_the_dead_peer_as_a_suspect_and_isolates_nothing():
    # pt-150916 in the given set: every survivor's NCCL error and the peer they all say went away
    window = window_from(_peer_closed("gpu-03"), "c1", "42", T0)
    assert window is not None
    v = attribute(window, _topology(), finished=True)
    assert v is not None
    assert (v.category, v.culprit.node if v.culprit else None, v.isolate) == (Category.UNKNOWN, "gpu-03", [])
    # the stream's verdict on the same window names no suspect (docstring of ``attribute``)
    live = attribute(window, _topology())
    assert live is not None and live.culprit is None
    mixed = [
        *_peer_closed("gpu-03", 2),
        *_lines("socketProgress: Connection closed by remote peer gpu-04<1>"),
    ]
    window = window_from(mixed, "c1", "42", T0)
    assert window is not None
    v = attribute(window, _topology(), finished=True)
    assert v is not None and v.culprit is None  # survivors that disagree name nobody
