"""Node health: a decaying score per node from degradation signals, before any job fails.

GPUs and links usually warn before they fail: correctable ECC errors climb, rows get
remapped, a port flaps, the same Xid 13/31/43 keeps coming back on one GPU, a GPU keeps
throttling for heat, a DIMM keeps logging corrected errors. Each of these alone is noise;
together, on one node, they are a node to take out of the pool when its jobs end. Pure
functions; the node agent persists the state.

Score: ``health = exp(-sum of penalties)`` in (0, 1]. Each piece of evidence adds a penalty
(``WEIGHTS``, per event) to its kind and GPU; every penalty halves each ``half_life_s`` of
event time, so old evidence fades and a node that stops misbehaving recovers. Weights:

==================== ====== ================================================================
kind                 weight evidence
==================== ====== ================================================================
ecc_sbe              0.30   Xid 92 (high single-bit ECC rate), dcgm "More than N SBE" lines
ecc_sbe (counter)    0.01   per correctable error in ``DCGM_FI_DEV_ECC_SBE_VOL_TOTAL``
                            increments, at most 0.3 per sample (one burst)
row_remap_pending    0.40   Xid 63, "row remappings are pending", ``DCGM_FI_DEV_ROW_REMAP_PENDING``
row_remap_failure    1.00   Xid 64, "row remapping failed", ``DCGM_FI_DEV_ROW_REMAP_FAILURE``
link_flap            0.20   a NIC/IB link going down (mlx5 "Link down"), NHC "No IB port ACTIVE"
xid_repeat           0.25   each Xid 13/31/43 on a GPU *after the first* (one is an app bug)
thermal              0.05   a telemetry sample with a thermal throttle bit, 0.10 for a
                            thermal-violation log line
host_memory_ce       0.10   an EDAC line of corrected host memory errors (a DIMM going bad:
                            seven such lines within a half-life reach the threshold)
==================== ====== ================================================================

One row-remap failure alone gives 0.37 (below the 0.5 default threshold); two Xid 92s and a
pending remap give 0.37; a single SBE or a single Xid 13 stays above 0.85. Below the threshold
the node gets one pre-emptive ``degrading`` incident per episode (``kind`` degrading, culprit
node and worst GPU, ``isolate`` empty: the policy decides whether to drain after the node's jobs
end); the episode ends (a closing revision) when the score is back above ``recover``.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from schemas.base import UtcDatetime
from schemas.health import NodeHealth
from schemas.incidents import (
    Category,
    Culprit,
    Evidence,
    Incident,
    IncidentKind,
    IncidentStatus,
    RootCause,
)
from schemas.signals import Signal
from schemas.telemetry import GpuTelemetry

WEIGHTS: dict[str, float] = {
    "ecc_sbe": 0.30,
    "row_remap_pending": 0.40,
    "row_remap_failure": 1.00,
    "link_flap": 0.20,
    "xid_repeat": 0.25,
    "thermal": 0.10,
    "host_memory_ce": 0.10,
    "nvswitch_nonfatal": 0.15,
    "pcie_replay": 0.15,
    "nvlink_errors": 0.15,
}
SBE_PER_ERROR = 0.01
SBE_BURST_CAP = 0.30
THERMAL_SAMPLE = 0.05
XID_KIND = {92: "ecc_sbe", 63: "row_remap_pending", 64: "row_remap_failure"}
REPEAT_XIDS = (13, 31, 43)
RULE_KIND = {
    "gpu.ecc_sbe": "ecc_sbe",
    "gpu.amd_ras_correctable": "ecc_sbe",  # amdgpu's corrected-error counts: the same degradation
    "gpu.row_remap_pending": "row_remap_pending",
    "gpu.row_remap_failure": "row_remap_failure",
    "network.link_down": "link_flap",
    "network.ib_port_down": "link_flap",
    "gpu.clocks_throttled": "thermal",
    "gpu.slowdown_active": "thermal",
    "host.edac_corrected": "host_memory_ce",
    # An NVSwitch logging non-fatal errors (link error rates, ECC it corrected): the node's NVLink
    # fabric wearing; the kernel's SXid line and Fabric Manager's own log say the same.
    "gpu.sxid_nonfatal": "nvswitch_nonfatal",
    "gpu.fm_sxid_nonfatal": "nvswitch_nonfatal",
    "gpu.dcgm_nvswitch_nonfatal": "nvswitch_nonfatal",
    # DCGM's passive checks over their limits: a GPU's PCIe link retrying packets, or its NVLink error
    # counters rising. DCGM rates both ISOLATE; here they wear a node down over a few reports rather
    # than drain it on one, since each is a rate over a threshold, not a failed part.
    "gpu.pcie_replays": "pcie_replay",
    "gpu.nvlink_errors": "nvlink_errors",
}
KIND_CATEGORY = {
    "ecc_sbe": Category.HARDWARE_GPU,
    "row_remap_pending": Category.HARDWARE_GPU,
    "row_remap_failure": Category.HARDWARE_GPU,
    "xid_repeat": Category.HARDWARE_GPU,
    "thermal": Category.HARDWARE_GPU,
    "link_flap": Category.HARDWARE_NETWORK,
    "host_memory_ce": Category.HARDWARE_HOST,
    "nvswitch_nonfatal": Category.HARDWARE_GPU,
    "pcie_replay": Category.HARDWARE_GPU,
    "nvlink_errors": Category.HARDWARE_GPU,
}
SBE_COUNTER = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
REMAP_PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"
REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
THROTTLE = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
THERMAL_BITS = 0x20 | 0x40
MAX_RECENT = 8
MAX_ENTRIES = 256


@dataclass(frozen=True)
class HealthConfig:
    threshold: float = 0.5
    recover: float = 0.7
    half_life_s: float = 6 * 3600.0
    snapshot_delta: float = 0.02  # publish a snapshot when the score moves this much
    snapshot_every_s: float = 300.0  # or this long after the last one, while evidence comes in


class Item(BaseModel):
    """One piece of evidence, kept for the incident's evidence list."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    gpu: str | None = None
    time: UtcDatetime
    rule: str
    text: str
    signal_id: str


