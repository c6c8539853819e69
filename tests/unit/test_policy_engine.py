"""The recovery policy engine: budgets, confirmations, deadlines, per-job overrides, gate valves, modes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from schemas.actions import IsolationRequest, Mode, ModeChange, ModeScope, WorkloadKind
from schemas.incidents import Category, Incident, IncidentStatus, RootCause
from schemas.jobs import JobInfo
from streams.decide.gate import GateState, admit
from streams.decide.modes import ModeRegistry
from streams.decide.policy import JobRecord, backoff_s, plan
from streams.decide.policy_config import FleetValves, JobPolicy, PolicyFile, job_override

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def incident(
    n: int = 1,
    *,
    restartable: bool = True,
    category: Category = Category.HARDWARE_GPU,
    isolate: tuple[str, ...] = ("gpu-03:3",),
    job: str = "42",
    cluster: str = "c1",
    at: datetime = NOW,
) -> Incident:
    return Incident(
        incident_id=f"inc-{job}-{n}",
        revision=1,
        cluster=cluster,
        job_id=job,
        attempt=n,
        status=IncidentStatus.OPEN,
        category=category,
        root_cause=RootCause(
            rule="gpu.xid79", summary="Xid 79 on gpu-03", signal_id="s", event_time=at, text="x"
        ),
        isolate=list(isolate),
        restartable=restartable,
        confidence=0.95,
        opened_at=at,
        updated_at=at,
        first_signal_time=at,
    )


def kinds(p) -> list[str]:
    return [a.kind.value for a in p.actions] + [f"isolate {r.node}" for r in p.isolations]


# -- plan ---------------------------------------------------------------------------------------


def test_a_hardware_fault_restarts_excluding_the_culprit_and_asks_the_gate_to_isolate_it():
    p = plan(incident(), JobPolicy(), Mode.ACT, JobRecord(), NOW)
    assert p.rule == "restart-excluding"
    assert kinds(p) == ["requeue_job", "isolate gpu-03"]
    assert p.actions[0].exclude_nodes == ["gpu-03"] and not p.actions[0].dry_run
    assert p.isolations[0].gpu == "3"
    assert p.isolations[0].expires_at == NOW + timedelta(seconds=JobPolicy().drain_expiry_s)


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ("nccl.watchdog_timeout", "restart"),
        ("nccl.taking_process_down", "restart"),  # "...we are taking the entire process down"
        ("slurm.job_cancelled", "no-restart-without-culprit"),
    ],
)
def test_a_cascade_root_that_says_the_process_is_gone_restarts_in_place_without_a_culprit(rule, expected):
    inc = incident(category=Category.UNKNOWN, isolate=())
    inc = inc.model_copy(update={"root_cause": inc.root_cause.model_copy(update={"rule": rule})})
    p = plan(inc, JobPolicy(), Mode.ACT, JobRecord(), NOW)
    assert p.rule == expected
    assert kinds(p) == (["requeue_job"] if expected == "restart" else [])


def test_restarts_stop_after_the_budget_of_failures_without_a_new_checkpoint():
    record, policy = JobRecord(), JobPolicy(max_requeue_times=2)
    rules = [plan(incident(n), policy, Mode.ACT, record, NOW + timedelta(minutes=n)).rule for n in (1, 2, 3)]
    assert rules == ["restart-excluding", "restart-excluding", "stop-budget"]


def test_a_new_checkpoint_gives_the_job_a_fresh_budget():
    record, policy = JobRecord(), JobPolicy(max_requeue_times=1)
    plan(incident(1), policy, Mode.ACT, record, NOW)
    record.info = JobInfo(job_id="42", last_checkpoint_at=NOW + timedelta(minutes=1), time=NOW)
    p = plan(incident(2), policy, Mode.ACT, record, NOW + timedelta(minutes=2))
    assert p.rule == "restart-excluding"
    assert p.budget["failures_since_checkpoint"] == 1


def test_refined_revisions_of_one_incident_spend_the_budget_once():
    record, policy = JobRecord(), JobPolicy(max_requeue_times=1)
    for rev in (1, 2, 3):
        p = plan(incident(1).model_copy(update={"revision": rev}), policy, Mode.ACT, record, NOW)
    assert p.rule == "restart-excluding"
    assert len(record.failures) == 1


def test_backoff_grows_after_the_first_restart_and_is_capped():
    policy = JobPolicy(backoff_base_s=30, backoff_max_s=100)
    assert [backoff_s(policy, n) for n in (1, 2, 3, 4, 5)] == [0.0, 30.0, 60.0, 100.0, 100.0]
    record = JobRecord()
    plan(incident(1), policy, Mode.ACT, record, NOW)
    second = plan(incident(2), policy, Mode.ACT, record, NOW + timedelta(minutes=1))
    assert second.actions[0].backoff_s == 30.0


def test_a_non_restartable_root_cause_stops_at_once_by_default():
    p = plan(incident(restartable=False, isolate=()), JobPolicy(), Mode.ACT, JobRecord(), NOW)
    assert (p.rule, p.actions) == ("stop-not-restartable", [])
    assert "not restartable" in p.notes[-1]


def test_a_non_restartable_root_cause_gets_one_confirmation_retry_when_configured():
    record, policy = JobRecord(), JobPolicy(confirm_non_restartable=True, on_budget_exhausted="cancel")
    first = plan(incident(1, restartable=False, isolate=()), policy, Mode.ACT, record, NOW)
    second = plan(
        incident(2, restartable=False, isolate=()), policy, Mode.ACT, record, NOW + timedelta(minutes=5)
    )
    assert (first.rule, kinds(first)) == ("confirm-retry", ["requeue_job"])
    assert (second.rule, kinds(second)) == ("stop-not-restartable", ["cancel_job"])


def test_attribution_slower_than_the_deadline_fails_open_without_a_restart():
    inc = incident().model_copy(update={"opened_at": NOW - timedelta(minutes=20)})
    p = plan(inc, JobPolicy(decision_deadline_s=600), Mode.ACT, JobRecord(), NOW)
    assert p.rule == "fail-open"
    assert kinds(p) == ["isolate gpu-03"]  # hardware recovery still runs


def test_stale_incidents_produce_nothing():
    p = plan(incident(at=NOW - timedelta(hours=3)), JobPolicy(), Mode.ACT, JobRecord(), NOW)
    assert (p.rule, kinds(p)) == ("stale", [])


def test_auto_resume_off_isolates_but_never_restarts():
    p = plan(incident(), JobPolicy(auto_resume_mode="off"), Mode.ACT, JobRecord(), NOW)
    assert (p.rule, kinds(p)) == ("no-auto-resume", ["isolate gpu-03"])


def test_observe_mode_marks_every_proposal_as_dry_run():
    p = plan(incident(), JobPolicy(), Mode.OBSERVE, JobRecord(), NOW)
    assert all(a.dry_run for a in p.actions) and all(r.mode == Mode.OBSERVE for r in p.isolations)


def test_kubernetes_jobs_carry_their_namespace_and_workload_kind():
    info = JobInfo(
        job_id="train-7",
        scheduler="kubernetes",
        namespace="ml",
        partition="ml",
        workload_kind="pytorchjob",
        time=NOW,
    )
    p = plan(incident(job="train-7"), JobPolicy(), Mode.ACT, JobRecord(info=info), NOW)
    action = p.actions[0]
    assert (action.scheduler, action.namespace, action.workload_kind) == (
        "kubernetes",
        "ml",
        WorkloadKind.PYTORCH_JOB,
    )
    assert p.isolations[0].scheduler == "kubernetes" and p.isolations[0].partition == "ml"


# -- policy file and per-job overrides -----------------------------------------------------------


def test_aps_comment_overrides_the_restart_budget_the_way_nvidias_engine_reads_it():
    info = JobInfo(
        job_id="42",
        comment='run 7 {"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 1}}',
        time=NOW,
    )
    policy, notes = PolicyFile().resolve("c1", None, info)
    assert (policy.auto_resume_mode, policy.max_requeue_times, notes) == ("requeue", 1, [])


def test_a_job_cannot_change_fleet_knobs_and_bad_values_are_ignored_with_a_note():
    comment = '{"APS": {"max_requeue_times": -5, "isolate": false}}'
    layer, notes = job_override(JobInfo(job_id="42", comment=comment, time=NOW))
    assert layer == {"max_requeue_times": -5}
    assert any("'isolate'" in n for n in notes)
    policy, notes = PolicyFile().resolve("c1", None, JobInfo(job_id="42", comment=comment, time=NOW))
    assert policy.max_requeue_times == JobPolicy().max_requeue_times
    assert any("ignored policy override from job" in n for n in notes)


def test_a_comment_that_mentions_aps_without_json_is_noted_not_fatal():
    layer, notes = job_override(JobInfo(job_id="42", comment="APS please", time=NOW))
    assert layer == {} and "no valid JSON" in notes[0]


def test_pod_annotation_carries_the_same_override():
    info = JobInfo(
        job_id="t", annotations={"sickbay.io/policy": '{"APS": {"auto_resume_mode": "none"}}'}, time=NOW
    )
    policy, _ = PolicyFile().resolve("c1", None, info)
    assert policy.auto_resume_mode == "off"


def test_cluster_then_partition_overrides_apply_in_order(tmp_path: Path):
    path = tmp_path / "policy.toml"
    path.write_text(
        """
