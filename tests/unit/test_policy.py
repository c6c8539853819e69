from __future__ import annotations

from datetime import timedelta

from schemas.actions import ActionKind, Mode
from schemas.incidents import Category
from streams.correlate.correlator import Timing, add_signal, apply_topology, decide_now
from streams.decide.policy import PolicyConfig, advise
from tests.factories import T0, cuda_error, kernel_xid, one, slurmctld_allocate

NOW = T0 + timedelta(minutes=2)


def _incident(raw=None, *more):
    topo, _ = apply_topology(None, one(slurmctld_allocate("42", "gpu-[01-04]", T0)), "c1")
    window = None
    for i, r in enumerate([raw or kernel_xid("gpu-03", 79, T0), *more]):
        sig = one(r, offset=1 + i).model_copy(update={"job_id": "42"})
        window = add_signal(window, topo, sig, "c1", NOW)
    assert window is not None
    _, incident = decide_now(window, topo, NOW, Timing())
    assert incident is not None
    return incident


def test_observe_mode_proposes_drain_and_requeue_as_dry_runs():
    actions, notes = advise(_incident(), PolicyConfig(), NOW)
    assert [(a.kind, a.dry_run, a.mode) for a in actions] == [
        (ActionKind.DRAIN_NODE, True, Mode.OBSERVE),
        (ActionKind.REQUEUE_JOB, True, Mode.OBSERVE),
    ]
    assert actions[0].node == "gpu-03"
    assert actions[1].exclude_nodes == ["gpu-03"]
    assert actions[0].reason.startswith("sickbay: Xid 79")
    assert actions[0].reason.endswith(f"[{actions[0].incident_id}]")
    assert "Xid 79" in actions[0].reason
    assert notes == []


def test_a_provisional_revision_is_held_and_its_final_revision_acts():
    inc = _incident()
    held, notes = advise(inc.model_copy(update={"provisional": True}), PolicyConfig(mode=Mode.ACT), NOW)
    assert held == []
    assert any(n.startswith("holding: a provisional verdict") for n in notes)
    final, _ = advise(inc.model_copy(update={"revision": 2}), PolicyConfig(mode=Mode.ACT), NOW)
    assert [a.kind for a in final] == [ActionKind.DRAIN_NODE, ActionKind.REQUEUE_JOB]


def test_act_mode_actions_are_not_dry_runs_and_keys_are_stable_across_revisions():
    inc = _incident()
    a1, _ = advise(inc, PolicyConfig(mode=Mode.ACT), NOW)
    a2, _ = advise(inc.model_copy(update={"revision": 2}), PolicyConfig(mode=Mode.ACT), NOW)
    assert not any(a.dry_run for a in a1)
    assert [a.idempotency_key for a in a1] == [a.idempotency_key for a in a2]


def test_blast_radius_cap_holds_back_isolation_and_a_restart_with_no_culprit():
    inc = _incident().model_copy(update={"isolate": ["gpu-01", "gpu-02", "gpu-03"]})
    actions, notes = advise(inc, PolicyConfig(max_isolate=2), NOW)
    assert actions == []
    assert "blast radius" in notes[0] and "names no culprit" in notes[-1]


def test_application_faults_isolate_nothing():
    raw = kernel_xid(
        "gpu-03", 13, T0, text="Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address"
    )
    crash = cuda_error("gpu-03", "42", T0 + timedelta(seconds=1))  # the job's own process faulted
    inc = _incident(raw, crash)
    assert inc.category == Category.APPLICATION
    actions, _ = advise(inc, PolicyConfig(mode=Mode.ACT), NOW)
    assert actions == []  # an application fault: nothing to isolate, and no restart without a culprit


def test_stale_incidents_are_never_acted_on():
    actions, notes = advise(_incident(), PolicyConfig(max_incident_age_s=60), NOW + timedelta(hours=2))
    assert actions == []
    assert notes[0].startswith("stale")


def test_low_confidence_isolates_nothing_and_restarts_nothing():
    inc = _incident().model_copy(update={"confidence": 0.5})
    actions, notes = advise(inc, PolicyConfig(mode=Mode.ACT), NOW)
    assert actions == []
    assert "confidence" in notes[0]


def test_a_root_that_stops_the_job_restarts_it_in_place_without_a_culprit():
    inc = _incident().model_copy(update={"isolate": [], "category": Category.UNKNOWN})
    inc = inc.model_copy(
        update={"root_cause": inc.root_cause.model_copy(update={"rule": "nccl.watchdog_timeout"})}
    )
    actions, _ = advise(inc, PolicyConfig(mode=Mode.ACT), NOW)
    assert [(a.kind, a.exclude_nodes, a.policy_rule) for a in actions] == [
        (ActionKind.REQUEUE_JOB, [], "restart")
    ]


def test_a_node_incident_drains_the_node_and_restarts_nothing():
    inc = _incident().model_copy(update={"job_id": "node:gpu-03"})
    actions, _ = advise(inc, PolicyConfig(mode=Mode.ACT), NOW)
    assert [(a.kind, a.node) for a in actions] == [(ActionKind.DRAIN_NODE, "gpu-03")]
