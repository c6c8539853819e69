"""Kafka plumbing shared by collectors, adapters and sinks (confluent-kafka).

Producers are idempotent with ``acks=all`` and use the murmur2 partitioner, so a
key lands on the same partition as when Faust/aiokafka or Java produce it.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from connectors.sources.spool import Spool, SpoolPos
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


def delete_topics(bootstrap: str, names: Iterable[str], timeout_s: float = 30.0) -> None:
    """Drop a run's topics (benchmarks, tests): partitions left behind cost broker heap and make the
    next start replay their logs. Topics already gone, or never created, are fine."""
    names = list(names)
    if not names:
        return
    client = admin(bootstrap)  # kept alive until every future resolves (a dropped client cancels them)
    for fut in client.delete_topics(names, operation_timeout=timeout_s).values():
        try:
            fut.result()
        except KafkaException as exc:
            if exc.args and getattr(exc.args[0], "code", lambda: None)() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                log.warning("could not delete a topic: %s", exc)


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
            replicas = min((len(p.replicas) for p in meta.partitions.values()), default=0)
            if replicas < replication_factor:  # created before SICKBAY_REPLICATION_FACTOR was raised
                log.warning(
                    "topic %s has %d replicas, the setting says %d: reassign its partitions "
                    "(kafka-reassign-partitions) to make it survive a broker loss",
                    spec.name,
                    replicas,
                    replication_factor,
                )
            continue
        config = spec.config()
        if replication_factor >= 3:
            # A majority must hold each acks=all write: one broker of three can be down, none is lost.
            config = {**config, "min.insync.replicas": str(replication_factor // 2 + 1)}
        new = NewTopic(
            spec.name,
            num_partitions=spec.partitions,
            replication_factor=replication_factor,
            config=config,
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
    """A producer that counts delivery failures and never drops a message silently.

    With a :class:`~connectors.sources.spool.Spool` it also survives a broker that is
    away. When librdkafka reports all brokers down, or a delivery fails for good, the
    producer switches to *spooling*: what librdkafka still holds unsent is purged into
    the spool (oldest first), and new records are appended behind it, so memory stays
    bounded and order is kept. A metadata probe every half second notices the broker
    coming back; the spool is then *replayed* in order ahead of any new record, and
    each entry is acknowledged in the spool only once the broker has it. Entries
    delivered ahead of a failed one are remembered and not sent twice.

    Each :meth:`send` returns a ticket (1, 2, 3, ...). :meth:`checkpoint` makes the
    spool durable and returns the highest ticket up to which every record is delivered
    or spooled: a collector saves its file offsets up to that ticket and no further.
    """

    PROBE_EVERY_S = 0.5

    def __init__(
        self,
        bootstrap: str,
        client_id: str,
        *,
        linger_ms: int = 20,
        spool: Spool | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        config = producer_config(bootstrap, client_id, linger_ms=linger_ms)
        config.update({"error_cb": self._on_error, "reconnect.backoff.max.ms": 1000})
        config.update(extra or {})
        self._producer = Producer(config)
        self.spool = spool
        self.delivered = 0
        self.failed = 0
        self.spooled = 0
        self.replayed = 0
        self.last_error: str | None = None
        self.broker_down = False
        self._mode = "direct" if spool is None or spool.depth == 0 else "replaying"
        self._purge_pending = False
        self._next_probe = 0.0
        self._ticket = 0
        self._watermark = 0
        self._done: set[int] = set()
        self._replay_at: SpoolPos | None = spool.acked if spool is not None else None
        self._replay_inflight: deque[list[Any]] = deque()  # [end position, True/False/None] in send order
        self._delivered_ahead: set[SpoolPos] = set()  # replayed and delivered beyond a failed entry

    # -- callbacks (librdkafka runs them inside poll/flush/purge) ------------------------------------

    def _on_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            if not self.broker_down:
                log.warning("all brokers down: %s", err)
            self.broker_down = True
            if self.spool is not None:
                self._enter_spooling()
        elif err.fatal():
            log.error("fatal producer error: %s", err)
            self.last_error = str(err)
        else:
            log.debug("producer error: %s", err)

    def _complete(self, ticket: int) -> None:
        self._done.add(ticket)
        while self._watermark + 1 in self._done:
            self._watermark += 1
            self._done.discard(self._watermark)

    def _on_delivery_ticket(self, ticket: int, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self.delivered += 1
            self.broker_down = False
        elif self.spool is not None:
            self.last_error = str(err)
            if err.code() != KafkaError._PURGE_QUEUE:
                log.warning("delivery failed, spooling: %s", err)
            self.spool.append(msg.topic(), msg.key(), msg.value())
            self.spooled += 1
            self._enter_spooling()
        else:
            self.failed += 1
            self.last_error = str(err)
            log.error("delivery failed: %s", err)
        self._complete(ticket)

    def _on_delivery(self, err: KafkaError | None, _msg: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed += 1
            self.last_error = str(err)
            log.error("delivery failed: %s", err)

    def _on_replayed(self, slot: list[Any], err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            # Still in the spool (not acked): replayed again from the ack cursor once the broker is back.
            self.last_error = str(err)
            if err.code() != KafkaError._PURGE_QUEUE:
                log.warning("replayed record failed, it stays in the spool: %s", err)
            slot[1] = None
            self._enter_spooling()
            return
        slot[1] = True
        self.delivered += 1
        self.replayed += 1
        self.broker_down = False
        self._ack_replayed()

    # -- producing ------------------------------------------------------------------------------------

    def _enter_spooling(self) -> None:
        if self._mode != "spooling":
            log.warning("broker unreachable: spooling to %s", self.spool.dir if self.spool else "?")
            self._purge_pending = True  # librdkafka's unsent backlog goes to the spool first (order)
        self._mode = "spooling"
        self._next_probe = time.monotonic() + self.PROBE_EVERY_S

    def _purge_to_spool(self) -> None:
        """Move what librdkafka holds unsent into the spool (purged records fail with _PURGE_QUEUE
        and their callbacks append them); never called from inside a callback."""
        if self._purge_pending:
            self._purge_pending = False
            self._producer.purge(in_queue=True, in_flight=False, blocking=True)
            self._producer.poll(0)

    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        """Queue one record (or spool it while the broker is away)."""
        self.send(topic, value, key)

    def send(self, topic: str, value: bytes, key: bytes | None = None) -> int:
        """:meth:`produce` that returns the record's ticket (see :meth:`checkpoint`)."""
        self._ticket += 1
        ticket = self._ticket
        if self.spool is None:
            while True:
                try:
                    self._producer.produce(topic, value=value, key=key, on_delivery=self._on_delivery)
                    break
                except BufferError:
                    self._producer.poll(0.5)  # queue full: let deliveries drain, then retry
            self._producer.poll(0)
            self._complete(ticket)  # no spool: a ticket is done once librdkafka owns the record
            return ticket
        if self._mode == "direct":
            callback = functools.partial(self._on_delivery_ticket, ticket)
            while self._mode == "direct":
                try:
                    self._producer.produce(topic, value=value, key=key, on_delivery=callback)
                    self._producer.poll(0)
                    return ticket
                except BufferError:
                    # Full: wait for deliveries, or for the broker to be declared down.
                    self._producer.poll(0.1)
        self._purge_to_spool()
        self.spool.append(topic, key, value)
        self.spooled += 1
        self._complete(ticket)
        self._serve()
        return ticket

    def _probe(self) -> bool:
        try:
            self._producer.list_topics(timeout=0.25)
        except KafkaException:
            return False
        return True

    def _serve(self) -> None:
        """Purge into the spool, probe while spooling, feed the spool to librdkafka while replaying."""
        if self.spool is None or self._mode == "direct":
            return
        self._purge_to_spool()
        if self._mode == "spooling":
            now = time.monotonic()
            if now < self._next_probe:
                return
            self._next_probe = now + self.PROBE_EVERY_S
            if not self._probe():
                return
            log.info("broker reachable again: replaying %d spooled records", self.spool.depth)
            self.broker_down = False
            self._mode = "replaying"
            if any(slot[1] is None for slot in self._replay_inflight):
                # A replayed record failed: start again at the ack cursor, skipping what did arrive.
                self._delivered_ahead = {slot[0] for slot in self._replay_inflight if slot[1] is True}
                self._replay_inflight.clear()
                self._replay_at = self.spool.acked
        self._replay_some()

    def _replay_some(self, budget: int = 20_000) -> None:
        if self.spool is None or self._replay_at is None:
            return
        sent = 0
        while sent < budget:
            progressed = False
            for entry in self.spool.entries(self._replay_at):
                slot: list[Any] = [entry.end, True]
                if entry.end in self._delivered_ahead:
                    self._delivered_ahead.discard(entry.end)
                    self._replay_inflight.append(slot)  # arrived before: only its ack is owed
                    self._ack_replayed()
                else:
                    slot[1] = False
                    try:
                        self._producer.produce(
                            entry.topic,
                            value=entry.value,
                            key=entry.key,
                            on_delivery=functools.partial(self._on_replayed, slot),
                        )
                    except BufferError:
                        self._producer.poll(0.05)
                        return  # librdkafka is full: go on at the next poll
                    self._replay_inflight.append(slot)
                self._replay_at = entry.end
                progressed = True
                sent += 1
                if sent >= budget or self._mode != "replaying":
                    return
            if not progressed:
                self._mode = "direct"  # caught up: every spooled record is queued ahead of new ones
                log.info("spool replayed (%d records so far)", self.replayed)
                return

    def _ack_replayed(self) -> None:
        """Acknowledge in the spool the longest prefix of replayed entries the broker has."""
        if self.spool is None:
            return
        n, last = 0, None
        while self._replay_inflight and self._replay_inflight[0][1] is True:
            last = self._replay_inflight.popleft()[0]
            n += 1
        if last is not None:
            self.spool.ack(last, n)

    def poll(self, timeout_s: float = 0.0) -> None:
        """Serve delivery callbacks (librdkafka only runs them inside poll/flush) and the spool."""
        self._producer.poll(timeout_s)
        self._serve()
        if self.spool is not None:
            self.spool.commit()

    def checkpoint(self) -> int:
        """Make spooled records durable; return the ticket up to which all are delivered or spooled."""
        self._producer.poll(0)
        if self.spool is not None:
            self._purge_to_spool()
            self.spool.sync()
            self.spool.commit()
        return self._watermark

    @property
    def mode(self) -> str:
        """``direct``, ``spooling`` (broker away) or ``replaying``."""
        return self._mode

    @property
    def queued(self) -> int:
        return len(self._producer)

    def close(self, timeout_s: float = 10.0) -> int:
        """Flush, then let go of librdkafka's handle at once; returns what the flush left unsent.

        The handle's callbacks refer back to this object, so without it the handle's threads (and
        their reconnect attempts to a broker that has gone) live on until the garbage collector
        breaks the cycle. The producer is unusable afterwards."""
        left = self.flush(timeout_s)
        del self._producer
        return left

    def flush(self, timeout_s: float = 30.0) -> int:
        """Wait for outstanding messages (and a spool replay); returns how many are neither
        delivered nor spooled (0 = nothing can be lost by exiting now)."""
        if self.spool is None:
            left: int = self._producer.flush(timeout_s)
            if left:
                log.error("%d messages still queued after %.0fs", left, timeout_s)
            return left
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.poll(0.1)
            if self._mode == "direct" and len(self._producer) == 0 and not self._replay_inflight:
                break
            if self._mode == "spooling" and len(self._producer) == 0:
                break  # broker away and nothing in memory: the spool holds the rest
        if len(self._producer):
            self._enter_spooling()  # out of time: hand librdkafka's backlog to the spool
            self._purge_pending = True
        self.checkpoint()
        left = len(self._producer)  # in flight: neither delivered nor spooled
        if left:
            log.error("%d messages in flight and not yet acknowledged after %.0fs", left, timeout_s)
        return left