class NodeHealthState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node: str
    as_of: UtcDatetime | None = None  # event time the penalties are decayed to
    penalties: dict[str, float] = Field(default_factory=dict)  # "kind|gpu" -> decayed penalty
    seen: dict[str, float] = Field(default_factory=dict)  # "kind|gpu" -> decayed count (for repeats)
    counters: dict[str, float] = Field(default_factory=dict)  # "metric|gpu" -> last counter/gauge value
    events: int = 0
    recent: list[Item] = Field(default_factory=list)
    degrading_since: UtcDatetime | None = None
    incident_id: str | None = None
    revision: int = 0
    published_score: float | None = None
    published_at: UtcDatetime | None = None


def _decay(value: float, dt_s: float, half_life_s: float) -> float:
    return float(value * 0.5 ** (max(0.0, dt_s) / half_life_s))


def advance(state: NodeHealthState, to: datetime, cfg: HealthConfig) -> NodeHealthState:
    """Decay every penalty to event time ``to`` (never backwards)."""
    if state.as_of is not None and to <= state.as_of:
        return state
    if state.as_of is None:
        return state.model_copy(update={"as_of": to})
    dt = (to - state.as_of).total_seconds()
    pen = {k: d for k, v in state.penalties.items() if (d := _decay(v, dt, cfg.half_life_s)) > 1e-4}
    seen = {k: d for k, v in state.seen.items() if (d := _decay(v, dt, cfg.half_life_s)) > 1e-3}
    return state.model_copy(update={"as_of": to, "penalties": pen, "seen": seen})


def _add(
    state: NodeHealthState, kind: str, gpu: str | None, penalty: float, item: Item, cfg: HealthConfig
) -> NodeHealthState:
    state = advance(state, item.time, cfg)
    key = f"{kind}|{gpu or '-'}"
    if key not in state.penalties and len(state.penalties) >= MAX_ENTRIES:
        return state
    late_s = (state.as_of - item.time).total_seconds() if state.as_of else 0.0  # out of order: fade it
    seen_before = state.seen.get(key, 0.0)
    seen = {**state.seen, key: seen_before + _decay(1.0, late_s, cfg.half_life_s)}
    if kind == "xid_repeat" and seen_before < 0.5:
        penalty = 0.0  # the first one on a GPU is the application's
    pen = dict(state.penalties)
    if penalty > 0:
        pen[key] = pen.get(key, 0.0) + _decay(penalty, late_s, cfg.half_life_s)
    recent = sorted([*state.recent, item], key=lambda i: i.time)[-MAX_RECENT:]
    return state.model_copy(
        update={"penalties": pen, "seen": seen, "events": state.events + 1, "recent": recent}
    )


