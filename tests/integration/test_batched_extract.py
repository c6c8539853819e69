"""The batched extract stage on the real broker: what it sends, when it commits, what a replay does."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from connectors.kafka import ReliableProducer, consumer_config, ensure_topics
from connectors.kafka_partitioner import partition_for
from schemas import codec
from schemas.signals import Signal, SignalBatch
from schemas.topics import extract_group
from streams.extract.batched import BatchedExtract
from streams.settings import Settings
from tests.factories import T0, kernel_xid, nccl_timeout
from tests.unit.test_telemetry_extract import metric

pytestmark = pytest.mark.integration


def _settings(bootstrap: str) -> Settings:
    run = uuid.uuid4().hex[:8]
    s = Settings(kafka_bootstrap=bootstrap, topic_prefix=f"bx{run}", app_id=f"bx{run}", partitions=2)
    ensure_topics(bootstrap, s.topics.all())
    return s


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = ReliableProducer(bootstrap, "bx-test", linger_ms=0)
    for key, value in records:
        producer.produce(topic, value, key=key)
    assert producer.flush(15) == 0


def _read_all(bootstrap: str, topics: list[str], expect: int, timeout_s: float = 20) -> list[tuple[str, Any]]:
    c = Consumer(consumer_config(bootstrap, f"bx-read-{uuid.uuid4().hex}", "bx-read"))
    c.subscribe(topics)
    out: list[tuple[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < expect and time.monotonic() < deadline:
        for m in c.consume(100, 0.5):
            if m.error() is None and m.value() is not None:
                out.append((m.topic() or "", codec.loads(m.value() or b"")))
    time.sleep(1.0)  # anything beyond what was expected would be a duplicate: give it a moment
    out.extend(
        (m.topic() or "", codec.loads(m.value() or b"")) for m in c.consume(100, 0.5) if m.error() is None
    )
    c.close()
    return out


def _committed(s: Settings) -> int:
    c = Consumer(consumer_config(s.kafka_bootstrap, extract_group(s.app_id), "bx-probe"))
    parts = [TopicPartition(s.topics.raw_logs.name, p) for p in range(s.partitions)]
    total = sum(max(0, tp.offset) for tp in c.committed(parts, timeout=10))
    c.close()
    return total


def _drain(stage: BatchedExtract, records: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while stage.records < records and time.monotonic() < deadline:
        stage.step()


MIX = [
    (b"gpu-03", kernel_xid("gpu-03", 79, T0)),  # node fact
    (b"gpu-01", nccl_timeout("gpu-01", 0, "42", T0)),  # job fact
    (b"gpu-01", b"iteration 10 | loss 1.0 | nothing wrong here"),  # no rule
    (b"dcgm", metric()),  # Vector metric event
    (b"gpu-01", b'{"log": "truncated'),  # unreadable
]


def test_each_record_lands_on_its_topic_and_the_batch_is_committed_once_acknowledged(kafka_bootstrap):
    s = _settings(kafka_bootstrap)
    cat = s.topics
    _produce(kafka_bootstrap, cat.raw_logs.name, MIX)
    stage = BatchedExtract(s)
    stage._open()
    try:
        _drain(stage, len(MIX))
        assert _committed(s) == len(MIX)
    finally:
        stage._close()
    out = _read_all(
        kafka_bootstrap,
        [cat.signals_node.name, cat.signals_job.name, cat.raw_telemetry.name, cat.dlq.name],
        expect=4,
    )
    by_topic = sorted((t.split(".", 1)[1], v.get("rule") or v.get("reason") or v.get("node")) for t, v in out)
    assert by_topic == sorted(
        [
            ("signals.node", "gpu.xid"),
            ("signals.job", "nccl.watchdog_timeout"),
            ("raw.telemetry", codec.loads(metric())["tags"]["Hostname"]),
            ("dlq", "invalid_json"),
        ]
    )


def _read_placed(bootstrap: str, topic: str, expect: int) -> list[tuple[int, bytes, Any]]:
    """(partition, key, value) of what ``topic`` holds, read from the start."""
    c = Consumer(consumer_config(bootstrap, f"bx-read-{uuid.uuid4().hex}", "bx-read"))
    c.subscribe([topic])
    out: list[tuple[int, bytes, Any]] = []
    deadline = time.monotonic() + 20
    while len(out) < expect and time.monotonic() < deadline:
        for m in c.consume(100, 0.5):
            if m.error() is None and m.value() is not None:
                out.append((m.partition() or 0, m.key() or b"", codec.loads(m.value() or b"")))
    c.close()
    return out


def test_a_reads_job_signals_arrive_one_message_per_partition_where_each_jobs_key_lands(kafka_bootstrap):
    """Jobs 42 and 43 share partition 0 of two, job 44 has partition 1: one read's facts make one
    message per partition, each job's facts in their order, on the partition the broker's own keyed
    placement gives each job (so the correlate agent and its tables see them where they always did)."""
    s = _settings(kafka_bootstrap)
    cat = s.topics
    assert [partition_for(j, 2) for j in (b"42", b"43", b"44")] == [0, 0, 1]
    burst = [(b"gpu-01", nccl_timeout("gpu-01", rank, "42", T0)) for rank in (3, 0, 2)]
    others = [
        (b"gpu-02", nccl_timeout("gpu-02", 5, "43", T0)),
        (b"gpu-03", nccl_timeout("gpu-03", 7, "44", T0)),
    ]
    _produce(kafka_bootstrap, cat.raw_logs.name, [*burst, *others])
    stage = BatchedExtract(s)
    stage._open()
    try:
        _drain(stage, 5)
    finally:
        stage._close()
    placed = {p: (key, value) for p, key, value in _read_placed(kafka_bootstrap, cat.signals_job.name, 2)}
    assert sorted(placed) == [0, 1]
    key, shared = placed[0]
    batch = SignalBatch.model_validate(shared)  # jobs 42 and 43: one message
    assert batch.job_id is None and key in (b"42", b"43")
    # each job's facts in their order (which job comes first depends on which raw.logs partition is read first)
    assert [sig.rank for sig in batch.signals if sig.job_id == "42"] == [3, 0, 2]
    assert sorted((sig.job_id, sig.rank) for sig in batch.signals) == [
        ("42", 0),
        ("42", 2),
        ("42", 3),
        ("43", 5),
    ]
    key, lone = placed[1]
    assert key == b"44" and Signal.model_validate(lone).rank == 7  # a partition's lone fact is sent as itself
    # where the project's producer (librdkafka, murmur2_random) puts each job's key by itself
    keyed = [(job, codec.dumps({"job": job.decode()})) for job in (b"42", b"43", b"44")]
    _produce(kafka_bootstrap, cat.signals_job.name, keyed)
    by_key = {
        key: p for p, key, value in _read_placed(kafka_bootstrap, cat.signals_job.name, 5) if "job" in value
    }
    assert by_key == {b"42": 0, b"43": 0, b"44": 1}


def test_a_reads_node_facts_arrive_one_message_per_partition_of_signals_node_where_each_node_lands(
    kafka_bootstrap,
):
    """Node facts are packed like job signals: gpu-01 and gpu-03 share partition 1 of two, gpu-02 has
    partition 0; one read makes one message per partition, each node's facts in order, on the
    partition the broker's keyed placement gives each node."""
    s = _settings(kafka_bootstrap)
    cat = s.topics
    assert [partition_for(n, 2) for n in (b"gpu-01", b"gpu-02", b"gpu-03")] == [1, 0, 1]
    facts = [
        (b"gpu-01", kernel_xid("gpu-01", 79, T0)),
        (b"gpu-03", kernel_xid("gpu-03", 48, T0, text="DBE")),
        (b"gpu-01", kernel_xid("gpu-01", 94, T0)),
        (b"gpu-02", kernel_xid("gpu-02", 79, T0)),
    ]
    _produce(kafka_bootstrap, cat.raw_logs.name, facts)
    stage = BatchedExtract(s)
    stage._open()
    try:
        _drain(stage, len(facts))
    finally:
        stage._close()
    placed = {p: (key, value) for p, key, value in _read_placed(kafka_bootstrap, cat.signals_node.name, 2)}
    assert sorted(placed) == [0, 1]
    key, shared = placed[1]
    batch = SignalBatch.model_validate(shared)
    assert batch.keyed_by == "node" and key == b"gpu-01"
    assert [(sig.node, sig.attrs.get("code")) for sig in batch.signals] == [
        ("gpu-01", 79),
        ("gpu-01", 94),
        ("gpu-03", 48),
    ]
    key, lone = placed[0]
    assert key == b"gpu-02" and Signal.model_validate(lone).node == "gpu-02"
    keyed = [(node, codec.dumps({"node": node.decode()})) for node in (b"gpu-01", b"gpu-02", b"gpu-03")]
    _produce(kafka_bootstrap, cat.signals_node.name, keyed)
    by_key = {
        key: p
        for p, key, value in _read_placed(kafka_bootstrap, cat.signals_node.name, 5)
        if "signal_id" not in value and "signals" not in value
    }
    assert by_key == {b"gpu-01": 1, b"gpu-02": 0, b"gpu-03": 1}


