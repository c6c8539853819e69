"""The Slurm adapter against the real slurmctld + 4 slurmd started by deploy/local/slurm.sh."""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest

from connectors.actuators.slurm_adapter import SlurmAdapter
from connectors.actuators.slurm_cli import SlurmCli
from schemas.actions import Action, ActionKind, ActionStatus
from tests.factories import slurm_action

pytestmark = pytest.mark.integration
NODE = "gpu-02"


@pytest.fixture
def cli(slurm_conf):
    cli = SlurmCli(slurm_conf)
    yield cli
    _, state = cli.show("node", NODE)
    if state and "DRAIN" in state.get("State", ""):
        cli.run(["scontrol", "update", f"NodeName={NODE}", "State=RESUME"])


@pytest.fixture
def job(cli, tmp_path):
    run = cli.run(
        [
            "sbatch",
            "--parsable",
            "-N2",
            "-w",
            "gpu-01,gpu-02",
            "--ntasks-per-node=1",
            "-o",
            str(tmp_path / "slurm-%j.out"),
            "--wrap",
            "srun sleep 300",
        ]
    )
    assert run.returncode == 0, run.stderr
    job_id = run.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        _, state = cli.show("job", job_id)
        if state and state.get("JobState") == "RUNNING":
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"job {job_id} did not start: {state}")
    yield job_id
    cli.run(["scancel", job_id])


def _action(
    kind: ActionKind,
    *,
    dry_run: bool,
    node: str | None = None,
    job_id: str | None = None,
    exclude: list[str] | None = None,
) -> Action:
    return slurm_action(
        kind,
        dry_run=dry_run,
        node=node,
        job_id=job_id,
        exclude_nodes=exclude or [],
        reason="sickbay: Xid 79 (GPU fallen off the bus) [inc-it]",
    )


def _sinfo_reason(cli: SlurmCli) -> str:
    out = cli.run(["sinfo", "-R", "-h", "-N", "-o", "%N|%T|%E"]).stdout
    return next((line for line in out.splitlines() if line.startswith(f"{NODE}|")), "")


def test_observe_mode_validates_against_the_cluster_and_changes_nothing(cli):
    result = SlurmAdapter(cli).handle(_action(ActionKind.DRAIN_NODE, dry_run=True, node=NODE))
    assert result.status == ActionStatus.DRY_RUN
    assert result.detail.startswith(f"would run: scontrol update NodeName={NODE} State=DRAIN")
    assert _sinfo_reason(cli) == ""


def test_drain_sets_sickbays_reason_and_a_second_delivery_is_converged(cli):
    adapter = SlurmAdapter(cli)
    action = _action(ActionKind.DRAIN_NODE, dry_run=False, node=NODE)
    first = adapter.handle(action)
    assert first.status == ActionStatus.SUCCEEDED, first.detail
    assert first.commands[-1].argv[:3] == ["scontrol", "update", f"NodeName={NODE}"]
    assert "|sickbay: Xid 79 (GPU fallen off the bus) [inc-it]" in _sinfo_reason(cli)
    again = adapter.handle(action)
    assert again.status == ActionStatus.CONVERGED
    assert [c.argv[:2] for c in again.commands] == [["scontrol", "show"]]  # observed, did not act


def test_a_fresh_observation_confirms_a_drain_and_then_its_resume(cli):
    adapter = SlurmAdapter(cli)
    drain = _action(ActionKind.DRAIN_NODE, dry_run=False, node=NODE)
    assert adapter.holds(drain) is False
    assert adapter.handle(drain).status == ActionStatus.SUCCEEDED
    assert adapter.holds(drain) is True
    resume = _action(ActionKind.RESUME_NODE, dry_run=False, node=NODE)
    assert adapter.holds(resume) is False
    assert adapter.handle(resume).status == ActionStatus.SUCCEEDED
    assert adapter.holds(resume) is True
    assert adapter.holds(_action(ActionKind.DRAIN_NODE, dry_run=False, node="gpu-99")) is None


def test_drain_of_an_unknown_node_is_rejected_with_slurms_message(cli):
    result = SlurmAdapter(cli).handle(_action(ActionKind.DRAIN_NODE, dry_run=False, node="gpu-99"))
    assert result.status == ActionStatus.REJECTED
    assert "gpu-99 not found" in result.detail


def test_requeue_excluding_a_node_holds_excludes_and_releases_then_is_converged(cli, job):
    adapter = SlurmAdapter(cli)
    action = _action(ActionKind.REQUEUE_JOB, dry_run=False, job_id=job, exclude=[NODE])
    result = adapter.handle(action)
    assert result.status == ActionStatus.SUCCEEDED, result.detail
    assert [c.argv[1] for c in result.commands] == ["show", "requeuehold", "update", "release"]
    _, state = cli.show("job", job)
    assert state is not None
    assert state["ExcNodeList"] == NODE
    assert int(state["Restarts"]) == 1
    deadline = time.monotonic() + 30
    while state.get("JobState") != "PENDING" and time.monotonic() < deadline:
        time.sleep(0.2)
        _, state = cli.show("job", job)
    assert adapter.holds(action) is True  # what the runner's reconciliation asks
    assert adapter.handle(action).status == ActionStatus.CONVERGED


def test_requeue_with_backoff_holds_the_restart_until_its_start_time(cli, job):
    action = _action(ActionKind.REQUEUE_JOB, dry_run=False, job_id=job, exclude=[NODE])
    action = action.model_copy(update={"backoff_s": 120.0})
    result = SlurmAdapter(cli).handle(action)
    assert result.status == ActionStatus.SUCCEEDED, result.detail
    assert [c.argv[1] for c in result.commands] == ["show", "requeuehold", "update", "update", "release"]
    assert result.commands[3].argv[-1] == "StartTime=now+120"
    _, state = cli.show("job", job)
    assert state is not None
    eligible = datetime.fromisoformat(state["EligibleTime"]).replace(tzinfo=UTC)  # local time = UTC here
    assert eligible > datetime.now(UTC) + timedelta(seconds=60)
    # A requeued job is PENDING with Reason=None until slurmctld's scheduler next looks at it (at once on an
    # idle host; CI, loaded, once read None). Wait for that look, but the job must never run meanwhile.
    held = ("PENDING", "BeginTime")
    deadline = time.monotonic() + 90
    while (state.get("JobState"), state.get("Reason")) != held and time.monotonic() < deadline:
        assert state.get("JobState") != "RUNNING", state
        time.sleep(0.2)
        _, state = cli.show("job", job)
        assert state is not None
    assert (state["JobState"], state["Reason"]) == held


def test_requeue_of_an_unknown_job_is_rejected_clearly(cli):
    result = SlurmAdapter(cli).handle(_action(ActionKind.REQUEUE_JOB, dry_run=False, job_id="999999"))
    assert result.status == ActionStatus.REJECTED
    assert "job 999999 not found" in result.detail


def test_scontrol_is_run_with_argv_so_a_hostile_reason_is_only_text(cli):
    adapter = SlurmAdapter(cli)
    action = _action(ActionKind.DRAIN_NODE, dry_run=False, node=NODE).model_copy(
        update={"reason": "sickbay: x; touch /tmp/sickbay-pwned $(id)"}
    )
    subprocess.run(["rm", "-f", "/tmp/sickbay-pwned"], check=False)
    assert adapter.handle(action).status == ActionStatus.SUCCEEDED
    assert "touch /tmp/sickbay-pwned $(id)" in _sinfo_reason(cli)
    assert subprocess.run(["test", "-e", "/tmp/sickbay-pwned"], check=False).returncode == 1
