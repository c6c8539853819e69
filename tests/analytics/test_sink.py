from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from connectors.kafka import ReliableProducer, consumer_config, ensure_topics
from connectors.sinks import metrics
from connectors.sinks.sink import ClickHouseSink, run_sink
from schemas import codec
from schemas.topics import TopicCatalog
from tests.analytics.seed import build, feed, insert_inventory

pytestmark = pytest.mark.integration

ROLLUPS = {
    "incidents": "SELECT count() FROM {db}.incidents FINAL",
    "signals": "SELECT count() FROM {db}.signals FINAL",
    "actions": "SELECT count() FROM {db}.actions FINAL",
    "audit": "SELECT count() FROM {db}.audit FINAL",
    "assignments": "SELECT count() FROM {db}.job_assignments FINAL",
    "signals_daily": "SELECT sum(n) FROM (SELECT uniqExactMerge(signals) AS n FROM {db}.signals_daily GROUP BY day, node, rule)",
    "outcomes": "SELECT sum(n) FROM (SELECT uniqExactMerge(actions) AS n FROM {db}.action_outcomes_daily GROUP BY day, kind, status)",
    "attempts": "SELECT count(), sum(job_size) FROM {db}.job_attempt_runs",
    "failures_node_daily": "SELECT sum(incidents) FROM {db}.failures_node_daily",
    "gpu_hours": "SELECT round(sum(gpu_hours_lost), 3) FROM {db}.gpu_hours_lost",
    "health": "SELECT count() FROM {db}.node_health FINAL",
}


def _answers(client, db):
    return {k: client.query(sql.format(db=db)).result_rows[0] for k, sql in ROLLUPS.items()}


def test_a_replayed_history_changes_no_answer(ch_client, fresh_db):
    """At-least-once delivery: the same records written twice (a crash before the offset commit)."""
    cat = TopicCatalog(prefix="replay")
    fleet = build()
    sink = ClickHouseSink(ch_client, fresh_db, cat)
    feed(sink, cat, fleet)
    insert_inventory(ch_client, fresh_db)
    once = _answers(ch_client, fresh_db)
    feed(sink, cat, fleet)  # the replay, in a batch cut differently
    feed(ClickHouseSink(ch_client, fresh_db, cat), cat, fleet)  # and from a restarted sink
    twice = _answers(ch_client, fresh_db)
    assert twice == once
    raw = ch_client.query(f"SELECT count() FROM {fresh_db}.incidents").result_rows[0][0]
    assert raw > once["incidents"][0]  # the duplicates are there; FINAL (and the views) collapse them
    assert once["incidents"] == (len({i.incident_id for i in fleet.incidents}),)
    assert once["signals"] == (len(fleet.signals),)


def test_a_provisional_revision_is_stored_marked_and_implicates_no_node(ch_client, fresh_db):
    """A cascade-only verdict published inside the root grace names the node whose timeouts had not
    arrived yet; the final revision names the real culprit. Only the final one enters node health."""
    from schemas.incidents import Culprit

    cat = TopicCatalog(prefix="prov")
    base = build().latest("42")
    incident_id = f"inc-prov-{uuid.uuid4().hex[:8]}"
    early = base.model_copy(
        update={
            "incident_id": incident_id,
            "revision": 1,
            "provisional": True,
            "culprit": Culprit(node="slow-shipper"),
        }
    )
    final = early.model_copy(update={"revision": 2, "provisional": False, "culprit": Culprit(node="gpu-07")})
    sink = ClickHouseSink(ch_client, fresh_db, cat)
    for offset, inc in enumerate([early, final]):
        sink.add(cat.incidents.name, codec.dumps(inc), 0, offset)
    sink.flush()
    rows = ch_client.query(
        f"SELECT revision, provisional FROM {fresh_db}.incidents WHERE incident_id = {{id:String}} ORDER BY revision",
        parameters={"id": incident_id},
    ).result_rows
    assert rows == [(1, 1), (2, 0)]
    implicated = ch_client.query(
        f"SELECT node FROM {fresh_db}.node_health FINAL WHERE incident_id = {{id:String}}",
        parameters={"id": incident_id},
    ).result_rows
    assert implicated == [("gpu-07",)]


def test_rows_round_trip_with_their_json_columns(ch_client, fresh_db):
    cat = TopicCatalog(prefix="rt")
    fleet = build()
    feed(ClickHouseSink(ch_client, fresh_db, cat), cat, fleet)
    inc = fleet.latest("42")
    supporting, evidence, opened = ch_client.query(
        f"SELECT supporting, evidence, opened_at FROM {fresh_db}.incidents FINAL WHERE incident_id = {{id:String}}",
        parameters={"id": inc.incident_id},
    ).result_rows[0]
    assert codec.loads(evidence) == codec.loads(codec.dumps(inc.evidence))
    assert codec.loads(supporting) == codec.loads(codec.dumps(inc.supporting))
    assert opened.replace(tzinfo=inc.opened_at.tzinfo) == inc.opened_at.replace(
        microsecond=inc.opened_at.microsecond // 1000 * 1000
    )
    attrs = ch_client.query(
        f"SELECT attrs FROM {fresh_db}.signals WHERE rule = 'gpu.xid' LIMIT 1"
    ).result_rows[0][0]
    assert codec.loads(attrs)["code"] in (79, 48)


