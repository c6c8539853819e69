"""Where the API's mutations go: intents published to Kafka, never direct changes to the cluster.

The decide step, the adapters and the sink consume these topics like any other
record; the API only waits until Kafka has the record (acks=all), then answers
``202 Accepted``.
"""

from __future__ import annotations

import threading
from typing import Protocol

from connectors.kafka import ReliableProducer, admin


class PublishError(RuntimeError):
    """Kafka did not take the record; nothing was published."""


class Publisher(Protocol):
    def publish(self, topic: str, key: str, value: bytes) -> None: ...

    def ready(self) -> tuple[bool, str]: ...


class KafkaPublisher:
    """A synchronous publisher: returns once the broker has acknowledged the record."""

    def __init__(self, bootstrap: str, timeout_s: float = 10.0) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._producer = ReliableProducer(bootstrap, "sickbay-api", linger_ms=0)
        self._lock = threading.Lock()

    def publish(self, topic: str, key: str, value: bytes) -> None:
        with self._lock:
            failed = self._producer.failed
            self._producer.produce(topic, value, key=key.encode())
            left = self._producer.flush(self.timeout_s)
            if left or self._producer.failed > failed:
                raise PublishError(self._producer.last_error or f"not delivered within {self.timeout_s:.0f}s")

    def close(self) -> None:
        """Let go of the producer (the API's shutdown, and tests that outlive their broker)."""
        with self._lock:
            self._producer.close(self.timeout_s)

    def ready(self) -> tuple[bool, str]:
        try:
            meta = admin(self.bootstrap).list_topics(timeout=2.0)
        except Exception as exc:  # confluent_kafka raises KafkaException; any failure means not ready
            return False, f"kafka unreachable: {exc}"
        return True, f"kafka: {len(meta.brokers)} broker(s)"


class MemoryPublisher:
    """Keeps what was published (tests, and `sickbay api --no-kafka` for a read-only console)."""

    def __init__(self, *, fail: bool = False) -> None:
        self.records: list[tuple[str, str, bytes]] = []
        self.fail = fail

    def publish(self, topic: str, key: str, value: bytes) -> None:
        if self.fail:
            raise PublishError("publishing is disabled")
        self.records.append((topic, key, value))

    def ready(self) -> tuple[bool, str]:
        return (not self.fail), "in-memory publisher"
