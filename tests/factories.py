"""Realistic records for tests, in the shapes real shippers write (ecosystem.md §1)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas import codec
from schemas.actions import Action, ActionKind, Mode
from schemas.base import utcnow
from schemas.incidents import Category
from schemas.signals import AssignmentBatch, JobNodeAssignment, Signal
from streams.correlate.attribution import Verdict, attribute
from streams.extract.extractor import Extractor, Position
from streams.extract.normalize import normalize

T0 = datetime(2026, 11, 29, 3, 0, 0, tzinfo=UTC)
EXTRACTOR = Extractor()


class ListSink:
    """Stands in for a collector's producer: every (topic, value, key) it was given, in order."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes | None]] = []

    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        self.records.append((topic, value, key))

    def lines(self) -> list[dict[str, Any]]:
        """Every record's value, decoded."""
        return [codec.loads(v) for _, v, _ in self.records]

    def on(self, topic: str) -> list[dict[str, Any]]:
        """The decoded values sent to ``topic``."""
        return [codec.loads(v) for t, v, _ in self.records if t == topic]

    def keyed(self, topic: str) -> list[tuple[dict[str, Any], bytes | None]]:
        """The decoded values sent to ``topic`` with their keys."""
        return [(codec.loads(v), k) for t, v, k in self.records if t == topic]


def slurmctld_allocate(job: str, nodes: str, at: datetime) -> bytes:
    ts = at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}"
    return f"[{ts}] sched: Allocate JobId={job} NodeList={nodes} #CPUs=8 Partition=gpu".encode()


def slurmctld_line(text: str, at: datetime) -> bytes:
    ts = at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}"
    return f"[{ts}] {text}".encode()


def kernel_xid(
    node: str, code: int, at: datetime, pci: str = "0000:06:00", text: str = "GPU has fallen off the bus."
) -> bytes:
    """A Fluent Bit record from a tail of /var/log/kern.log on ``node``."""
    line = (
        f"{at.strftime('%b %d %H:%M:%S')} {node} kernel: [ 5321.108101] NVRM: Xid (PCI:{pci}): {code}, {text}"
    )
    return codec.dumps(
        {"@timestamp": at.timestamp(), "log": line, "hostname": node, "filename": "/var/log/kern.log"}
    )


def nccl_timeout(node: str, rank: int, job: str, at: datetime, seq: int = 1234) -> bytes:
    """A Vector record from the job's output file on ``node``."""
    line = (
        f"[rank{rank}]:[E1129 03:10:00.426415540 ProcessGroupNCCL.cpp:629] [Rank {rank}] Watchdog caught "
        f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1048576, "
        f"NumelOut=1048576, Timeout(ms)=600000) ran for 600081 milliseconds before timing out."
    )
    return codec.dumps(
        {
            "message": line,
            "timestamp": at.isoformat(),
            "host": node,
            "source_type": "file",
            "file": f"/scratch/run/slurm-{job}.out",
        }
    )


def cuda_error(
    node: str, job: str, at: datetime, message: str = "an illegal memory access was encountered"
) -> bytes:
    return codec.dumps(
        {
            "@timestamp": at.timestamp(),
            "log": f"RuntimeError: CUDA error: {message}",
            "hostname": node,
            "filename": f"/scratch/run/slurm-{job}.out",
        }
    )


def job_output(host: str, job: str, at: datetime, line: str) -> bytes:
    """A Vector record of one line of the job's output file, collected on ``host`` (srun gathers
    every rank's output on the batch host)."""
    return codec.dumps(
        {
            "message": line,
            "timestamp": at.isoformat(),
            "host": host,
            "source_type": "file",
            "file": f"/scratch/run/slurm-{job}.out",
        }
    )


