"""Typed signals: what a deterministic rule found in one raw record."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from schemas.base import Contract, UtcDatetime
from schemas.incidents import Category

AttrValue = str | int | float | bool | list[str]


class Role(StrEnum):
    """How a signal may take part in attribution (NVRx's registry roles, plus ours)."""

    ROOT_CANDIDATE = "root_candidate"
    CASCADE = "cascade"
    CONFIRMATION = "confirmation"
    HINT = "hint"  # diagnostic advice text: never a root
    TOPOLOGY = "topology"  # scheduler facts: which job runs where
    PROGRESS = "progress"


class SourceRef(Contract):
    """Where the evidence came from, precise enough to find the original bytes again."""

    kind: Literal["kernel", "training", "scheduler", "telemetry", "other"] = "other"
    adapter: str | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    file: str | None = None
    line: int | None = None


class Signal(Contract):
    """A fact extracted from a record, keyed for the topology joins.

    ``signal_id`` is deterministic (source position + rule), so a replayed record
    yields the same id and downstream state can drop the duplicate.
    """

    signal_id: str
    rule: str
    role: Role
    category: Category | None = None
    summary: str
    event_time: UtcDatetime
    observed_time: UtcDatetime
    node: str | None = None
    job_id: str | None = None
    rank: int | None = None
    gpu: str | None = None
    attrs: dict[str, AttrValue] = Field(default_factory=dict)
    restartable: bool | None = None
    isolation: Literal["none", "gpu", "node", "link"] = "none"
    decisive: bool = False
    weight: int = Field(default=50, ge=0, le=100)  # specificity of the rule, for root selection
    context: str | None = None  # history/co-occurrence handling the engine applies (see rules.Context)
    text: str = Field(max_length=4096)
    source: SourceRef = Field(default_factory=SourceRef)
    routed: bool = False  # a copy re-keyed from a node onto one of its jobs


SIGNAL_BATCH_KIND: Literal["signal_batch"] = "signal_batch"
MAX_SIGNALS_PER_BATCH = 256


class SignalBatch(Contract):
    """Several signals, in the order they were extracted, as one message on ``signals.job``.

    Why: a job's start prints one NCCL placement line per rank, and a collective failure one timeout
    per rank, so a 4,000-rank job sends thousands of facts in a burst; and a busy fleet's thousand
    jobs each add a few facts to every read of ``raw.logs``. Each Kafka message costs a stateful stage
    more than the fact inside it (consumer bookkeeping, a pass through each agent, an
    acknowledgement), so the extract stage packs what one read found for the jobs of one partition
    into one message. Consumers unpack it and handle each signal exactly as if it had come alone,
    keyed by its own job; a signal keeps its own deterministic id, so a replayed batch is dropped
    signal by signal.

    ``job_id`` names the batch's one job; ``None`` means the signals of several jobs that share a
    partition of ``signals.job`` (the message goes to that partition), and each signal names its job.

    ``keyed_by`` ``node``: node facts on ``signals.node`` (no job yet), packed the same way per
    partition of that topic; each is handled under its own node (``node``, ``_unknown`` without one).
    """

    kind: Literal["signal_batch"] = SIGNAL_BATCH_KIND
    keyed_by: Literal["job", "node"] = "job"
    job_id: str | None = None
    signals: list[Signal] = Field(min_length=1, max_length=MAX_SIGNALS_PER_BATCH)

    @model_validator(mode="after")
    def _each_signal_names_its_job(self) -> SignalBatch:
        if self.keyed_by == "node":
            if self.job_id is not None:
                raise ValueError("a batch of node facts names no job")
        elif self.job_id is None and any(s.job_id is None for s in self.signals):
            raise ValueError("a batch of several jobs needs a job_id on every signal")
        return self


RANK_PLACEMENT_RULE = "nccl.rank_placement"
PLACEMENT_BATCH_KIND: Literal["placement_batch"] = "placement_batch"
MAX_PLACEMENTS_PER_BATCH = 4096


class RankPlacement(Contract):
    """Where one rank of a job runs, as NCCL's init line (``... rank R nranks N cudaDev D busId B -
    Init COMPLETE``) states it: the ``nccl.rank_placement`` fact in its compact form.

    Why its own shape: every rank prints the line at every communicator init, so on a fleet these
    are about half of all extracted facts, and each one as a full ``Signal`` (summary, role,
    category, weight, ... none of which a placement uses) cost the extract stage a model and a
    rendered summary and the route and correlate steps a validation each. ``as_signal`` gives the
    ``Signal`` it stands for (what ``sickbay diagnose`` and the ClickHouse sink see)."""

    signal_id: str  # the line's deterministic id (source position + rule), as its Signal's
    event_time: UtcDatetime
    node: str  # the NCCL prefix's host: where the rank runs
    job_id: str | None = None  # None until the route step files it under the node's job
    rank: int = Field(ge=0)
    nranks: int = Field(ge=1)
    cuda_dev: int | None = None
    bus_id: str | None = None  # NCCL's busId (``bd000``), as printed
    task: int | None = None  # srun --label's task id on that line, if any
    text: str = Field(max_length=4096)
    source: SourceRef = Field(default_factory=SourceRef)
    routed: bool = False  # a copy re-keyed from its node onto one of its jobs

    def as_signal(self, observed_time: datetime) -> Signal:
        """The ``nccl.rank_placement`` signal this placement stands for."""
        attrs: dict[str, AttrValue] = {"nranks": self.nranks}
        if self.cuda_dev is not None:
            attrs["cuda_dev"] = self.cuda_dev
        if self.bus_id is not None:
            attrs["bus_id"] = self.bus_id
        if self.task is not None:
            attrs["task"] = self.task
        dev = "?" if self.cuda_dev is None else self.cuda_dev  # as the rule's summary renders a gap
        bus = "?" if self.bus_id is None else self.bus_id
        return Signal(
            signal_id=self.signal_id,
            rule=RANK_PLACEMENT_RULE,
            role=Role.HINT,
            category=Category.UNKNOWN,
            summary=f"rank {self.rank} of {self.nranks} runs here (cudaDev {dev}, busId {bus})",
            event_time=self.event_time,
            observed_time=observed_time,
            node=self.node,
            job_id=self.job_id,
            rank=self.rank,
            attrs=attrs,
            text=self.text,
            source=self.source,
            routed=self.routed,
        )


class PlacementBatch(Contract):
    """Rank placements as one message on ``signals.node`` (``keyed_by`` ``node``: as the extract
    stage found them, each under its own node) or ``signals.job`` (``keyed_by`` ``job``: each names
    its job; the route step's forwards, or lines whose record named the job).

    Packed per partition like ``SignalBatch``, and sent ahead of the partition's signals of the same
    read, so a job's ranks are placed before the errors that name them are decided. Readers handle
    each placement as if it had come alone; a placement is idempotent (the same rank on the same
    node changes nothing), so a replayed batch is harmless."""

    kind: Literal["placement_batch"] = PLACEMENT_BATCH_KIND
    keyed_by: Literal["job", "node"] = "node"
    observed_time: UtcDatetime
    placements: list[RankPlacement] = Field(min_length=1, max_length=MAX_PLACEMENTS_PER_BATCH)

    @model_validator(mode="after")
    def _job_keyed_placements_name_their_job(self) -> PlacementBatch:
        if self.keyed_by == "job" and any(p.job_id is None for p in self.placements):
            raise ValueError("a batch keyed by job needs a job_id on every placement")
        return self


class JobNodeAssignment(Contract):
    """Topology on the node-keyed side: this node serves (or stopped serving) this job attempt."""

    node: str
    job_id: str
    attempt: int = Field(ge=1)
    state: Literal["assigned", "released"]
    event_time: UtcDatetime
    cluster: str = "default"


ASSIGNMENT_BATCH_KIND: Literal["assignment_batch"] = "assignment_batch"
MAX_ASSIGNMENTS_PER_BATCH = 1024


class AssignmentBatch(Contract):
    """Several job ↔ node assignments as one message on ``topology.node``.

    Why: a job's start assigns every node of its allocation, so a thousand starting jobs on ten
    thousand nodes were ten thousand messages through the node-side stage, each costing more than the
    fact inside it. The correlate stage packs what one of its batches learnt for the nodes of one
    partition of ``topology.node`` into one message sent to that partition. Readers handle each
    assignment as if it had come alone, keyed by its own node; per node, the order is the order the
    assignments were learnt.
    """

    kind: Literal["assignment_batch"] = ASSIGNMENT_BATCH_KIND
    assignments: list[JobNodeAssignment] = Field(min_length=1, max_length=MAX_ASSIGNMENTS_PER_BATCH)
