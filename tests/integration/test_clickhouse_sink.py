from __future__ import annotations

import base64
import uuid

import pytest

from connectors.sinks.clickhouse_schema import LATEST_VERSION, get_client, migrate
from connectors.sinks.sink import ClickHouseSink
from schemas import codec
from schemas.topics import TopicCatalog
from streams.correlate.correlator import Timing, add_signal, apply_topology, decide_now
from tests.factories import T0, kernel_xid, one, slurmctld_allocate

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client(clickhouse_dsn):
    c = get_client(clickhouse_dsn)
    yield c
    c.close()


@pytest.fixture
def db(client):
    name = f"it_{uuid.uuid4().hex[:10]}"
    assert migrate(client, name) == LATEST_VERSION
    yield name
    client.command(f"DROP DATABASE IF EXISTS {name}")


def _incident():
    topo, _ = apply_topology(None, one(slurmctld_allocate("42", "gpu-[01-04]", T0)), "c1")
    sig = one(kernel_xid("gpu-03", 79, T0), offset=1).model_copy(update={"job_id": "42"})
    _, incident = decide_now(add_signal(None, topo, sig, "c1", T0), topo, T0, Timing())
    return sig, incident


def test_migrations_are_idempotent(client, db):
    assert migrate(client, db) == LATEST_VERSION
    assert client.query(f"SELECT count() FROM {db}.schema_migrations").result_rows[0][0] == LATEST_VERSION


def test_incident_revisions_and_replayed_records_collapse_to_one_latest_row(client, db):
    cat = TopicCatalog(prefix="x")
    sink = ClickHouseSink(client, db, cat)
    sig, inc = _incident()
    rev2 = inc.model_copy(update={"revision": 2, "confidence": 0.99})
    for _ in range(2):  # a replay after a crash before the offset commit
        sink.add(cat.signals_node.name, codec.dumps(sig))
        sink.add(cat.incidents.name, codec.dumps(inc))
    sink.add(cat.incidents.name, codec.dumps(rev2))
    sink.add(cat.signals_job.name, codec.dumps(sig.model_copy(update={"routed": True})))
    sink.flush()
    assert sink.stats.skipped_routed == 1
    rows = client.query(
        f"SELECT revision, confidence, culprit_node, root_code FROM {db}.incidents FINAL"
    ).result_rows
    assert [(r[0], round(r[1], 2), r[2], r[3]) for r in rows] == [(2, 0.99, "gpu-03", 79)]
    assert client.query(f"SELECT count() FROM {db}.signals FINAL").result_rows[0][0] == 1


def test_a_record_that_does_not_validate_lands_in_dead_letters_with_its_bytes(client, db):
    cat = TopicCatalog(prefix="x")
    sink = ClickHouseSink(client, db, cat)
    bad = b'{"incident_id": "only this"}'
    sink.add(cat.incidents.name, bad, partition=0, offset=9)
    sink.flush()
    [(stage, reason, offset, original)] = client.query(
        f"SELECT stage, reason, offset, original_b64 FROM {db}.dead_letters"
    ).result_rows
    assert (stage, reason, offset) == ("sink", "invalid_record", 9)
    assert base64.b64decode(original) == bad
