"""Typed signals: what a deterministic rule found in one raw record."""

from __future__ import annotations

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
