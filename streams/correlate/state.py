"""State the correlator keeps per job (in Faust tables; plain pydantic models here).

Kept bounded: a 4,000-rank job's cascade is held as counts plus a few
representative signals, never as 4,000 copies rewritten to the changelog.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from schemas.incidents import Evidence, Incident
from schemas.signals import RANK_PLACEMENT_RULE, RankPlacement, Signal

SAMPLES_PER_RULE = 8


class PastFailure(BaseModel):
    """The root of an incident that ended one attempt of a job (``restarts.py``)."""

    model_config = ConfigDict(extra="forbid")

    attempt: int
    failure: str  # restarts.failure_of: what failed, without where (the next attempt runs elsewhere)
    root: Evidence


class JobTopology(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str
    attempt: int = 1
    nodes: list[str] = Field(default_factory=list)
    # nodes in the scheduler's allocation order (Slurm's hostlist): with its default block
    # distribution, node i holds ranks i*k .. i*k+k-1. Kubernetes topologies are not ordered.
    ordered: bool = False
    started_at: datetime | None = None
    ended_at: datetime | None = None
    end_state: str | None = None
    # the job's history, carried from attempt to attempt: has restarting helped so far (restarts.py)
    failures: list[PastFailure] = Field(default_factory=list)
    last_checkpoint_at: datetime | None = None
    # Wall time after which the ended attempt's look-back hints and rank placements go (the
    # lateness bound from its end); None once they went, or while the attempt runs. Evidence
    # routed through a node's logs can reach the job after the scheduler's end line, and the
    # window it opens needs them (a busy rank's bar, the rank -> node map of a "[rank22]" error).
    forget_after: datetime | None = None


class RankPlace(BaseModel):
    """Where one rank of a job runs, from NCCL's init line (``nccl.rank_placement``)."""

    model_config = ConfigDict(extra="forbid")

    node: str
    gpu: str | None = None  # PCI id as the kernel's Xid lines name it (0000:21:00)
    nranks: int
    time: datetime
    cuda_dev: int | None = None
    rank: int | None = None  # the rank this line was about (a neighbour's, when inferred)
    task: int | None = None  # srun's --label task id on that line, if any
    inferred: bool = False  # from a neighbouring rank (see infer_place), not the rank's own line


RANKS_PER_BLOCK = 64


class RankBlock(BaseModel):
    """The placements of one block of ``RANKS_PER_BLOCK`` consecutive ranks of a job: one table
    entry, so a job start's burst of init lines (a batch of them per read of the raw logs) rewrites
    a few blocks rather than one entry per rank, and the entry stays small for a 4,000-rank job."""

    model_config = ConfigDict(extra="forbid")

    places: dict[int, RankPlace] = Field(default_factory=dict)


def placement_of(signal: Signal) -> RankPlace | None:
    """The placement an ``nccl.rank_placement`` signal states (its node is the NCCL prefix's host)."""
    nranks = signal.attrs.get("nranks")
    if signal.rule != RANK_PLACEMENT_RULE or signal.rank is None or signal.node is None:
        return None
    if not isinstance(nranks, int):
        return None
    bus = signal.attrs.get("bus_id")
    dev = signal.attrs.get("cuda_dev")
    return RankPlace(
        node=signal.node,
        gpu=nccl_bus_to_pci(bus) if isinstance(bus, str) else None,
        nranks=nranks,
        time=signal.event_time,
        cuda_dev=dev if isinstance(dev, int) else None,
        rank=signal.rank,
        task=task if isinstance(task := signal.attrs.get("task"), int) else None,
    )


def placement_from(placement: RankPlacement) -> RankPlace:
    """The placement a compact ``RankPlacement`` states: the same as its signal's (``placement_of``)."""
    return RankPlace(
        node=placement.node,
        gpu=nccl_bus_to_pci(placement.bus_id) if placement.bus_id is not None else None,
        nranks=placement.nranks,
        time=placement.event_time,
        cuda_dev=placement.cuda_dev,
        rank=placement.rank,
        task=placement.task,
    )


MAX_LOCAL_RANKS = 16


