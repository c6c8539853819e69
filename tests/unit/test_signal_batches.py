"""Packing job signals into ``SignalBatch`` messages (per job, per partition) and job ↔ node assignments
into ``AssignmentBatch`` messages (per partition), and taking them apart."""

from __future__ import annotations

from datetime import timedelta

import pytest

from connectors.kafka_partitioner import partition_for
from schemas import codec
from schemas.signals import (
    MAX_ASSIGNMENTS_PER_BATCH,
    MAX_SIGNALS_PER_BATCH,
    AssignmentBatch,
    JobNodeAssignment,
    Signal,
    SignalBatch,
)
from streams.extract.extractor import Extractor
from streams.extract.record import Outgoing, extract_record, hold_job_signals
from streams.signal_batches import (
    BadBatch,
    pack,
    pack_assignments,
    pack_node_partitions,
    pack_partitions,
    unpack,
    unpack_assignments,
)
from tests.factories import T0, kernel_xid, nccl_timeout


def _signal(rank: int) -> Signal:
    [out] = extract_record(Extractor(), nccl_timeout("gpu-01", rank, "42", T0), "gpu-01", "raw", 0, rank, T0)
    assert isinstance(out.value, Signal)
    return out.value


def test_a_lone_signal_is_sent_as_itself():
    sig = _signal(0)
    assert pack("42", [sig]) == [sig]


def test_a_burst_is_packed_in_order_into_as_few_batches_as_the_bound_allows():
    sig = _signal(0)
    burst = [
        sig.model_copy(update={"rank": r, "signal_id": f"s{r}"}) for r in range(MAX_SIGNALS_PER_BATCH + 3)
    ]
    packed = pack("42", burst)
    assert [type(p) for p in packed] == [SignalBatch, SignalBatch]
    unpacked = [s for p in packed for s in unpack(codec.loads(codec.dumps(p)))]
    assert [s["rank"] for s in unpacked] == list(range(MAX_SIGNALS_PER_BATCH + 3))


def test_unpack_returns_a_plain_record_as_it_is_and_a_batch_as_its_signals():
    sig = codec.loads(codec.dumps(_signal(1)))
    assert unpack(sig) == [sig]
    assert unpack({"tick": True}) == [{"tick": True}]
    batch = codec.loads(codec.dumps(SignalBatch(job_id="42", signals=[_signal(1), _signal(2)])))
    assert [Signal.model_validate(s).rank for s in unpack(batch)] == [1, 2]


@pytest.mark.parametrize("signals", [None, "x", [], {"rank": 1}])
def test_a_batch_without_a_list_of_signals_is_refused(signals):
    with pytest.raises(BadBatch):
        unpack({"kind": "signal_batch", "job_id": "42", "signals": signals})


def test_a_batch_holds_at_least_one_and_at_most_the_bound_of_signals():
    with pytest.raises(ValueError):
        SignalBatch(job_id="42", signals=[])
    with pytest.raises(ValueError):
        SignalBatch(job_id="42", signals=[_signal(0)] * (MAX_SIGNALS_PER_BATCH + 1))


def test_job_signals_are_held_per_job_and_everything_else_is_sent_as_it_is():
    xid = extract_record(
        Extractor(), kernel_xid("gpu-03", 79, T0 + timedelta(seconds=1)), "gpu-03", "raw", 0, 9, T0
    )
    a, b = _signal(0), _signal(1)
    outs = [Outgoing("signals_job", b"42", a), *xid, Outgoing("signals_job", b"42", b)]
    by_job: dict[bytes, list[Signal]] = {}
    rest = hold_job_signals(outs, by_job)
    assert rest == xid and [o.dest for o in rest] == ["signals_node"]
    assert by_job == {b"42": [a, b]}


def _job_signals(job: str, ranks: range) -> list[Signal]:
    sig = _signal(0)
    return [sig.model_copy(update={"job_id": job, "rank": r, "signal_id": f"{job}/{r}"}) for r in ranks]


def _by_partition(by_job: dict[bytes, list[Signal]], partitions: int) -> dict[int, list[Signal]]:
    out: dict[int, list[Signal]] = {}
    for key, signals in by_job.items():
        out.setdefault(partition_for(key, partitions), []).extend(signals)
    return out


def test_the_jobs_of_one_partition_share_messages_sent_to_that_partition_each_job_in_order():
    by_job = {f"{j}".encode(): _job_signals(f"{j}", range(3)) for j in range(40)}
    sent = list(pack_partitions(by_job, lambda key: partition_for(key, 4)))
    assert len(sent) == 4  # 120 signals of 40 jobs: one message per partition
    for partition, key, message in sent:
        assert isinstance(message, SignalBatch) and message.job_id is None
        assert partition_for(key, 4) == partition  # the key is one of its jobs
        assert {partition_for(s.job_id.encode(), 4) for s in message.signals} == {partition}
    got = {p: list(m.signals) for p, _, m in sent if isinstance(m, SignalBatch)}
    assert got == _by_partition(by_job, 4)  # nothing lost, nothing moved, each job's order kept


def test_a_partition_holding_one_job_keeps_the_plain_shapes():
    lone = {b"42": _job_signals("42", range(1))}
    [(_, key, message)] = pack_partitions(lone, lambda key: 0)
    assert (key, message) == (b"42", lone[b"42"][0])
    burst = {b"42": _job_signals("42", range(5))}
    [(_, key, message)] = pack_partitions(burst, lambda key: 0)
    assert key == b"42" and isinstance(message, SignalBatch) and message.job_id == "42"


