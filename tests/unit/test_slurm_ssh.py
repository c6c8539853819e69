"""SSH executor: the exact ssh argv, strict quoting for the remote login shell, failures classified."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from connectors.actuators.slurm_adapter import SlurmAdapter
from connectors.actuators.slurm_ssh import SlurmSsh
from schemas.actions import ActionKind, ActionStatus
from tests.factories import slurm_action


class Recorder:
    def __init__(self, rc: int = 0, out: str = "", err: str = "") -> None:
        self.reply = (rc, out, err)
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        assert "shell" not in kw  # never a local shell
        self.calls.append(argv)
        return subprocess.CompletedProcess(argv, *self.reply)


def ssh(runner: Recorder) -> SlurmSsh:
    return SlurmSsh(
        "ctl.example.org",
        user="sickbay",
        port=2222,
        key_file=Path("/etc/sickbay/id_ed25519"),
        known_hosts=Path("/etc/sickbay/known_hosts"),
        runner=runner,
    )


def test_the_ssh_argv_keeps_host_key_checking_on_and_never_prompts():
    runner = Recorder()
    ssh(runner).run(["scontrol", "show", "node", "-o", "gpu-01"])
    argv = runner.calls[0]
    assert argv[0] == "ssh"
    opts = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
    assert "BatchMode=yes" in opts and "StrictHostKeyChecking=yes" in opts
    assert "UserKnownHostsFile=/etc/sickbay/known_hosts" in opts and "IdentitiesOnly=yes" in opts
    assert argv[argv.index("-i") + 1] == "/etc/sickbay/id_ed25519"
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-l") + 1] == "sickbay"
    assert argv[-3:] == ["ctl.example.org", "--", "scontrol show node -o gpu-01"]


def test_a_hostile_reason_reaches_the_remote_shell_as_one_quoted_word():
    runner = Recorder()
    reason = "Reason=sickbay: x; touch /tmp/pwned $(id) `id` 'q'"
    run = ssh(runner).run(["scontrol", "update", "NodeName=gpu-01", "State=DRAIN", reason])
    remote = runner.calls[0][-1]
    assert shlex.split(remote) == ["scontrol", "update", "NodeName=gpu-01", "State=DRAIN", reason]
    assert run.argv == [
        "scontrol",
        "update",
        "NodeName=gpu-01",
        "State=DRAIN",
        reason,
    ]  # the audit: Slurm's argv


def test_an_ssh_connection_failure_is_transient_and_retried():
    runner = Recorder(255, "", "ssh: connect to host ctl.example.org port 2222: Connection refused")
    sleeps: list[float] = []
    result = SlurmAdapter(ssh(runner), retries=2, backoff_s=0.1, sleep=sleeps.append).handle(
        slurm_action(ActionKind.DRAIN_NODE, node="gpu-01")
    )
    assert result.status == ActionStatus.FAILED
    assert "Connection refused" in result.detail and "(after 3 attempts)" in result.detail
    assert sleeps == [0.1, 0.2]


def test_a_silent_ssh_failure_still_says_which_host_failed():
    run = ssh(Recorder(255)).run(["scontrol", "ping"])
    assert run.stderr == "ssh to ctl.example.org:2222 failed"


@pytest.mark.parametrize("host", ["-oProxyCommand=id", "ctl example", "ctl;id", ""])
def test_an_option_like_or_malformed_host_is_refused(host):
    with pytest.raises(ValueError, match="invalid SSH host"):
        SlurmSsh(host)


def test_an_option_like_user_is_refused():
    with pytest.raises(ValueError, match="invalid SSH user"):
        SlurmSsh("ctl", user="-oProxyCommand=id")


def test_multiplexing_shares_one_connection_through_a_private_control_dir(tmp_path):
    runner = Recorder()
    backend = SlurmSsh("ctl", control_dir=tmp_path / "cm", control_persist_s=30, runner=runner)
    backend.run(["scontrol", "ping"])
    opts = [runner.calls[0][i + 1] for i, a in enumerate(runner.calls[0]) if a == "-o"]
    assert {"ControlMaster=auto", f"ControlPath={tmp_path / 'cm'}/%C", "ControlPersist=30"} <= set(opts)
    assert (tmp_path / "cm").stat().st_mode & 0o777 == 0o700
    backend.close()
    assert runner.calls[-1][-3:] == ["-O", "exit", "ctl"]


def test_a_control_dir_others_can_use_is_refused(tmp_path):
    shared = tmp_path / "cm"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ValueError, match="must be owned by this user and private"):
        SlurmSsh("ctl", control_dir=shared)


@pytest.mark.parametrize(
    "said", ["Host key verification failed.", "root@ctl: Permission denied (publickey)."]
)
def test_a_host_key_mismatch_or_a_refused_key_fails_at_once(said):
    sleeps: list[float] = []
    result = SlurmAdapter(ssh(Recorder(255, "", said)), sleep=sleeps.append).handle(
        slurm_action(ActionKind.DRAIN_NODE, node="gpu-01")
    )
    assert result.status == ActionStatus.FAILED and said in result.detail
    assert sleeps == []
