"""``squeue --json`` / ``sinfo --json`` snapshots and the changes between two of them.

Slurm has no change feed short of the slurmctld log, so the collector polls and
diffs: a job that became RUNNING, ended, or was requeued, and a node whose state,
flags or reason changed, each become one change. The models read the 22.05
(``openapi/v0.0.38``) shape and the 23.02+ shape (``{"set", "number"}`` wrappers,
``job_state`` as a list), because sites upgrade controllers and collectors apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from schemas import codec

TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
    }
)


class SlurmJsonError(ValueError):
    """``--json`` output that cannot be read (not JSON, or Slurm reported errors)."""


def _unwrap_number(value: Any) -> Any:
    """23.02+ writes ``{"set": true, "infinite": false, "number": 5}``; 22.05 writes ``5`` or null."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        return value.get("number")
    return value


class _SlurmModel(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class SqueueJob(_SlurmModel):
    job_id: int
    name: str = ""
    job_state: str
    nodes: str = ""
    partition: str = ""
    comment: str = ""  # may carry the job's own recovery policy ({"APS": {...}})
    node_count: int | None = None
    state_reason: str = ""
    start_time: int | None = None
    end_time: int | None = None
    exit_code: int | None = None  # the raw wait(2) status on 22.05: 768 is exit 3
    restart_cnt: int = 0
    cpus: int | None = None
    array_job_id: int | None = None
    array_task_id: int | None = None

    @field_validator("job_state", mode="before")
    @classmethod
    def _state(cls, v: Any) -> Any:
        return v[0] if isinstance(v, list) and v else v

    @field_validator(
        "start_time",
        "end_time",
        "restart_cnt",
        "cpus",
        "array_job_id",
        "array_task_id",
        "node_count",
        mode="before",
    )
    @classmethod
    def _number(cls, v: Any) -> Any:
        return _unwrap_number(v)

    @field_validator("exit_code", mode="before")
    @classmethod
    def _exit(cls, v: Any) -> Any:
        if isinstance(v, dict) and "return_code" in v:  # 23.02+: {"status": [...], "return_code": {...}}
            code = _unwrap_number(v.get("return_code"))
            sig = (
                _unwrap_number((v.get("signal") or {}).get("id"))
                if isinstance(v.get("signal"), dict)
                else None
            )
            return (sig & 0x7F) if sig else (int(code or 0) << 8)
        return _unwrap_number(v)

    @property
    def terminal(self) -> bool:
        return self.job_state in TERMINAL_STATES

    @property
    def wait_status(self) -> tuple[Literal["WEXITSTATUS", "WTERMSIG"], int]:
        """What slurmctld's ``_job_complete`` line says about this status."""
        raw = self.exit_code or 0
        if raw & 0x7F:
            return "WTERMSIG", raw & 0x7F
        if self.job_state == "CANCELLED" and raw == 0:
            return "WTERMSIG", 15  # scancel: squeue keeps status 0, slurmctld reports the SIGTERM
        return "WEXITSTATUS", (raw >> 8) & 0xFF


class SinfoNode(_SlurmModel):
    name: str
    state: str
    state_flags: list[str] = Field(default_factory=list)
    reason: str = ""

    @field_validator("state", mode="before")
    @classmethod
    def _state(cls, v: Any) -> Any:
        return "+".join(v) if isinstance(v, list) else v

    @property
    def full_state(self) -> str:
        """``idle+DRAIN``: the base state and its flags, as ``sinfo -o %T`` would compose them."""
        return "+".join([self.state.lower(), *sorted(self.state_flags)])


def _load(raw: str | bytes, key: str) -> list[dict[str, Any]]:
    try:
        doc = codec.loads(raw)
    except codec.JSONDecodeError as exc:
        raise SlurmJsonError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        raise SlurmJsonError(f"no {key!r} list in the document")
    errors = doc.get("errors") or []
    if errors:
        raise SlurmJsonError(f"Slurm reported errors: {errors}")
    return [item for item in doc[key] if isinstance(item, dict)]


def parse_squeue(raw: str | bytes) -> tuple[dict[int, SqueueJob], list[str]]:
    """Jobs by id, plus one problem string per job entry that could not be read (never dropped silently)."""
    jobs: dict[int, SqueueJob] = {}
    problems: list[str] = []
    for item in _load(raw, "jobs"):
        try:
            job = SqueueJob.model_validate(item)
        except ValidationError as exc:
            problems.append(f"job {item.get('job_id', '?')}: {exc.errors()[0]['msg']}")
            continue
        jobs[job.job_id] = job
    return jobs, problems


def parse_sinfo(raw: str | bytes) -> tuple[dict[str, SinfoNode], list[str]]:
    nodes: dict[str, SinfoNode] = {}
    problems: list[str] = []
    for item in _load(raw, "nodes"):
        try:
            node = SinfoNode.model_validate(item)
        except ValidationError as exc:
            problems.append(f"node {item.get('name', '?')}: {exc.errors()[0]['msg']}")
            continue
        nodes[node.name] = node
    return nodes, problems


# States a job is only in after it started: a job seen in one of them already had its start reported,
# so its end (RUNNING -> COMPLETING -> FAILED) must not report a second start.
STARTED_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})

