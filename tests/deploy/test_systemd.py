"""deploy/systemd/install.sh on this machine (systemd is not PID 1 here): it installs into a temp
root, writes the EnvironmentFile 0600 and keeps an existing one, the units pass
``systemd-analyze verify``, and the worker and Slurm-adapter units' own ExecStart command lines,
started by hand with the unit's environment, consume from the local Kafka and reach the local Slurm."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from connectors.kafka import ReliableProducer, consumer_config, ensure_topics
from schemas import codec
from schemas.actions import ActionKind, ActionResult, ActionStatus
from schemas.incidents import Incident
from streams.settings import REPO_ROOT, Settings
from tests.factories import kernel_xid, nccl_timeout, slurmctld_allocate

INSTALL = REPO_ROOT / "deploy" / "systemd" / "install.sh"
SICKBAY = Path(shutil.which("sickbay") or REPO_ROOT / ".venv" / "bin" / "sickbay")
UNITS = (
    "sickbay-worker@.service",
    "sickbay-adapter-slurm.service",
    "sickbay-adapter-slurm-ssh.service",
    "sickbay-collect@.service",
    "sickbay-sink-clickhouse.service",
)


def _install(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    return subprocess.run(
        ["bash", str(INSTALL), "--prefix", str(root), "--user", user, "--sickbay", str(SICKBAY), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _unit(path: Path, instance: str = "1") -> tuple[list[str], dict[str, str], list[Path]]:
    """ExecStart argv, Environment= pairs and EnvironmentFile= paths, specifiers expanded like systemd."""
    spec = {"%i": instance, "%H": socket.gethostname(), "%%": "%"}
    argv: list[str] = []
    env: dict[str, str] = {}
    files: list[Path] = []
    for raw in path.read_text().splitlines():
        key, sep, value = raw.partition("=")
        if not sep or raw.startswith("#"):
            continue
        for k, v in spec.items():
            value = value.replace(k, v)
        if key == "ExecStart":
            argv = shlex.split(value)
        elif key == "Environment":
            name, _, val = value.partition("=")
            env[name] = val
        elif key == "EnvironmentFile":
            files.append(Path(value.removeprefix("-")))
    return argv, env, files


def _environment_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as systemd reads them (comments and blank lines skipped, quotes stripped)."""
    out = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", ";")) and "=" in line:
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip().strip("'\"")
    return out


