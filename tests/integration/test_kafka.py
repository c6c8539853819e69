from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer

from connectors.kafka import ReliableProducer, consumer_config, ensure_topics
from schemas.topics import TopicCatalog, TopicSpec

pytestmark = pytest.mark.integration


def test_catalog_topics_are_created_with_their_partition_counts_and_retention(kafka_bootstrap):
    from connectors.kafka import admin

    prefix = f"it{uuid.uuid4().hex[:8]}"
    cat = TopicCatalog(prefix=prefix, partitions=3, app_id=prefix)
    created = ensure_topics(kafka_bootstrap, cat.all())
    assert set(created) == {t.name for t in cat.all()}
    assert ensure_topics(kafka_bootstrap, cat.all()) == []  # idempotent
    meta = admin(kafka_bootstrap).list_topics(timeout=10).topics
    assert len(meta[cat.raw_logs.name].partitions) == 3
    assert len(meta[cat.dlq.name].partitions) == 1


def test_an_existing_topic_with_another_partition_count_is_refused_with_a_clear_error(kafka_bootstrap):
    name = f"it{uuid.uuid4().hex[:8]}.mismatch"
    ensure_topics(kafka_bootstrap, [TopicSpec(name=name, key="k", value="v", partitions=2)])
    with pytest.raises(RuntimeError, match="PartitionsMismatch"):
        ensure_topics(kafka_bootstrap, [TopicSpec(name=name, key="k", value="v", partitions=4)])


def test_confluent_producers_partition_keys_like_faust_and_aiokafka(kafka_bootstrap):
    """librdkafka's default partitioner differs from aiokafka's murmur2; ours must agree with Faust."""
    from aiokafka.partitioner import DefaultPartitioner

    name = f"it{uuid.uuid4().hex[:8]}.keys"
    ensure_topics(kafka_bootstrap, [TopicSpec(name=name, key="k", value="v", partitions=8)])
    producer = ReliableProducer(kafka_bootstrap, "it-keys", linger_ms=0)
    keys = [f"gpu-{i:02d}".encode() for i in range(40)]
    for key in keys:
        producer.produce(name, b"x", key=key)
    assert producer.flush(10) == 0 and producer.failed == 0
    consumer = Consumer(consumer_config(kafka_bootstrap, f"it-{uuid.uuid4().hex}", "it"))
    consumer.subscribe([name])
    seen: dict[bytes, int] = {}
    for _ in range(200):
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen[msg.key()] = msg.partition()
        if len(seen) == len(keys):
            break
    consumer.close()
    partitioner = DefaultPartitioner()
    want = {k: partitioner(k, list(range(8)), list(range(8))) for k in keys}
    assert seen == want


def test_the_session_cleanup_spares_topics_another_running_application_reads(kafka_bootstrap):
    """A benchmark sharing the broker with a test session must keep its topics when the session
    ends; what the session alone created goes."""
    from connectors.kafka import admin
    from tests.components import _topics_dropped_after

    busy, idle = f"itbusy{uuid.uuid4().hex[:8]}", f"itidle{uuid.uuid4().hex[:8]}"
    with _topics_dropped_after(kafka_bootstrap):
        ensure_topics(
            kafka_bootstrap,
            [
                TopicSpec(name=f"{busy}.raw.logs", key="k", value="v", partitions=1),
                TopicSpec(name=f"{busy}-windows-changelog", key="k", value="v", partitions=1),
                TopicSpec(name=f"{idle}.raw.logs", key="k", value="v", partitions=1),
            ],
        )
        reader = Consumer(consumer_config(kafka_bootstrap, f"{busy}-group", "it-cleanup"))
        reader.subscribe([f"{busy}.raw.logs"])
        deadline = time.monotonic() + 30
        while not reader.assignment() and time.monotonic() < deadline:
            reader.poll(0.2)
        assert reader.assignment(), "the reader never got its partition"
    try:
        left = set(admin(kafka_bootstrap).list_topics(timeout=10).topics)
        assert {f"{busy}.raw.logs", f"{busy}-windows-changelog"} <= left
        assert f"{idle}.raw.logs" not in left
    finally:
        reader.close()
