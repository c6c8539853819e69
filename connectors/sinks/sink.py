"""``sickbay sink clickhouse``: every stage's output topic → ClickHouse.

The add/flush contract
    :meth:`ClickHouseSink.add` validates one record against its contract and
    buffers its row (already encoded); :meth:`ClickHouseSink.flush` writes every
    buffered row, one insert per table. Kafka offsets are committed only after
    the insert that holds their rows has returned, so a crash replays the
    uncommitted records. A record that does not validate is written to the
    ``dead_letters`` table with the reason and its bytes, never dropped.

Dedup on replay
    Every table is a ReplacingMergeTree keyed by a deterministic id (signal id,
    incident id + revision, action id, audit id, ...), and the additive rollups
    count ``uniqExact`` ids, so rows written twice by a replay collapse. The
    collapse happens at merge time: read with ``FINAL`` (the views and the API
    do) for exact answers.

Backpressure
    The buffer is bounded (rows and bytes): :attr:`ClickHouseSink.full` and
    :meth:`ClickHouseSink.room`. :func:`run_sink` never fetches more than the
    room left, and writes one batch in a background thread while it consumes and
    validates the next; when the buffer is full (the store is slow or down) it
    pauses its partitions, keeps polling so it stays in the group, retries the
    failed insert with backoff, and resumes once the batch is in.
"""

from __future__ import annotations

import base64
import gc
import logging
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from pydantic import ValidationError

from connectors.kafka import consumer_config
from connectors.lifecycle import StopFlag
from connectors.sinks import metrics, rows
from connectors.sinks.clickhouse_schema import get_client, migrate
from schemas import codec
from schemas.actions import Action, ActionResult, ModeChange
from schemas.audit import AuditRecord
from schemas.base import utcnow
from schemas.collector import CollectorReport
from schemas.deadletter import DeadLetter
from schemas.health import NodeHealth
from schemas.incidents import Incident
from schemas.signals import AssignmentBatch, JobNodeAssignment, PlacementBatch, Signal, SignalBatch
from schemas.topics import TopicCatalog

log = logging.getLogger("sickbay.sink")

DEFAULT_MAX_ROWS = 200_000
_OBSERVED_TABLES = {"incidents", "action_results", "dead_letters"}  # feed metrics beyond row counts
DEFAULT_MAX_BYTES = 256 * 2**20
_BATCH_MARK = b'"signal_batch"'  # a SignalBatch says its kind in its first fields
_ASSIGNMENTS_MARK = b'"assignment_batch"'  # and so does an AssignmentBatch
_PLACEMENTS_MARK = b'"placement_batch"'  # and a PlacementBatch
_BATCH_MARK_WITHIN = 128


@dataclass
class SinkStats:
    consumed: int = 0
    written: dict[str, int] = field(default_factory=dict)
    skipped_routed: int = 0
    dead_lettered: int = 0
    flushes: int = 0


@dataclass
class Batch:
    """Rows cut from the buffer for one flush, with the Kafka offsets they make safe to commit."""

    tables: dict[str, list[bytes]]
    offsets: dict[tuple[str, int], int]  # (topic, partition) -> next offset to consume
    rows: int
    done: set[str] = field(default_factory=set)  # tables already inserted (a retry skips them)


def table_map(cat: TopicCatalog) -> dict[str, rows.TableMap]:
    t = rows.TableMap
    return {
        cat.signals_node.name: t(
            "signals", Signal, rows.SIGNAL_COLUMNS, rows.signal_row, rows.signal_row_json
        ),
        cat.signals_job.name: t(
            "signals", Signal, rows.SIGNAL_COLUMNS, rows.signal_row, rows.signal_row_json
        ),
        cat.topology_node.name: t(
            "job_assignments", JobNodeAssignment, rows.ASSIGNMENT_COLUMNS, rows.assignment_row
        ),
        cat.incidents.name: t("incidents", Incident, rows.INCIDENT_COLUMNS, rows.incident_row),
        cat.actions.name: t("actions", Action, rows.ACTION_COLUMNS, rows.action_row),
        cat.action_results.name: t("action_results", ActionResult, rows.RESULT_COLUMNS, rows.result_row),
        cat.audit.name: t("audit", AuditRecord, rows.AUDIT_COLUMNS, rows.audit_row),
        cat.control_modes.name: t("mode_changes", ModeChange, rows.MODE_COLUMNS, rows.mode_row),
        cat.dlq.name: t("dead_letters", DeadLetter, rows.DLQ_COLUMNS, rows.dlq_row),
        cat.collector_reports.name: t(
            "collector_reports", CollectorReport, rows.REPORT_COLUMNS, rows.report_row
        ),
        cat.health_nodes.name: t("node_health_scores", NodeHealth, rows.HEALTH_COLUMNS, rows.health_row),
    }


