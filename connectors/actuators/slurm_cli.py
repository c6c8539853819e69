"""Slurm through its own CLI (``scontrol``, ``scancel``): argv lists only, never a shell.

``scontrol`` is what every Slurm site has, whatever its version; slurmrestd has
no requeue endpoint (ecosystem.md §3.1). :class:`SlurmCli` is the local
executor; :class:`connectors.actuators.slurm_ssh.SlurmSsh` runs the same argv on
a control host, and :class:`connectors.actuators.slurm_rest.SlurmRest` speaks
slurmrestd. All three satisfy :class:`connectors.actuators.slurm_backend.SlurmBackend`.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from schemas.actions import CommandRun

_KV = re.compile(r"(?:^|\s)([A-Za-z][\w/:.\[\]]*)=")

Runner = Callable[..., "subprocess.CompletedProcess[str]"]

# scontrol/scancel messages that mean "the controller was not reached": worth another try.
_TRANSIENT = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|Zero Bytes were transmitted"
    r"|backup controller in standby|Communication connection failure|timed out after",
    re.IGNORECASE,
)
# ... and the ones that mean "the controller answered: no such node/job".
_NOT_FOUND = re.compile(r"Node \S+ not found|Invalid job id specified|Invalid node name specified")


def parse_kv_line(line: str) -> dict[str, str]:
    """``scontrol show ... -o`` output: ``Key=value`` pairs where values may hold spaces."""
    matches = list(_KV.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[m.group(1)] = line[m.end() : end].strip()
    return out


class SlurmCli:
    """The local executor: ``scontrol``/``scancel`` run on this host."""

    mode = "local"

    def __init__(
        self, slurm_conf: Path | None = None, timeout_s: float = 30.0, runner: Runner = subprocess.run
    ) -> None:
        self.env = dict(os.environ)
        if slurm_conf is not None:
            self.env["SLURM_CONF"] = str(slurm_conf)
        self.timeout_s = timeout_s
        self.runner = runner

    def wrap(self, argv: list[str]) -> list[str]:
        """The argv actually executed for ``argv`` (the SSH executor puts ``ssh ... --`` in front)."""
        return argv

    def run(self, argv: list[str]) -> CommandRun:
        """Run one command. The record keeps the Slurm argv, whatever transport carried it."""
        started = time.monotonic()
        try:
            proc = self.runner(
                self.wrap(argv),
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                env=self.env,
                check=False,
            )
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        except FileNotFoundError as exc:
            rc, out, err = 127, "", f"{self.wrap(argv)[0]} not found: {exc}"
        except subprocess.TimeoutExpired:
            rc, out, err = 124, "", f"timed out after {self.timeout_s}s"
        return CommandRun(
            argv=argv,
            returncode=rc,
            stdout=out[-4000:],
            stderr=err[-4000:],
            duration_s=round(time.monotonic() - started, 4),
        )

    def transient(self, run: CommandRun) -> bool:
        """The command did not reach the controller (timeout, connection): retrying may succeed."""
        return run.returncode == 124 or bool(_TRANSIENT.search(run.stderr))

    def not_found(self, run: CommandRun) -> bool:
        return run.returncode != 0 and bool(_NOT_FOUND.search(run.stderr + run.stdout))

    def show(self, entity: str, name: str) -> tuple[CommandRun, dict[str, str] | None]:
        run = self.run(["scontrol", "show", entity, "-o", name])
        if run.returncode != 0 or not run.stdout.strip():
            return run, None
        return run, parse_kv_line(run.stdout.strip().splitlines()[0])

    def list_nodes(self) -> tuple[CommandRun, list[dict[str, str]]]:
        run = self.run(["scontrol", "show", "node", "-o"])
        if run.returncode != 0:
            return run, []
        return run, [parse_kv_line(line) for line in run.stdout.splitlines() if line.strip()]

    def drain_argv(self, node: str, reason: str) -> list[str]:
        return ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]

    def resume_argv(self, node: str) -> list[str]:
        return ["scontrol", "update", f"NodeName={node}", "State=RESUME"]

    def requeue_hold_argv(self, job_id: str) -> list[str]:
        return ["scontrol", "requeuehold", job_id]

    def release_argv(self, job_id: str) -> list[str]:
        return ["scontrol", "release", job_id]

    def exclude_argv(self, job_id: str, nodes: list[str]) -> list[str]:
        return ["scontrol", "update", f"JobId={job_id}", f"ExcNodeList={','.join(nodes)}"]

    def begin_argv(self, job_id: str, delay_s: int) -> list[str]:
        """Restart backoff the Slurm way: the held job may not start before now + delay."""
        return ["scontrol", "update", f"JobId={job_id}", f"StartTime=now+{int(delay_s)}"]

    def cancel_argv(self, job_id: str) -> list[str]:
        return ["scancel", job_id]

    def sinfo_reasons(self) -> CommandRun:
        return self.run(["sinfo", "-R", "-h", "-o", "%N|%T|%E"])

    def info(self) -> dict[str, Any]:
        return {"mode": self.mode, "SLURM_CONF": self.env.get("SLURM_CONF")}