def signal_kind(signal: Signal) -> str | None:
    """Which degradation kind a node signal is evidence of, if any."""
    kind = RULE_KIND.get(signal.rule)
    if kind is not None:
        return kind
    if signal.rule in ("gpu.xid", "gpu.xid_named_cause"):
        code = signal.attrs.get("code")
        if isinstance(code, int):
            if code in REPEAT_XIDS:
                return "xid_repeat"
            return XID_KIND.get(code)
    return None


def observe_signal(
    state: NodeHealthState | None, signal: Signal, cfg: HealthConfig
) -> NodeHealthState | None:
    """Fold a node signal in; ``None`` when it is no degradation evidence and there is no state."""
    kind = signal_kind(signal)
    if kind is None:
        return state
    state = state or NodeHealthState(node=signal.node or "_unknown")
    item = Item(
        kind=kind,
        gpu=signal.gpu,
        time=signal.event_time,
        rule=signal.rule,
        text=signal.text[:512],
        signal_id=signal.signal_id,
    )
    return _add(state, kind, signal.gpu, WEIGHTS[kind], item, cfg)


def telemetry_relevant(sample: GpuTelemetry) -> bool:
    return any(k in sample.metrics for k in (SBE_COUNTER, REMAP_PENDING, REMAP_FAILURE, THROTTLE))


def observe_telemetry(
    state: NodeHealthState | None, sample: GpuTelemetry, cfg: HealthConfig
) -> NodeHealthState | None:
    """Counters and flags from one telemetry sample: SBE increments, remap flags, thermal throttling."""
    m = sample.metrics
    if not telemetry_relevant(sample):
        return state
    state = state or NodeHealthState(node=sample.node)
    gpu = sample.pci_bus_id or (str(sample.gpu) if sample.gpu is not None else None)
    gkey = str(sample.gpu) if sample.gpu is not None else (gpu or "-")
    sid = f"telemetry:{sample.node}:{gkey}:{sample.time.isoformat()}"
    counters = dict(state.counters)

    def item(kind: str, text: str) -> Item:
        return Item(kind=kind, gpu=gpu, time=sample.time, rule=f"telemetry.{kind}", text=text, signal_id=sid)

    if SBE_COUNTER in m:
        key = f"{SBE_COUNTER}|{gkey}"
        prev, now_v = counters.get(key), m[SBE_COUNTER]
        counters[key] = now_v
        state = state.model_copy(update={"counters": counters})
        delta = now_v - prev if prev is not None and now_v >= prev else 0.0  # a reset is not errors
        if delta > 0:
            pen = min(SBE_BURST_CAP, SBE_PER_ERROR * delta)
            text = f"{delta:.0f} new correctable ECC errors on GPU {gkey} ({now_v:.0f} total)"
            state = _add(state, "ecc_sbe", gpu, pen, item("ecc_sbe", text), cfg)
    for metric, kind in ((REMAP_PENDING, "row_remap_pending"), (REMAP_FAILURE, "row_remap_failure")):
        if metric in m:
            key = f"{metric}|{gkey}"
            was = state.counters.get(key, 0.0)
            state = state.model_copy(update={"counters": {**state.counters, key: m[metric]}})
            if m[metric] > 0 and was <= 0:  # count the flag turning on, not every sample showing it
                text = f"{metric}={m[metric]:.0f} on GPU {gkey}"
                state = _add(state, kind, gpu, WEIGHTS[kind], item(kind, text), cfg)
    if THROTTLE in m and int(m[THROTTLE]) & THERMAL_BITS:
        text = f"GPU {gkey} thermally throttled (clock throttle reasons 0x{int(m[THROTTLE]):x})"
        state = _add(state, "thermal", gpu, THERMAL_SAMPLE, item("thermal", text), cfg)
    return state


def components(state: NodeHealthState) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, v in state.penalties.items():
        kind = key.split("|", 1)[0]
        out[kind] = out.get(kind, 0.0) + v
    return {k: round(v, 4) for k, v in sorted(out.items())}


def health(state: NodeHealthState) -> float:
    return math.exp(-sum(state.penalties.values()))


def worst_gpu(state: NodeHealthState) -> str | None:
    per_gpu: dict[str, float] = {}
    for key, v in state.penalties.items():
        gpu = key.split("|", 1)[1]
        if gpu != "-":
            per_gpu[gpu] = per_gpu.get(gpu, 0.0) + v
    return max(per_gpu, key=lambda g: (per_gpu[g], g)) if per_gpu else None


