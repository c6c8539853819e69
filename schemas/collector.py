"""What a collector could reach: the coverage report every collector emits.

A verdict is only as good as the evidence that reached it. A collector that could
not read ``/var/log/kern.log`` or could not reach the broker must say so, so the
correlator can attach the report to a verdict ("no kernel log from gpu-03: the
collector there could not read it") instead of reading silence as health.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.base import Contract, UtcDatetime

TargetKind = Literal["file", "broker", "spool", "scheduler", "api", "exporter", "other"]


class Reach(BaseModel):
    """One thing a collector tried to read from or write to, and whether it could."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: TargetKind
    target: str
    ok: bool
    state: str = ""  # e.g. reading, rotated, missing, unreadable, skipped, direct, spooling
    detail: str | None = None
    position: int | None = None  # files: bytes read and acknowledged
    size: int | None = None  # files: current size


class CollectorReport(Contract):
    """A periodic and final coverage record of one collector process."""

    collector: str  # files, slurm, kubernetes, prometheus, loki, nvml
    host: str | None = None
    time: UtcDatetime
    started: UtcDatetime
    final: bool = False
    reached: list[Reach] = Field(default_factory=list)
    unmatched: list[str] = Field(default_factory=list)  # patterns or targets that matched nothing
    broker_reachable: bool
    producer_mode: str = "direct"
    spool_depth: int = 0
    spool_bytes: int = 0
    counts: dict[str, int] = Field(default_factory=dict)

    @property
    def unreachable(self) -> list[Reach]:
        return [r for r in self.reached if not r.ok]
