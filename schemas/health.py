"""Node health snapshots: what the node-health detector believes about one node right now.

Published on ``<prefix>.health.nodes`` (keyed by node) whenever a node's score moves, so the
ClickHouse sink can keep a time series per node and an operator can see a node degrade before
any job fails on it. ``components`` holds the decayed penalty per kind of degradation signal
(see ``streams/correlate/node_health.py`` for the kinds, weights and decay), so a score can
always be explained.
"""

from __future__ import annotations

from pydantic import Field

from schemas.base import Contract, UtcDatetime


class NodeHealth(Contract):
    cluster: str
    node: str = Field(min_length=1, max_length=253)
    time: UtcDatetime  # event time of the newest evidence folded in
    score: float = Field(ge=0.0, le=1.0)  # 1 = healthy, 0 = certainly degrading
    degrading: bool  # below the threshold (with hysteresis)
    components: dict[str, float] = Field(default_factory=dict)  # kind -> decayed penalty
    worst_gpu: str | None = None  # the GPU that contributes most, when the evidence names one
    events: int = Field(default=0, ge=0)  # evidence items folded in since the node was first seen
