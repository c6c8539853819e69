"""Which partition a keyed record lands on, computed the way Kafka's producers do it.

Why: the extract stage packs the job signals of one read into one message per *partition* of
``signals.job`` (not per job), and must send that message to the partition every one of its jobs
would have been sent to alone. Faust/aiokafka, the Java client and librdkafka's ``murmur2_random``
(``connectors.kafka.producer_config``) all place a keyed record at
``murmur2(key) & 0x7fffffff  %  partitions``; this module is that function, so a packed signal and a
signal sent by any of those clients with its job as the key meet on the same partition, the same
worker and the same changelog partition of the job's tables.
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """32-bit MurmurHash2 as the Kafka clients use it (seed ``0x9747b28c``), unsigned."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= data[whole + 2] << 16
        if tail >= 2:
            h ^= data[whole + 1] << 8
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for(key: bytes, partitions: int) -> int:
    """The partition a record with ``key`` goes to among ``partitions`` (a positive count)."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class KeyPartitioner:
    """``partition_for`` over one topic's partition count, remembering the keys it has placed: a
    fleet has a few thousand live jobs, and each read of ``raw.logs`` asks again for most of them."""

    def __init__(self, partitions: int, bound: int = 65_536) -> None:
        if partitions < 1:
            raise ValueError(f"a topic has at least one partition, not {partitions}")
        self.partitions = partitions
        self.bound = bound
        self._placed: dict[bytes, int] = {}

    def __call__(self, key: bytes) -> int:
        placed = self._placed.get(key)
        if placed is None:
            if len(self._placed) >= self.bound:
                self._placed.clear()  # finished jobs' keys: cheaper to forget all than to age them
            placed = self._placed[key] = partition_for(key, self.partitions)
        return placed
