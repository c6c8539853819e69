"""State the correlator keeps per job (in Faust tables; plain pydantic models here).

Kept bounded: a 4,000-rank job's cascade is held as counts plus a few
representative signals, never as 4,000 copies rewritten to the changelog.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from schemas.signals import Signal

SAMPLES_PER_RULE = 8


class JobTopology(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str
    attempt: int = 1
    nodes: list[str] = Field(default_factory=list)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    end_state: str | None = None


class RuleTally(BaseModel):
    """Every signal of one rule in a window: counts and where, plus a few samples."""

    model_config = ConfigDict(extra="forbid")

    count: int = 0
    nodes: list[str] = Field(default_factory=list)
    ranks: list[int] = Field(default_factory=list)
    first_seen: datetime | None = None
    samples: list[Signal] = Field(default_factory=list)


class IncidentWindow(BaseModel):
    """An incident in the making: opened by the first initiating signal, closed by quiet or job end."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    attempt: int
    cluster: str
    opening_signal_id: str
    opened_at: datetime  # processing time
    last_signal_at: datetime  # processing time, for the quiet period
    first_signal_time: datetime  # event time
    seen_ids: list[str] = Field(default_factory=list)
    roots: list[Signal] = Field(default_factory=list)  # root candidates, kept whole (few)
    tallies: dict[str, RuleTally] = Field(default_factory=dict)  # cascades, confirmations, hints
    revision: int = 0
    fingerprint: str | None = None  # what decides actions in the last emitted revision
    dirty: bool = False
    closed: bool = False
