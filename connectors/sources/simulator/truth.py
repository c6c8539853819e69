"""Ground truth of one simulated scenario: what a correct verdict and a correct response are.

Written beside the logs as ``truth.json`` (outside the ``logs/`` folder that
``sickbay diagnose`` reads) and available on demand (``sickbay sim truth``).
"""

from __future__ import annotations

from pydantic import Field

from schemas.base import Contract, UtcDatetime
from schemas.incidents import Category


class GroundTruth(Contract):
    scenario_id: str
    scenario_type: str
    seed: int
    flavour: str = Field(description="slurm or kubernetes")
    description: str
    job_id: str
    job_nodes: list[str]
    attempts: int = Field(default=1, ge=1, description="job attempts in the scenario (requeues + 1)")
    category: Category
    healthy: bool = Field(description="nothing failed that calls for a response: no actions, no incident")
    culprit_node: str | None = None
    culprit_gpu: str | None = Field(default=None, description="PCI address as Xid lines print it: 0000:18:00")
    culprit_gpu_index: int | None = None
    culprit_rank: int | None = None
    restartable: bool
    actions: list[str] = Field(
        default_factory=list,
        description='canonical: "drain_node N", "requeue_job J excluding N[,M]", "requeue_job J"',
    )
    decisive_time: UtcDatetime
    decisive_line: str | None = Field(default=None, description="the line as written in its file")
    decisive_host: str | None = Field(default=None, description="the node the decisive line came from")
    decisive_source: str | None = Field(default=None, description="kernel, training, scheduler or telemetry")
    start_time: UtcDatetime
    end_time: UtcDatetime


def drain_and_requeue(job_id: str, node: str, restartable: bool = True) -> list[str]:
    acts = [f"drain_node {node}"]
    if restartable:
        acts.append(f"requeue_job {job_id} excluding {node}")
    return acts
