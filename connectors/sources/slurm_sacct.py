"""``sacct`` text output: finished jobs with their exit codes, when accounting exists.

The exit code is read from the TEXT column ``ExitCode`` (``N:M``: exit status N,
signal M). ``sacct --json`` on 22.05 reports a wrong exit code, so the collector
never asks for JSON here. Columns are requested by name (``-o``) and split on
``|`` (``-P``), so a site's ``SACCT_FORMAT`` does not change what we read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

SACCT_FIELDS = ("JobID", "JobName", "State", "ExitCode", "NodeList", "Start", "End")
_EXIT = re.compile(r"^(\d+):(\d+)$")
_NOT_ENABLED = ("accounting storage is disabled", "slurmdbd", "no accounting")


class SacctUnavailable(RuntimeError):
    """This cluster has no accounting (``AccountingStorageType=accounting_storage/none``) or no slurmdbd."""


@dataclass(frozen=True)
class SacctJob:
    job_id: str
    name: str
    state: str  # first word: "CANCELLED by 0" → "CANCELLED"
    exit_status: int
    signal: int
    nodes: str
    start: datetime | None
    end: datetime | None

    @property
    def how(self) -> tuple[Literal["WEXITSTATUS", "WTERMSIG"], int]:
        return ("WTERMSIG", self.signal) if self.signal else ("WEXITSTATUS", self.exit_status)


def sacct_argv(since: datetime) -> list[str]:
    """Allocations (``-X``: no steps) that ended since ``since``, in a fixed column order."""
    return [
        "sacct",
        "-P",
        "-n",
        "-X",
        "-a",
        "-s",
        "CD,F,CA,TO,NF,OOM,PR,BF,DL,RQ",
        "-S",
        since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S"),
        "-o",
        ",".join(SACCT_FIELDS),
    ]


def _time(text: str) -> datetime | None:
    if text in ("", "Unknown", "None"):
        return None
    try:
        return datetime.fromisoformat(text).replace(tzinfo=UTC)
    except ValueError:
        return None


def check_available(stderr: str, returncode: int) -> None:
    low = stderr.lower()
    if returncode != 0 or any(k in low for k in _NOT_ENABLED):
        raise SacctUnavailable(stderr.strip() or f"sacct exited {returncode}")


def parse_sacct(text: str) -> tuple[list[SacctJob], list[str]]:
    """Rows of ``sacct -P -n -o <SACCT_FIELDS>``; rows that cannot be read come back as problems."""
    jobs: list[SacctJob] = []
    problems: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = line.split("|")
        if len(cols) != len(SACCT_FIELDS):
            problems.append(f"expected {len(SACCT_FIELDS)} columns, got {len(cols)}: {line[:120]!r}")
            continue
        job_id, name, state, exit_code, nodes, start, end = cols
        m = _EXIT.match(exit_code.strip())
        if m is None:
            problems.append(f"job {job_id}: exit code {exit_code!r} is not N:M")
            continue
        jobs.append(
            SacctJob(
                job_id=job_id,
                name=name,
                state=state.split(" ", 1)[0],
                exit_status=int(m.group(1)),
                signal=int(m.group(2)),
                nodes=nodes if nodes not in ("None assigned", "") else "",
                start=_time(start),
                end=_time(end),
            )
        )
    return jobs, problems
