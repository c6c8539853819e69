"""The operator loop on real Kafka: API intent → topic → sink → ClickHouse → API."""

from __future__ import annotations

import threading
import uuid
import warnings

import pytest
from pydantic import SecretStr

from connectors.api.app import ApiConfig, create_app
from connectors.api.publisher import KafkaPublisher
from connectors.api.store import Store
from connectors.kafka import ensure_topics
from connectors.sinks.sink import ClickHouseSink, run_sink
from schemas.actions import Mode
from schemas.topics import TopicCatalog
from tests.analytics.seed import build, feed, insert_inventory

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.integration
WRITE = {"Authorization": "Bearer t", "X-Sickbay-Actor": "bob"}


def test_intents_published_by_the_api_come_back_through_the_sink(kafka_bootstrap, ch_client, fresh_db):
    cat = TopicCatalog(prefix=f"loop{uuid.uuid4().hex[:8]}", partitions=2)
    ensure_topics(kafka_bootstrap, cat.sickbay())
    feed(
        ClickHouseSink(ch_client, fresh_db, TopicCatalog(prefix="seed")), TopicCatalog(prefix="seed"), build()
    )
    insert_inventory(ch_client, fresh_db)
    store = Store(ch_client, fresh_db)
    config = ApiConfig(cluster="c1", default_mode=Mode.OBSERVE, topics=cat, token=SecretStr("t"))
    publisher = KafkaPublisher(kafka_bootstrap)
    api = TestClient(create_app(store, publisher, config))

    assert api.get("/readyz").json()["checks"]["kafka"]["ok"] is True
    r = api.put(
        "/api/v1/modes",
        json={"mode": "act", "reason": "GPU faults are well understood", "category": "hardware_gpu"},
        headers=WRITE,
    )
    assert r.status_code == 202, r.text
    r = api.post("/api/v1/nodes/gpu-02/isolate", json={"reason": "row remapping failures"}, headers=WRITE)
    assert r.status_code == 202, r.text
    action_id = r.json()["record"]["action_id"]
    publisher.close()  # both intents are on the broker (the API answered 202 after its ack)

    stats = run_sink(
        kafka_bootstrap,
        "unused://",
        fresh_db,
        cat,
        group_id=f"{cat.prefix}-sink",
        max_wait_s=0.2,
        idle_exit_s=8.0,
        client=ch_client,
        stop=threading.Event(),
    )
    assert stats.written.get("mode_changes") == 1 and stats.written.get("actions") == 1

    modes = {m["scope"]: m for m in api.get("/api/v1/modes").json()}
    assert modes["c1/*/hardware_gpu"]["mode"] == "act" and modes["c1/*/hardware_gpu"]["actor"] == "api:bob"
    assert modes["c1/*/*"]["source"] == "settings"
    node = api.get("/api/v1/nodes/gpu-02").json()
    assert node["state"] == "isolating" and node["last_action_id"] == action_id  # no adapter result yet
    assert any(h["event"] == "drain_requested" for h in node["health"])
    events = {a["event"] for a in api.get("/api/v1/audit", params={"action": action_id}).json()}
    assert events == {"operator.isolate_requested"}
    assert {a["event"] for a in api.get("/api/v1/audit", params={"event": "mode.changed"}).json()} == {
        "mode.changed"
    }
