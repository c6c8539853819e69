"""Fixtures for the deployment artefacts: helm (built once from its Go module) and chart rendering."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.settings import REPO_ROOT

CHART = REPO_ROOT / "deploy" / "helm" / "sickbay"
Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def helm() -> Path:
    """helm from deploy/local/tools.sh (cached under ~/.cache/sickbay/bin; the first build takes minutes)."""
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "deploy" / "local" / "tools.sh"), "helm"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            "no helm: deploy/local/tools.sh could not build helm.sh/helm/v3 from the Go module proxy "
            f"(needs Go, /usr/local/go/bin/go):\n{done.stdout}\n{done.stderr}"
        )
    return Path(done.stdout.strip().splitlines()[-1])


def helm_run(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="session")
def render(helm: Path) -> Render:
    """``render("--set", "mode=act")`` → the manifests ``helm template`` prints, as dicts."""

    def _render(*args: str, release: str = "sb", namespace: str = "sickbay") -> list[dict[str, Any]]:
        done = helm_run(helm, "template", release, str(CHART), "--namespace", namespace, *args)
        assert done.returncode == 0, done.stderr
        return [d for d in yaml.safe_load_all(done.stdout) if d]

    return _render


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}
