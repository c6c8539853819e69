from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from schemas import codec
from streams.cli.main import app

runner = CliRunner()


def test_sim_list_names_every_type():
    from connectors.sources.simulator import SCENARIO_TYPES

    out = runner.invoke(app, ["sim", "list"])
    assert out.exit_code == 0
    assert all(s.name in out.stdout for s in SCENARIO_TYPES)


def test_sim_scenario_writes_logs_and_truth(tmp_path: Path):
    out = runner.invoke(app, ["sim", "scenario", "ib_port_down", "--seed", "4", "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    truth = codec.loads(out.stdout.strip().splitlines()[-1])
    assert truth["scenario_type"] == "ib_port_down" and truth["category"] == "hardware_network"
    folder = tmp_path / truth["scenario_id"]
    assert (folder / "truth.json").is_file() and any((folder / "logs").rglob("*.log"))
    again = runner.invoke(app, ["sim", "truth", "ib_port_down", "--seed", "4"])
    assert codec.loads(again.stdout.strip()) == truth


def test_sim_rejects_an_unknown_type():
    out = runner.invoke(app, ["sim", "scenario", "no_such_thing"])
    assert out.exit_code == 2
