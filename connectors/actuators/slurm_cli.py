"""Slurm through its own CLI (``scontrol``): argv lists only, never a shell.

``scontrol`` is what every Slurm site has, whatever its version; slurmrestd has
no requeue endpoint (ecosystem.md §3.1).
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


def parse_kv_line(line: str) -> dict[str, str]:
    """``scontrol show ... -o`` output: ``Key=value`` pairs where values may hold spaces."""
    matches = list(_KV.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[m.group(1)] = line[m.end() : end].strip()
    return out


class SlurmCli:
    def __init__(
        self, slurm_conf: Path | None = None, timeout_s: float = 30.0, runner: Runner = subprocess.run
    ) -> None:
        self.env = dict(os.environ)
        if slurm_conf is not None:
            self.env["SLURM_CONF"] = str(slurm_conf)
        self.timeout_s = timeout_s
        self.runner = runner

    def run(self, argv: list[str]) -> CommandRun:
        started = time.monotonic()
        try:
            proc = self.runner(
                argv, capture_output=True, text=True, timeout=self.timeout_s, env=self.env, check=False
            )
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        except FileNotFoundError as exc:
            rc, out, err = 127, "", f"{argv[0]} not found: {exc}"
        except subprocess.TimeoutExpired:
            rc, out, err = 124, "", f"timed out after {self.timeout_s}s"
        return CommandRun(
            argv=argv,
            returncode=rc,
            stdout=out[-4000:],
            stderr=err[-4000:],
            duration_s=round(time.monotonic() - started, 4),
        )

    def show(self, entity: str, name: str) -> tuple[CommandRun, dict[str, str] | None]:
        run = self.run(["scontrol", "show", entity, "-o", name])
        if run.returncode != 0 or not run.stdout.strip():
            return run, None
        return run, parse_kv_line(run.stdout.strip().splitlines()[0])

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

    def sinfo_reasons(self) -> CommandRun:
        return self.run(["sinfo", "-R", "-h", "-o", "%N|%T|%E"])

    def info(self) -> dict[str, Any]:
        return {"SLURM_CONF": self.env.get("SLURM_CONF")}
