"""The Slurm adapter's resume (the API's restore request) against the real local Slurm."""

from __future__ import annotations

import pytest

from connectors.actuators.slurm_adapter import SlurmAdapter
from connectors.actuators.slurm_cli import SlurmCli
from schemas.actions import Action, ActionKind, ActionStatus
from tests.factories import slurm_action

pytestmark = pytest.mark.integration
NODE = "gpu-04"


@pytest.fixture
def cli(slurm_conf):
    cli = SlurmCli(slurm_conf)
    yield cli
    _, state = cli.show("node", NODE)
    if state and "DRAIN" in state.get("State", ""):
        cli.run(cli.resume_argv(NODE))


def _action(kind: ActionKind, *, dry_run: bool = False) -> Action:
    return slurm_action(
        kind,
        dry_run=dry_run,
        node=NODE,
        incident_id="",
        reason="sickbay: isolate requested by api:alice: ECC errors",
    )


def _state(cli: SlurmCli) -> str:
    _, state = cli.show("node", NODE)
    assert state is not None
    return state.get("State", "")


def test_a_sickbay_drain_is_resumed_then_resume_converges(cli):
    adapter = SlurmAdapter(cli)
    assert adapter.handle(_action(ActionKind.DRAIN_NODE)).status == ActionStatus.SUCCEEDED
    assert "DRAIN" in _state(cli)
    advice = adapter.handle(_action(ActionKind.RESUME_NODE, dry_run=True))
    assert advice.status == ActionStatus.DRY_RUN and "State=RESUME" in advice.detail
    assert "DRAIN" in _state(cli)
    done = adapter.handle(_action(ActionKind.RESUME_NODE))
    assert done.status == ActionStatus.SUCCEEDED, done.detail
    assert "DRAIN" not in _state(cli)
    assert [c.argv for c in done.commands][-1] == ["scontrol", "update", f"NodeName={NODE}", "State=RESUME"]
    again = adapter.handle(_action(ActionKind.RESUME_NODE))
    assert again.status == ActionStatus.CONVERGED


def test_a_drain_by_someone_else_is_left_alone(cli):
    run = cli.run(["scontrol", "update", f"NodeName={NODE}", "State=DRAIN", "Reason=admin: memory test"])
    assert run.returncode == 0, run.stderr
    result = SlurmAdapter(cli).handle(_action(ActionKind.RESUME_NODE))
    assert result.status == ActionStatus.REJECTED and "someone else" in result.detail
    assert "DRAIN" in _state(cli)
