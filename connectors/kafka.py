"""Kafka plumbing shared by collectors, adapters and sinks (confluent-kafka).

Producers are idempotent with ``acks=all`` and use the murmur2 partitioner, so a
key lands on the same partition as when Faust/aiokafka or Java produce it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from schemas.topics import TopicSpec

log = logging.getLogger("sickbay.kafka")


class KafkaUnavailable(RuntimeError):
    pass


def producer_config(bootstrap: str, client_id: str, *, linger_ms: int = 20) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": linger_ms,
        "compression.type": "lz4",
        "partitioner": "murmur2_random",
        "message.timeout.ms": 300_000,
        "allow.auto.create.topics": False,
    }


def consumer_config(bootstrap: str, group_id: str, client_id: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "client.id": client_id,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,  # we commit after the work is durable
        "allow.auto.create.topics": False,
        "session.timeout.ms": 10_000,
        "isolation.level": "read_committed",
    }


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})  # warnings and worse only


def wait_for_broker(bootstrap: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    client = admin(bootstrap)
    while time.monotonic() < deadline:
        try:
            client.list_topics(timeout=2.0)
            return
        except KafkaException as exc:
            last = exc
            time.sleep(0.5)
    raise KafkaUnavailable(
        f"no Kafka broker answers at {bootstrap} (start one with `make dev-up`, "
        f"or set SICKBAY_KAFKA_BOOTSTRAP): {last}"
    )


def ensure_topics(bootstrap: str, specs: Iterable[TopicSpec], replication_factor: int = 1) -> list[str]:
    """Create missing topics with explicit partitions; refuse existing ones with a different count."""
    client = admin(bootstrap)
    specs = list(specs)
    existing = client.list_topics(timeout=10.0).topics
    created: list[str] = []
    for spec in specs:
        meta = existing.get(spec.name)
        if meta is not None and meta.error is None:
            if len(meta.partitions) != spec.partitions:
                raise RuntimeError(
                    f"topic {spec.name} has {len(meta.partitions)} partitions, the catalog says "
                    f"{spec.partitions}: Faust would refuse it (PartitionsMismatch); use a new topic prefix"
                )
            continue
        new = NewTopic(
            spec.name,
            num_partitions=spec.partitions,
            replication_factor=replication_factor,
            config=spec.config(),
        )
        fut = client.create_topics([new], operation_timeout=15.0)[spec.name]
        try:
            fut.result()
            created.append(spec.name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    return created


class ReliableProducer:
    """A producer that counts delivery failures and never drops a message silently."""

    def __init__(self, bootstrap: str, client_id: str, *, linger_ms: int = 20) -> None:
        self._producer = Producer(producer_config(bootstrap, client_id, linger_ms=linger_ms))
        self.delivered = 0
        self.failed = 0
        self.last_error: str | None = None

    def _on_delivery(self, err: KafkaError | None, _msg: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed += 1
            self.last_error = str(err)
            log.error("delivery failed: %s", err)

    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=self._on_delivery)
                break
            except BufferError:
                self._producer.poll(0.5)  # queue full: let deliveries drain, then retry
        self._producer.poll(0)

    def poll(self, timeout_s: float = 0.0) -> None:
        """Serve delivery callbacks (librdkafka only runs them inside poll/flush)."""
        self._producer.poll(timeout_s)

    def flush(self, timeout_s: float = 30.0) -> int:
        """Wait for outstanding messages; returns how many are still queued (0 = all delivered)."""
        left: int = self._producer.flush(timeout_s)
        if left:
            log.error("%d messages still queued after %.0fs", left, timeout_s)
        return left
