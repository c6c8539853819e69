"""``sickbay sink clickhouse``: signals, incidents, actions, results, audit and dead letters → ClickHouse.

The add/flush contract: records are buffered per table and written in one
insert per table when the batch is full or old enough; only then are the Kafka
offsets committed. A crash before the commit replays the batch, and the
ReplacingMergeTree tables collapse the duplicates. A record that does not
validate is written to the ``dead_letters`` table with the reason, never dropped.
"""

from __future__ import annotations

import base64
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError
from pydantic import ValidationError

from connectors.kafka import consumer_config
from connectors.lifecycle import StopFlag
from connectors.sinks import rows
from connectors.sinks.clickhouse_schema import get_client, migrate
from schemas import codec
from schemas.actions import Action, ActionResult
from schemas.audit import AuditRecord
from schemas.base import utcnow
from schemas.deadletter import DeadLetter
from schemas.incidents import Incident
from schemas.signals import Signal
from schemas.topics import TopicCatalog

log = logging.getLogger("sickbay.sink")


@dataclass
class SinkStats:
    consumed: int = 0
    written: dict[str, int] = field(default_factory=dict)
    skipped_routed: int = 0
    dead_lettered: int = 0
    flushes: int = 0


def table_map(cat: TopicCatalog) -> dict[str, rows.TableMap]:
    return {
        cat.signals_node.name: ("signals", Signal, rows.SIGNAL_COLUMNS, rows.signal_row),
        cat.signals_job.name: ("signals", Signal, rows.SIGNAL_COLUMNS, rows.signal_row),
        cat.incidents.name: ("incidents", Incident, rows.INCIDENT_COLUMNS, rows.incident_row),
        cat.actions.name: ("actions", Action, rows.ACTION_COLUMNS, rows.action_row),
        cat.action_results.name: ("action_results", ActionResult, rows.RESULT_COLUMNS, rows.result_row),
        cat.audit.name: ("audit", AuditRecord, rows.AUDIT_COLUMNS, rows.audit_row),
        cat.dlq.name: ("dead_letters", DeadLetter, rows.DLQ_COLUMNS, rows.dlq_row),
    }


class ClickHouseSink:
    def __init__(self, client: Any, database: str, cat: TopicCatalog) -> None:
        self.client = client
        self.database = database
        self.map = table_map(cat)
        self.columns = {t: cols for t, _m, cols, _f in self.map.values()}
        self.buffers: dict[str, list[list[Any]]] = {}
        self.stats = SinkStats()

    def add(
        self, topic: str, value: bytes | None, partition: int | None = None, offset: int | None = None
    ) -> None:
        table, model, _cols, to_row = self.map[topic]
        self.stats.consumed += 1
        try:
            record = model.model_validate(codec.loads(value or b""))
        except (ValidationError, ValueError) as exc:
            self._dead_letter(topic, value or b"", partition, offset, exc)
            return
        if isinstance(record, Signal) and record.routed:
            self.stats.skipped_routed += 1  # the original is stored from signals.node
            return
        self.buffers.setdefault(table, []).append(to_row(record))

    def _dead_letter(
        self, topic: str, value: bytes, partition: int | None, offset: int | None, exc: Exception
    ) -> None:
        self.stats.dead_lettered += 1
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
        self.buffers.setdefault("dead_letters", []).append(rows.dlq_row(dl))

    def pending(self) -> int:
        return sum(len(b) for b in self.buffers.values())

    def flush(self) -> None:
        for table, batch in self.buffers.items():
            if not batch:
                continue
            self.client.insert(f"{self.database}.{table}", batch, column_names=self.columns[table])
            self.stats.written[table] = self.stats.written.get(table, 0) + len(batch)
        self.buffers = {}
        self.stats.flushes += 1


def run_sink(
    bootstrap: str,
    dsn: str,
    database: str,
    cat: TopicCatalog,
    *,
    group_id: str = "sickbay-sink",
    batch_size: int = 5000,
    max_wait_s: float = 1.0,
    idle_exit_s: float | None = None,
) -> SinkStats:
    """Consume until SIGTERM/SIGINT (or ``idle_exit_s`` without records); flush, commit, exit."""
    client = get_client(dsn)
    migrate(client, database)
    sink = ClickHouseSink(client, database, cat)
    consumer = Consumer(consumer_config(bootstrap, group_id, "sickbay-sink"))
    consumer.subscribe(list(sink.map))
    stopping = StopFlag()
    last_flush = last_record = time.monotonic()
    uncommitted = 0
    try:
        while not stopping:
            msgs = consumer.consume(num_messages=batch_size, timeout=0.2)
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        log.warning("consumer error: %s", err)
                    continue
                sink.add(str(msg.topic()), msg.value(), msg.partition(), msg.offset())
                uncommitted += 1
                last_record = time.monotonic()
            now = time.monotonic()
            if uncommitted and (sink.pending() >= batch_size or now - last_flush >= max_wait_s):
                sink.flush()
                consumer.commit(asynchronous=False)  # only after the rows are in ClickHouse
                uncommitted, last_flush = 0, now
            if idle_exit_s is not None and now - last_record > idle_exit_s:
                break
    finally:
        if uncommitted:
            sink.flush()
            consumer.commit(asynchronous=False)
        consumer.close()
        client.close()
    return sink.stats
