"""The isolation gate: fleet-wide safety valves on draining nodes, one serial point per cluster.

A bad rule, a broken switch or a shared-filesystem outage can make hundreds of
nodes look guilty at once. Draining them all would be worse than the fault, so
every isolation passes here, where the whole cluster is counted:

- **blast radius:** at most ``max_isolations_per_window`` nodes isolated per window,
  and at most ``max_partition_fraction`` of a partition (when its size is known);
  on breach nothing more is isolated and an alert is raised;
- **flapping:** a node isolated ``flap_max_isolations`` times within the flap
  window goes to a human instead of being drained again;
- **already isolated:** a second incident on a node that is still drained re-asserts the drain (the
  adapter converges) without counting it again.

State is kept per (cluster, mode): dry-run isolations in observe mode are counted
(the shadow statistics show when a valve *would* have tripped) but never hold back
a real isolation once the operator switches to act.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from schemas.actions import IsolationRequest
from streams.decide.policy_config import FleetValves

MAX_REASSERTED = 32  # incidents remembered per drained node (a node rarely collects more while drained)


class Isolation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node: str
    at: datetime
    partition: str | None = None
    expires_at: datetime | None = None
    incident_id: str
    # other incidents that re-asserted this drain: a re-read of one of their requests is a replay too
    reasserted_by: list[str] = Field(default_factory=list)


class GateState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    active: dict[str, Isolation] = Field(default_factory=dict)  # node → its current isolation
    recent: list[Isolation] = Field(default_factory=list)  # isolations inside the blast window
    history: dict[str, list[datetime]] = Field(default_factory=dict)  # node → isolation times (flap window)
    tripped_at: datetime | None = None  # the blast-radius valve tripped; alert raised once per window


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    approved: bool
    valve: str | None = None  # which valve held it back: blast_radius | partition_fraction | flapping
    note: str = ""
    alert: bool = False  # the valve just tripped: page a human
    replay: bool = False  # this incident's drain of this node was admitted before: propose nothing again


def _prune(state: GateState, valves: FleetValves, now: datetime) -> None:
    window = timedelta(seconds=valves.isolation_window_s)
    state.recent = [i for i in state.recent if now - i.at < window]
    flap = timedelta(seconds=valves.flap_window_s)
    for node in list(state.history):
        kept = [t for t in state.history[node] if now - t < flap]
        if kept:
            state.history[node] = kept
        else:
            del state.history[node]
    for node, iso in list(state.active.items()):
        if iso.expires_at is not None and iso.expires_at <= now:
            del state.active[node]
    if state.tripped_at is not None and now - state.tripped_at >= window:
        state.tripped_at = None


def admit(state: GateState, req: IsolationRequest, valves: FleetValves, now: datetime) -> Verdict:
    """Decide one isolation request and update ``state`` (in place) when it is approved."""
    _prune(state, valves, now)
    if req.restore:
        state.active.pop(req.node, None)
        return Verdict(approved=True, note=f"{req.node} restored")

    if req.node in state.active:
        # Already drained (e.g. pre-emptively, as degrading): this incident's drain is re-asserted so its
        # own record is complete — the adapter answers "converged" — but it is not counted again.
        held = state.active[req.node]
        if held.incident_id == req.incident_id or req.incident_id in held.reasserted_by:
            # The same request again: its input re-read after a worker died between proposing the
            # drain and committing the request's offset. The drain is out already; say nothing twice.
            return Verdict(approved=False, replay=True, note=f"{req.node} already isolated for this incident")
        held.reasserted_by = [*held.reasserted_by, req.incident_id][-MAX_REASSERTED:]
        return Verdict(approved=True, note=f"{req.node} already isolated for {held.incident_id}; not counted")

    flaps = state.history.get(req.node, [])
    if len(flaps) >= valves.flap_max_isolations:
        return Verdict(
            approved=False,
            valve="flapping",
            note=(
                f"{req.node} was isolated {len(flaps)} times in {valves.flap_window_s / 3600:.0f} h; "
                "not isolating again — a human should look at it"
            ),
            alert=True,
        )

    if len(state.recent) >= valves.max_isolations_per_window:
        first_trip = state.tripped_at is None
        state.tripped_at = state.tripped_at or now
        return Verdict(
            approved=False,
            valve="blast_radius",
            note=(
                f"blast radius: {len(state.recent)} nodes isolated in the last "
                f"{valves.isolation_window_s:.0f}s (cap {valves.max_isolations_per_window}); "
                "isolation stopped"
            ),
            alert=first_trip,
        )

    size = valves.partition_sizes.get(req.partition) if req.partition else None
    if size:
        in_partition = sum(1 for i in state.active.values() if i.partition == req.partition)
        if (in_partition + 1) > valves.max_partition_fraction * size:
            return Verdict(
                approved=False,
                valve="partition_fraction",
                note=(
                    f"partition {req.partition}: {in_partition} of {size} nodes already isolated; one more "
                    f"exceeds {valves.max_partition_fraction:.0%}"
                ),
                alert=True,
            )

    iso = Isolation(
        node=req.node, at=now, partition=req.partition, expires_at=req.expires_at, incident_id=req.incident_id
    )
    state.active[req.node] = iso
    state.recent.append(iso)
    state.history.setdefault(req.node, []).append(now)
    return Verdict(approved=True, note=f"{req.node} isolated ({len(state.recent)} in window)")
