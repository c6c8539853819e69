"""What the scheduler says about a job, beyond which nodes it runs on.

The decide step reads it to resolve a job's policy: its partition or namespace,
and the per-job override a user wrote into the Slurm job comment or a pod
annotation (``{"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 2}}``,
the convention NVIDIA's resiliency engine reads). Collectors publish it; the
correlator adds the last checkpoint it saw.
"""

from __future__ import annotations

from pydantic import Field

from schemas.base import Contract, UtcDatetime


class JobInfo(Contract):
    """Partial facts are fine: a consumer merges a record's non-empty fields onto what it knew
    (the correlator publishes only ``last_checkpoint_at``; a collector only scheduler facts)."""

    job_id: str = Field(min_length=1, max_length=256)
    cluster: str = "default"
    scheduler: str | None = None  # "slurm" | "kubernetes"; None: this record does not say
    partition: str | None = None  # Slurm partition, or the Kubernetes namespace
    namespace: str | None = None
    workload_kind: str | None = None  # schemas.actions.WorkloadKind value for Kubernetes workloads
    comment: str | None = Field(default=None, max_length=8192)  # Slurm job comment (may hold APS JSON)
    annotations: dict[str, str] = Field(default_factory=dict)  # pod / job annotations
    num_nodes: int | None = Field(default=None, ge=0)
    last_checkpoint_at: UtcDatetime | None = None
    time: UtcDatetime  # when this fact was observed
