"""Every action through every executor mode, on the real local Slurm 22.05 cluster.

- local: scontrol/scancel on this host;
- ssh: the same argv through a real sshd on 127.0.0.1 (deploy/local/sshd.sh: own host key, checked);
- rest: the real slurmrestd on a UNIX socket (deploy/local/slurmrestd.sh, rest_auth/local).

Jobs are named ``sickbay-act-test-*`` and cancelled afterwards; every drained node is resumed.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from connectors.actuators.runner import run_adapter
from connectors.actuators.slurm_adapter import SlurmAdapter, expiry_text
from connectors.actuators.slurm_backend import SlurmBackend
from connectors.actuators.slurm_cli import SlurmCli
from connectors.actuators.slurm_rest import SlurmRest
from connectors.actuators.slurm_ssh import SlurmSsh
from connectors.kafka import ReliableProducer, consumer_config, ensure_topics
from schemas import codec
from schemas.actions import ActionKind, ActionResult, ActionStatus
from schemas.base import utcnow
from schemas.deadletter import DeadLetter
from schemas.topics import TopicCatalog
from streams.settings import REPO_ROOT
from tests.components import LOCAL
from tests.factories import slurm_action

pytestmark = pytest.mark.integration
NODE = "gpu-03"


def _script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(LOCAL / name), *args], capture_output=True, text=True, timeout=300, check=False
    )


def _env_of(name: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in _script(name, "env").stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        out[key] = shlex.split(value)[0] if value else ""
    return out


@pytest.fixture(scope="module")
def local(slurm_conf: Path) -> SlurmCli:
    return SlurmCli(slurm_conf)


@pytest.fixture(scope="module")
def ssh_backend(slurm_conf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmSsh]:
    was_running = _script("sshd.sh", "status").returncode == 0
    up = _script("sshd.sh", "up")
    if up.returncode != 0:
        pytest.fail(f"no sshd for the SSH mode: deploy/local/sshd.sh up failed:\n{up.stdout}\n{up.stderr}")
    env = _env_of("sshd.sh")
    backend = SlurmSsh(
        env["SICKBAY_SLURM_SSH_HOST"],
        user=env["SICKBAY_SLURM_SSH_USER"],
        port=int(env["SICKBAY_SLURM_SSH_PORT"]),
        key_file=Path(env["SICKBAY_SLURM_SSH_KEY"]),
        known_hosts=Path(env["SICKBAY_SLURM_SSH_KNOWN_HOSTS"]),
        control_dir=tmp_path_factory.mktemp("ssh-cm"),
    )
    yield backend
    backend.close()
    if not was_running:
        _script("sshd.sh", "down")


@pytest.fixture(scope="module")
def rest_backend(slurm_conf: Path) -> Iterator[SlurmRest]:
    was_running = _script("slurmrestd.sh", "status").returncode == 0
    up = _script("slurmrestd.sh", "up")
    if up.returncode != 0:
        pytest.fail(f"no slurmrestd: deploy/local/slurmrestd.sh up failed:\n{up.stdout}\n{up.stderr}")
    backend = SlurmRest(_env_of("slurmrestd.sh")["SICKBAY_SLURM_REST_URL"])
    yield backend
    backend.close()
    if not was_running:
        _script("slurmrestd.sh", "down")


@pytest.fixture(params=["local", "ssh", "rest"])
def backend(request: pytest.FixtureRequest) -> SlurmBackend:
    name = {"local": "local", "ssh": "ssh_backend", "rest": "rest_backend"}[request.param]
    result: SlurmBackend = request.getfixturevalue(name)
    return result


@pytest.fixture(params=["local", "ssh"])
def changer(request: pytest.FixtureRequest) -> SlurmBackend:
    """The modes that can drain, resume and requeue on Slurm 22.05 (slurmrestd v0.0.38 cannot)."""
    name = {"local": "local", "ssh": "ssh_backend"}[request.param]
    result: SlurmBackend = request.getfixturevalue(name)
    return result


@pytest.fixture
def restore(local: SlurmCli) -> Iterator[None]:
    yield
    _, state = local.show("node", NODE)
    if state and "DRAIN" in state.get("State", ""):
        local.run(local.resume_argv(NODE))


def _node(local: SlurmCli) -> dict[str, str]:
    _, state = local.show("node", NODE)
    assert state is not None
    return state


@pytest.fixture
def job(local: SlurmCli, tmp_path: Path) -> Iterator[str]:
    run = local.run(
        [
            "sbatch", "--parsable", "-J", f"sickbay-act-test-{uuid.uuid4().hex[:6]}", "-N1", "-w", "gpu-01",
            "-o", str(tmp_path / "slurm-%j.out"), "--wrap", "sleep 300",
        ]
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    job_id = run.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    state: dict[str, str] | None = None
    while time.monotonic() < deadline:
        _, state = local.show("job", job_id)
        if state and state.get("JobState") == "RUNNING":
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"job {job_id} did not start: {state}")
    yield job_id
    local.run(["scancel", job_id])


def _adapter(backend: SlurmBackend) -> SlurmAdapter:
    return SlurmAdapter(backend, retries=1, backoff_s=0.1)


def _wait_job_state(local: SlurmCli, job_id: str, wanted: str, timeout_s: float = 30) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    state: dict[str, str] | None = None
    while time.monotonic() < deadline:
        _, state = local.show("job", job_id)
        if state and state.get("JobState") == wanted:
            return state
        time.sleep(0.2)
    pytest.fail(f"job {job_id} never reached {wanted}: {state}")


def test_drain_converges_then_resume_restores_the_node(changer, local, restore):
    adapter = _adapter(changer)
    reason = f"sickbay: Xid 79 via {changer.mode} [inc-it]"
    first = adapter.handle(slurm_action(ActionKind.DRAIN_NODE, node=NODE, reason=reason))
    assert first.status == ActionStatus.SUCCEEDED, first.detail
    state = _node(local)
    assert "DRAIN" in state["State"] and state["Reason"].startswith(reason)
    again = adapter.handle(slurm_action(ActionKind.DRAIN_NODE, node=NODE, reason=reason))
    assert again.status == ActionStatus.CONVERGED
    resumed = adapter.handle(slurm_action(ActionKind.RESUME_NODE, node=NODE))
    assert resumed.status == ActionStatus.SUCCEEDED, resumed.detail
    assert "DRAIN" not in _node(local)["State"]


def test_requeue_holds_excludes_and_releases(changer, local, job):
    result = _adapter(changer).handle(
        slurm_action(ActionKind.REQUEUE_JOB, job_id=job, exclude_nodes=["gpu-01"])
    )
    assert result.status == ActionStatus.SUCCEEDED, result.detail
    assert [c.argv[1] for c in result.commands] == ["show", "requeuehold", "update", "release"]
    _, state = local.show("job", job)
    assert state is not None and state["ExcNodeList"] == "gpu-01" and state["Restarts"] == "1"


def test_cancel_ends_the_job_and_a_second_cancel_converges(backend, local, job):
    adapter = _adapter(backend)
    first = adapter.handle(slurm_action(ActionKind.CANCEL_JOB, job_id=job))
    assert first.status == ActionStatus.SUCCEEDED, first.detail
    _wait_job_state(local, job, "CANCELLED")
    again = adapter.handle(slurm_action(ActionKind.CANCEL_JOB, job_id=job))
    assert again.status == ActionStatus.CONVERGED and "CANCELLED" in again.detail


@pytest.mark.parametrize(
    ("kind", "fields", "said"),
    [
        (ActionKind.DRAIN_NODE, {"node": "gpu-99"}, "unknown node: node gpu-99 not found"),
        (ActionKind.REQUEUE_JOB, {"job_id": "999999"}, "unknown job: job 999999 not found"),
        (ActionKind.CANCEL_JOB, {"job_id": "999999_7"}, "unknown job: job 999999_7 not found"),
    ],
)
def test_an_unknown_node_or_job_is_rejected_clearly(backend, kind, fields, said):
    result = _adapter(backend).handle(slurm_action(kind, **fields))
    assert result.status == ActionStatus.REJECTED
    if backend.mode == "rest" and "_" in fields.get("job_id", ""):
        said = "rest mode: slurmrestd v0.0.38 addresses jobs by numeric id only"  # its URL parser says "not found"
    assert result.detail.startswith(said)


def test_rest_mode_on_22_05_refuses_drain_and_requeue_and_leaves_the_cluster_alone(rest_backend, local, job):
    adapter = _adapter(rest_backend)
    drain = adapter.handle(slurm_action(ActionKind.DRAIN_NODE, node=NODE))
    assert drain.status == ActionStatus.REJECTED and "no node update endpoint" in drain.detail
    requeue = adapter.handle(slurm_action(ActionKind.REQUEUE_JOB, job_id=job, exclude_nodes=["gpu-01"]))
    assert requeue.status == ActionStatus.REJECTED and "no requeue endpoint" in requeue.detail
    assert "DRAIN" not in _node(local)["State"]
    _, state = local.show("job", job)
    assert state is not None and state["JobState"] == "RUNNING" and state["Restarts"] == "0"


def test_a_hostile_reason_is_only_text_on_the_control_host(ssh_backend, local, restore):
    marker = Path(f"/tmp/sickbay-ssh-pwned-{uuid.uuid4().hex[:6]}")
    reason = f"sickbay: x; touch {marker} $(touch {marker}) `touch {marker}` '\""
    result = _adapter(ssh_backend).handle(slurm_action(ActionKind.DRAIN_NODE, node=NODE, reason=reason))
    assert result.status == ActionStatus.SUCCEEDED, result.detail
    assert _node(local)["Reason"].startswith(
        reason.replace('"', "")
    )  # scontrol itself drops '"' (locally too)
    assert not marker.exists()


def test_an_unreachable_control_host_fails_after_retries_with_ssh_s_message(slurm_conf):
    dead = SlurmSsh("127.0.0.1", port=1, connect_timeout_s=2)  # nothing listens on port 1
    sleeps: list[float] = []
    result = SlurmAdapter(dead, retries=2, backoff_s=0.05, sleep=sleeps.append).handle(
        slurm_action(ActionKind.DRAIN_NODE, node=NODE)
    )
    assert result.status == ActionStatus.FAILED
    assert "Connection refused" in result.detail and "(after 3 attempts)" in result.detail
    assert sleeps == [0.05, 0.1]


def test_an_unknown_host_key_is_refused_at_once(ssh_backend, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    stranger = SlurmSsh(
        ssh_backend.host,
        user=ssh_backend.user,
        port=ssh_backend.port,
        key_file=ssh_backend.key_file,
        known_hosts=empty,
    )
    sleeps: list[float] = []
    result = SlurmAdapter(stranger, sleep=sleeps.append).handle(
        slurm_action(ActionKind.DRAIN_NODE, node=NODE)
    )
    assert result.status == ActionStatus.FAILED
    assert "Host key verification failed" in result.detail
    assert sleeps == []  # not retried: it will not heal


def test_the_sweep_resumes_an_expired_sickbay_drain(changer, local, restore):
    past = expiry_text(utcnow() - timedelta(minutes=5))
    drain = local.run(local.drain_argv(NODE, f"sickbay: Xid 79 [inc-sweep] {past}"))
    assert drain.returncode == 0, drain.stderr
    results = _adapter(changer).sweep_expired("it")
    ours = [r for r in results if r.commands and f"NodeName={NODE}" in r.commands[0].argv]
    assert [r.status for r in ours] == [ActionStatus.SUCCEEDED]
    assert ours[0].incident_id == "inc-sweep"
    assert "DRAIN" not in _node(local)["State"]


def test_the_sweep_leaves_a_drain_by_someone_else_and_an_unexpired_one(local, restore):
    future = expiry_text(utcnow() + timedelta(hours=1))
    for reason in ["admin: memtest expires 2020-01-01T00:00:00Z", f"sickbay: Xid 79 [inc-later] {future}"]:
        assert local.run(local.drain_argv(NODE, reason)).returncode == 0
        local.run(["scontrol", "update", f"NodeName={NODE}", f"Reason={reason}"])
        results = _adapter(local).sweep_expired("it")
        assert all(f"NodeName={NODE}" not in c.argv for r in results for c in r.commands)
        state = _node(local)
        assert "DRAIN" in state["State"] and state["Reason"].startswith(reason)


def test_the_sweep_reports_rest_mode_cannot_resume_and_keeps_the_drain(rest_backend, local, restore):
    past = expiry_text(utcnow() - timedelta(minutes=5))
    assert local.run(local.drain_argv(NODE, f"sickbay: Xid 79 [inc-rest] {past}")).returncode == 0
    results = _adapter(rest_backend).sweep_expired("it")
    ours = [r for r in results if r.incident_id == "inc-rest"]
    assert [r.status for r in ours] == [ActionStatus.REJECTED]
    assert "no node update endpoint" in ours[0].detail
    assert "DRAIN" in _node(local)["State"]


def test_the_runner_publishes_rejections_sweeps_expired_drains_and_dead_letters_junk(
    kafka_bootstrap, local, restore
):
    past = expiry_text(utcnow() - timedelta(minutes=5))
    assert local.run(local.drain_argv(NODE, f"sickbay: Xid 79 [inc-runner] {past}")).returncode == 0
    prefix = f"it{uuid.uuid4().hex[:8]}"
    cat = TopicCatalog(prefix=prefix, partitions=1, app_id=prefix)
    ensure_topics(kafka_bootstrap, cat.all())
    producer = ReliableProducer(kafka_bootstrap, "it-actions", linger_ms=0)
    unknown = slurm_action(ActionKind.DRAIN_NODE, node="gpu-99")
    hostile = slurm_action(ActionKind.CANCEL_JOB, job_id="1;reboot")
    producer.produce(cat.actions.name, b"{not an action", key=b"junk")
    for action in (unknown, hostile):
        producer.produce(cat.actions.name, codec.dumps(action), key=action.action_id.encode())
    assert producer.flush(30) == 0
    handled = run_adapter(
        kafka_bootstrap, cat, _adapter(local), "it", group_id=f"{prefix}-a", idle_exit_s=3, sweep_every_s=60
    )
    assert handled == 2
    consumer = Consumer(consumer_config(kafka_bootstrap, f"{prefix}-check", "it-check"))
    consumer.subscribe([cat.action_results.name, cat.dlq.name])
    results: dict[str, ActionResult] = {}
    dead: list[DeadLetter] = []
    deadline = time.monotonic() + 30
    while (len(results) < 3 or not dead) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        if msg.topic() == cat.dlq.name:
            dead.append(DeadLetter.model_validate(codec.loads(msg.value() or b"")))
        else:
            r = ActionResult.model_validate(codec.loads(msg.value() or b""))
            results[r.action_id] = r
    consumer.close()
    assert results[unknown.action_id].status == ActionStatus.REJECTED
    assert "gpu-99 not found" in results[unknown.action_id].detail
    assert results[hostile.action_id].status == ActionStatus.REJECTED
    assert "invalid Slurm job id '1;reboot'" in results[hostile.action_id].detail
    assert [d.reason for d in dead] == ["unreadable_action"] and dead[0].stage == "adapter.slurm"
    swept = [r for r in results.values() if r.incident_id == "inc-runner"]
    assert [(r.kind, r.status) for r in swept] == [(ActionKind.RESUME_NODE, ActionStatus.SUCCEEDED)]
    assert "DRAIN" not in _node(local)["State"]


def test_the_sweep_command_prints_what_it_resumed(slurm_conf, local, restore):
    past = expiry_text(utcnow() - timedelta(minutes=5))
    assert local.run(local.drain_argv(NODE, f"sickbay: Xid 79 [inc-cli] {past}")).returncode == 0
    env = {"PATH": "/usr/bin:/bin:/usr/sbin", "SLURM_CONF": str(slurm_conf), "SICKBAY_CLUSTER": "it"}
    dry = subprocess.run(
        [sys.executable, "-m", "streams.cli.main", "adapter", "slurm-sweep", "--dry-run"],
        capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    ours = [r for r in map(codec.loads, dry.stdout.splitlines()) if r["incident_id"] == "inc-cli"]
    assert [r["status"] for r in ours] == ["dry_run"] and "DRAIN" in _node(local)["State"]
    real = subprocess.run(
        [sys.executable, "-m", "streams.cli.main", "adapter", "slurm-sweep"],
        capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert real.returncode == 0, real.stderr
    ours = [r for r in map(codec.loads, real.stdout.splitlines()) if r["incident_id"] == "inc-cli"]
    assert [r["status"] for r in ours] == ["succeeded"] and "DRAIN" not in _node(local)["State"]


def test_slurmrestd_up_waits_through_a_slow_start_instead_of_calling_it_an_exit(slurm_conf):
    """A CI run failed because `up` read /proc/<pid>/comm before setsid had exec'd slurmrestd.

    A `setsid` on PATH that takes a second before exec'ing the real one holds that window open; the script must
    wait for the ping, not take the not-yet-slurmrestd comm for an exit. Its own stack dir (short, for the socket
    path limit) shares the cluster's slurm.conf and leaves any running slurmrestd alone.
    """
    real_setsid = shutil.which("setsid")
    assert real_setsid, "no setsid on PATH"
    with tempfile.TemporaryDirectory(prefix="sb-rd-") as tmp:
        root = Path(tmp)
        (root / "stack").mkdir()
        (root / "stack" / "slurm").symlink_to(slurm_conf.parent)
        (root / "bin").mkdir()
        slow = root / "bin" / "setsid"
        slow.write_text(f'#!/bin/sh\nsleep 1\nexec {real_setsid} "$@"\n')
        slow.chmod(0o755)
        env = {
            **os.environ,
            "PATH": f"{root / 'bin'}:{os.environ['PATH']}",
            "SICKBAY_STACK_DIR": str(root / "stack"),
        }
        script = [str(LOCAL / "slurmrestd.sh")]
        up = subprocess.run(
            ["bash", *script, "up"], capture_output=True, text=True, env=env, timeout=120, check=False
        )
        try:
            assert up.returncode == 0, up.stderr
            assert "ready (pid" in up.stderr and "exited" not in up.stderr
            status = subprocess.run(
                ["bash", *script, "status"], capture_output=True, text=True, env=env, check=False
            )
            assert status.returncode == 0, status.stdout
        finally:
            subprocess.run(["bash", *script, "down"], capture_output=True, env=env, timeout=60, check=False)
