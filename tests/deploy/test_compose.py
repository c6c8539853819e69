"""The single-host compose file, parsed (no Docker here): pinned images, settings that sickbay reads,
roles that the CLI has, and the order in which services start."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
import yaml

from connectors.api.settings import ApiSettings
from streams.cli.main import app
from streams.settings import REPO_ROOT, Settings

COMPOSE = REPO_ROOT / "deploy" / "compose"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((COMPOSE / "compose.yaml").read_text())  # resolves the << merges
    return doc


def _setting_names() -> set[str]:
    names = set()
    for model, prefix in ((Settings, "SICKBAY_"), (ApiSettings, "SICKBAY_API_")):
        for name, info in model.model_fields.items():
            names.add(f"{prefix}{name.upper()}")
            alias = info.validation_alias
            names.update(getattr(alias, "choices", []) if alias is not None else [])
    return names


def _cli_paths() -> set[tuple[str, ...]]:
    """Every command path of the `sickbay` CLI: ("worker",), ("collect", "files"), ..."""
    group = typer.main.get_group(app)
    out: set[tuple[str, ...]] = set()
    for name, cmd in group.commands.items():
        out.add((name,))
        for sub in getattr(cmd, "commands", {}):
            out.add((name, sub))
    return out


def test_every_image_is_pinned_to_a_version_never_latest(compose):
    for name, svc in compose["services"].items():
        image = svc["image"]
        repo, _, tag = image.partition("@")[0].rpartition(":")
        assert repo and tag, f"{name}: {image} has no tag"
        assert tag != "latest" and re.match(r"^\d+(\.\d+)+", tag), f"{name}: {image}"


def test_sickbay_services_are_built_from_the_containerfile(compose):
    sickbay = {n: s for n, s in compose["services"].items() if s["image"].startswith("localhost/sickbay:")}
    assert {"topics", "worker", "sink", "api", "collect-files", "adapter-slurm"} <= set(sickbay)
    for svc in sickbay.values():
        assert svc["build"]["dockerfile"] == "deploy/container/Containerfile"
        assert (COMPOSE / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file()
        assert svc["read_only"] is True
        assert svc["cap_drop"] == ["ALL"]


def test_every_sickbay_variable_is_a_setting_with_a_valid_value(compose):
    known = _setting_names()
    for name, svc in compose["services"].items():
        env = svc.get("environment") or {}
        sickbay = {k: v for k, v in env.items() if k.startswith("SICKBAY_") or k == "CLICKHOUSE_URL"}
        unknown = set(sickbay) - known
        assert unknown == set(), (name, unknown)
        if sickbay:
            values = {
                k.removeprefix("SICKBAY_").lower(): v for k, v in sickbay.items() if k != "CLICKHOUSE_URL"
            }
            settings = Settings(**{k: v for k, v in values.items() if k in Settings.model_fields})
            assert settings.mode.value == "observe", name
            assert settings.kafka_bootstrap == "kafka:9092", name
    example = (COMPOSE / "sickbay.env.example").read_text().splitlines()
    names = {line.split("=", 1)[0].lstrip("# ") for line in example if "=" in line}
    assert names - known == set()


def test_every_sickbay_service_runs_a_real_cli_command(compose):
    paths = _cli_paths()
    for name, svc in compose["services"].items():
        if not svc["image"].startswith("localhost/sickbay:"):
            continue
        words = svc["command"]
        assert (words[0],) in paths, (name, words)
        if len(words) > 1 and not words[1].startswith("-"):
            assert tuple(words[:2]) in paths, (name, words)


def test_topics_exist_before_any_role_starts_and_kafka_is_kraft_without_auto_create(compose):
    services = compose["services"]
    kafka = services["kafka"]["environment"]
    assert kafka["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert kafka["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert services["topics"]["command"] == ["topics", "create"]
    assert services["topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    for name in ("worker", "sink", "api"):
        dep = services[name]["depends_on"]
        assert dep["topics"]["condition"] == "service_completed_successfully", name
    assert services["sink"]["depends_on"]["clickhouse"]["condition"] == "service_healthy"


def test_the_secrets_file_is_never_committed():
    ignored = (COMPOSE / ".gitignore").read_text().split()
    assert "sickbay.env" in ignored