def snapshot(state: NodeHealthState, cluster: str) -> NodeHealth:
    return NodeHealth(
        cluster=cluster,
        node=state.node,
        time=state.as_of or datetime.fromtimestamp(0).astimezone(),
        score=round(health(state), 4),
        degrading=state.degrading_since is not None,
        components=components(state),
        worst_gpu=worst_gpu(state),
        events=state.events,
    )


def snapshot_due(state: NodeHealthState, cfg: HealthConfig) -> bool:
    if state.as_of is None:
        return False
    if state.published_score is None or state.published_at is None:
        return True
    moved = abs(health(state) - state.published_score) >= cfg.snapshot_delta
    stale = state.as_of - state.published_at >= timedelta(seconds=cfg.snapshot_every_s)
    return moved or stale


def mark_published(state: NodeHealthState) -> NodeHealthState:
    return state.model_copy(update={"published_score": health(state), "published_at": state.as_of})


def degrading_id(cluster: str, node: str, since: datetime) -> str:
    raw = f"{cluster}|node:{node}|degrading|{int(since.timestamp() // 3600)}"
    return "inc-" + hashlib.blake2b(raw.encode(), digest_size=8).hexdigest()


def evaluate(
    state: NodeHealthState, cluster: str, now: datetime, cfg: HealthConfig
) -> tuple[NodeHealthState, Incident | None]:
    """Open a degrading episode below the threshold, close it above ``recover``; the incident
    revision to publish, if any. ``now`` is processing time (``updated_at``)."""
    score = health(state)
    if state.degrading_since is None and score < cfg.threshold and state.as_of is not None:
        since = state.as_of
        inc_id = degrading_id(cluster, state.node, since)
        state = state.model_copy(update={"degrading_since": since, "incident_id": inc_id, "revision": 1})
        return state, _incident(state, cluster, now, IncidentStatus.OPEN)
    if state.degrading_since is not None and score >= cfg.recover:
        state = state.model_copy(update={"revision": state.revision + 1})
        incident = _incident(state, cluster, now, IncidentStatus.CLOSED)
        return state.model_copy(update={"degrading_since": None, "incident_id": None}), incident
    return state, None


def _incident(state: NodeHealthState, cluster: str, now: datetime, status: IncidentStatus) -> Incident:
    comps = components(state)
    top_kind = max(comps, key=lambda k: (comps[k], k)) if comps else "ecc_sbe"
    category = KIND_CATEGORY.get(top_kind, Category.HARDWARE_HOST)
    score = health(state)
    gpu = worst_gpu(state) if category == Category.HARDWARE_GPU else None
    items = [i for i in state.recent if i.kind == top_kind] or state.recent
    root = items[-1] if items else None
    as_of = state.as_of or now
    parts = ", ".join(f"{k} {v:.2f}" for k, v in comps.items())
    summary = (
        f"node {state.node} degrading: health {score:.2f} < threshold ({parts})"
        if status == IncidentStatus.OPEN
        else f"node {state.node} recovered: health {score:.2f}"
    )
    return Incident(
        incident_id=state.incident_id or degrading_id(cluster, state.node, as_of),
        revision=max(1, state.revision),
        cluster=cluster,
        job_id=f"node:{state.node}",
        attempt=1,
        status=status,
        category=category,
        root_cause=RootCause(
            rule=f"node_health.{top_kind}",
            summary=summary,
            signal_id=root.signal_id if root else f"node-health:{state.node}",
            event_time=root.time if root else as_of,
            node=state.node,
            gpu=gpu,
            text=(root.text if root else summary)[:1024],
        ),
        culprit=Culprit(node=state.node, gpu=gpu),
        # Nothing failed yet: no isolation request of its own (it would spend the fleet's isolation
        # budget before real failures). ``kind`` degrading lets the policy drain after the jobs end.
        isolate=[],
        restartable=True,
        # graded: a node just under the threshold is flagged; only a clearly failing one is drained
        confidence=round(min(0.95, max(0.5, 1.0 - score)), 3),
        evidence=[
            Evidence(
                signal_id=i.signal_id,
                rule=i.rule,
                node=state.node,
                event_time=i.time,
                text=i.text,
                source_kind="telemetry" if i.rule.startswith("telemetry.") else "kernel",
            )
            for i in state.recent
        ],
        coverage=sorted({"telemetry" if i.rule.startswith("telemetry.") else "kernel" for i in state.recent}),
        opened_at=now,
        updated_at=now,
        first_signal_time=state.degrading_since or as_of,
        kind=IncidentKind.DEGRADING,
    )