ChangeKind = Literal[
    "job_started", "job_ended", "job_requeued", "job_state", "job_gone", "node_state", "node_reason"
]


@dataclass(frozen=True)
class Change:
    """One state change seen between two polls; ``time`` is Slurm's own time when it has one."""

    kind: ChangeKind
    time: datetime
    job: SqueueJob | None = None
    node: SinfoNode | None = None
    before: str | None = None


def _ts(epoch: int | None, fallback: datetime) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC) if epoch else fallback


def diff_jobs(
    before: dict[int, SqueueJob] | None, after: dict[int, SqueueJob], now: datetime
) -> list[Change]:
    """Changes from ``before`` to ``after``; ``before=None`` (first poll) reports running jobs as started."""
    out: list[Change] = []
    for job_id, job in sorted(after.items()):
        old = (before or {}).get(job_id)
        if old is None:
            if before is not None or job.job_state == "RUNNING":
                out.append(Change("job_state", now, job=job, before=None))
            if job.job_state == "RUNNING" or (before is not None and job.terminal and job.nodes):
                out.append(Change("job_started", _ts(job.start_time, now), job=job))
            if before is not None and job.terminal:
                out.append(Change("job_ended", _ts(job.end_time, now), job=job))
            continue
        if old.job_state == job.job_state and old.restart_cnt == job.restart_cnt and old.nodes == job.nodes:
            continue
        out.append(Change("job_state", now, job=job, before=old.job_state))
        if job.restart_cnt > old.restart_cnt:
            out.append(Change("job_requeued", now, job=job))
        if job.job_state == "RUNNING" and (old.job_state != "RUNNING" or job.start_time != old.start_time):
            out.append(Change("job_started", _ts(job.start_time, now), job=job))
        if job.terminal and not old.terminal:
            if old.job_state not in STARTED_STATES and job.nodes:
                out.append(Change("job_started", _ts(job.start_time, now), job=job))  # ran between two polls
            out.append(Change("job_ended", _ts(job.end_time, now), job=job))
    for job_id, old in sorted((before or {}).items()):
        if job_id not in after and not old.terminal:
            out.append(Change("job_gone", now, job=old, before=old.job_state))
    return out


def diff_nodes(
    before: dict[str, SinfoNode] | None, after: dict[str, SinfoNode], now: datetime
) -> list[Change]:
    """Node state / reason changes; the first poll reports only nodes that carry a reason (drained, down)."""
    out: list[Change] = []
    for name, node in sorted(after.items()):
        old = (before or {}).get(name)
        if old is None:
            if before is not None or node.reason:
                out.append(Change("node_state", now, node=node, before=None))
            if node.reason:
                out.append(Change("node_reason", now, node=node, before=None))
            continue
        if old.full_state != node.full_state:
            out.append(Change("node_state", now, node=node, before=old.full_state))
        if old.reason != node.reason and node.reason:
            out.append(Change("node_reason", now, node=node, before=old.reason or None))
    return out
