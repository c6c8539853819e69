from __future__ import annotations

from datetime import UTC, datetime

from benchmarks.scoreboard import Row, Verdict, canonical, measures, score_stream, table
from connectors.sources.simulator import generate
from schemas import codec
from schemas.actions import Action, ActionKind, Mode
from schemas.incidents import Category, Culprit, Incident, IncidentStatus, RootCause

NOW = datetime(2026, 11, 29, tzinfo=UTC)


def _incident(job: str, category: Category, node: str | None, revision: int = 1) -> bytes:
    inc = Incident(
        incident_id="inc-1",
        revision=revision,
        cluster="c",
        job_id=job,
        attempt=1,
        status=IncidentStatus.OPEN,
        category=category,
        root_cause=RootCause(rule="r", summary="s", signal_id="x", event_time=NOW, text="t"),
        culprit=Culprit(node=node) if node else None,
        restartable=True,
        confidence=0.9,
        opened_at=NOW,
        updated_at=NOW,
        first_signal_time=NOW,
    )
    return codec.dumps(inc)


def _action(job: str, kind: ActionKind, node: str | None = None, exclude: list[str] | None = None) -> Action:
    return Action(
        action_id="a",
        idempotency_key="k",
        kind=kind,
        mode=Mode.OBSERVE,
        dry_run=True,
        cluster="c",
        incident_id="inc-1",
        incident_revision=1,
        job_id=job,
        node=node,
        exclude_nodes=exclude or [],
        reason="r",
        created_at=NOW,
    )


def test_stream_scoring_takes_the_last_revision_and_measures_latency_from_the_decisive_record():
    t = generate("xid79_fallen_off_bus", 5).truth
    row = Row(truth=t)
    seen = [
        (100.0, "p.incidents", _incident(t.job_id, Category.UNKNOWN, None, 1)),
        (101.5, "p.incidents", _incident(t.job_id, Category.HARDWARE_GPU, t.culprit_node, 2)),
        (101.6, "p.actions", codec.dumps(_action(t.job_id, ActionKind.DRAIN_NODE, t.culprit_node))),
        (
            101.7,
            "p.actions",
            codec.dumps(_action(t.job_id, ActionKind.REQUEUE_JOB, None, [t.culprit_node or ""])),
        ),
    ]
    score_stream([row], seen, {0: 101.0})
    v = row.stream
    assert v is not None and v.category == "hardware_gpu" and v.culprit_node == t.culprit_node
    assert v.latency_s == 0.5 and round(v.action_latency_s or 0, 3) == 0.6
    assert sorted(v.actions) == sorted(t.actions)
    m = measures([row], "stream")
    assert m["category_acc"] == 1.0 and m["culprit_acc"] == 1.0 and m["action_acc"] == 1.0
    assert m["false_isolations"] == 0


def test_no_incident_scores_unknown_and_a_drain_on_noise_is_counted():
    t = generate("noise_xid13_single", 2).truth
    quiet, noisy = Row(truth=t), Row(truth=t)
    score_stream([quiet], [], {})
    assert quiet.stream is not None and quiet.stream.category == "unknown" and quiet.stream.actions == []
    noisy.stream = Verdict(category="application", actions=["drain_node x"])
    m = measures([quiet, noisy], "stream")
    assert m["category_acc"] == 0.5 and m["false_actions_healthy"] == 1 and m["false_isolations"] == 1
    lines = table([quiet, noisy], stream=False)
    assert lines[0].startswith("| scenario type") and any("**ALL**" in ln for ln in lines)


def test_canonical_action_strings():
    assert canonical(_action("7", ActionKind.DRAIN_NODE, "gpu-0001")) == "drain_node gpu-0001"
    assert canonical(_action("7", ActionKind.REQUEUE_JOB, None, ["b", "a"])) == "requeue_job 7 excluding a,b"
    assert canonical(_action("7", ActionKind.REQUEUE_JOB)) == "requeue_job 7"
