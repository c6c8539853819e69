"""Actions are intents; results are facts.

The decide step publishes :class:`Action` records with an idempotency key and a
mode; adapters execute them (or, in observe mode, only record what they would
do) and publish :class:`ActionResult`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from schemas.base import Contract, UtcDatetime
from schemas.incidents import Category


class Mode(StrEnum):
    OBSERVE = "observe"  # record what would be done; execute nothing
    ACT = "act"


class ActionKind(StrEnum):
    DRAIN_NODE = "drain_node"
    REQUEUE_JOB = "requeue_job"
    RESUME_NODE = "resume_node"  # undo a drain (an operator's restore request); scheduler adapters resume
    CANCEL_JOB = "cancel_job"  # stop a job for good (retry budget spent, not restartable); Slurm scancel


class WorkloadKind(StrEnum):
    """What ``job_id`` names, so an adapter knows which API restarts it."""

    SLURM_JOB = "slurm_job"
    PYTORCH_JOB = "pytorchjob"  # kubeflow.org/v1 PyTorchJob
    TRAIN_JOB = "trainjob"  # trainer.kubeflow.org/v1alpha1 TrainJob
    KUEUE_WORKLOAD = "kueue_workload"  # kueue.x-k8s.io/v1beta1 Workload


class ActionStatus(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DRY_RUN = "dry_run"  # observe mode: validated, not executed
    CONVERGED = "converged"  # the scheduler already shows the wanted state
    REJECTED = "rejected"  # refused by a safety check in the adapter
    PENDING = "pending"  # executed; the scheduler does not show the wanted state yet
    ABANDONED = "abandoned"  # never converged within the reconcile deadline; a human has to look


class Action(Contract):
    action_id: str
    idempotency_key: str
    kind: ActionKind
    mode: Mode
    dry_run: bool
    scheduler: Literal["slurm", "kubernetes"] = "slurm"
    cluster: str
    incident_id: str
    incident_revision: int = Field(ge=1)
    job_id: str | None = None
    node: str | None = None
    gpu: str | None = None  # the GPU named in the verdict, when the isolation is GPU-scoped
    exclude_nodes: list[str] = Field(default_factory=list)
    reason: str = Field(min_length=1, max_length=256)
    created_at: UtcDatetime
    # Kubernetes addressing (ignored by Slurm adapters): the workload's namespace and kind.
    namespace: str | None = Field(default=None, max_length=63)
    workload_kind: WorkloadKind | None = None
    # An isolation is reversible: after this time an operator (or the adapter's sweep) may restore it.
    expires_at: UtcDatetime | None = None
    policy_rule: str | None = None  # which policy rule proposed it (audit)
    backoff_s: float = Field(default=0.0, ge=0.0)  # restart no earlier than created_at + backoff_s


class CommandRun(Contract):
    """One scheduler command as executed: argv (never a shell string) and what it said."""

    argv: list[str]
    returncode: int
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0


class ActionResult(Contract):
    action_id: str
    idempotency_key: str
    kind: ActionKind
    status: ActionStatus
    adapter: str
    cluster: str
    incident_id: str
    started_at: UtcDatetime
    finished_at: UtcDatetime
    commands: list[CommandRun] = Field(default_factory=list)
    detail: str = ""


class ModeScope(Contract):
    """Where a mode applies: a cluster, optionally narrowed to a partition and/or a verdict category."""

    cluster: str = Field(min_length=1, max_length=128)
    partition: str | None = Field(default=None, min_length=1, max_length=128)
    category: Category | None = None

    def key(self) -> str:
        """The record key on the modes topic (compaction keeps the latest change per scope)."""
        return f"{self.cluster}/{self.partition or '*'}/{self.category.value if self.category else '*'}"


class ModeChange(Contract):
    """An operator switched a scope between observe and act (the decide step applies it)."""

    change_id: str
    scope: ModeScope
    mode: Mode
    actor: str
    reason: str = Field(min_length=1, max_length=256)
    time: UtcDatetime


class IsolationRequest(Contract):
    """A drain the decide step wants, sent to the per-cluster gate that applies the fleet-wide valves.

    Jobs are spread over partitions, but the blast-radius cap and the flapping guard
    count across all of them, so isolations pass one serial point per cluster.
    """

    request_id: str
    cluster: str
    node: str
    partition: str | None = None
    incident_id: str
    incident_revision: int = Field(ge=1)
    job_id: str | None = None
    gpu: str | None = None
    category: Category
    mode: Mode
    reason: str = Field(min_length=1, max_length=256)
    expires_at: UtcDatetime | None = None
    policy_rule: str | None = None
    scheduler: Literal["slurm", "kubernetes"] = "slurm"
    restore: bool = False  # an operator restored the node (counts for the flapping guard)
    time: UtcDatetime