def test_the_buffer_is_bounded_and_a_failed_flush_keeps_its_rows(ch_client, fresh_db):
    cat = TopicCatalog(prefix="bp")
    fleet = build()
    sink = ClickHouseSink(ch_client, fresh_db, cat, max_rows=5)
    for n, sig in enumerate(fleet.signals[:5]):
        assert not sink.full
        sink.add(cat.signals_node.name, codec.dumps(sig), 0, n)
    assert sink.full and sink.room() == 0

    class Down:
        def raw_insert(self, *a, **k):
            raise ConnectionError("ClickHouse is down")

    sink.client = Down()
    failures = metrics.FLUSH_FAILURES._value.get()
    with pytest.raises(ConnectionError):
        sink.flush()
    assert sink.pending() == 5 and sink.offsets == {(cat.signals_node.name, 0): 5}
    assert metrics.FLUSH_FAILURES._value.get() == failures + 1
    sink.client = ch_client
    sink.flush()
    assert sink.pending() == 0
    assert ch_client.query(f"SELECT count() FROM {fresh_db}.signals").result_rows[0][0] == 5


class FlakyClient:
    """A real client whose first inserts fail (the store is down for a while), counting calls."""

    def __init__(self, real, failures: int) -> None:
        self.real = real
        self.failures = failures
        self.inserts = 0

    def raw_insert(self, *args, **kwargs):
        self.inserts += 1
        if self.failures > 0:
            self.failures -= 1
            time.sleep(0.3)
            raise ConnectionError("ClickHouse unavailable")
        return self.real.raw_insert(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_run_sink_pauses_while_the_store_is_down_then_writes_everything_once_and_commits(
    kafka_bootstrap, ch_client, fresh_db
):
    cat = TopicCatalog(prefix=f"sinkbp{uuid.uuid4().hex[:8]}", partitions=2)
    ensure_topics(kafka_bootstrap, cat.sickbay())
    fleet = build()
    producer = ReliableProducer(kafka_bootstrap, "test-sink-bp", linger_ms=5)
    bulk = [s.model_copy(update={"signal_id": f"bulk-{i}"}) for i in range(400) for s in fleet.signals[:1]]
    for sig in [*fleet.signals, *bulk]:
        producer.produce(cat.signals_node.name, codec.dumps(sig), key=(sig.node or "").encode())
    for inc in fleet.incidents:
        producer.produce(cat.incidents.name, codec.dumps(inc), key=inc.job_id.encode())
    producer.produce(cat.incidents.name, b'{"incident_id": "broken"}', key=b"x")
    assert producer.close(30) == 0
    flaky = FlakyClient(ch_client, failures=3)
    paused_seen = []
    stop = threading.Event()
    group = f"{cat.prefix}-sink"

    def watch():
        while not stop.is_set():
            paused_seen.append(metrics.PAUSED._value.get())
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        stats = run_sink(
            kafka_bootstrap,
            "unused://",
            fresh_db,
            cat,
            group_id=group,
            batch_size=50,
            max_buffer_rows=100,
            max_wait_s=0.2,
            idle_exit_s=8.0,
            client=flaky,
            stop=threading.Event(),
        )
    finally:
        stop.set()
        watcher.join()
    assert 1 in paused_seen  # the buffer filled while the inserts failed: consumption paused
    assert flaky.inserts > 3
    expected_signals = len(fleet.signals) + 400
    assert (
        ch_client.query(f"SELECT count() FROM {fresh_db}.signals FINAL").result_rows[0][0] == expected_signals
    )
    assert ch_client.query(f"SELECT count() FROM {fresh_db}.dead_letters").result_rows[0][0] == 1
    assert stats.dead_lettered == 1
    consumer = Consumer(consumer_config(kafka_bootstrap, group, "test-check"))
    try:
        committed = consumer.committed(
            [TopicPartition(cat.signals_node.name, p) for p in range(2)]
            + [TopicPartition(cat.incidents.name, p) for p in range(2)],
            timeout=10,
        )
    finally:
        consumer.close()
    total = sum(max(tp.offset, 0) for tp in committed)
    assert total == expected_signals + len(fleet.incidents) + 1  # every record's offset is committed


class _Consumer:
    """Records offset commits (the part of a Kafka consumer WritePipeline uses)."""

    def __init__(self) -> None:
        self.commits: list[list[tuple[str, int, int]]] = []

    def commit(self, offsets, asynchronous):
        self.commits.append([(tp.topic, tp.partition, tp.offset) for tp in offsets])


def test_offsets_are_committed_in_order_and_never_past_an_unwritten_batch(ch_client, fresh_db):
    import time as _time

    from connectors.sinks.sink import WritePipeline

    cat = TopicCatalog(prefix="order")
    topic = cat.signals_node.name
    sigs = build().signals
    assert len(sigs) >= 7
    flaky = FlakyClient(ch_client, failures=10)
    consumer = _Consumer()
    sink = ClickHouseSink(flaky, fresh_db, cat)
    pipe = WritePipeline(sink, consumer)
    for n, sig in enumerate(sigs[:3]):
        sink.add(topic, codec.dumps(sig), 0, n)
    assert pipe.start_write(_time.monotonic(), due=True)
    pipe.settle(wait=True)  # the insert failed: the batch waits for a retry
    assert pipe.retry is not None and consumer.commits == []
    for n, sig in enumerate(sigs[3:5], start=3):
        sink.add(topic, codec.dumps(sig), 0, n)
    pipe.drain()  # the retry fails again: both batches go back to the buffer, nothing is committed
    assert consumer.commits == [] and sink.pending() == 5
    flaky.failures = 0
    for n, sig in enumerate(sigs[5:7], start=5):
        sink.add(topic, codec.dumps(sig), 0, n)
    pipe.close()
    assert consumer.commits == [[(topic, 0, 7)]]
    assert ch_client.query(f"SELECT count() FROM {fresh_db}.signals FINAL").result_rows[0][0] == 7
