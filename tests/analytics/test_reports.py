"""`sickbay report ...` answers the canned questions from ClickHouse, as tables and as JSON."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from schemas import codec
from streams.cli.main import app

pytestmark = pytest.mark.integration


@pytest.fixture
def report(seeded, clickhouse_dsn, monkeypatch):
    db, fleet = seeded
    if clickhouse_dsn.startswith("chdb://"):
        monkeypatch.delenv("CLICKHOUSE_URL", raising=False)
        monkeypatch.setenv("SICKBAY_CHDB_PATH", clickhouse_dsn.removeprefix("chdb://"))
    else:
        monkeypatch.setenv("CLICKHOUSE_URL", clickhouse_dsn)
    monkeypatch.setenv("SICKBAY_CLICKHOUSE_DATABASE", db)

    def run(*args: str) -> str:
        result = CliRunner().invoke(app, ["report", *args])
        assert result.exit_code == 0, result.output
        return result.output

    return run, fleet


def test_top_nodes(report):
    run, _ = report
    lines = run("top-nodes").splitlines()
    assert lines[0].split()[:3] == ["node", "cluster", "incidents"]
    assert lines[2].split()[:3] == ["gpu-06", "c1", "2"] and "47" in lines[2]  # MTBF 47 h
    assert {line.split()[0] for line in lines[3:]} == {"gpu-01", "gpu-03"}
    rows = codec.loads(run("top-nodes", "--limit", "1", "--format", "json"))
    assert [(r["node"], r["incidents"]) for r in rows] == [("gpu-06", 2)]


def test_failure_mix(report):
    run, _ = report
    out = run("failure-mix")
    assert "hardware_gpu" in out and "75" in out and "application" in out and "25" in out
    assert "NVIDIA A100-SXM4-80GB" in out and "535.129.03" in out


def test_mttd_and_mtta(report):
    run, _ = report
    out = run("mttd")
    detect = next(line for line in out.splitlines() if line.startswith("MTTD"))
    act = next(line for line in out.splitlines() if line.startswith("MTTA"))
    assert detect.split()[2:4] == ["4", "0.4"] and act.split()[2:4] == ["3", "0.8"]
    assert "GPU-hours lost" in out
    data = codec.loads(run("mttd", "--format", "json"))
    assert data["detect_s"]["p50"] == pytest.approx(0.4)


def test_job_recovery_history(report):
    run, fleet = report
    out = run("job", "42")
    assert out.startswith("job 42 on c1: 2 attempt(s), 1.600 GPU-hours lost")
    assert "gpu-01,gpu-02,gpu-03,gpu-04" in out and "gpu-01,gpu-02,gpu-04,gpu-05" in out
    assert "Xid 79" in out and "drain_node" in out and "requeue_job" in out and "succeeded" in out
    detail = codec.loads(run("job", "42", "--format", "json"))
    assert [a["attempt"] for a in detail["attempts"]] == [1, 2]
    assert detail["attempts"][0]["incidents"][0]["incident_id"] == fleet.latest("42").incident_id


def test_unknown_job_and_bad_arguments_fail_clearly(report):
    result = CliRunner().invoke(app, ["report", "job", "999"])
    assert result.exit_code == 1 and "no job 999" in result.output
    result = CliRunner().invoke(app, ["report", "top-nodes", "--format", "xml"])
    assert result.exit_code == 2 and "--format must be table or json" in result.output


def test_reports_can_ask_a_running_api_instead_of_the_store(seeded, ch_client, monkeypatch):
    """With `sickbay serve` holding an embedded store, reports go through the API (same models)."""
    from pydantic import SecretStr

    from connectors.api.app import ApiConfig, create_app
    from connectors.api.publisher import MemoryPublisher
    from connectors.api.store import Store
    from schemas.actions import Mode
    from schemas.topics import TopicCatalog
    from tests.analytics.browser import serve_in_thread

    db, _fleet = seeded
    config = ApiConfig(
        cluster="c1", default_mode=Mode.OBSERVE, topics=TopicCatalog(), read_token=SecretStr("r")
    )
    monkeypatch.setenv("SICKBAY_API_READ_TOKEN", "r")
    with serve_in_thread(create_app(Store(ch_client, db), MemoryPublisher(), config)) as url:
        for args, expect in (
            (["top-nodes", "--limit", "1"], "gpu-06"),
            (["mttd"], "MTTD (detect)"),
            (["failure-mix"], "hardware_gpu"),
            (["job", "42"], "job 42 on c1: 2 attempt(s)"),
        ):
            result = CliRunner().invoke(app, ["report", *args, "--api", url])
            assert result.exit_code == 0 and expect in result.output, result.output
        missing = CliRunner().invoke(app, ["report", "job", "999", "--api", url])
        assert missing.exit_code == 2 and "404" in missing.output


def _expected_shadow(fleet, horizon):
    """The same question asked of the seeded objects directly (not of the store)."""
    from datetime import timedelta

    latest = {i.incident_id: i for i in fleet.incidents}
    out: dict[tuple[str, str], list[int]] = {}
    for a in fleet.actions:
        if not a.dry_run or a.kind.value not in ("drain_node", "requeue_job"):
            continue
        row = out.setdefault((a.kind.value, latest[a.incident_id].category.value), [0, 0, 0, 0])
        row[0] += 1
        if a.kind.value == "drain_node":
            row[1] += any(
                i.incident_id != a.incident_id
                and i.culprit is not None
                and i.culprit.node == a.node
                and a.created_at < i.first_signal_time <= a.created_at + horizon
                for i in latest.values()
            )
        else:
            restarted = any(
                s.job_id == a.job_id
                and s.rule
                in ("slurm.job_requeued", "scheduler.slurm_requeue_node_failure", "slurm.job_allocated")
                and a.created_at - timedelta(minutes=10) <= s.event_time <= a.created_at + horizon
                for s in fleet.signals
            )
            row[2 if restarted else 3] += 1
    return out


def test_shadow_compares_observe_mode_proposals_with_what_happened(report):
    from datetime import timedelta

    run, fleet = report
    body = codec.loads(run("shadow", "--horizon-h", "72", "--format", "json"))
    got = {
        (r["kind"], r["category"]): [
            r["proposed"],
            r["failed_again"],
            r["restarted_by_scheduler"],
            r["stayed_down"],
        ]
        for r in body["rows"]
    }
    expected = _expected_shadow(fleet, timedelta(hours=72))
    assert expected, "the seeded fleet must hold observe-mode proposals"
    assert got == expected
    assert "would have" in run("shadow")