def test_a_partitions_signals_past_the_bound_go_in_several_messages():
    by_job = {f"{j}".encode(): _job_signals(f"{j}", range(100)) for j in range(3)}
    sent = list(pack_partitions(by_job, lambda key: 0))
    sizes = [len(m.signals) if isinstance(m, SignalBatch) else 1 for _, _, m in sent]
    assert sizes == [MAX_SIGNALS_PER_BATCH, 300 - MAX_SIGNALS_PER_BATCH]
    # the last chunk holds only job 2's signals: it names its job again
    assert [m.job_id for _, _, m in sent if isinstance(m, SignalBatch)] == [None, "2"]
    flat = [s for _, _, m in sent for s in (m.signals if isinstance(m, SignalBatch) else [m])]
    assert flat == [s for signals in by_job.values() for s in signals]


def test_a_batch_of_several_jobs_needs_every_signal_to_name_its_job():
    a, b = _job_signals("42", range(1))[0], _job_signals("43", range(1))[0]
    assert SignalBatch(signals=[a, b]).job_id is None
    with pytest.raises(ValueError, match="job_id on every signal"):
        SignalBatch(signals=[a, b.model_copy(update={"job_id": None})])


def _assignment(node: str, state: str = "assigned", job: str = "42") -> JobNodeAssignment:
    return JobNodeAssignment(node=node, job_id=job, attempt=1, state=state, event_time=T0)  # type: ignore[arg-type]


def test_assignments_are_packed_per_partition_of_their_nodes_each_partition_in_order():
    nodes = [f"gpu-{n:03d}" for n in range(40)]
    assignments = [_assignment(n) for n in nodes] + [_assignment("gpu-007", "released")]
    packed = list(pack_assignments(assignments, lambda key: partition_for(key, 4)))
    seen: list[JobNodeAssignment] = []
    for partition, key, value in packed:
        inside = value.assignments if isinstance(value, AssignmentBatch) else [value]
        assert {partition_for(a.node.encode(), 4) for a in inside} == {partition}
        assert key == inside[0].node.encode()
        seen.extend(inside)
    assert len(packed) == 4
    assert sorted(seen, key=assignments.index) == assignments  # nothing lost or added
    gpu7 = [a.state for a in seen if a.node == "gpu-007"]
    assert gpu7 == ["assigned", "released"]  # a node's assignments keep their order


def test_a_lone_assignment_is_sent_as_itself_and_a_long_partition_in_several_batches():
    one = _assignment("gpu-001")
    assert list(pack_assignments([one], lambda _key: 2)) == [(2, b"gpu-001", one)]
    many = [_assignment(f"gpu-{n:04d}") for n in range(MAX_ASSIGNMENTS_PER_BATCH + 1)]
    packed = list(pack_assignments(many, lambda _key: 0))
    assert [type(v) for _, _, v in packed] == [AssignmentBatch, JobNodeAssignment]
    unpacked = [a for _, _, v in packed for a in unpack_assignments(codec.loads(codec.dumps(v)))]
    assert [a["node"] for a in unpacked] == [a.node for a in many]


def test_unpack_assignments_returns_a_plain_record_as_it_is_and_refuses_a_batch_without_a_list():
    plain = codec.loads(codec.dumps(_assignment("gpu-001")))
    assert unpack_assignments(plain) == [plain]
    for broken in ({"kind": "assignment_batch"}, {"kind": "assignment_batch", "assignments": []}):
        with pytest.raises(BadBatch):
            unpack_assignments(broken)


def _node_fact(node: str, n: int) -> Signal:
    [out] = extract_record(Extractor(), kernel_xid(node, 79, T0), node, "raw", 0, n, T0)
    assert isinstance(out.value, Signal) and out.value.job_id is None
    return out.value


def test_node_facts_are_held_per_node_and_packed_per_partition_of_signals_node_each_node_in_order():
    by_job: dict[bytes, list[Signal]] = {}
    by_node: dict[bytes, list[Signal]] = {}
    facts = [_node_fact(node, n) for n, node in enumerate(["gpu-01", "gpu-02", "gpu-01", "gpu-03"])]
    for fact in facts:
        rest = hold_job_signals([Outgoing("signals_node", fact.node.encode(), fact)], by_job, by_node)
        assert rest == []
    assert by_job == {} and list(by_node) == [b"gpu-01", b"gpu-02", b"gpu-03"]
    packed = list(pack_node_partitions(by_node, lambda key: partition_for(key, 2)))
    by_partition = {partition: (key, value) for partition, key, value in packed}
    assert sorted(by_partition) == [0, 1]  # gpu-02 on 0; gpu-01 and gpu-03 on 1
    key, lone = by_partition[0]
    assert (key, lone) == (b"gpu-02", facts[1])  # a partition's lone fact is sent as itself
    key, batch = by_partition[1]
    assert isinstance(batch, SignalBatch) and batch.keyed_by == "node" and batch.job_id is None
    assert key == b"gpu-01"
    assert [s.signal_id for s in batch.signals] == [
        facts[0].signal_id,
        facts[2].signal_id,
        facts[3].signal_id,
    ]


def test_a_batch_of_node_facts_names_no_job():
    fact = _node_fact("gpu-01", 0)
    with pytest.raises(ValueError, match="names no job"):
        SignalBatch(keyed_by="node", job_id="42", signals=[fact, fact])
