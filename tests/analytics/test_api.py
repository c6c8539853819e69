from __future__ import annotations

import warnings

import pytest
from pydantic import SecretStr

from connectors.api.app import ApiConfig, create_app
from connectors.api.openapi import DEFAULT as OPENAPI_JSON
from connectors.api.openapi import render
from connectors.api.publisher import MemoryPublisher
from connectors.api.store import Store
from schemas import codec
from schemas.actions import Action, ActionKind, Mode, ModeChange
from schemas.audit import AuditRecord
from schemas.topics import TopicCatalog

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's notice that its test client will move to httpx2
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.integration

WRITE = {"Authorization": "Bearer w-token"}
READ = {"Authorization": "Bearer r-token"}
CAT = TopicCatalog(prefix="api")


def _client(store, publisher=None, *, read_token=True):
    config = ApiConfig(
        cluster="c1",
        default_mode=Mode.OBSERVE,
        topics=CAT,
        token=SecretStr("w-token"),
        read_token=SecretStr("r-token") if read_token else None,
    )
    return TestClient(create_app(store, publisher or MemoryPublisher(), config))


@pytest.fixture(scope="module")
def store(seeded, ch_client):
    return Store(ch_client, seeded[0])


@pytest.fixture
def pub():
    return MemoryPublisher()


@pytest.fixture
def api(store, pub):
    return _client(store, pub)


def test_the_published_openapi_spec_is_what_the_code_generates():
    assert OPENAPI_JSON.read_text() == render(), "run: .venv/bin/python -m connectors.api.openapi"


@pytest.mark.parametrize(
    ("headers", "status"),
    [({}, 401), ({"Authorization": "Bearer nope"}, 401), (READ, 200), (WRITE, 200)],
)
def test_reads_need_a_token_once_a_read_token_is_set(api, headers, status):
    r = api.get("/api/v1/incidents", headers=headers)
    assert r.status_code == status
    if status == 401:
        assert r.json()["error"] == "unauthorized" and r.headers["www-authenticate"] == "Bearer"


def test_reads_are_open_without_a_read_token_and_health_is_always_open(store):
    api = _client(store, read_token=False)
    assert api.get("/api/v1/nodes").status_code == 200
    assert api.get("/healthz").json() == {"status": "ok"}
    ready = api.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"]["store"]["ok"] is True


@pytest.mark.parametrize(
    ("headers", "status", "error"),
    [
        ({}, 401, "unauthorized"),
        (READ, 403, "forbidden"),
        ({"Authorization": "Bearer x"}, 401, "unauthorized"),
    ],
)
def test_mutations_need_the_write_token(api, pub, headers, status, error):
    r = api.post("/api/v1/nodes/gpu-02/isolate", json={"reason": "flaky"}, headers=headers)
    assert (r.status_code, r.json()["error"]) == (status, error)
    assert pub.records == []


def test_mutations_are_refused_while_no_write_token_is_configured(store, pub):
    config = ApiConfig(cluster="c1", default_mode=Mode.OBSERVE, topics=CAT)
    api = TestClient(create_app(store, pub, config))
    r = api.put("/api/v1/modes", json={"mode": "act", "reason": "x"}, headers=WRITE)
    assert r.status_code == 403 and "SICKBAY_API_TOKEN" in r.json()["detail"]


def test_incident_list_filters(api, seeded):
    _db, fleet = seeded

    def ids(**params):
        r = api.get("/api/v1/incidents", params=params, headers=READ)
        assert r.status_code == 200, r.text
        return [i["job_id"] for i in r.json()["items"]]

    assert ids() == ["45", "44", "43", "42"]  # newest first
    assert ids(category="application") == ["44"]
    assert ids(node="gpu-06") == ["45", "43"]
    assert ids(node="gpu-02") == ["44", "42"]  # a node of the job counts, not only the culprit
    assert ids(job="43") == ["43"]
    assert ids(status="open", limit=2) == ["45", "44"]
    assert ids(limit=2, offset=2) == ["43", "42"]
    first = fleet.latest("43").first_signal_time
    assert ids(since=first.isoformat(), until=fleet.latest("45").first_signal_time.isoformat()) == [
        "44",
        "43",
    ]
    assert ids(cluster="elsewhere") == []


