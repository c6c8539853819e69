"""Recovery policy settings: one validated file, overridable per cluster, partition and job.

Resolution, most general first, each level overriding only the keys it sets::

    defaults → clusters.<cluster> → clusters.<cluster>.partitions.<partition> → the job's own override

The job's own override is what a user wrote into the Slurm job comment or a pod
annotation, in the shape NVIDIA's resiliency engine reads::

    {"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 2}}

A job may only loosen or tighten the *job* knobs (restart mode and budget, backoff);
the fleet valves (blast radius, flapping) belong to the operator and live in
:class:`FleetValves`, which a job cannot touch. A malformed override never fails
the decision: it is ignored and the reason is written to the audit trail.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.jobs import JobInfo

APS_ANNOTATION = "sickbay.io/policy"  # pod/job annotation holding the same JSON as a Slurm comment


class JobPolicy(BaseModel):
    """The knobs that shape one job's recovery. Every field has the safe default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    auto_resume_mode: Literal["requeue", "off"] = "requeue"
    max_requeue_times: int = Field(default=3, ge=0, le=100, description="failures without a new checkpoint")
    confirm_non_restartable: bool = Field(
        default=False, description="retry a non-restartable root cause once to confirm before stopping"
    )
    on_budget_exhausted: Literal["leave", "cancel"] = "leave"
    backoff_base_s: float = Field(default=30.0, ge=0, le=86400)
    backoff_max_s: float = Field(default=600.0, ge=0, le=86400)
    isolate: bool = True
    min_confidence_to_isolate: float = Field(default=0.8, ge=0.0, le=1.0)
    max_isolate_per_incident: int = Field(default=2, ge=0, le=64)
    drain_expiry_s: float = Field(default=24 * 3600.0, gt=0)
    isolate_degrading: bool = Field(
        default=True, description="drain a node the health detector calls degrading (jobs on it finish first)"
    )
    restart_stragglers: bool = Field(default=False, description="restart a job whose straggler was found")
    restart_in_place_rules: list[str] = Field(
        default_factory=lambda: ["hang.", "nccl.watchdog", "nccl.blocking_wait", "nccl.taking_process_down"],
        description="root rules (prefixes) that stop a job by themselves: restart even with no culprit",
    )
    max_incident_age_s: float = Field(default=3600.0, gt=0, description="stale/replay guard")
    decision_deadline_s: float = Field(
        default=600.0, gt=0, description="attribution slower than this → fail open, no restart from us"
    )


class FleetValves(BaseModel):
    """Cluster-wide limits on isolation, applied by the per-cluster gate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_isolations_per_window: int = Field(default=8, ge=0)
    isolation_window_s: float = Field(default=3600.0, gt=0)
    max_partition_fraction: float = Field(default=0.1, gt=0.0, le=1.0)
    partition_sizes: dict[str, int] = Field(default_factory=dict, description="nodes per partition")
    flap_max_isolations: int = Field(default=3, ge=1, description="isolations of one node before a human")
    flap_window_s: float = Field(default=7 * 86400.0, gt=0)


# Keys a job may set through its comment/annotation. NVIDIA's two names, plus a few of ours.
JOB_OVERRIDABLE = frozenset(
    {"auto_resume_mode", "max_requeue_times", "on_budget_exhausted", "backoff_base_s", "backoff_max_s"}
)
_APS_ALIASES = {"auto_resume_mode": {"requeue": "requeue", "singleton_dependency": "requeue", "none": "off"}}


class PartitionOverride(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: dict[str, Any] = Field(default_factory=dict)


class ClusterOverride(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: dict[str, Any] = Field(default_factory=dict)
    valves: FleetValves | None = None
    partitions: dict[str, PartitionOverride] = Field(default_factory=dict)


class PolicyFile(BaseModel):
    """The operator's file (TOML). Validated whole at start: a typo stops the worker, loudly."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    defaults: JobPolicy = Field(default_factory=JobPolicy)
    valves: FleetValves = Field(default_factory=FleetValves)
    clusters: dict[str, ClusterOverride] = Field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> PolicyFile:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
        policy = cls.model_validate(data)
        policy.check()
        return policy

    def check(self) -> None:
        """Overrides are partial dicts; validate each one merged onto the defaults now, not at 3 a.m."""
        for name, cluster in self.clusters.items():
            merged = self.defaults.model_copy(update=cluster.policy)
            JobPolicy.model_validate(merged.model_dump())
            for pname, part in cluster.partitions.items():
                try:
                    JobPolicy.model_validate({**merged.model_dump(), **part.policy})
                except ValidationError as exc:
                    raise ValueError(f"clusters.{name}.partitions.{pname}.policy: {exc}") from exc

    def valves_for(self, cluster: str) -> FleetValves:
        override = self.clusters.get(cluster)
        return override.valves if override and override.valves else self.valves

    def resolve(
        self, cluster: str, partition: str | None, info: JobInfo | None
    ) -> tuple[JobPolicy, list[str]]:
        """The effective policy for one job, plus notes about overrides that were refused."""
        layers: list[tuple[str, dict[str, Any]]] = []
        override = self.clusters.get(cluster)
        if override:
            layers.append((f"clusters.{cluster}", override.policy))
            if partition and partition in override.partitions:
                layers.append(
                    (f"clusters.{cluster}.partitions.{partition}", override.partitions[partition].policy)
                )
        notes: list[str] = []
        if info is not None:
            job_layer, job_notes = job_override(info)
            notes.extend(job_notes)
            if job_layer:
                layers.append(("job", job_layer))
        data = self.defaults.model_dump()
        for where, layer in layers:
            candidate = {**data, **layer}
            try:
                JobPolicy.model_validate(candidate)
            except ValidationError as exc:
                notes.append(f"ignored policy override from {where}: {_first_error(exc)}")
                continue
            data = candidate
        return JobPolicy.model_validate(data), notes


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    return f"{loc}: {err.get('msg', 'invalid')}"


_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def _parse_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in free text (a Slurm comment often carries other words too)."""
    match = _JSON_OBJECT.search(text)
    if not match:
        return None
    try:
        value = orjson.loads(match.group(0))
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def job_override(info: JobInfo) -> tuple[dict[str, Any], list[str]]:
    """The keys a job set for itself (from its comment or annotation), with notes on what was refused."""
    sources = [info.comment] if info.comment else []
    if APS_ANNOTATION in info.annotations:
        sources.append(info.annotations[APS_ANNOTATION])
    layer: dict[str, Any] = {}
    notes: list[str] = []
    for text in sources:
        if "APS" not in text and "sickbay" not in text:
            continue
        obj = _parse_json_object(text)
        if obj is None:
            notes.append("ignored job policy: comment/annotation mentions APS but holds no valid JSON object")
            continue
        section = obj.get("APS", obj.get("sickbay"))
        if not isinstance(section, dict):
            notes.append("ignored job policy: the APS value is not an object")
            continue
        for key, value in section.items():
            if key not in JOB_OVERRIDABLE:
                notes.append(f"ignored job policy key {key!r}: not settable per job")
                continue
            aliases = _APS_ALIASES.get(key)
            layer[key] = (
                aliases.get(value, value) if aliases is not None and isinstance(value, str) else value
            )
    return layer, notes