def stage_names(cat: TopicCatalog) -> dict[str, str]:
    """The pipeline stage whose output each topic is (the label of the events-per-stage counter)."""
    return {
        cat.signals_node.name: "extract",
        cat.signals_job.name: "route",
        cat.topology_node.name: "topology",
        cat.incidents.name: "correlate",
        cat.actions.name: "decide",
        cat.action_results.name: "act",
        cat.audit.name: "audit",
        cat.control_modes.name: "control",
        cat.dlq.name: "dead_letter",
        cat.collector_reports.name: "collect",
        cat.health_nodes.name: "node_health",
    }


class ClickHouseSink:
    """Buffered, validated, replay-safe writes of sickbay's records into ClickHouse."""

    def __init__(
        self,
        client: Any,
        database: str,
        cat: TopicCatalog,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.client = client
        self.database = database
        self.map = table_map(cat)
        self.stages = stage_names(cat)
        self.columns = {tm.table: tm.columns for tm in self.map.values()}
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.stats = SinkStats()
        self._observed = {t for t, tm in self.map.items() if tm.table in _OBSERVED_TABLES}
        self._reset()

    def _reset(self) -> None:
        self.buffers: dict[str, list[bytes]] = {}
        self.offsets: dict[tuple[str, int], int] = {}
        self._rows = 0
        self._bytes = 0
        self._per_topic: dict[str, int] = dict.fromkeys(self.map, 0)
        self._dead: Tally[tuple[str, str]] = Tally()
        self._outcomes: Tally[tuple[str, str]] = Tally()
        self._detect: list[float] = []
        self._action_s: list[tuple[str, float]] = []

    # -- the add/flush contract -------------------------------------------------------------------
    # add() and cut() run on the consuming thread; write() may run on another one with a cut batch.

    def add(
        self, topic: str, value: bytes | None, partition: int | None = None, offset: int | None = None
    ) -> None:
        """Validate one record and buffer its row (never refuses one: callers stop feeding when ``full``)."""
        tm = self.map[topic]
        self._per_topic[topic] += 1
        if partition is not None and offset is not None:
            self.offsets[(topic, partition)] = offset + 1
        if tm.model is Signal and _BATCH_MARK in (value or b"")[:_BATCH_MARK_WITHIN]:
            self._add_packed(topic, value or b"", partition, offset, SignalBatch)
            return
        if tm.model is Signal and _PLACEMENTS_MARK in (value or b"")[:_BATCH_MARK_WITHIN]:
            self._add_packed(topic, value or b"", partition, offset, PlacementBatch)
            return
        if tm.model is JobNodeAssignment and _ASSIGNMENTS_MARK in (value or b"")[:_BATCH_MARK_WITHIN]:
            self._add_packed(topic, value or b"", partition, offset, AssignmentBatch)
            return
        if tm.fast is not None:
            try:
                row = tm.fast(value or b"")
            except (rows.RowError, ValueError, KeyError, TypeError):
                pass  # not the worker's usual shape: the contract decides (it may accept, e.g. epoch times)
            else:
                if row is rows.SKIP:
                    self.stats.skipped_routed += 1
                else:
                    self._append(tm.table, rows.encode(row))
                return
        try:
            # One pass from bytes to a validated contract (pydantic-core parses the JSON itself).
            record = tm.model.model_validate_json(value or b"")
        except ValidationError as exc:
            self._dead_letter(topic, value or b"", partition, offset, exc)
            return
        if topic in self._observed:
            self._observe(record)
        elif tm.model is Signal and record.routed:  # type: ignore[attr-defined]
            self.stats.skipped_routed += 1  # the original is stored from signals.node
            return
        self._append(tm.table, rows.encode(tm.row(record)))

    def _add_packed(
        self,
        topic: str,
        value: bytes,
        partition: int | None,
        offset: int | None,
        packing: type[SignalBatch | AssignmentBatch | PlacementBatch],
    ) -> None:
        """A ``SignalBatch`` or a ``PlacementBatch`` (``signals.job``, ``signals.node``) or an
        ``AssignmentBatch`` (``topology.node``): one row per signal, placement (the
        ``nccl.rank_placement`` signal it stands for) or assignment, as if each had come alone (the
        packing is transport, not data); a batch that does not validate is dead-lettered whole."""
        try:
            batch = packing.model_validate_json(value)
        except ValidationError as exc:
            self._dead_letter(topic, value, partition, offset, exc)
            return
        table = self.map[topic].table
        if isinstance(batch, AssignmentBatch):
            for a in batch.assignments:
                self._append(table, rows.encode(rows.assignment_row(a)))
            return
        if isinstance(batch, PlacementBatch):
            for p in batch.placements:
                if p.routed:
                    self.stats.skipped_routed += 1  # the original is stored from signals.node
                else:
                    self._append(table, rows.encode(rows.signal_row(p.as_signal(batch.observed_time))))
            return
        for signal in batch.signals:
            if signal.routed:
                self.stats.skipped_routed += 1
            else:
                self._append(table, rows.encode(rows.signal_row(signal)))

    def _append(self, table: str, line: bytes) -> None:
        buf = self.buffers.get(table)
        if buf is None:
            buf = self.buffers[table] = []
        buf.append(line)
        self._rows += 1
        self._bytes += len(line) + 1

    def _observe(self, record: Any) -> None:
        if isinstance(record, Incident):
            if record.revision == 1:
                self._detect.append((record.opened_at - record.first_signal_time).total_seconds())
        elif isinstance(record, ActionResult):
            self._outcomes[(record.kind.value, record.status.value)] += 1
            self._action_s.append(
                (record.kind.value, (record.finished_at - record.started_at).total_seconds())
            )
        elif isinstance(record, DeadLetter):
            self._dead[(record.stage, record.reason)] += 1

    def _dead_letter(
        self, topic: str, value: bytes, partition: int | None, offset: int | None, exc: Exception
    ) -> None:
        self.stats.dead_lettered += 1
        self._dead[("sink", "invalid_record")] += 1
        dl = DeadLetter(
            stage="sink",
            reason="invalid_record",
            error=str(exc)[:2048],
            topic=topic,
            partition=partition,
            offset=offset,
            original_b64=base64.b64encode(value).decode(),
            time=utcnow(),
        )
        self._append("dead_letters", rows.encode(rows.dlq_row(dl)))

    def pending(self) -> int:
        return self._rows

    @property
    def full(self) -> bool:
        return self._rows >= self.max_rows or self._bytes >= self.max_bytes

    def room(self) -> int:
        """How many more records fit before the bound."""
        return 0 if self._bytes >= self.max_bytes else max(0, self.max_rows - self._rows)

    def cut(self) -> Batch:
        """Detach what is buffered (rows and the offsets they cover) as one batch to write."""
        batch = Batch(tables=self.buffers, offsets=self.offsets, rows=self._rows)
        self.stats.consumed += sum(self._per_topic.values())
        for topic, n in self._per_topic.items():
            if n:
                metrics.RECORDS.labels(self.stages[topic]).inc(n)
        for (stage, reason), n in self._dead.items():
            metrics.DEAD_LETTERS.labels(stage, reason).inc(n)
        for (kind, status), n in self._outcomes.items():
            metrics.ACTION_OUTCOMES.labels(kind, status).inc(n)
        for seconds in self._detect:
            metrics.INCIDENT_DETECT_SECONDS.observe(max(0.0, seconds))
        for kind, seconds in self._action_s:
            metrics.ACTION_SECONDS.labels(kind).observe(max(0.0, seconds))
        self._reset()
        metrics.BUFFERED.set(0)
        return batch

    def write(self, batch: Batch) -> None:
        """Insert a batch, one insert per table; on failure the batch can be written again as it is."""
        started = time.perf_counter()
        for table, lines in batch.tables.items():
            if not lines or table in batch.done:
                continue
            self.client.raw_insert(
                f"{self.database}.{table}",
                self.columns[table],
                b"\n".join(lines),
                settings=rows.INSERT_SETTINGS,
                fmt=rows.INSERT_FORMAT,
            )
            batch.done.add(table)
            self.stats.written[table] = self.stats.written.get(table, 0) + len(lines)
            metrics.ROWS_WRITTEN.labels(table).inc(len(lines))
        self.stats.flushes += 1
        metrics.FLUSH_SECONDS.observe(time.perf_counter() - started)

    def restore(self, batch: Batch) -> None:
        """Put an unwritten batch back in front of the buffer (a synchronous flush that failed)."""
        for table, lines in batch.tables.items():
            if table not in batch.done:
                self.buffers[table] = lines + self.buffers.get(table, [])
        self.offsets = {**batch.offsets, **self.offsets}
        self._rows = sum(len(b) for b in self.buffers.values())
        self._bytes = sum(len(line) + 1 for b in self.buffers.values() for line in b)

    def flush(self) -> None:
        """Write everything buffered. If the insert fails the rows stay buffered and the error is raised."""
        batch = self.cut()
        try:
            self.write(batch)
        except Exception:
            metrics.FLUSH_FAILURES.inc()
            self.restore(batch)
            raise


def _commit(consumer: Consumer | None, offsets: dict[tuple[str, int], int]) -> None:
    if consumer is None or not offsets:
        return
    try:
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        consumer.commit(offsets=tps, asynchronous=False)
    except KafkaException as exc:  # e.g. a partition revoked meanwhile: its new owner replays, rows collapse
        log.warning("offset commit failed (the records will be replayed and deduplicated): %s", exc)


class _Lag:
    """Consumer lag per partition from librdkafka's statistics (``stats_cb``, every ``every_s``).

    The statistics arrive inside ``consume()``, so measuring costs no broker round trip and never
    blocks the loop.
    """

    def __init__(self, group: str, every_s: float = 10.0) -> None:
        self.group = group
        self.every_s = every_s

    def config(self) -> dict[str, Any]:
        return {"statistics.interval.ms": int(self.every_s * 1000), "stats_cb": self.on_stats}

    def on_stats(self, payload: str) -> None:
        try:
            stats = codec.loads(payload)
        except ValueError:
            return
        for topic, t in (stats.get("topics") or {}).items():
            for part, p in (t.get("partitions") or {}).items():
                lag = p.get("consumer_lag", -1)
                if part != "-1" and isinstance(lag, int) and lag >= 0:
                    metrics.CONSUMER_LAG.labels(self.group, topic, part).set(lag)


class WritePipeline:
    """One batch being inserted (writer thread) while the next is consumed and validated.

    ``consumer``: where to commit the offsets of each written batch (``None``: nothing to commit,
    as in the benchmark, which feeds the sink from memory).
    """

    def __init__(self, sink: ClickHouseSink, consumer: Consumer | None) -> None:
        self.sink = sink
        self.consumer = consumer
        self.writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sickbay-sink-writer")
        self.inflight: tuple[Future[None], Batch] | None = None
        self.retry: Batch | None = None
        self.retry_at = 0.0
        self.backoff = 0.5
        self.paused = False

    def settle(self, wait: bool) -> None:
        """Finish the in-flight insert: commit its offsets, or keep the batch for a retry."""
        if self.inflight is None or (not wait and not self.inflight[0].done()):
            return
        future, batch = self.inflight
        self.inflight = None
        try:
            future.result()
        except Exception as exc:
            metrics.FLUSH_FAILURES.inc()
            log.warning("insert of %d rows failed, retrying in %.1fs: %s", batch.rows, self.backoff, exc)
            self.retry, self.retry_at = batch, time.monotonic() + self.backoff
            self.backoff = min(self.backoff * 2, 30.0)
            return
        self.backoff = 0.5
        _commit(self.consumer, batch.offsets)

    def start_write(self, now: float, due: bool) -> bool:
        """Start an insert (a retry first) when the writer is free; True when a new batch was cut."""
        if self.inflight is not None:
            return False
        if self.retry is not None:
            if now >= self.retry_at:
                batch, self.retry = self.retry, None
                self.inflight = (self.writer.submit(self.sink.write, batch), batch)
            return False
        if not due:
            return False
        batch = self.sink.cut()
        self.inflight = (self.writer.submit(self.sink.write, batch), batch)
        return True

    def backpressure(self) -> None:
        """Pause fetching while the buffer is full; resume when there is room again."""
        if self.sink.full == self.paused or self.consumer is None:
            return
        self.paused = self.sink.full
        (self.consumer.pause if self.paused else self.consumer.resume)(self.consumer.assignment())
        metrics.PAUSED.set(int(self.paused))
        state = "paused" if self.paused else "resumed"
        log.info("consumption %s (%d rows buffered)", state, self.sink.pending())

    def drain(self) -> None:
        """Write everything (in-flight, retried, buffered) and commit; on revoke and at exit.

        A batch that cannot be written goes back into the buffer with everything after it, uncommitted:
        committing a later batch would skip its records.
        """
        self.settle(wait=True)
        pending = [b for b in (self.retry, self.sink.cut()) if b is not None and b.rows]
        self.retry = None
        for i, batch in enumerate(pending):
            try:
                self.sink.write(batch)
            except Exception as exc:
                metrics.FLUSH_FAILURES.inc()
                log.error("could not write %d rows (kept, uncommitted): %s", batch.rows, exc)
                for unwritten in reversed(pending[i:]):
                    self.sink.restore(unwritten)
                return
            _commit(self.consumer, batch.offsets)

    def close(self) -> None:
        self.drain()
        self.writer.shutdown(wait=True)
        metrics.PAUSED.set(0)


def run_sink(
    bootstrap: str,
    dsn: str,
    database: str,
    cat: TopicCatalog,
    *,
    group_id: str = "sickbay-sink",
    batch_size: int = 20_000,
    max_wait_s: float = 1.0,
    idle_exit_s: float | None = None,
    max_buffer_rows: int = DEFAULT_MAX_ROWS,
    stop: threading.Event | None = None,
    client: Any = None,
    on_ready: Callable[[], None] | None = None,
) -> SinkStats:
    """Consume until stopped (SIGTERM/SIGINT, ``stop`` set, or ``idle_exit_s`` without records).

    ``client``: an open ClickHouse client to share (``sickbay serve`` shares the embedded store with
    the API); otherwise one is opened from ``dsn`` and closed at the end. ``stop``: an event for a sink
    running in a thread (signals only reach the main thread).
    """
    own_client = client is None
    client = client if client is not None else get_client(dsn)
    migrate(client, database)
    sink = ClickHouseSink(client, database, cat, max_rows=max(max_buffer_rows, batch_size))
    lag = _Lag(group_id)
    consumer = Consumer({**consumer_config(bootstrap, group_id, "sickbay-sink"), **lag.config()})
    pipe = WritePipeline(sink, consumer)
    consumer.subscribe(list(sink.map), on_revoke=lambda _c, _p: pipe.drain())
    stopping: Callable[[], bool] = stop.is_set if stop is not None else StopFlag().__bool__
    gc.collect()
    gc.freeze()  # start-up objects (schemas, clients) leave the collector's scans: less work per record
    last_flush = last_record = time.monotonic()
    if on_ready is not None:
        on_ready()
    try:
        while not stopping():
            now = time.monotonic()
            pipe.settle(wait=False)
            pending = sink.pending()
            due = pending >= batch_size or (pending > 0 and now - last_flush >= max_wait_s)
            if pipe.start_write(now, due):
                last_flush = now
            pipe.backpressure()
            room = min(batch_size, sink.room())
            msgs = consumer.consume(num_messages=max(1, room), timeout=0.05 if pipe.inflight else 0.2)
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        log.warning("consumer error: %s", err)
                    continue
                sink.add(str(msg.topic()), msg.value(), msg.partition(), msg.offset())
                last_record = time.monotonic()
            metrics.BUFFERED.set(sink.pending())
            if idle_exit_s is not None and time.monotonic() - last_record > idle_exit_s:
                break
    finally:
        pipe.close()
        consumer.close()
        if own_client:
            client.close()
        st = sink.stats
        log.info(
            "sink stopped: consumed %d, written %s, dead-lettered %d",
            st.consumed,
            st.written,
            st.dead_lettered,
        )
    return sink.stats