def test_a_stage_that_died_before_its_commit_is_replayed_with_the_same_signal_ids(kafka_bootstrap):
    s = _settings(kafka_bootstrap)
    cat = s.topics
    _produce(kafka_bootstrap, cat.raw_logs.name, MIX[:2])
    first = BatchedExtract(s)
    first._open()
    first._commit_settled = lambda *, asynchronous: None  # type: ignore[method-assign]  # dies before it
    _drain(first, 2)
    first._producer.flush(10)  # type: ignore[union-attr]
    first._consumer.close()  # type: ignore[union-attr]  # gone without a commit, as after kill -9
    assert _committed(s) == 0

    second = BatchedExtract(s)
    second._open()
    try:
        _drain(second, 2)
        assert _committed(s) == 2
    finally:
        second._close()
    out = _read_all(kafka_bootstrap, [cat.signals_node.name, cat.signals_job.name], expect=4)
    ids = sorted(v["signal_id"] for _, v in out)
    assert len(ids) == 4 and len(set(ids)) == 2  # each fact twice, under one id: the correlator drops copies


def test_a_batch_whose_sends_failed_is_read_again_and_only_then_committed(kafka_bootstrap, monkeypatch):
    from streams.extract import batched

    monkeypatch.setattr(batched, "RETRY_PAUSE_S", 0.0)
    s = _settings(kafka_bootstrap)
    _produce(kafka_bootstrap, s.topics.raw_logs.name, MIX[:2])
    stage = BatchedExtract(s)
    stage._open()
    try:
        real = stage._settle
        calls: list[int] = []

        def settle_once_failed(first: dict[tuple[str, int], int], last: dict[tuple[str, int], int]) -> None:
            if not calls:
                stage._failed.append("signals.job: Local: Message timed out (injected)")
            calls.append(1)
            real(first, last)

        monkeypatch.setattr(stage, "_settle", settle_once_failed)
        while stage.records < 2:
            stage.step()
        assert _committed(s) == 0  # the failed batch was not committed
        _drain(stage, 4)  # the same two records again
        assert stage.records == 4
        assert _committed(s) == 2
    finally:
        stage._close()


def test_the_stage_stopped_commits_and_a_new_one_resumes_after_its_last_record(kafka_bootstrap):
    s = _settings(kafka_bootstrap)
    _produce(kafka_bootstrap, s.topics.raw_logs.name, MIX[:2])
    stage = BatchedExtract(s)
    stage.start()
    deadline = time.monotonic() + 30
    while stage.records < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    stage.stop()
    stage.join(30)
    assert not stage.alive() and stage.error is None
    assert _committed(s) == 2

    _produce(kafka_bootstrap, s.topics.raw_logs.name, MIX[2:3])
    again = BatchedExtract(s)
    again._open()
    try:
        _drain(again, 1)
        time.sleep(0.5)
        again.step()
        assert again.records == 1  # only the new record: nothing before the commit was read twice
    finally:
        again._close()
