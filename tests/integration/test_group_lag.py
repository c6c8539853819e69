"""Every consumer group's lag, asked of the real broker (what /metrics shows as sickbay_group_lag)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import CollectorRegistry, generate_latest

from connectors.kafka import ReliableProducer, consumer_config, ensure_topics
from connectors.lag import GroupLagCollector, GroupTopics
from schemas.topics import TopicSpec

pytestmark = pytest.mark.integration


def test_group_lag_is_the_log_end_minus_the_committed_offset_per_partition(kafka_bootstrap):
    run = uuid.uuid4().hex[:8]
    topic, group = f"lag{run}.t", f"lag{run}-group"
    ensure_topics(kafka_bootstrap, [TopicSpec(name=topic, key="k", value="v", partitions=2)])
    producer = ReliableProducer(kafka_bootstrap, "lag-test", linger_ms=0)
    for i in range(30):
        producer.produce(topic, b"x", key=f"k{i}".encode())
    assert producer.flush(15) == 0
    consumer = Consumer(consumer_config(kafka_bootstrap, group, "lag-test"))
    high = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)}
    assert sum(high.values()) == 30
    # The group committed 5 records on partition 0 and everything on partition 1.
    consumer.commit(
        offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, high[1])], asynchronous=False
    )
    consumer.close()

    collector = GroupLagCollector(kafka_bootstrap, [GroupTopics(group, (topic,))], cache_s=0)
    assert sorted(collector.measure()) == [(group, topic, 0, high[0] - 5), (group, topic, 1, 0)]

    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    assert f'sickbay_group_lag{{group="{group}",partition="0",topic="{topic}"}} {float(high[0] - 5)}' in text
    assert "sickbay_group_lag_up 1.0" in text


def test_an_unreachable_broker_reports_down_instead_of_failing_the_scrape():
    collector = GroupLagCollector("127.0.0.1:1", [GroupTopics("g", ("t",))], cache_s=0)
    collector.measure = lambda timeout_s=5.0: (_ for _ in ()).throw(RuntimeError("no broker"))  # type: ignore[method-assign]
    registry = CollectorRegistry()
    registry.register(collector)
    assert "sickbay_group_lag_up 0.0" in generate_latest(registry).decode()
