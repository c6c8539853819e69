"""Reconciliation: an executed action is trusted only once a fresh observation shows its wanted state."""

from __future__ import annotations

import time

from connectors.actuators.runner import Reconciler
from schemas.actions import ActionKind, ActionResult, ActionStatus
from schemas.base import utcnow
from tests.factories import slurm_action


def result_for(action, status=ActionStatus.SUCCEEDED) -> ActionResult:
    now = utcnow()
    return ActionResult(
        action_id=action.action_id,
        idempotency_key=action.idempotency_key,
        kind=action.kind,
        status=status,
        adapter="fake",
        cluster=action.cluster,
        incident_id=action.incident_id,
        started_at=now,
        finished_at=now,
    )


class FakeAdapter:
    def __init__(self, answers):
        self.answers = list(answers)
        self.asked = 0

    def holds(self, _action):
        self.asked += 1
        return self.answers.pop(0) if self.answers else self.answers_default

    answers_default = False


def settle(rec: Reconciler, timeout_s: float = 5.0) -> list[ActionResult]:
    out: list[ActionResult] = []
    deadline = time.monotonic() + timeout_s
    while rec.pending and time.monotonic() < deadline:
        out.extend(rec.due())
        time.sleep(0.01)
    return out


def test_an_action_converges_when_a_later_observation_shows_the_wanted_state():
    adapter = FakeAdapter([False, None, True])  # not yet, scheduler unreachable, then there
    rec = Reconciler(adapter, deadline_s=5, first_check_s=0.01)
    action = slurm_action(ActionKind.DRAIN_NODE, node="gpu-01")
    rec.track(action, result_for(action))
    [done] = settle(rec)
    assert (done.status, done.action_id, adapter.asked) == (ActionStatus.CONVERGED, action.action_id, 3)
    assert done.detail.startswith("reconciled: observed after")


def test_an_action_the_scheduler_never_shows_is_abandoned_at_the_deadline():
    rec = Reconciler(FakeAdapter([]), deadline_s=0.05, first_check_s=0.01)
    action = slurm_action(ActionKind.REQUEUE_JOB, job_id="42")
    rec.track(action, result_for(action, ActionStatus.PENDING))
    [done] = settle(rec)
    assert done.status == ActionStatus.ABANDONED and "did not show" in done.detail


def test_dry_runs_rejections_and_adapters_without_observation_are_not_tracked():
    rec = Reconciler(FakeAdapter([True]), deadline_s=5)
    dry = slurm_action(ActionKind.DRAIN_NODE, node="gpu-01", dry_run=True)
    rec.track(dry, result_for(dry, ActionStatus.DRY_RUN))
    act = slurm_action(ActionKind.DRAIN_NODE, node="gpu-01")
    rec.track(act, result_for(act, ActionStatus.REJECTED))
    assert rec.pending == []
    blind = Reconciler(object(), deadline_s=5)
    blind.track(act, result_for(act))
    assert blind.pending == [] and blind.due() == []
