"""The route step's backlog probe against the real broker: a group that has not committed up to the
previous look's log ends is behind; one that has caught up is not (streams/correlate/backlog.py)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from connectors.kafka import consumer_config, ensure_topics, producer_config
from schemas.topics import TopicSpec
from streams.correlate.backlog import BacklogProbe, Watched

pytestmark = pytest.mark.integration


def _produce(bootstrap: str, topic: str, n: int) -> None:
    """``n`` records on each of the topic's two partitions."""
    producer = Producer(producer_config(bootstrap, "backlog-test", linger_ms=0))
    for p in (0, 1):
        for _ in range(n):
            producer.produce(topic, b"x", partition=p)
    assert producer.flush(15) == 0


def test_a_group_is_behind_until_it_commits_up_to_the_previous_looks_log_ends(kafka_bootstrap):
    run = uuid.uuid4().hex[:8]
    topic, group, never = f"backlog{run}.t", f"backlog{run}-group", f"backlog{run}-never"
    ensure_topics(kafka_bootstrap, [TopicSpec(name=topic, key="k", value="v", partitions=2)])
    consumer = Consumer(consumer_config(kafka_bootstrap, group, "backlog-test"))
    try:
        _produce(kafka_bootstrap, topic, 10)
        high = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)}
        consumer.commit(offsets=[TopicPartition(topic, p, high[p]) for p in (0, 1)], asynchronous=False)
        probe = BacklogProbe(kafka_bootstrap, [Watched(group, ((topic, 2),)), Watched(never, ((topic, 2),))])
        assert probe.look() == []  # the first look only sets the fence

        _produce(kafka_bootstrap, topic, 10)  # beyond the fence: not yet owed
        assert probe.look() == []  # caught up to the first fence; this look's ends are the next
        # partition 0 is handled up to the second fence, partition 1 is not
        new_high = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)
        }
        assert new_high == {p: high[p] + 10 for p in (0, 1)}
        consumer.commit(offsets=[TopicPartition(topic, 0, new_high[0])], asynchronous=False)
        # the group that never committed is never counted behind (a start is the resumed rule's case)
        assert probe.look() == [(group, topic, 1)]

        consumer.commit(offsets=[TopicPartition(topic, 1, new_high[1])], asynchronous=False)
        assert probe.look() == []
    finally:
        consumer.close()


def test_a_probe_that_cannot_reach_the_broker_raises_for_its_caller_to_report():
    probe = BacklogProbe("127.0.0.1:1", [Watched("g", (("t", 1),))], timeout_s=1.0)
    with pytest.raises(Exception):  # noqa: B017 - the admin client's own error, whatever its class
        probe.look()