@pytest.mark.parametrize(
    ("params", "where"),
    [
        ({"category": "gpu"}, "category"),
        ({"job": "42' OR 1=1 --"}, "job"),
        ({"node": "gpu-01;DROP TABLE x"}, "node"),
        ({"limit": 0}, "limit"),
        ({"limit": 100000}, "limit"),
        ({"since": "yesterday"}, "since"),
    ],
)
def test_bad_parameters_are_a_422_that_names_the_field(api, params, where):
    r = api.get("/api/v1/incidents", params=params, headers=READ)
    assert r.status_code == 422
    body = r.json()
    assert body["error"] == "invalid_request"
    assert any(where in e["loc"] for e in body["detail"]), body


def test_time_ranges_must_be_ordered_and_carry_a_timezone(api):
    r = api.get("/api/v1/incidents", params={"since": "2026-11-29T00:00:00"}, headers=READ)
    assert r.status_code == 422 and "timezone" in r.json()["detail"]
    r = api.get(
        "/api/v1/incidents",
        params={"since": "2026-11-29T00:00:00Z", "until": "2026-11-28T00:00:00Z"},
        headers=READ,
    )
    assert r.status_code == 422 and "before" in r.json()["detail"]


def test_incident_detail_has_root_cause_cascade_evidence_actions_audit_and_latency(api, seeded):
    _db, fleet = seeded
    inc = fleet.latest("42")
    r = api.get(f"/api/v1/incidents/{inc.incident_id}", headers=READ)
    assert r.status_code == 200
    d = r.json()
    assert d["revision"] == inc.revision and d["culprit_node"] == "gpu-03"
    assert d["root_cause"]["code"] == 79 and d["root_cause"]["text"] == inc.root_cause.text
    assert [s["rule"] for s in d["supporting"]] == [s.rule for s in inc.supporting]
    assert [e["text"] for e in d["evidence"]] == [e.text for e in inc.evidence]
    assert {(a["kind"], a["status"]) for a in d["actions"]} == {
        ("drain_node", "succeeded"),
        ("requeue_job", "succeeded"),
    }
    assert {"incident.opened", "action.proposed", "action.succeeded"} <= {a["event"] for a in d["audit"]}
    assert d["latency"]["detect_s"] == pytest.approx(0.4) and d["latency"]["recovered_by"] == "next_attempt"
    assert d["latency"]["gpu_hours_lost"] == pytest.approx(32 * 3 / 60)  # 4 nodes x 8 GPUs x 3 minutes


def test_incident_detail_carries_what_each_collector_could_reach_when_it_failed(api, seeded):
    _db, fleet = seeded
    d = api.get(f"/api/v1/incidents/{fleet.latest('42').incident_id}", headers=READ).json()
    seen = {(c["collector"], c["host"]): c for c in d["collectors"]}
    assert set(seen) == {("files", "gpu-01"), ("files", "gpu-03"), ("slurm", "ctld")}  # not the day-old one
    assert seen[("files", "gpu-01")]["unreachable"] == ["file:/var/log/kern.log"]
    assert seen[("files", "gpu-03")]["unreachable"] == [] and seen[("slurm", "ctld")]["broker_reachable"]


def test_unknown_ids_are_404_with_a_json_body(api):
    for path in ("/api/v1/incidents/inc-0000", "/api/v1/jobs/999", "/api/v1/nodes/gpu-99", "/api/v1/nope"):
        r = api.get(path, headers=READ)
        assert r.status_code == 404 and r.json()["error"] == "not_found", path


