"""The Faust application: one app, named topics from the catalog, one registered orjson codec."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
from collections.abc import Mapping
from typing import Any

import faust
from faust.serializers import codecs
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.transport.producer import ProducerBuffer
from faust.types import ProducerT, TransportT
from faust.types.tuples import FutureMessage

from schemas import codec
from streams.settings import Settings

CODEC = "sickbay-json"
log = logging.getLogger("sickbay.app")


class SickbayCodec(codecs.Codec):
    """Faust codec over sickbay's single JSON seam (pydantic models in, plain dicts out)."""

    def _dumps(self, obj: Any) -> bytes:
        return codec.dumps(obj)

    def _loads(self, s: bytes) -> Any:
        return codec.loads(s)


codecs.register(CODEC, SickbayCodec())


class IdempotentProducer(faust_aiokafka.Producer):
    """Faust's aiokafka producer with ``enable_idempotence``. Without it a send whose ack is lost when
    a partition leader goes away (a broker stopped, a network cut) is retried and lands twice: the
    3-broker fault test saw every action of a run delivered twice. Idempotence needs acks=all, which
    ``create_app`` sets; Faust 0.15 has no setting for it, hence the subclass."""

    def _settings_default(self) -> Any:
        return {**super()._settings_default(), "enable_idempotence": True}


class IdempotentTransport(faust_aiokafka.Transport):
    Producer = IdempotentProducer


def skipped_by_the_stream(app: Any, message: Any) -> bool:
    """Faust's streams skip a message they find while a rebalance holds the flow, or one fetched under
    the previous consumer generation, and acknowledge it "so that the lag does not grow". Such a
    message was never handled (never ``tracked``, which a stream does before handing a message on),
    and the conditions still hold when its acknowledgement comes, in the same step. A message that
    could not be decoded is acknowledged by the conductor while the flow runs: not this."""
    return not message.tracked and (
        message.generation_id != app.consumer_generation_id or not app.flow_control.is_active()
    )


class SkipSafeConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer that never acknowledges a message its stream skipped.

    For a partition this worker keeps, or takes over, in the rebalance, that acknowledgement is a
    loss: the commit timer can pass the skipped offsets before the streams seek back to the
    committed offsets at the rebalance's end, and then nothing handles them. Unacknowledged, they
    hold the partition's commit back, and the seek reads them again for whichever worker owns the
    partition then. Every other acknowledgement is Faust's own.

    One hold needs help: Faust's commit lets the offset at the committed position be absent from
    its acknowledged offsets (``_new_offset`` tolerates ``min(acked) == committed + 1``, since a
    transaction marker or a compacted record may sit there and never be delivered). A withheld
    message at that very offset would be committed past all the same; the consumer remembers the
    offsets it withheld until the next seek, and commits nothing for a partition whose committed
    position is one of them."""

    def ack(self, message: Any) -> bool:
        if skipped_by_the_stream(self.app, message) and self.app.topics.acks_enabled_for(message.topic):
            message.acked = True  # settled: the stream's later calls for this message are no-ops
            self._withheld_offsets().setdefault(message.tp, set()).add(message.offset)
            log.info(
                "held back the ack of a message the stream skipped in a rebalance: %s[%s]@%s",
                message.topic,
                message.partition,
                message.offset,
            )
            return False
        return super().ack(message)

    _withheld: dict[Any, set[int]] | None = None  # partition -> offsets withheld since the last seek

    def _withheld_offsets(self) -> dict[Any, set[int]]:
        if self._withheld is None:
            self._withheld = {}
        return self._withheld

    def _new_offset(self, tp: Any) -> int | None:
        withheld = self._withheld_offsets().get(tp)
        if withheld and self._committed_offset[tp] in withheld:
            return None  # the message at the committed position was skipped: read again after the seek
        new: int | None = super()._new_offset(tp)
        if withheld and new is not None and new > (lowest := min(withheld)):
            # Faust checks the head of the acknowledged run against the committed offset only when
            # there is one: on a partition never committed, a run starting past a withheld message
            # would be committed over it. Up to it, then; what lies past it is read again after the seek.
            return lowest
        return new

    async def perform_seek(self) -> None:
        """The rebalance's seek to the committed offsets: every withheld message is read again.

        The flow stops first, and stays stopped until the recovery resumes it. After a recovery that
        read changelogs, Faust's ``on_recovery_completed`` resumes the stream partitions and seeks
        them one by one (an OffsetFetch each) while the flow it opened for the changelogs still runs,
        then resumes flow control, which empties every stream's queue. A message fetched after its
        partition's seek and still queued then was dropped with its read position already past it:
        never handled, never read again (the scale-out test, 2026-12-04: every ``signals.job`` record
        produced in the 0.4 s of that seek was lost, and a job's incident missed its root). Stopped,
        the fetcher delivers nothing during the seek; what it had queued is dropped and read again
        from the committed offsets once the recovery resumes the flow. Every caller resumes it after
        the seek (the recovery's two endings), or calls this while it is stopped (``getmany``)."""
        self.stop_flow()
        self._withheld_offsets().clear()
        await super().perform_seek()

    async def seek_to_committed(self) -> Mapping[Any, int]:
        """Every stream partition to its committed offset, and one with none to its first offset.

        aiokafka's seek leaves a partition without a committed offset (or committed at 0) where its
        fetcher stands, and Faust then reads it on from there, with no committed offset to check its
        acknowledgements against. What the rebalance dropped on such a partition was never read
        again, and the next commit passed it: records fetched ahead while the recovery read
        changelogs, handed to the streams as it resumed the partition and emptied from their queues
        by its resume a moment later, or the end of a batch the stopped flow cut off. The scale-out CI
        run of 2026-12-04 lost one job whole, most likely this way (not reproduced here since): its
        ``signals.job`` partition got its first records after the broker loss, while the group's
        commits were failing for a new coordinator, and may well have had no committed offset when
        the worker kill's rebalance came. The group's consumers start such a partition at the
        earliest offset (``consumer_auto_offset_reset``), so the seek goes there too: what was
        handled already comes again, a replay like the one after any kill -9. Changelog partitions
        keep their place (never committed; a standby reads them on).

        The first offsets are looked up, then sought to, rather than asked of aiokafka's
        ``seek_to_beginning``: that leaves a partition without a position until its reset is done,
        and Faust's livelock check reads every partition's position on its own timer, where
        aiokafka asserts one is set (a clean-clone CI run of 2026-12-04 crashed a worker so)."""
        committed = await super().seek_to_committed()
        acking = self.app.topics.acks_enabled_for
        unset = [tp for tp, offset in committed.items() if not offset and acking(tp.topic)]
        if unset:
            log.info("no committed offset: reading from the first offset of %s", _tps(unset))
            for tp, first in (await self._thread.earliest_offsets(*unset)).items():
                self._thread.seek(tp, first)
        return committed


def _tps(tps: list[Any], most: int = 12) -> str:
    """Partitions for a log line: the first ``most`` by name, then how many more."""
    ordered = sorted(tps, key=lambda tp: (tp.topic, tp.partition))
    named = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in ordered[:most])
    return named if len(ordered) <= most else f"{named} and {len(ordered) - most} more"


class SickbayConsumerTransport(faust_aiokafka.Transport):
    Consumer = SkipSafeConsumer


PRODUCER_BUFFER_MESSAGES = 2000
FLUSH_RECHECK_S = 0.1  # how often a waiting flush looks again whether the buffer still runs


class DrainingBuffer(ProducerBuffer):
    """Faust's buffer of table writes (changelog sends), with a flush that empties it and a sender
    that takes every queued write in one pass.

    Faust flushes this buffer, then the producer, before it commits the input offsets, so that a
    committed offset's table writes are on the broker. The stock flush returns as soon as no write
    leaves the buffer within 0.1 s, with the rest still queued, and the commit goes ahead. aiokafka's
    send waits longer than that while a partition has no leader (its broker just died) or on a
    loaded host, and a ``kill -9`` then lost table writes whose input offsets were already
    committed: the partition's next owner recovered a window without a signal it would never read
    again (the scale-out CI test, 2026-12-01: an incident whose root had gone, category unknown).

    This flush returns once every queued write has been handed to the producer, whose own flush then
    waits for the broker's acks. A write being handed over counts as queued: the sending task has
    taken it from the queue but aiokafka has not got it yet.

    The stock sender also woke once per write, and a flush that waited for it woke once per write too
    (an ``asyncio.wait_for`` each: a take's few hundred writes were a few hundred trips through the
    event loop). Here the sender, once woken, hands over everything queued in one pass, and a flush
    waits once, for the sender to be idle: nothing queued and nothing being handed over. Only the
    sender sends, so writes reach the producer in the order they were made, and a send that fails
    fails there, as in Faust (a flush never takes a write off the queue that it could then lose).
    Stopping keeps Faust's behaviour (the sending task ends with the service)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._queued = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def put(self, fut: FutureMessage) -> None:
        super().put(fut)
        self._idle.clear()
        self._queued.set()

    @ProducerBuffer.task
    async def _handle_pending(self) -> None:
        pending = self.pending
        while not self.should_stop:
            await self._queued.wait()
            self._queued.clear()
            while not pending.empty():
                await self._send_pending(pending.get_nowait())
                self.message_sent.set()
            self._idle.set()  # no await since the queue was found empty: no write came in between

    async def flush(self) -> None:
        while self.state == "running" and not self._idle.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), timeout=FLUSH_RECHECK_S)
        await super().flush()


class SickbayApp(faust.App):
    """``faust.App`` whose producer transport is the idempotent one (the consumer side is unchanged)."""

    def _new_producer_transport(self) -> TransportT:
        return IdempotentTransport(self.conf.broker_producer, self)

    def _new_transport(self) -> TransportT:
        return SickbayConsumerTransport(self.conf.broker_consumer, self)

    def _new_producer(self) -> ProducerT:
        """Faust holds table writes (changelog sends) in a buffer and pauses the stream to drain it
        past 100 messages, logging a warning and an info line each time. A packed batch's writes
        at its end are a few hundred, so the stock bound paused and logged after most batches (375
        times in one ``make bench-stream`` run: 1.6 % of the worker's time was those log lines).
        The buffer is a ``DrainingBuffer``, so that a commit never passes writes still queued."""
        producer = super()._new_producer()
        buffer = DrainingBuffer(loop=producer.loop, beacon=producer.beacon)
        buffer.app = self
        if producer.threaded_producer is not None:
            buffer.threaded_producer = producer.threaded_producer
        buffer.max_messages = PRODUCER_BUFFER_MESSAGES
        producer.buffer = buffer
        return producer


def tune_the_gc() -> None:
    """For a worker's long-lived processes (the Faust worker and its extract process), not for
    tests. A worker holds hundreds of thousands of objects built at start-up (modules, pydantic
    schemas, rule tables) and allocates pydantic objects at a high rate, so CPython's full
    collections came every second or two and walked the whole heap to find nothing: 20 pauses of
    50-300 ms in one ``make bench-stream`` run (measured with ``gc.callbacks``, 2026-11-30). Freezing
    what start-up built takes it out of every later collection. Raising the young threshold as well
    (20,000 instead of 700) measured slower in alternated runs, so the thresholds stay CPython's."""
    gc.freeze()


EXTRACT_THREAD_SWITCH_S = 0.0005
PYTHON_SWITCH_S = 0.005


def share_the_gil(settings: Settings) -> None:
    """With ``SICKBAY_EXTRACT_PROCESS=false`` the batched extract stage is a thread of the worker,
    CPU-bound between its reads, beside the event loop with every agent (many short socket calls). A
    thread that drops the GIL for a socket call waits, when it returns, until the other thread hands
    it back, which CPython forces only every switch interval (5 ms by default), so the loop stalled
    behind extraction after nearly every send and poll. For that layout 0.5 ms measured +8 %
    events/s on bench-stream's short profile (seven alternated pairs, 2026-11-30, every pair in
    favour; 0.1 ms was no better and once much worse). With extract in its own process (the default)
    the worker's other threads are Faust's and aiokafka's light helpers, and CPython's 5 ms measured
    +4 % against 0.5 ms (two alternated pairs of the full bench, 2026-11-30). An operator's
    ``SICKBAY_GIL_SWITCH_INTERVAL_S`` wins over both."""
    interval = settings.gil_switch_interval_s
    if interval is None:
        thread = settings.extract_stage == "batched" and not settings.extract_process
        interval = EXTRACT_THREAD_SWITCH_S if thread else PYTHON_SWITCH_S
    sys.setswitchinterval(interval)


def create_app(settings: Settings, **overrides: Any) -> faust.App:
    """Build the app; tests pass ``store="memory://"``. The id is always ``settings.app_id``, so the
    catalog pre-creates the internal topics this app will use."""
    share_the_gil(settings)
    conf: dict[str, Any] = {
        "broker": f"kafka://{settings.kafka_bootstrap}",
        "store": settings.faust_store,
        "datadir": str(settings.state_dir / "faust" / "{conf.id}"),
        "topic_partitions": settings.partitions,
        "topic_replication_factor": settings.replication_factor,
        "topic_allow_declare": True,  # only changelog/leader topics; sources are pre-created
        "processing_guarantee": "at_least_once",  # exactly_once is not dependable in faust 0.15
        "consumer_auto_offset_reset": "earliest",
        "broker_session_timeout": settings.faust_session_timeout_s,
        "broker_heartbeat_interval": settings.faust_heartbeat_s,
        "broker_rebalance_timeout": settings.faust_rebalance_timeout_s,
        "broker_request_timeout": max(30.0, settings.faust_session_timeout_s * 3),
        "broker_commit_interval": settings.faust_commit_interval_s,
        "broker_max_poll_records": 500,
        # Messages a stream buffers before its consumer pauses the partition. Faust's default (4096)
        # lets a burst pile up in every agent's queue; smaller queues drained as they fill measured
        # +5 % events/s on bench-stream's short profile (A/B, 4096 / 512 / 128: 8.2k / 8.4k / 8.6k).
        "stream_buffer_maxsize": 128,
        "table_standby_replicas": 0,
        "stream_wait_empty": True,
        "web_enabled": settings.faust_web_enabled,
        "web_port": settings.faust_web_port,
        "producer_acks": -1,
        "producer_linger": 0.005,
        # aiokafka keeps one open batch per partition and waits for the broker's ack when it is
        # full: at the 16 KiB default a stage stalls every ~10 signals (bench-stream)
        "producer_max_batch_size": 512 * 1024,
        "key_serializer": "raw",
        "value_serializer": CODEC,
    }
    conf.update(overrides)
    app_id = settings.app_id
    (settings.state_dir / "faust" / app_id).mkdir(parents=True, exist_ok=True)
    return SickbayApp(app_id, **conf)
