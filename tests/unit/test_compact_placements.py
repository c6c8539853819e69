"""Rank placements in their compact form (``RankPlacement`` / ``PlacementBatch``): the streaming
stage's carrier for NCCL's init lines, which are about half of a fleet's extracted facts.

What a placement must keep is what its ``nccl.rank_placement`` signal said: the same id, node, rank
and GPU, and in the sink the same row; the packing follows the partitions like ``SignalBatch``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from connectors.kafka_partitioner import KeyPartitioner
from connectors.sinks import rows
from connectors.sinks.sink import ClickHouseSink
from schemas import codec
from schemas.signals import MAX_PLACEMENTS_PER_BATCH, PlacementBatch, RankPlacement
from schemas.topics import TopicCatalog
from streams.correlate.state import placement_from, placement_of
from streams.extract.extractor import Extractor, Position
from streams.extract.normalize import normalize
from streams.extract.record import extract_record
from streams.signal_batches import is_placement_batch, pack_placements
from tests.factories import T0, job_output, nccl_init

EXTRACTOR = Extractor()
LINES = [
    nccl_init("gpu-03", 22, 32, 6, "ba000"),
    nccl_init("gpu-02", 12, 32, 4, "9a000", label="12: "),  # srun --label's task id
    "[rank7]:gke-a3-pool-036i:3128172:3128531 [7] NCCL INFO comm 0x961116aa4da2 rank 7 nranks 64 "
    "cudaDev 7 nvmlDev 7 busId db000 commId 0x633a780f8792d9c3 - Init COMPLETE",
    "9dc3329bb310:48:48 [0] NCCL INFO comm 0x55cd529909c0 rank 0 nranks 1 cudaDev 0 busId 21000 - Init COMPLETE",
]


@pytest.mark.parametrize("text", LINES)
def test_a_compact_placement_stands_for_exactly_the_signal_its_line_gives(text: str):
    line = normalize(job_output("gpu-01", "42", T0, text))
    pos = Position("t.raw.logs", 3, 77)
    [signal] = EXTRACTOR.extract(line, T0 + timedelta(seconds=5), pos)
    placed: list[RankPlacement] = []
    assert EXTRACTOR.extract(line, T0 + timedelta(seconds=5), pos, placements=placed) == []
    [placement] = placed
    assert placement.as_signal(T0 + timedelta(seconds=5)) == signal
    assert placement_from(placement) == placement_of(signal)


def test_other_signals_of_a_record_are_returned_as_they_were():
    line = normalize(
        job_output("gpu-01", "42", T0, "[rank3]:RuntimeError: CUDA error: an illegal memory access")
    )
    placed: list[RankPlacement] = []
    assert EXTRACTOR.extract(line, T0, Position("t", 0, 1), placements=placed) == EXTRACTOR.extract(
        line, T0, Position("t", 0, 1)
    )
    assert placed == []


def test_a_record_naming_its_job_places_its_ranks_under_that_job_and_sends_no_signal_for_them():
    raw = job_output("gpu-01", "42", T0, nccl_init("gpu-03", 22, 32, 6, "ba000"))
    placed: list[RankPlacement] = []
    assert extract_record(EXTRACTOR, raw, "gpu-01", "t", 0, 9, T0, placements=placed) == []
    assert [(p.job_id, p.node, p.rank, p.source.offset) for p in placed] == [("42", "gpu-03", 22, 9)]


def test_a_dead_lettered_record_places_nothing():
    placed: list[RankPlacement] = []
    [out] = extract_record(EXTRACTOR, b'{"message": 5}', "gpu-01", "t", 0, 9, T0, placements=placed)
    assert out.dest == "dlq" and placed == []


def _placement(job: str | None, node: str, rank: int) -> RankPlacement:
    return RankPlacement(
        signal_id=f"id-{node}-{rank}", event_time=T0, node=node, job_id=job, rank=rank, nranks=64, text="init"
    )


def test_placements_are_packed_per_partition_in_order_keyed_by_their_first_job_or_node():
    partition_of = KeyPartitioner(4)
    by_node = {f"n{i}".encode(): [_placement(None, f"n{i}", r) for r in range(3)] for i in range(12)}
    out = list(pack_placements(by_node, partition_of, "node", T0))
    assert sorted(p for p, _, _ in out) == sorted({partition_of(k) for k in by_node})
    for partition, key, batch in out:
        assert batch.keyed_by == "node" and key == batch.placements[0].node.encode()
        nodes = [p.node for p in batch.placements]
        assert {partition_of(n.encode()) for n in nodes} == {partition}
        for node in set(nodes):  # each node's placements stay together and in order
            assert [p.rank for p in batch.placements if p.node == node] == [0, 1, 2]
    assert is_placement_batch(codec.loads(codec.dumps(out[0][2])))


def test_a_partitions_placements_past_the_bound_go_in_several_messages():
    many = {b"42": [_placement("42", "n1", r % 4096) for r in range(MAX_PLACEMENTS_PER_BATCH + 5)]}
    sizes = [len(b.placements) for _, key, b in pack_placements(many, KeyPartitioner(1), "job", T0)]
    assert sizes == [MAX_PLACEMENTS_PER_BATCH, 5]


def test_a_batch_keyed_by_job_needs_every_placement_to_name_its_job():
    with pytest.raises(ValidationError, match="job_id on every placement"):
        PlacementBatch(
            keyed_by="job",
            observed_time=T0,
            placements=[_placement("42", "n1", 0), _placement(None, "n1", 1)],
        )
    with pytest.raises(ValidationError):
        PlacementBatch(keyed_by="node", observed_time=T0, placements=[])


def test_the_sink_stores_a_placement_as_the_signal_row_it_stands_for_and_skips_routed_copies():
    cat = TopicCatalog(prefix="t")
    sink = ClickHouseSink(_NoClient(), "db", cat)
    mine, routed = _placement(None, "n1", 0), _placement("42", "n1", 0).model_copy(update={"routed": True})
    sink.add(cat.signals_node.name, codec.dumps(PlacementBatch(observed_time=T0, placements=[mine])), 0, 1)
    sink.add(
        cat.signals_job.name,
        codec.dumps(PlacementBatch(keyed_by="job", observed_time=T0, placements=[routed])),
        0,
        2,
    )
    assert sink.buffers["signals"] == [rows.encode(rows.signal_row(mine.as_signal(T0)))]
    assert sink.stats.skipped_routed == 1


class _NoClient:
    def raw_insert(self, *_a: object, **_kw: object) -> None:  # pragma: no cover - nothing is flushed
        raise AssertionError