def test_jobs_nodes_actions_audit_modes_and_fleet(api):
    jobs = api.get("/api/v1/jobs", headers=READ).json()
    assert [j["job_id"] for j in jobs][:1] == ["45"]
    job = api.get("/api/v1/jobs/42", headers=READ).json()
    assert [(a["attempt"], len(a["incidents"])) for a in job["attempts"]] == [(1, 1), (2, 0)]
    assert "gpu-03" not in job["attempts"][1]["nodes"]
    nodes = {n["node"]: n for n in api.get("/api/v1/nodes", headers=READ).json()}
    assert nodes["gpu-03"]["state"] == "isolated" and nodes["gpu-02"]["state"] == "ok"
    assert nodes["gpu-06"]["incidents"] == 2 and nodes["gpu-06"]["gpu_model"] == "NVIDIA A100-SXM4-80GB"
    node = api.get("/api/v1/nodes/gpu-06", headers=READ).json()
    assert {"implicated", "drain_advised", "drain_requested"} <= {h["event"] for h in node["health"]}
    actions = api.get("/api/v1/actions", params={"kind": "drain_node"}, headers=READ).json()
    assert {a["node"] for a in actions} == {"gpu-03", "gpu-06"}
    audit = api.get("/api/v1/audit", params={"event": "action.dry_run"}, headers=READ).json()
    assert audit and all(a["event"] == "action.dry_run" for a in audit)
    modes = api.get("/api/v1/modes", headers=READ).json()
    assert modes[0] == {
        "scope": "c1/*/*",
        "cluster": "c1",
        "partition": None,
        "category": None,
        "mode": "observe",
        "actor": "settings",
        "reason": "SICKBAY_MODE",
        "time": None,
        "source": "settings",
    }
    fleet = api.get("/api/v1/fleet", headers=READ).json()
    assert fleet["top_nodes"][0]["node"] == "gpu-06" and fleet["top_nodes"][0]["mtbf_h"] == 47.0
    assert {r["key"]: r["count"] for r in fleet["failure_mix"]} == {"hardware_gpu": 3, "application": 1}


def test_isolate_publishes_a_drain_intent_and_its_audit_record(api, pub):
    r = api.post(
        "/api/v1/nodes/gpu-02/isolate",
        json={"reason": "ECC errors climbing", "incident_id": "inc-x"},
        headers={**WRITE, "X-Sickbay-Actor": "alice", "Idempotency-Key": "req-1"},
    )
    assert r.status_code == 202, r.text
    (t1, key, value), (t2, _k, audit_value) = pub.records
    action = Action.model_validate(codec.loads(value))
    audit = AuditRecord.model_validate(codec.loads(audit_value))
    assert (t1, t2, key) == ("api.actions", "api.audit", "gpu-02")
    assert action.kind == ActionKind.DRAIN_NODE and action.node == "gpu-02" and not action.dry_run
    assert action.mode == Mode.ACT and action.reason.startswith("sickbay: isolate requested by api:alice")
    assert action.incident_id == "inc-x"
    assert audit.event == "operator.isolate_requested" and audit.action_id == action.action_id
    assert r.json()["record"]["action_id"] == action.action_id and r.json()["audit_id"] == audit.audit_id
    again = api.post(
        "/api/v1/nodes/gpu-02/isolate",
        json={"reason": "again"},
        headers={**WRITE, "Idempotency-Key": "req-1"},
    )
    assert again.json()["record"]["action_id"] == action.action_id  # the same key, the same intent


def test_isolate_refuses_unknown_and_already_isolated_nodes_and_bad_bodies(api, pub):
    cases = [
        ("/api/v1/nodes/gpu-99/isolate", {"reason": "x"}, 404),
        ("/api/v1/nodes/gpu-03/isolate", {"reason": "x"}, 409),
        ("/api/v1/nodes/gpu-02/isolate", {"reason": ""}, 422),
        ("/api/v1/nodes/gpu-02/isolate", {"reason": "x", "force": True}, 422),
        ("/api/v1/nodes/gpu-02/isolate", None, 422),
        ("/api/v1/nodes/bad%20name/isolate", {"reason": "x"}, 422),
    ]
    for path, body, status in cases:
        r = api.post(path, json=body, headers=WRITE)
        assert r.status_code == status, (path, body, r.text)
        assert "error" in r.json()
    assert pub.records == []