def nccl_init(node: str, rank: int, nranks: int, cuda_dev: int, bus: str, label: str = "") -> str:
    """NCCL's init-complete line (2.28 wording, as captured on a real H200)."""
    return (
        f"{label}{node}:{1000 + rank}:{1000 + rank} [{cuda_dev}] NCCL INFO ncclCommInitRankConfig comm "
        f"0x1d48abc0 rank {rank} nranks {nranks} cudaDev {cuda_dev} nvmlDev {cuda_dev} busId {bus} "
        f"commId 0x4bca522fd9d660f3 - Init COMPLETE"
    )


def signals(
    raw: bytes, offset: int | None = None, topic: str = "t", key_host: str | None = None
) -> list[Signal]:
    pos = Position(topic, 0, offset) if offset is not None else Position()
    return EXTRACTOR.extract(normalize(raw, key_host=key_host), T0 + timedelta(hours=1), pos)


def one(raw: bytes, **kw: object) -> Signal:
    out = signals(raw, **kw)  # type: ignore[arg-type]
    assert len(out) == 1, out
    return out[0]


def verdict(*raws: bytes) -> Verdict:
    """The attribution of one job's window ("7") holding one signal of each raw record, in order."""
    from streams.correlate.correlator import window_from

    sigs = [one(r, offset=i).model_copy(update={"job_id": "7"}) for i, r in enumerate(raws)]
    window = window_from(sigs, cluster="c", job_id="7", now=T0)
    assert window is not None
    v = attribute(window, None)
    assert v is not None
    return v


def output_verdict(*lines: str) -> Verdict:
    """The attribution of job 7's output lines, as gpu-01 collected them one second apart from T0."""
    return verdict(
        *(job_output("gpu-01", "7", T0 + timedelta(seconds=i), line) for i, line in enumerate(lines))
    )


def output_signals(line: str) -> list[Signal]:
    """The signals one line of job 7's output gives, as gpu-01 collected it at T0 (``[]``: no rule's)."""
    return signals(job_output("gpu-01", "7", T0, line))


def outcome(v: Verdict) -> tuple[str | None, Category, bool]:
    """What a verdict says: its root's rule, its category and whether a restart is the recovery."""
    return (v.root.rule if v.root else None), v.category, v.restartable


def slurm_action(
    kind: ActionKind, *, dry_run: bool = False, reason: str = "sickbay: test", **fields: Any
) -> Action:
    """An action as the decide step (or the API) would publish it, with a fresh idempotency key."""
    key = f"it:{kind.value}:{uuid.uuid4().hex}"
    return Action(
        action_id=key,
        idempotency_key=key,
        kind=kind,
        mode=Mode.OBSERVE if dry_run else Mode.ACT,
        dry_run=dry_run,
        cluster="it",
        incident_id=fields.pop("incident_id", "inc-it"),
        incident_revision=1,
        reason=reason,
        created_at=utcnow(),
        **fields,
    )


def sent_assignments(sent: list[tuple[bytes, Any]]) -> list[JobNodeAssignment]:
    """The assignments in what a stage sent to ``topology.node``, packed (``AssignmentBatch``) or not."""
    out: list[JobNodeAssignment] = []
    for _, value in sent:
        out.extend(value.assignments if isinstance(value, AssignmentBatch) else [value])
    return out


def acked() -> asyncio.Future[None]:
    """What a stand-in for a Faust topic's ``send`` returns: like Faust's, a future that the
    broker's acknowledgement resolves (here at once), for code that waits for delivery."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    done.set_result(None)
    return done


def keys_with_differing_actions(actions: list[Action]) -> list[str]:
    """Idempotency keys under which more than one distinct action was proposed.

    The decide step marks a key as issued only once the broker holds its action
    (streams/decide/agent.py), so a worker killed between the two re-sends the same action under
    the same key, which the adapters skip once they have run it. Copies of one action are that
    re-send; two different actions under one key would be two decisions, a bug."""
    seen: dict[str, set[tuple[object, ...]]] = {}
    for a in actions:
        what = (a.kind, a.node, a.job_id, tuple(a.exclude_nodes), a.incident_id, a.dry_run)
        seen.setdefault(a.idempotency_key, set()).add(what)
    return [k for k, v in seen.items() if len(v) > 1]
