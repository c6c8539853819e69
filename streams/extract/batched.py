"""The batched extract stage: ``raw.logs`` → signals in batches, beside the Faust agents.

Why not a Faust agent: ``raw.logs`` is the fleet's full log volume, most of it lines no rule wants,
and Faust handles every record one by one through its stream machinery (consumer buffers, event
objects, per-message ack and offset bookkeeping). On ``make bench-stream`` that machinery cost more
CPU than the rules themselves. This stage reads with confluent-kafka ``consume(N)``, runs the same
:func:`~streams.extract.record.extract_record` on each record, hands the results to librdkafka's
producer (batching, compression and acks happen in its C thread) and commits the batch's offsets
only once every record it caused is acknowledged. The Faust agents keep the low-volume, stateful
topics (signals, topology, incidents).

Guarantees, the same as the agent's: at least once. A batch whose sends fail is read again (its
signals keep their ids: ``topic/partition/offset`` + rule, so the correlator drops the copies). A
``kill -9`` between send and commit replays at most one batch, the same way. Offsets are committed
on a rebalance before the partitions move, so another worker starts where this one stopped.

It runs beside the worker's agents (consumer group ``<app_id>-extract``): in a child process with its
own GIL by default (``process.py``), or in a thread of the worker (``SICKBAY_EXTRACT_PROCESS=false``).
A stage that dies crashes the worker (it must not stop reading while the worker looks alive).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from connectors.kafka import consumer_config, producer_config
from connectors.kafka_partitioner import KeyPartitioner
from schemas import codec
from schemas.base import utcnow
from schemas.signals import RankPlacement, Signal
from schemas.topics import extract_group
from streams.extract.extractor import Extractor
from streams.extract.quiet import RepeatQuieter
from streams.extract.record import DESTINATIONS, Destination, extract_record, hold_job_signals, sends_nothing
from streams.pipeline import key_str
from streams.settings import Settings
from streams.signal_batches import pack_node_partitions, pack_partitions, pack_placements

log = logging.getLogger("sickbay.extract")

SETTLE_TIMEOUT_S = 60.0  # a batch's sends that are not acknowledged by then are sent again
RETRY_PAUSE_S = 1.0
METADATA_TIMEOUT_S = 10.0


def consumer_settings(settings: Settings) -> dict[str, Any]:
    """The stage's consumer. Under the static membership the deploy sets up for workers
    (``CONSUMER_GROUP_INSTANCE_ID``, which Faust's own consumer reads too) it joins its group as the
    same member, so a restarted worker gets its ``raw.logs`` partitions back without a rebalance."""
    group = extract_group(settings.app_id)  # also its client id
    conf: dict[str, Any] = {
        **consumer_config(settings.kafka_bootstrap, group, group),
        "session.timeout.ms": int(settings.faust_session_timeout_s * 1000),
        "fetch.max.bytes": 32 * 1024 * 1024,
    }
    if instance := os.environ.get("CONSUMER_GROUP_INSTANCE_ID"):
        conf["group.instance.id"] = instance  # unique per member; the group differs from Faust's
    return conf


class BatchedExtract:
    """Consume → extract → produce → commit, one batch at a time, in its own thread."""

    def __init__(self, settings: Settings, extractor: Extractor | None = None) -> None:
        self.settings = settings
        self.extractor = extractor or Extractor()
        self.quieter = RepeatQuieter(self.extractor.catalog)
        self.prefilter = self.extractor.catalog.prefilter  # this thread is the only one that scans with it
        cat = settings.topics
        self.source = cat.raw_logs.name
        self.topics: dict[Destination, str] = {dest: getattr(cat, dest).name for dest in DESTINATIONS}
        self.error: BaseException | None = None  # why the thread stopped, when it was not asked to
        self.records = 0
        self._stop = threading.Event()
        self._failed: list[str] = []  # delivery errors of the batch in flight
        self._settled: list[TopicPartition] = []  # offsets acknowledged and committed (async)
        self._thread = threading.Thread(target=self._run, name="sickbay-extract", daemon=True)
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        # signals.job's and signals.node's partitions: the catalog's until ``_open`` asks the broker
        self._job_partition = KeyPartitioner(settings.topics.signals_job.partitions)
        self._node_partition = KeyPartitioner(settings.topics.signals_node.partitions)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float | None = None) -> None:
        self._thread.join(timeout_s)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        self.run(self._stop.is_set)

    def run(self, stopped: Callable[[], bool]) -> None:
        """Open, read batches until ``stopped()``, close; a failure is kept in ``error`` (the thread's
        body, and the extract process's with its own stop condition)."""
        try:
            self._open()
            while not stopped():
                self.step()
        except BaseException as exc:  # reported to the worker, which crashes on it
            log.exception("the batched extract stage stopped")
            self.error = exc
        finally:
            self._close()

    def _open(self) -> None:
        s = self.settings
        self._consumer = Consumer(consumer_settings(s))
        self._producer = Producer(
            {
                **producer_config(s.kafka_bootstrap, extract_group(s.app_id), linger_ms=5),
                "queue.buffering.max.messages": 1_000_000,
                "batch.size": 1024 * 1024,
                "delivery.report.only.error": True,  # no Python callback per successful send
                "on_delivery": self._on_delivery,
            }
        )
        self._consumer.subscribe([self.source], on_revoke=self._on_revoke)
        self._job_partition = KeyPartitioner(self._partitions_of(self.topics["signals_job"]))
        self._node_partition = KeyPartitioner(self._partitions_of(self.topics["signals_node"]))

    def _partitions_of(self, topic: str) -> int:
        """The topic's partition count as the broker has it (packs are sent to explicit partitions,
        so it must be the count every keyed producer sees); the catalog's when the broker cannot say."""
        _, producer = self._clients()
        try:
            meta = producer.list_topics(topic, timeout=METADATA_TIMEOUT_S).topics.get(topic)
        except KafkaException as exc:
            meta, reason = None, str(exc)
        else:
            reason = str(meta.error) if meta is not None and meta.error is not None else "no metadata"
        if meta is not None and meta.error is None and meta.partitions:
            return len(meta.partitions)
        fallback = self.settings.partitions  # the catalog's count, every topic's
        log.warning("extract: no partition count for %s (%s); the catalog's: %d", topic, reason, fallback)
        return fallback

    def _clients(self) -> tuple[Consumer, Producer]:
        if self._consumer is None or self._producer is None:
            raise RuntimeError("the extract stage is not open")
        return self._consumer, self._producer

    def _close(self) -> None:
        if self._producer is not None:
            self._producer.flush(SETTLE_TIMEOUT_S)
        if self._consumer is not None:
            try:
                self._commit_settled(asynchronous=False)
            finally:
                self._consumer.close()

    # -- one batch ---------------------------------------------------------------------------

    def step(self) -> int:
        """Read up to ``extract_batch_max`` records, send what they cause, commit when acknowledged.
        Returns how many records were read."""
        consumer, producer = self._clients()
        msgs = consumer.consume(self.settings.extract_batch_max, self.settings.extract_poll_s)
        if not msgs:
            producer.poll(0)
            return 0
        now = utcnow()
        first: dict[tuple[str, int], int] = {}
        last: dict[tuple[str, int], int] = {}
        by_job: dict[bytes, list[Signal]] = {}
        by_node: dict[bytes, list[Signal]] = {}
        placements: list[RankPlacement] = []
        found = self.prefilter.record_literals([m.value() or b"" for m in msgs])
        for m, literals in zip(msgs, found, strict=True):
            if (err := m.error()) is not None:
                self._consumer_error(err)
                continue
            offset = m.offset() or 0
            tp = (m.topic() or self.source, m.partition() or 0)
            first.setdefault(tp, offset)
            last[tp] = offset
            if not literals and sends_nothing(m.value() or b""):
                continue
            # read whole, a literal-free record ``sends_nothing`` could not vouch for too (checking
            # it again inside ``extract_record`` would repeat the JSON load and the model)
            self._extract(m, tp, offset, now, by_job, by_node, literals or None, placements)
        self._produce_placements(placements, now)
        self._produce_signals(by_job, by_node)
        self.records += len(msgs)
        self._settle(first, last)
        return len(msgs)

    def _extract(
        self,
        m: Message,
        tp: tuple[str, int],
        offset: int,
        now: Any,
        by_job: dict[bytes, list[Signal]],
        by_node: dict[bytes, list[Signal]],
        literals: tuple[int, ...] | None,
        placements: list[RankPlacement],
    ) -> None:
        """Job signals, node facts and rank placements wait for the end of the batch
        (``_produce_placements``, ``_produce_signals``); the rest go now. ``literals``: what the batch
        scan found in the record (``None``: nothing)."""
        outs = extract_record(
            self.extractor,
            m.value() or b"",
            key_str(m.key()),
            tp[0],
            tp[1],
            offset,
            now,
            self.quieter,
            literals,
            placements,
        )
        for out in hold_job_signals(outs, by_job, by_node):
            self._produce(self.topics[out.dest], out.key, codec.dumps(out.value))

    def _produce_placements(self, placements: list[RankPlacement], now: datetime) -> None:
        """The batch's rank placements in their compact form, packed per partition: under their job
        on ``signals.job`` where the record named it, else under their node on ``signals.node`` for
        the route step to file under the node's job. Sent ahead of the batch's signals, so that on
        each partition a job's ranks are placed before the errors naming them are decided."""
        if not placements:
            return
        by_job: dict[bytes, list[RankPlacement]] = {}
        by_node: dict[bytes, list[RankPlacement]] = {}
        for p in placements:
            if p.job_id is not None:
                by_job.setdefault(p.job_id.encode(), []).append(p)
            else:
                by_node.setdefault(p.node.encode(), []).append(p)
        topic = self.topics["signals_job"]
        for partition, key, value in pack_placements(by_job, self._job_partition, "job", now):
            self._produce(topic, key, codec.dumps(value), partition)
        topic = self.topics["signals_node"]
        for partition, key, value in pack_placements(by_node, self._node_partition, "node", now):
            self._produce(topic, key, codec.dumps(value), partition)

    def _produce_signals(self, by_job: dict[bytes, list[Signal]], by_node: dict[bytes, list[Signal]]) -> None:
        """Each job's signals of the batch, in the order read, packed with the other jobs of its
        partition into as few messages as ``SignalBatch`` allows: a job's burst (every rank's placement
        at start, every rank's timeout at a failure) and a busy fleet's thousand jobs with a fact or two
        each cost the stateful stages a message per partition, not one per job or per rank. Node facts
        the same way, per partition of ``signals.node`` (kernel noise from ten thousand nodes)."""
        topic = self.topics["signals_job"]
        for partition, key, value in pack_partitions(by_job, self._job_partition):
            self._produce(topic, key, codec.dumps(value), partition)
        topic = self.topics["signals_node"]
        for partition, key, value in pack_node_partitions(by_node, self._node_partition):
            self._produce(topic, key, codec.dumps(value), partition)

    def _produce(self, topic: str, key: bytes, value: bytes, partition: int | None = None) -> None:
        _, producer = self._clients()
        while True:
            try:
                if partition is None:
                    producer.produce(topic, value, key)
                else:
                    producer.produce(topic, value, key, partition=partition)
                return
            except BufferError:  # the local queue is full: let librdkafka send, then try again
                producer.poll(0.05)

    def _settle(self, first: dict[tuple[str, int], int], last: dict[tuple[str, int], int]) -> None:
        """Commit the batch once all its sends are acknowledged; otherwise read it again."""
        consumer, producer = self._clients()
        left = producer.flush(SETTLE_TIMEOUT_S)
        if left or self._failed:
            log.warning(
                "extract: %d sends not acknowledged, %d failed (%s); reading the batch again",
                left,
                len(self._failed),
                "; ".join(self._failed[:3]),
            )
            self._failed.clear()
            for (topic, part), offset in first.items():
                consumer.seek(TopicPartition(topic, part, offset))
            time.sleep(RETRY_PAUSE_S)
            return
        self._settled = [TopicPartition(t, p, off + 1) for (t, p), off in last.items()]
        self._commit_settled(asynchronous=True)

    def _commit_settled(self, *, asynchronous: bool) -> None:
        if not self._settled or self._consumer is None:
            return
        try:
            if asynchronous:
                self._consumer.commit(offsets=self._settled, asynchronous=True)
            else:
                self._consumer.commit(offsets=self._settled, asynchronous=False)
        except KafkaException as exc:  # a moved partition: its next owner reads from the last commit
            log.warning("extract: offset commit failed: %s", exc)

    # -- callbacks (on this thread, from consume/flush) -------------------------------------------

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._failed.append(f"{msg.topic()}: {err}")

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Before partitions move: everything read so far is settled (batches settle before the next
        read), so make the last commit synchronous; the new owner starts right after it."""
        self._commit_settled(asynchronous=False)
        self._settled = []

    def _consumer_error(self, err: KafkaError) -> None:
        if err.fatal():
            raise KafkaException(err)
        log.warning("extract: consumer error: %s", err)


def register(pipe: Any, make_stage: Callable[[Settings], BatchedExtract] = BatchedExtract) -> type:
    """Run the stage as a service of the worker's Faust app: started once tables are recovered,
    stopped (last batch settled and committed) with the worker, and a stage that dies crashes it.
    It runs in a child process (``process.py``) unless ``extract_process`` is off, then in a thread.
    Returns the service class (tests start it on its own)."""
    import mode

    from streams.extract.process import ExtractProcess

    settings = pipe.settings

    class ExtractStage(mode.Service):
        stage: BatchedExtract | ExtractProcess

        async def on_start(self) -> None:
            if settings.extract_process:
                self.stage = ExtractProcess(settings, make_stage)
            else:
                self.stage = make_stage(settings)
            self.stage.start()
            pipe.services["extract"] = self.stage

        async def on_stop(self) -> None:
            self.stage.stop()
            await asyncio.to_thread(self.stage.join, SETTLE_TIMEOUT_S + 10)

        @mode.Service.task
        async def _watch(self) -> None:
            while not self.should_stop:
                await self.sleep(1.0)
                if not self.stage.alive() and not self.should_stop:
                    await self.crash(self.stage.error or RuntimeError("the extract stage stopped"))
                    return

    pipe.app.service(ExtractStage)
    return ExtractStage
