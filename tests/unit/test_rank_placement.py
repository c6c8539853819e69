"""A rank-prefixed failure in a job's collected output is about the node its rank runs on.

srun gathers every rank's output on the batch host and a launcher pod can log for the others, so
the shipper's host is often not the failing node. NCCL's init line (``host:pid:tid [cudaDev] ... rank
R nranks N cudaDev D busId B - Init COMPLETE``) is printed by each rank's own process and says where
it runs; the correlator keeps it and attribution moves the culprit there.
"""

from __future__ import annotations

from datetime import timedelta

from schemas.incidents import Category
from streams.correlate.attribution import attribute
from streams.correlate.correlator import apply_topology, window_from
from streams.correlate.state import (
    JobTopology,
    RankPlace,
    infer_place,
    nccl_bus_to_pci,
    newer_placement,
    placements,
)
from tests.factories import T0, job_output, kernel_xid, nccl_init, nccl_timeout, one, slurmctld_allocate

NODES = ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
BUSES = ["18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000"]


def _inits(ranks: list[int], label: bool = False, host: str = "gpu-01") -> list:
    out = []
    for r in ranks:
        node, dev = NODES[r // 8], r % 8
        line = nccl_init(node, r, 32, dev, BUSES[dev], label=f"{r}: " if label else "")
        out.append(one(job_output(host, "42", T0, line)))
    return out


def _verdict(sigs: list, topo: JobTopology | None = None):
    places = placements(sigs)
    window = window_from([s for s in sigs if s.rule != "nccl.rank_placement"], "c1", "42", T0)
    assert window is not None
    return attribute(window, topo, places.get)


def test_busid_reads_back_as_the_pci_id_the_kernel_names():
    assert nccl_bus_to_pci("21000") == "0000:21:00"
    assert nccl_bus_to_pci("60") == "0000:00:06"  # the real H200: PCI 00000000:00:06.0
    assert nccl_bus_to_pci("1000a1000") == "1000:a1:00"
    assert nccl_bus_to_pci("not-hex") is None


def test_the_init_line_names_the_ranks_own_host_not_the_collecting_one():
    [sig] = _inits([22])
    assert (sig.rule, sig.node, sig.rank) == ("nccl.rank_placement", "gpu-03", 22)
    assert sig.attrs["nranks"] == 32 and sig.attrs["cuda_dev"] == 6 and sig.attrs["bus_id"] == "ba000"


def test_an_ecc_error_of_rank_22_collected_on_the_batch_host_blames_rank_22s_node_and_gpu():
    ecc = one(
        job_output(
            "gpu-01",
            "42",
            T0 + timedelta(minutes=5),
            "[rank22]:RuntimeError: CUDA error: uncorrectable ECC error encountered",
        )
    )
    assert ecc.node == "gpu-01"
    v = _verdict([*_inits([0, 8, 22]), ecc], JobTopology(job_id="42", nodes=NODES))
    assert v.category == Category.HARDWARE_GPU
    assert (v.culprit.node, v.culprit.gpu, v.culprit.rank) == ("gpu-03", "0000:ba:00", 22)
    assert v.root.attrs["logged_on"] == "gpu-01"


def test_without_a_placement_the_culprit_stays_where_the_line_was_logged():
    ecc = one(
        job_output(
            "gpu-01", "42", T0, "[rank22]:RuntimeError: CUDA error: uncorrectable ECC error encountered"
        )
    )
    v = _verdict([*_inits([0, 8]), ecc])
    assert v.culprit.node == "gpu-01"


def test_a_missing_ranks_node_is_implied_only_by_a_higher_rank_of_the_same_block():
    got = placements(_inits([16, 23]))
    placed = infer_place(20, got.get)
    assert placed is not None and (placed.node, placed.gpu, placed.inferred) == ("gpu-03", None, True)
    assert infer_place(24, got.get) is None  # rank 16 says nothing about where its block ends
    alone = {5: RankPlace(node="gpu-01", nranks=32, time=T0, cuda_dev=0, rank=5)}  # one GPU visible per rank
    assert infer_place(3, alone.get) is None


def test_a_kernel_root_keeps_its_own_node():
    xid = one(kernel_xid("gpu-02", 79, T0)).model_copy(update={"job_id": "42", "rank": 22})
    v = _verdict([*_inits([22]), xid])
    assert v.culprit.node == "gpu-02"


def test_a_placement_host_that_is_not_a_job_node_is_not_trusted_but_a_short_name_is_matched():
    ecc = one(
        job_output(
            "gpu-01", "42", T0, "[rank22]:RuntimeError: CUDA error: uncorrectable ECC error encountered"
        )
    )
    stranger = JobTopology(job_id="42", nodes=["a-01", "a-02"])
    assert _verdict([*_inits([22]), ecc], stranger).culprit.node == "gpu-01"
    fqdn = JobTopology(job_id="42", nodes=[f"{n}.cluster.local" for n in NODES])
    assert _verdict([*_inits([22]), ecc], fqdn).culprit.node == "gpu-03.cluster.local"


def test_srun_task_labels_count_as_ranks_only_where_nccls_lines_showed_task_equals_rank():
    line = "4: RuntimeError: CUDA error: uncorrectable ECC error encountered"
    ecc = one(job_output("gpu-01", "42", T0, line))
    assert ecc.rank is None and ecc.attrs["srun_task"] == 4
    # one task per GPU: "12: host:... rank 12" -> labels are ranks
    assert (
        _verdict(
            [*_inits([4, 12], label=True), ecc.model_copy(update={"attrs": {"srun_task": 12}})]
        ).culprit.node
        == "gpu-02"
    )
    # one torchrun per node: "1: host:... rank 12" -> task 1 is a node index, not rank 1
    node_labelled = [
        one(
            job_output(
                "gpu-01", "42", T0, nccl_init(NODES[r // 8], r, 32, r % 8, BUSES[r % 8], label=f"{r // 8}: ")
            )
        )
        for r in (1, 12)
    ]
    v = _verdict([*node_labelled, ecc.model_copy(update={"attrs": {"srun_task": 1}})])
    assert v.culprit.node == "gpu-01"  # left where it was logged


def test_the_world_communicators_placement_wins_over_a_subgroups():
    world = RankPlace(node="gpu-03", nranks=32, time=T0, rank=3)
    tp_group = RankPlace(node="gpu-01", nranks=8, time=T0 + timedelta(seconds=5), rank=3)
    assert not newer_placement(world, tp_group)
    assert newer_placement(world, tp_group.model_copy(update={"time": T0 + timedelta(hours=1)}))


SIX = [f"gpu-{i:04d}" for i in range(1462, 1468)]


def _timeouts(ranks: list[int]) -> list:
    return [
        one(nccl_timeout(SIX[r // 8], r, "42", T0 + timedelta(minutes=10, milliseconds=r)), offset=100 + r)
        for r in ranks
    ]


def _slurm_topology() -> JobTopology:
    topo, _ = apply_topology(None, one(slurmctld_allocate("42", "gpu-[1462-1467]", T0)), "c1")
    return topo


def test_the_one_rank_every_other_rank_waited_for_is_named_a_suspect_but_nothing_is_isolated():
    v = _verdict(_timeouts([r for r in range(48) if r != 36]), _slurm_topology())
    assert v.category == Category.UNKNOWN and v.isolate == []
    assert (v.culprit.node, v.culprit.rank) == ("gpu-1466", 36)  # Slurm block layout: ranks 32-39


def test_no_suspect_while_too_few_ranks_reported_or_the_silent_ones_span_nodes():
    assert _verdict(_timeouts([*range(30), 47]), _slurm_topology()).culprit is None
    assert _verdict(_timeouts([r for r in range(48) if r not in (3, 36)]), _slurm_topology()).culprit is None


def _collected_on_one_host(ranks: list[int]) -> list:
    return [
        one(nccl_timeout("gpu-1462", r, "42", T0 + timedelta(minutes=10, milliseconds=r)), offset=100 + r)
        for r in ranks
    ]


def test_an_unordered_kubernetes_topology_needs_init_lines_or_per_node_logs_to_name_a_suspect():
    pods = JobTopology(job_id="42", nodes=sorted(SIX))
    # a launcher pod that logs for every rank shows no blocks
    assert _verdict(_collected_on_one_host([r for r in range(48) if r != 36]), pods).culprit is None
    # each pod's log shipped from its own node: node gpu-1466 reported ranks 32-39 but 36
    v = _verdict(_timeouts([r for r in range(48) if r != 36]), pods)
    assert (v.culprit.node, v.culprit.rank) == ("gpu-1466", 36)
    inits = [
        one(job_output("gpu-1462", "42", T0, nccl_init(SIX[r // 8], r, 48, r % 8, BUSES[r % 8])))
        for r in (0, 39)
    ]
    v = _verdict([*inits, *_collected_on_one_host([r for r in range(48) if r != 36])], pods)
    assert v.culprit.node == "gpu-1466"  # rank 39 on cudaDev 7: ranks 32-39 share its node


def test_without_the_ranks_init_line_slurms_block_layout_places_it_once_the_world_size_is_known():
    line = "[rank22]:RuntimeError: CUDA error: uncorrectable ECC error encountered"
    ecc = one(job_output("gpu-01", "42", T0 + timedelta(minutes=5), line))
    topo, _ = apply_topology(None, one(slurmctld_allocate("42", "gpu-[01-04]", T0)), "c1")
    v = _verdict([*_inits([0, 3]), ecc], topo)  # ranks 0 and 3 say: 32 ranks, 8 per node
    assert (v.culprit.node, v.culprit.gpu) == ("gpu-03", None)
    unordered = JobTopology(job_id="42", nodes=NODES)  # a Kubernetes job's nodes carry no rank order
    assert _verdict([*_inits([0, 3]), ecc], unordered).culprit.node == "gpu-01"


def test_a_silent_last_rank_is_found_by_rounding_the_world_up_to_full_nodes():
    v = _verdict(_timeouts(list(range(47))), _slurm_topology())  # 6 nodes x 8: rank 47 never reported
    assert (v.culprit.node, v.culprit.rank) == ("gpu-1467", 47)


def test_ranks_reported_from_overlapping_blocks_name_no_node():
    pods = JobTopology(job_id="42", nodes=sorted(SIX))
    mixed = [
        one(nccl_timeout(SIX[(r // 8 + r % 2) % 6], r, "42", T0 + timedelta(minutes=10)), offset=100 + r)
        for r in range(48)
        if r != 36
    ]
    assert _verdict(mixed, pods).culprit is None


def test_a_monitored_barrier_logged_by_rank_zero_blames_the_missing_ranks_node():
    """Rank 0 coordinates the barrier and names the rank that never came; that rank's init line
    places it. The cause stays unknown (hung or died) and nothing is drained on it."""
    missed = one(
        job_output(
            "gpu-01",
            "42",
            T0 + timedelta(minutes=5),
            "[rank0]: RuntimeError: [Rank 0]: Rank 22 failed to pass monitoredBarrier in 30000 ms",
        )
    )
    assert (missed.rule, missed.rank) == ("nccl.monitored_barrier_missed", 22)
    v = _verdict([*_inits([0, 8, 22]), missed], JobTopology(job_id="42", nodes=NODES))
    assert v.category == Category.UNKNOWN and v.restartable and v.isolate == []
    assert (v.culprit.node, v.culprit.gpu, v.culprit.rank) == ("gpu-03", "0000:ba:00", 22)