[defaults]
max_requeue_times = 3

[valves]
max_isolations_per_window = 5

[clusters.prod.policy]
max_requeue_times = 2
isolate = false

[clusters.prod.partitions.debug.policy]
auto_resume_mode = "off"
"""
    )
    pf = PolicyFile.load(path)
    prod, _ = pf.resolve("prod", "batch", None)
    debug, _ = pf.resolve("prod", "debug", None)
    other, _ = pf.resolve("dev", None, None)
    assert (prod.max_requeue_times, prod.isolate, prod.auto_resume_mode) == (2, False, "requeue")
    assert (debug.max_requeue_times, debug.auto_resume_mode) == (2, "off")
    assert other.max_requeue_times == 3
    assert pf.valves_for("prod").max_isolations_per_window == 5


def test_a_typo_in_the_policy_file_stops_the_worker_at_start(tmp_path: Path):
    path = tmp_path / "policy.toml"
    path.write_text("[defaults]\nmax_requeue_time = 3\n")
    with pytest.raises(ValueError, match="max_requeue_time"):
        PolicyFile.load(path)
    path.write_text('[clusters.prod.partitions.p.policy]\nauto_resume_mode = "sometimes"\n')
    with pytest.raises(ValueError, match=r"clusters\.prod\.partitions\.p"):
        PolicyFile.load(path)


# -- the isolation gate ------------------------------------------------------------------------


def request(node: str, *, partition: str | None = None, mode: Mode = Mode.ACT, restore: bool = False):
    return IsolationRequest(
        request_id=f"r-{node}",
        cluster="c1",
        node=node,
        partition=partition,
        incident_id=f"inc-{node}",
        incident_revision=1,
        category=Category.HARDWARE_GPU,
        mode=mode,
        reason="sickbay: test",
        restore=restore,
        time=NOW,
    )


def test_the_blast_radius_valve_stops_isolation_at_the_cap_and_alerts_once():
    state, valves = GateState(), FleetValves(max_isolations_per_window=3)
    verdicts = [admit(state, request(f"n{i:03d}"), valves, NOW) for i in range(300)]
    assert sum(v.approved for v in verdicts) == 3
    held = [v for v in verdicts if not v.approved]
    assert {v.valve for v in held} == {"blast_radius"}
    assert sum(v.alert for v in held) == 1


def test_the_blast_window_slides():
    state, valves = GateState(), FleetValves(max_isolations_per_window=1, isolation_window_s=60)
    assert admit(state, request("a"), valves, NOW).approved
    assert not admit(state, request("b"), valves, NOW + timedelta(seconds=30)).approved
    assert admit(state, request("b"), valves, NOW + timedelta(seconds=61)).approved


def test_at_most_a_fraction_of_a_partition_is_isolated():
    state = GateState()
    valves = FleetValves(
        max_partition_fraction=0.25, partition_sizes={"gpu": 8}, max_isolations_per_window=100
    )
    verdicts = [admit(state, request(f"n{i}", partition="gpu"), valves, NOW) for i in range(5)]
    assert [v.approved for v in verdicts] == [True, True, False, False, False]
    assert verdicts[2].valve == "partition_fraction"


def test_a_node_that_keeps_coming_back_goes_to_a_human():
    state, valves = GateState(), FleetValves(flap_max_isolations=2, max_isolations_per_window=100)
    t = NOW
    for _ in range(2):
        assert admit(state, request("flappy"), valves, t).approved
        admit(state, request("flappy", restore=True), valves, t + timedelta(minutes=1))
        t += timedelta(hours=1)
    third = admit(state, request("flappy"), valves, t)
    assert (third.approved, third.valve, third.alert) == (False, "flapping", True)


def test_a_node_already_isolated_is_re_asserted_for_the_next_incident_but_not_counted_twice():
    state, valves = GateState(), FleetValves(max_isolations_per_window=1)
    first = request("n1").model_copy(update={"expires_at": NOW + timedelta(hours=1)})
    assert admit(state, first, valves, NOW).approved
    next_incident = request("n1").model_copy(update={"incident_id": "inc-next", "request_id": "r-next"})
    again = admit(state, next_incident, valves, NOW + timedelta(minutes=5))
    assert again.approved and "already isolated" in again.note
    assert (
        len(state.recent) == 1 and len(state.history["n1"]) == 1
    )  # neither the cap nor the flap count moved
    assert not admit(state, request("n2"), valves, NOW + timedelta(minutes=6)).approved  # the cap still holds


# -- runtime modes ----------------------------------------------------------------------------


def change(mode: Mode, *, partition: str | None = None, category: Category | None = None, at: datetime = NOW):
    return ModeChange(
        change_id=f"m-{mode}-{partition}-{category}-{at.timestamp()}",
        scope=ModeScope(cluster="c1", partition=partition, category=category),
        mode=mode,
        actor="ops",
        reason="test",
        time=at,
    )


def test_the_most_specific_mode_scope_wins():
    reg = ModeRegistry(Mode.OBSERVE)
    assert reg.resolve("c1", "gpu", Category.HARDWARE_GPU) == (Mode.OBSERVE, "default")
    reg.apply(change(Mode.ACT))
    reg.apply(change(Mode.OBSERVE, partition="gpu"))
    reg.apply(change(Mode.ACT, partition="gpu", category=Category.HARDWARE_GPU))
    assert reg.resolve("c1", "gpu", Category.HARDWARE_GPU)[0] == Mode.ACT
    assert reg.resolve("c1", "gpu", Category.HARDWARE_NETWORK)[0] == Mode.OBSERVE
    assert reg.resolve("c1", "cpu", Category.HARDWARE_NETWORK)[0] == Mode.ACT
    assert reg.resolve("c2", None, None)[0] == Mode.OBSERVE


def test_an_older_mode_change_replayed_late_does_not_undo_a_newer_one():
    reg = ModeRegistry(Mode.OBSERVE)
    assert reg.apply(change(Mode.ACT, at=NOW))
    assert not reg.apply(change(Mode.OBSERVE, at=NOW - timedelta(minutes=1)))
    assert reg.resolve("c1", None, None)[0] == Mode.ACT


def test_the_shipped_example_policy_file_is_valid_and_means_what_it_says():
    pf = PolicyFile.load(Path(__file__).resolve().parents[2] / "deploy" / "config" / "policy.example.toml")
    debug, notes = pf.resolve("prod", "debug", None)
    assert (debug.auto_resume_mode, debug.max_requeue_times, notes) == ("off", 2, [])
    assert pf.valves_for("prod").partition_sizes["gpu"] == 512
    assert pf.valves_for("elsewhere").max_isolations_per_window == 8


def test_a_degrading_node_is_drained_and_nothing_is_restarted():
    from schemas.incidents import Culprit, IncidentKind

    inc = incident(job="node:gpu-07", isolate=()).model_copy(
        update={"kind": IncidentKind.DEGRADING, "culprit": Culprit(node="gpu-07", gpu="2"), "confidence": 0.6}
    )
    p = plan(inc, JobPolicy(), Mode.ACT, JobRecord(), NOW)
    assert (p.rule, kinds(p)) == ("drain-degrading", ["isolate gpu-07"])
    assert p.isolations[0].policy_rule == "drain-degrading"
    off = plan(inc, JobPolicy(isolate_degrading=False), Mode.ACT, JobRecord(), NOW)
    assert (off.rule, kinds(off)) == ("degrading-observe-only", [])


def test_a_straggler_is_isolated_but_its_job_is_not_restarted_by_default():
    from schemas.incidents import IncidentKind

    inc = incident().model_copy(update={"kind": IncidentKind.STRAGGLER})
    p = plan(inc, JobPolicy(), Mode.ACT, JobRecord(), NOW)
    assert (p.rule, kinds(p)) == ("straggler-isolate-only", ["isolate gpu-03"])
    assert (
        plan(inc, JobPolicy(restart_stragglers=True), Mode.ACT, JobRecord(), NOW).rule == "restart-excluding"
    )


def test_the_same_incidents_request_read_again_after_a_worker_died_proposes_nothing_twice():
    state, valves = GateState(), FleetValves()
    assert admit(state, request("n1"), valves, NOW).approved
    replay = admit(state, request("n1"), valves, NOW + timedelta(seconds=20))
    assert (replay.approved, replay.replay, replay.alert) == (False, True, False)
    assert len(state.recent) == 1


def test_a_re_asserting_incidents_request_read_again_after_a_worker_died_proposes_nothing_twice():
    """A degrading incident drained the node; the job's incident then re-asserted the drain. After a
    kill -9 the job incident's request is read again: it is a replay, not a third proposal."""
    state, valves = GateState(), FleetValves()
    assert admit(state, request("n1"), valves, NOW).approved  # the degrading incident's drain
    job_incident = request("n1").model_copy(update={"incident_id": "inc-job", "request_id": "r-job"})
    assert admit(state, job_incident, valves, NOW + timedelta(seconds=1)).approved  # re-asserted once
    replay = admit(state, job_incident, valves, NOW + timedelta(seconds=20))
    assert (replay.approved, replay.replay) == (False, True)
    third = request("n1").model_copy(update={"incident_id": "inc-third", "request_id": "r-third"})
    assert admit(state, third, valves, NOW + timedelta(seconds=30)).approved  # another incident still is
