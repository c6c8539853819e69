"""The key → partition function packed messages are sent by: Kafka's murmur2, as every client has it."""

from __future__ import annotations

import random

import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as aiokafka_murmur2

from connectors.kafka_partitioner import KeyPartitioner, murmur2, partition_for

# Kafka's own test vectors (the Java client's UtilsTest.testMurmur2), as signed 32-bit values.
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "signed"), JAVA_VECTORS.items())
def test_murmur2_gives_the_java_clients_hash(key: bytes, signed: int):
    assert murmur2(key) == signed & 0xFFFFFFFF


def test_a_key_lands_where_faust_and_aiokafka_put_it_for_every_length_and_partition_count():
    rng = random.Random(7)
    for _ in range(2_000):
        key = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 48)))
        assert murmur2(key) == aiokafka_murmur2(key) & 0xFFFFFFFF
        for partitions in (1, 3, 4, 8, 12):
            every = list(range(partitions))
            assert partition_for(key, partitions) == DefaultPartitioner()(key, every, every)


def test_a_topic_without_partitions_is_refused():
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for(b"42", 0)
    with pytest.raises(ValueError, match="at least one partition"):
        KeyPartitioner(0)


def test_the_remembering_partitioner_answers_alike_and_forgets_past_its_bound():
    placer = KeyPartitioner(8, bound=4)
    keys = [f"job-{i}".encode() for i in range(10)]
    assert [placer(k) for k in keys] == [partition_for(k, 8) for k in keys]
    assert len(placer._placed) <= 4
    assert [placer(k) for k in keys] == [partition_for(k, 8) for k in keys]