def _exec_start(unit: Path, extra: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start the unit's ExecStart as systemd would: only the unit's environment, in its own session."""
    argv, env, files = _unit(unit)
    full = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
    for f in files:
        full |= _environment_file(f)
    full |= env | extra
    return subprocess.Popen(
        argv, env=full, cwd="/", stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_dry_run_prints_the_plan_and_changes_nothing(tmp_path):
    root = tmp_path / "root"
    done = _install(root, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert not root.exists()
    assert "would write" in done.stdout
    assert all(u in done.stdout for u in UNITS)


def test_install_writes_units_and_a_0600_environment_file_and_keeps_it_on_reinstall(tmp_path):
    root = tmp_path / "root"
    done = _install(root, "--env", "SICKBAY_KAFKA_BOOTSTRAP=k1:9092", "--env", "SICKBAY_CLUSTER=slurm-a")
    assert done.returncode == 0, done.stderr
    assert "not enabled" in done.stdout  # no systemd as PID 1 (or a prefix): nothing is started
    for u in UNITS:
        text = (root / "etc/systemd/system" / u).read_text()
        assert "@" not in text.replace(u.split("@")[0] + "@", "").split("[Unit]", 1)[1], u  # all rendered
        assert f"EnvironmentFile={root}/etc/sickbay/sickbay.env" in text, u
        assert f"ExecStart={SICKBAY} " in text, u
        assert "NoNewPrivileges=yes" in text and "ProtectSystem=strict" in text, u
    env_file = root / "etc/sickbay/sickbay.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    settings = _environment_file(env_file)
    assert settings == {
        "SICKBAY_MODE": "observe",
        "SICKBAY_KAFKA_BOOTSTRAP": "k1:9092",
        "SICKBAY_CLUSTER": "slurm-a",
    }
    assert stat.S_IMODE((root / "etc/sickbay").stat().st_mode) == 0o750

    env_file.write_text(env_file.read_text() + "CLICKHOUSE_URL=http://u:secret@ch:8123\n")
    again = _install(root, "--env", "SICKBAY_CLUSTER=other")
    assert again.returncode == 0, again.stderr
    assert "keeping" in again.stdout
    assert _environment_file(env_file)["CLICKHOUSE_URL"] == "http://u:secret@ch:8123"
    assert _environment_file(env_file)["SICKBAY_CLUSTER"] == "slurm-a"


def test_every_unit_passes_systemd_analyze_verify(tmp_path):
    verify = shutil.which("systemd-analyze")
    if verify is None:
        pytest.fail("systemd-analyze is not installed (apt-get install systemd)")
    root = tmp_path / "root"
    assert _install(root).returncode == 0
    units = root / "etc/systemd/system"
    # templates are verified as instances, the way systemctl would load them
    for template, instance in (("sickbay-worker@.service", "1"), ("sickbay-collect@.service", "files")):
        shutil.copy(units / template, units / template.replace("@.", f"@{instance}."))
        (root / "etc/sickbay/collect-files.env").touch()
    paths = [str(p) for p in units.glob("*.service") if not p.name.endswith("@.service")]
    done = subprocess.run(
        [verify, "verify", *paths], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_units_differ_only_where_they_should():
    worker = (REPO_ROOT / "deploy/systemd/units/sickbay-worker@.service").read_text()
    assert "Environment=SICKBAY_STATE_DIR=@STATE_DIR@/worker-%i" in worker  # one RocksDB dir per instance
    assert "Environment=CONSUMER_GROUP_INSTANCE_ID=%H-worker-%i" in worker  # stable static membership
    local = (REPO_ROOT / "deploy/systemd/units/sickbay-adapter-slurm.service").read_text()
    ssh = (REPO_ROOT / "deploy/systemd/units/sickbay-adapter-slurm-ssh.service").read_text()
    assert "Environment=SICKBAY_SLURM_MODE=local" in local and "Conflicts=sickbay-adapter-slurm-ssh" in local
    assert "Environment=SICKBAY_SLURM_MODE=ssh" in ssh and "Conflicts=sickbay-adapter-slurm.service" in ssh
    collect = (REPO_ROOT / "deploy/systemd/units/sickbay-collect@.service").read_text()
    assert "ExecStart=@SICKBAY@ collect %i $SICKBAY_COLLECT_ARGS" in collect


def _read(consumer: Consumer, want: int, timeout_s: float) -> list[bytes]:
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(out) < want:
        msg = consumer.poll(0.3)
        value = msg.value() if msg is not None and msg.error() is None else None
        if value is not None:
            out.append(value)
    return out


@pytest.mark.integration
def test_installed_worker_and_adapter_units_consume_from_kafka_and_reach_slurm(
    kafka_bootstrap, slurm_conf, tmp_path
):
    run = uuid.uuid4().hex[:8]
    prefix = f"sd{run}"
    root = tmp_path / "root"
    done = _install(
        root,
        "--env",
        f"SICKBAY_KAFKA_BOOTSTRAP={kafka_bootstrap}",
        "--env",
        f"SICKBAY_TOPIC_PREFIX={prefix}",
        "--env",
        f"SICKBAY_APP_ID={prefix}",
        "--env",
        "SICKBAY_ROOT_GRACE_S=2",
        "--env",
        f"SLURM_CONF={slurm_conf}",
    )
    assert done.returncode == 0, done.stderr
    cat = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=prefix, app_id=prefix).topics
    ensure_topics(kafka_bootstrap, cat.all())
    units = root / "etc/systemd/system"
    worker_log, adapter_log = tmp_path / "worker.log", tmp_path / "adapter.log"
    worker = _exec_start(units / "sickbay-worker@.service", {}, worker_log)
    adapter = _exec_start(units / "sickbay-adapter-slurm.service", {}, adapter_log)
    incidents = Consumer(consumer_config(kafka_bootstrap, f"it-sd-{run}", "it"))
    incidents.subscribe([cat.incidents.name])
    results = Consumer(consumer_config(kafka_bootstrap, f"it-sdr-{run}", "it"))
    results.subscribe([cat.action_results.name])
    try:
        deadline = time.monotonic() + 180
        while "Worker]: Ready" not in worker_log.read_text(errors="replace"):
            assert worker.poll() is None, worker_log.read_text()[-4000:]
            assert time.monotonic() < deadline, worker_log.read_text()[-4000:]
            time.sleep(0.25)
        # the unit's own state dir and membership id are in force
        assert (root / "var/lib/sickbay/worker-1/faust" / prefix).is_dir()
        now = datetime.now(UTC)
        producer = ReliableProducer(kafka_bootstrap, "it-systemd", linger_ms=0)
        producer.produce(
            cat.raw_logs.name,
            slurmctld_allocate("6160", "gpu-[01-04]", now - timedelta(minutes=1)),
            key=b"ctl",
        )
        producer.produce(cat.raw_logs.name, kernel_xid("gpu-03", 79, now), key=b"gpu-03")
        for rank, node in enumerate(["gpu-01", "gpu-02", "gpu-04"]):
            producer.produce(cat.raw_logs.name, nccl_timeout(node, rank, "6160", now), key=node.encode())
        assert producer.flush(10) == 0
        got = [Incident.model_validate(codec.loads(v)) for v in _read(incidents, 1, 90)]
        assert got, worker_log.read_text()[-4000:]
        assert got[0].job_id == "6160"
        assert got[0].culprit is not None and got[0].culprit.node == "gpu-03"

        res = [ActionResult.model_validate(codec.loads(v)) for v in _read(results, 2, 90)]
        drains = [r for r in res if r.kind is ActionKind.DRAIN_NODE]
        assert drains, adapter_log.read_text()[-4000:]
        # observe mode (the env file's default): validated on the real slurmctld, not executed
        assert drains[0].status is ActionStatus.DRY_RUN, drains[0]
        shown = drains[0].commands[0]
        assert shown.argv[0].endswith("scontrol") and "gpu-03" in shown.argv, shown
        assert shown.returncode == 0, shown  # slurmctld answered for gpu-03
    finally:
        incidents.close()
        results.close()
        _stop(worker)
        _stop(adapter)
