"""The container image definition, checked without Docker: pinned bases, non-root, multi-stage with
wheels built in the first stage; the entry point that runs any role; and the wheel the image installs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from streams.settings import REPO_ROOT

CONTAINER = REPO_ROOT / "deploy" / "container"
ENTRYPOINT = CONTAINER / "entrypoint.sh"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = (CONTAINER / "Containerfile").read_text()
    out: list[tuple[str, str]] = []
    for raw in re.sub(r"\\\n", " ", text).splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for ins in _instructions():
        if ins[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    return stages


def _base_images() -> list[str]:
    args = {}
    for word, rest in _instructions():
        if word == "ARG" and "=" in rest:
            k, _, v = rest.partition("=")
            args[k] = v
    images = []
    for word, rest in _instructions():
        if word == "FROM":
            ref = rest.split()[0]
            images.append(re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], ref))
    return images


def test_every_base_image_is_pinned_to_an_exact_version_never_latest():
    images = _base_images()
    assert len(images) == 2
    for image in images:
        name, _, tag = image.partition("@")[0].rpartition(":")
        assert name and tag, image
        assert tag != "latest", image
        assert re.match(r"^\d+\.\d+\.\d+-", tag), f"{image}: pin an exact patch release (or a digest)"
    text = (CONTAINER / "Containerfile").read_text()
    assert "sha256" in text  # the comment says how to pin the digest too


def test_build_stage_makes_wheels_and_the_runtime_installs_only_those_offline():
    build, runtime = _stages()
    assert build[0][1].endswith(" AS build")
    assert any(w == "RUN" and "pip wheel --wheel-dir /wheels " in r for w, r in build)
    installs = [r for w, r in runtime if w == "RUN" and "pip install" in r]
    assert len(installs) == 1
    assert "--no-index" in installs[0]
    assert "from=build" in installs[0]
    assert not any("build-essential" in r for _, r in runtime)  # compilers stay in stage 1


def test_runtime_stage_runs_as_a_non_root_user_through_one_entry_point():
    _, runtime = _stages()
    users = [r for w, r in runtime if w == "USER"]
    assert users, "the runtime stage sets no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, users[-1]  # numeric: runAsNonRoot can verify it
    entry = [r for w, r in runtime if w == "ENTRYPOINT"]
    assert entry == ['["/usr/bin/tini", "--", "/usr/local/bin/sickbay-entrypoint"]']
    assert any(w == "ENV" and "SICKBAY_STATE_DIR=/var/lib/sickbay" in r for w, r in runtime)


def test_build_context_ignore_file_lets_through_everything_the_build_copies():
    ignore = (CONTAINER / "Containerfile.dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied: set[str] = set()
    for word, rest in _instructions():
        if word == "COPY" and "--from=" not in rest:
            parts = [p for p in rest.split() if not p.startswith("--")]
            copied.update(p.rstrip("/").removeprefix("./") for p in parts[:-1])
    assert copied <= allowed, copied - allowed
    assert "*" in ignore  # everything else (.venv, .cache, tests) stays out of the context


def _fake_sickbay(tmp_path: Path) -> dict[str, str]:
    """A `sickbay` on PATH that prints its arguments and the membership id it was given."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "sickbay"
    fake.write_text('#!/bin/sh\necho "args=$*"\necho "instance=${CONSUMER_GROUP_INSTANCE_ID-<unset>}"\n')
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("SICKBAY_ROLE", "CONSUMER_GROUP_INSTANCE_ID")}
    return {**env, "PATH": f"{bindir}:{env['PATH']}"}


def _entry(env: dict[str, str], *args: str) -> list[str]:
    done = subprocess.run(["sh", str(ENTRYPOINT), *args], env=env, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_entry_point_runs_the_role_from_arguments_or_from_SICKBAY_ROLE(tmp_path):
    env = _fake_sickbay(tmp_path)
    assert _entry(env, "collect", "files", "--follow", "/var/log/kern.log")[0] == (
        "args=collect files --follow /var/log/kern.log"
    )
    assert _entry({**env, "SICKBAY_ROLE": "adapter slurm"})[0] == "args=adapter slurm"
    assert _entry({**env, "SICKBAY_ROLE": "api"}, "sink", "clickhouse")[0] == "args=sink clickhouse"


def test_entry_point_gives_a_worker_its_pod_name_as_static_membership_id(tmp_path):
    env = _fake_sickbay(tmp_path)
    assert _entry({**env, "HOSTNAME": "sickbay-worker-2"}, "worker") == [
        "args=worker",
        "instance=sickbay-worker-2",
    ]
    assert _entry({**env, "HOSTNAME": "h", "SICKBAY_INSTANCE_ID": "w7"}, "worker")[1] == "instance=w7"
    assert (
        _entry({**env, "HOSTNAME": "h", "CONSUMER_GROUP_INSTANCE_ID": "set"}, "worker")[1] == "instance=set"
    )
    assert _entry({**env, "HOSTNAME": "h"}, "api")[1] == "instance=<unset>"  # only workers join a group


def _copied_sources() -> list[str]:
    """What the build stage COPYs from the context (the image's whole source)."""
    build, _ = _stages()
    out = []
    for word, rest in build:
        if word == "COPY":
            out += [p.rstrip("/").removeprefix("./") for p in rest.split()[:-1] if not p.startswith("--")]
    return out


@pytest.mark.timeout(300)
def test_the_wheel_built_from_what_the_image_copies_carries_rules_console_and_entry_point(tmp_path):
    """``pip wheel`` of sickbay alone, from a copy of exactly the build stage's COPY sources (the
    image's stage 1 adds its dependencies' wheels beside it)."""
    src = tmp_path / "src"
    src.mkdir()
    for rel in _copied_sources():
        path = REPO_ROOT / rel
        if path.is_dir():
            shutil.copytree(path, src / rel, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / rel)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "wheels"), "."],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "wheels").glob("sickbay-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "sickbay = streams.cli.main:main" in zf.read(entry_points).decode()
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        assert "License-Expression: Apache-2.0" in metadata.splitlines()
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)  # the text ships with it
    assert {"streams/extract/rules/gpu.toml", "connectors/api/static/index.html"} <= names
    assert "schemas/topics.py" in names
    assert not any(n.startswith(("tests/", "benchmarks/", "deploy/")) for n in names)


def test_deploy_scripts_pass_shellcheck():
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.fail("shellcheck is not installed (make test installs it: deploy/local/test-tools.sh)")
    scripts = [
        CONTAINER / "entrypoint.sh",
        REPO_ROOT / "deploy" / "systemd" / "install.sh",
        REPO_ROOT / "deploy" / "local" / "kafka-cluster.sh",
        REPO_ROOT / "deploy" / "local" / "tools.sh",
        REPO_ROOT / "deploy" / "local" / "test-tools.sh",
    ]
    done = subprocess.run([shellcheck, *map(str, scripts)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout
