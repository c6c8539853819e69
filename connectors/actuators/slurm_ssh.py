"""SSH executor: the local executor's argv, run on a Slurm control host.

For sites whose change review allows no new service inside the cluster: the
adapter holds a key that may log in to one control host. The remote side runs
the command through the login user's shell, so the argv is quoted with
:func:`shlex.join` into exactly one string after ``--``; nothing is ever passed
through a local shell. Host key checking stays on (``StrictHostKeyChecking=yes``)
against a known_hosts file the operator provides; ``BatchMode`` makes a missing
key or an unknown host fail at once instead of prompting. With a ``control_dir``
the commands share one SSH connection (``ControlMaster``), so an action costs a
remote command, not a handshake per command (~0.1 s instead of ~0.3 s here).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

from connectors.actuators.slurm_cli import Runner, SlurmCli
from schemas.actions import CommandRun

_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:\-]{0,252}")
_DENIED = re.compile(r"Host key verification failed|Permission denied|REMOTE HOST IDENTIFICATION HAS CHANGED")
SSH_FAILED = 255  # ssh's own exit status for connection/authentication errors


def _private_dir(path: Path) -> Path:
    """The directory of the control sockets: ours alone, or multiplexing would let others ride our login."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ValueError(f"SSH control directory {path} must be owned by this user and private (0700)")
    return path


class SlurmSsh(SlurmCli):
    mode = "ssh"

    def __init__(
        self,
        host: str,
        *,
        user: str | None = None,
        port: int = 22,
        key_file: Path | None = None,
        known_hosts: Path | None = None,
        connect_timeout_s: int = 10,
        timeout_s: float = 30.0,
        control_dir: Path | None = None,
        control_persist_s: int = 60,
        runner: Runner = subprocess.run,
    ) -> None:
        for what, value in (("host", host), ("user", user or "x")):
            if not _SAFE.fullmatch(value):
                raise ValueError(f"invalid SSH {what} {value!r}")  # '-oProxyCommand=...' would be an option
        super().__init__(None, timeout_s=timeout_s, runner=runner)
        self.env.pop("SLURM_CONF", None)  # the control host uses its own slurm.conf
        self.host = host
        self.user = user
        self.port = port
        self.key_file = key_file
        self.known_hosts = known_hosts
        self.connect_timeout_s = connect_timeout_s
        self.control_dir = _private_dir(control_dir) if control_dir is not None else None
        self.control_persist_s = control_persist_s

    def ssh_argv(self) -> list[str]:
        argv = [
            "ssh",
            "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes",
            "-o", f"ConnectTimeout={self.connect_timeout_s}",
            "-o", "ServerAliveInterval=5",
            "-p", str(self.port),
        ]  # fmt: skip
        if self.known_hosts is not None:
            argv += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
        if self.key_file is not None:
            argv += ["-o", "IdentitiesOnly=yes", "-i", str(self.key_file)]
        if self.user:
            argv += ["-l", self.user]
        if self.control_dir is not None:
            argv += [
                "-o", "ControlMaster=auto",
                "-o", f"ControlPath={self.control_dir}/%C",
                "-o", f"ControlPersist={self.control_persist_s}",
            ]  # fmt: skip
        return [*argv, self.host]

    def close(self) -> None:
        """Stop the shared connection now instead of after ``control_persist_s`` idle seconds."""
        if self.control_dir is not None:
            self.runner([*self.ssh_argv()[:-1], "-O", "exit", self.host], capture_output=True, check=False)

    def wrap(self, argv: list[str]) -> list[str]:
        return [*self.ssh_argv(), "--", shlex.join(argv)]

    def transient(self, run: CommandRun) -> bool:
        """Connection trouble is retried; a refused key or a changed host key is not (it will not heal)."""
        if run.returncode == SSH_FAILED:
            return not _DENIED.search(run.stderr)
        return super().transient(run)

    def run(self, argv: list[str]) -> CommandRun:
        run = super().run(argv)
        if run.returncode == SSH_FAILED and not run.stderr.strip():
            run = run.model_copy(update={"stderr": f"ssh to {self.host}:{self.port} failed"})
        return run