def test_restore_publishes_a_resume_intent(api, pub):
    r = api.post("/api/v1/nodes/gpu-03/restore", json={"reason": "GPU replaced"}, headers=WRITE)
    assert r.status_code == 202
    action = Action.model_validate(codec.loads(pub.records[0][2]))
    assert action.kind == ActionKind.RESUME_NODE and action.node == "gpu-03" and action.mode == Mode.ACT


def test_approving_advice_republishes_it_in_act_mode_once(api, pub, seeded):
    _db, fleet = seeded
    advice = next(a for a in fleet.actions if a.dry_run and a.kind == ActionKind.DRAIN_NODE)
    r = api.post(
        f"/api/v1/actions/{advice.action_id}/approve", json={"reason": "confirmed ECC"}, headers=WRITE
    )
    assert r.status_code == 202
    approved = Action.model_validate(codec.loads(pub.records[0][2]))
    assert (approved.kind, approved.node, approved.mode, approved.dry_run) == (
        advice.kind,
        "gpu-06",
        Mode.ACT,
        False,
    )
    assert approved.idempotency_key == f"{advice.idempotency_key}|approved"
    audit = AuditRecord.model_validate(codec.loads(pub.records[1][2]))
    assert audit.event == "action.approved" and audit.details["approves"] == advice.action_id
    executed = next(a for a in fleet.actions if not a.dry_run)
    assert (
        api.post(f"/api/v1/actions/{executed.action_id}/approve", json={}, headers=WRITE).status_code == 409
    )
    assert api.post("/api/v1/actions/act-nope/approve", json={}, headers=WRITE).status_code == 404


def test_a_mode_change_is_published_keyed_by_scope(api, pub):
    r = api.put(
        "/api/v1/modes",
        json={
            "mode": "act",
            "reason": "trusted for GPU faults",
            "partition": "gpu",
            "category": "hardware_gpu",
        },
        headers=WRITE,
    )
    assert r.status_code == 202
    (topic, key, value), (audit_topic, _k, audit_value) = pub.records
    change = ModeChange.model_validate(codec.loads(value))
    assert (topic, key) == ("api.control.modes", "c1/gpu/hardware_gpu") and change.mode == Mode.ACT
    assert audit_topic == "api.audit"
    assert AuditRecord.model_validate(codec.loads(audit_value)).event == "mode.changed"
    bad = api.put("/api/v1/modes", json={"mode": "yolo", "reason": "x"}, headers=WRITE)
    assert bad.status_code == 422


def test_kafka_down_is_a_503_and_nothing_is_half_done(store):
    api = _client(store, MemoryPublisher(fail=True))
    r = api.put("/api/v1/modes", json={"mode": "act", "reason": "x"}, headers=WRITE)
    assert r.status_code == 503 and r.json()["error"] == "unavailable"
    assert api.get("/readyz").status_code == 503


def test_metrics_count_requests_and_expose_the_sink_series(api):
    api.get("/api/v1/nodes", headers=READ)
    text = api.get("/metrics").text
    assert 'sickbay_api_requests_total{method="GET",route="/api/v1/nodes",status="200"}' in text
    for name in (
        "sickbay_sink_rows_written_total",
        "sickbay_sink_flush_seconds_bucket",
        "sickbay_dead_letters_total",
        "sickbay_incident_detect_seconds_bucket",
        "sickbay_action_outcomes_total",
        "sickbay_action_seconds_bucket",
        "sickbay_stage_events_total",
    ):
        assert name in text, name
