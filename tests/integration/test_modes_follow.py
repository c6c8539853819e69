"""Runtime mode changes: `sickbay modes set` on the real broker reaches every worker's registry."""

from __future__ import annotations

import time
import uuid

import pytest
from typer.testing import CliRunner

from connectors.kafka import ensure_topics
from schemas.actions import Mode
from schemas.incidents import Category
from schemas.topics import TopicCatalog
from streams.cli.main import app
from streams.decide.modes import ModeFollower, ModeRegistry

pytestmark = pytest.mark.integration


def test_a_mode_set_on_the_cli_reaches_two_independent_followers(kafka_bootstrap, monkeypatch):
    prefix = f"modes{uuid.uuid4().hex[:8]}"
    cat = TopicCatalog(prefix=prefix, partitions=1, app_id=prefix)
    ensure_topics(kafka_bootstrap, [cat.control_modes, cat.audit])
    monkeypatch.setenv("SICKBAY_KAFKA_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.setenv("SICKBAY_TOPIC_PREFIX", prefix)
    monkeypatch.setenv("SICKBAY_CLUSTER", "c1")

    def cli(*args: str) -> None:
        result = CliRunner().invoke(app, ["modes", *args])
        assert result.exit_code == 0, result.output

    cli("set", "act", "--reason", "promote gpu faults", "--partition", "gpu", "--category", "hardware_gpu")
    followers = [
        ModeFollower(ModeRegistry(Mode.OBSERVE), kafka_bootstrap, cat.control_modes.name) for _ in (1, 2)
    ]
    for f in followers:
        f.start()  # started after the change: both read it from the compacted topic's start
    try:
        cli("set", "act", "--reason", "whole cluster")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(f.applied < 2 for f in followers):
            time.sleep(0.1)
        for f in followers:
            assert f.applied == 2
            assert f.registry.resolve("c1", "gpu", Category.HARDWARE_GPU)[0] == Mode.ACT
            mode, source = f.registry.resolve("c1", "cpu", Category.APPLICATION)
            assert (mode, source) == (Mode.ACT, "c1/*/* by cli")
            assert f.registry.resolve("c2", None, None) == (Mode.OBSERVE, "default")
    finally:
        for f in followers:
            f.stop()


def test_modes_set_without_a_reason_is_refused(kafka_bootstrap, monkeypatch):
    monkeypatch.setenv("SICKBAY_KAFKA_BOOTSTRAP", kafka_bootstrap)
    result = CliRunner().invoke(app, ["modes", "set", "act", "--reason", "  "])
    assert result.exit_code == 2 and "reason" in result.output
