"""The sink's fast signal rows agree with the contract path, and refuse what cannot be stored; packed
messages are stored row by row."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest

from benchmarks.bench_sink import templates
from connectors.sinks import rows
from connectors.sinks.sink import ClickHouseSink
from schemas import codec
from schemas.signals import AssignmentBatch, JobNodeAssignment, Signal, SignalBatch
from schemas.topics import TopicCatalog


@pytest.fixture(scope="module")
def signals() -> list[Signal]:
    return templates()


def test_fast_rows_equal_the_contract_rows_for_every_real_extracted_signal(signals: list[Signal]):
    assert len(signals) >= 10
    for sig in signals:
        fast = rows.signal_row_json(codec.dumps(sig))
        assert fast is not None
        assert rows.encode(fast) == rows.encode(rows.signal_row(sig)), sig.rule


def test_routed_copies_are_skipped(signals: list[Signal]):
    routed = signals[0].model_copy(update={"routed": True})
    assert rows.signal_row_json(codec.dumps(routed)) is rows.SKIP


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"role": "boss"}, "role"),
        ({"isolation": "rack"}, "isolation"),
        ({"category": "cosmic"}, "category"),
        ({"event_time": 5}, "event_time"),
        ({"rank": "3"}, "rank"),
        ({"text": "x" * 5000}, "text"),
        ({"schema_version": 2}, "schema_version"),
        ({"attrs": [1, 2]}, "attrs"),
    ],
)
def test_fast_rows_refuse_values_a_column_cannot_hold(signals: list[Signal], change: dict, why: str):
    d = orjson.loads(codec.dumps(signals[0]))
    d.update(change)
    with pytest.raises(rows.RowError, match=why):
        rows.signal_row_json(orjson.dumps(d))


class _NoClient:
    def raw_insert(self, *_a, **_kw):  # pragma: no cover - never reached: nothing is flushed
        raise AssertionError


def test_the_sink_falls_back_to_the_contract_and_dead_letters_only_what_it_refuses(signals: list[Signal]):
    cat = TopicCatalog(prefix="t")
    sink = ClickHouseSink(_NoClient(), "db", cat)
    good = codec.dumps(signals[0])
    epoch = orjson.loads(good)
    epoch["event_time"] = 1764385200.0  # the contract accepts epoch seconds; the fast path does not
    bad = orjson.loads(good)
    bad["role"] = "boss"
    for value in (good, orjson.dumps(epoch), orjson.dumps(bad), b"{not json"):
        sink.add(cat.signals_node.name, value, 0, 1)
    assert len(sink.buffers["signals"]) == 2
    assert len(sink.buffers["dead_letters"]) == 2
    assert sink.stats.dead_lettered == 2


@pytest.mark.parametrize("one_job", [True, False], ids=["one job", "jobs of one partition"])
def test_a_packed_batch_of_job_signals_is_stored_as_one_row_per_signal(signals: list[Signal], one_job: bool):
    cat = TopicCatalog(prefix="t")
    sink = ClickHouseSink(_NoClient(), "db", cat)
    routed = signals[1].model_copy(update={"routed": True})
    jobs = ["42", "42", "42"] if one_job else ["42", "43", "44"]
    packed = [
        s.model_copy(update={"job_id": j})
        for s, j in zip((signals[0], routed, signals[2]), jobs, strict=True)
    ]
    batch = SignalBatch(job_id="42" if one_job else None, signals=packed)
    sink.add(cat.signals_job.name, codec.dumps(batch), 0, 7)
    alone = ClickHouseSink(_NoClient(), "db", cat)
    for sig in (packed[0], packed[2]):
        alone.add(cat.signals_job.name, codec.dumps(sig), 0, 7)
    assert sink.buffers["signals"] == alone.buffers["signals"]  # packing is transport, not data
    assert sink.stats.skipped_routed == 1
    assert sink.offsets[(cat.signals_job.name, 0)] == 8


def test_a_batch_that_does_not_validate_is_dead_lettered_whole(signals: list[Signal]):
    cat = TopicCatalog(prefix="t")
    sink = ClickHouseSink(_NoClient(), "db", cat)
    bad = orjson.loads(codec.dumps(SignalBatch(job_id="42", signals=[signals[0], signals[1]])))
    bad["signals"][1]["role"] = "boss"
    sink.add(cat.signals_job.name, orjson.dumps(bad), 0, 3)
    assert "signals" not in sink.buffers
    assert sink.stats.dead_lettered == 1


def _packed_and_alone(topic: str, packed: bytes, alone: list[bytes]) -> tuple[ClickHouseSink, ClickHouseSink]:
    """Two sinks: one fed the packed message, one fed its items one by one (same partition, offset)."""
    cat = TopicCatalog(prefix="t")
    one_sink, each_sink = ClickHouseSink(_NoClient(), "db", cat), ClickHouseSink(_NoClient(), "db", cat)
    one_sink.add(topic, packed, 1, 4)
    for value in alone:
        each_sink.add(topic, value, 1, 4)
    return one_sink, each_sink


def test_a_packed_batch_of_assignments_is_stored_as_one_row_per_assignment():
    topic = TopicCatalog(prefix="t").topology_node.name
    at = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    assignments = [
        JobNodeAssignment(node=f"gpu-{n}", job_id="42", attempt=1, state="assigned", event_time=at)
        for n in range(3)
    ]
    packed = codec.dumps(AssignmentBatch(assignments=assignments))
    sink, alone = _packed_and_alone(topic, packed, [codec.dumps(a) for a in assignments])
    assert len(sink.buffers["job_assignments"]) == 3
    assert sink.buffers["job_assignments"] == alone.buffers["job_assignments"]
    assert sink.offsets[(topic, 1)] == 5
    bad = orjson.loads(packed)
    bad["assignments"][2]["state"] = "borrowed"
    sink.add(topic, orjson.dumps(bad), 1, 5)
    assert len(sink.buffers["job_assignments"]) == 3  # a batch that does not validate is dead-lettered whole
    assert sink.stats.dead_lettered == 1


def test_a_packed_batch_of_node_facts_is_stored_as_one_row_per_fact(signals: list[Signal]):
    topic = TopicCatalog(prefix="t").signals_node.name
    facts = [s.model_copy(update={"job_id": None, "node": f"gpu-0{n}"}) for n, s in enumerate(signals[:3])]
    packed = codec.dumps(SignalBatch(keyed_by="node", signals=facts))
    sink, alone = _packed_and_alone(topic, packed, [codec.dumps(f) for f in facts])
    assert len(sink.buffers["signals"]) == 3
    assert sink.buffers["signals"] == alone.buffers["signals"]