def infer_place(rank: int, get: Callable[[int], RankPlace | None]) -> RankPlace | None:
    """The rank's own placement, else one implied by a higher rank of the same node.

    NCCL at INFO prints every rank's init line, but shippers sample, rotate and drop. Launchers
    (srun's block distribution, torchrun's node_rank * nproc + local_rank) give each node a
    contiguous block of ranks with local rank == cudaDev, so rank r' on cudaDev d means ranks
    r'-d .. r' share its node. Only a higher rank can vouch: a lower one does not say where its block
    ends. Where each rank sees only its own GPU (CUDA_VISIBLE_DEVICES per rank, cudaDev 0 for all)
    nothing is implied, which is the safe answer."""
    own = get(rank)
    if own is not None:
        return own
    for higher in range(rank + 1, rank + MAX_LOCAL_RANKS):
        p = get(higher)
        if p is not None and p.cuda_dev is not None and higher - p.cuda_dev <= rank:
            return p.model_copy(
                update={"gpu": None, "cuda_dev": p.cuda_dev - (higher - rank), "inferred": True}
            )
    return None


def placements(signals: list[Signal]) -> dict[int, RankPlace]:
    """rank -> placement over a finished set of signals (``sickbay diagnose``), world communicator first."""
    out: dict[int, RankPlace] = {}
    for s in signals:
        new = placement_of(s)
        if new is not None and s.rank is not None and newer_placement(out.get(s.rank), new):
            out[s.rank] = new
    return out


# A placement from a smaller communicator (a tensor-parallel group's "rank 3 of 8") must not replace
# the world's; a later one of any size does once this much newer (the job was restarted elsewhere).
PLACEMENT_STALE_S = 600.0


def newer_placement(old: RankPlace | None, new: RankPlace) -> bool:
    if old is None or new.nranks >= old.nranks:
        return True
    return (new.time - old.time).total_seconds() > PLACEMENT_STALE_S


def nccl_bus_to_pci(bus_id: str) -> str | None:
    """NCCL prints a busId as the PCI id's hex digits run together (``0000:21:00.0`` -> ``21000``,
    ``0000:00:06.0`` -> ``60``); back to the ``domain:bus:device`` form the kernel's Xid lines use."""
    try:
        v = int(bus_id, 16)
    except ValueError:
        return None
    return f"{v >> 20:04x}:{(v >> 12) & 0xFF:02x}:{(v >> 4) & 0xFF:02x}"


class RuleTally(BaseModel):
    """Every signal of one rule in a window: counts and where, plus a few samples."""

    model_config = ConfigDict(extra="forbid")

    count: int = 0
    nodes: list[str] = Field(default_factory=list)
    ranks: list[int] = Field(default_factory=list)
    first_seen: datetime | None = None
    samples: list[Signal] = Field(default_factory=list)
    # rank -> the host that logged it first: where each node ships its own pods' or ranks' logs,
    # the ranks a node reported show which block of ranks it runs (attribution._reported_blocks)
    rank_nodes: dict[int, str] = Field(default_factory=dict)


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
    provisional: bool = False  # the last emitted revision was a cascade-only verdict inside the grace
    # The revisions emitted and not yet known to be on the broker, whole (one, mostly; a take can
    # emit two). The window is on the changelog before they are sent, so a worker that takes the job
    # over after a crash between the two sends them again, instead of deciding the window anew and
    # giving a revision number a second verdict (``CorrelateStage.send_outbox``).
    unsent: list[Incident] = Field(default_factory=list)


MAX_UNSENT = 8  # a streaming take lets go of its revisions at its end; only a caller outside one piles up


def with_unsent(window: IncidentWindow, incident: Incident) -> list[Incident]:
    """The window's unsent revisions with ``incident`` added (the oldest dropped past ``MAX_UNSENT``)."""
    return [*window.unsent[-(MAX_UNSENT - 1) :], incident]


def sent_upto(window: IncidentWindow, revision: int) -> IncidentWindow:
    """The window without the unsent revisions up to ``revision`` (the broker has them); the same
    window when it holds none of them."""
    kept = [i for i in window.unsent if i.revision > revision]
    if len(kept) == len(window.unsent):
        return window
    return window.model_copy(update={"unsent": kept})
