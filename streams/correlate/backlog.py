"""Is the fleet's topology still in flight? The route step's check before it calls a fact unclaimed.

A node fact no job claims within a grace becomes the node's own incident (``release_unclaimed``):
the GPU that falls off the bus on an idle node must still be drained. The grace is wall-clock, so
on its own it cannot tell an idle node from a job whose allocation line is stuck behind a backlog:
on a worker that died with the line unread (its partitions wait out the session timeout for a new
owner), on an extract stage catching up after a broker loss, or on this worker's own inbox. Each
of those made one fault both its job's root and a second, node-level incident (the scale-out test,
2026-12-03 and 2026-12-04: ``node:dgx-v100-315`` beside its job's own incident).

The broker knows. Every few seconds, while facts wait, this probe notes the log-end offsets of the
partitions that carry job ↔ node assignments (raw.logs for the extract stage's group; signals.job
and topology.node for the worker's) — the *fence* — and asks whether each group has since committed
up to the fence of the previous look. A group that has not is behind: records that were already on
the broker seconds ago are unhandled, and any of them may be the assignment a waiting fact needs.
While that holds, the route step starts the grace again (``CorrelateStage.held_at``); the lateness
bound caps the wait, so a group that never catches up delays a node's own incident, never loses it.

A group's first commit on a partition is not awaited (a partition it never committed on is not
behind by this test): a worker's start is the ``resumed`` rule's case, not this one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka.admin import AdminClient

from connectors.kafka import admin
from connectors.lag import Partition, committed_offsets, end_offsets
from schemas.topics import extract_group
from streams.settings import Settings

Position = tuple[str, str, int]  # (group, topic, partition)


@dataclass(frozen=True)
class Watched:
    """A consumer group and the topics of the topology path it reads."""

    group: str
    topics: tuple[tuple[str, int], ...]  # (topic, partition count)

    def partitions(self) -> list[Partition]:
        return [(topic, p) for topic, count in self.topics for p in range(count)]


def behind(fence: Mapping[Position, int], committed: Mapping[Position, int]) -> list[Position]:
    """The positions whose group has committed on the partition, but not up to the fence."""
    return sorted(pos for pos, end in fence.items() if pos in committed and committed[pos] < end)


@dataclass
class BacklogProbe:
    """Compares each group's commits with the previous look's log ends (one admin client for the
    probe's life; its calls block, the caller runs them in a thread)."""

    bootstrap: str
    watched: Sequence[Watched]
    timeout_s: float = 5.0
    _fence: dict[Position, int] | None = None
    _admin: AdminClient | None = field(default=None, repr=False)

    def look(self) -> list[Position]:
        """One look: the positions behind the previous look's fence (none at the first look), and
        this look's log ends kept as the next fence. Raises what the admin client raises."""
        if self._admin is None:
            self._admin = admin(self.bootstrap)
        every = sorted({p for w in self.watched for p in w.partitions()})
        ends = end_offsets(self._admin, every, self.timeout_s)
        committed: dict[Position, int] = {}
        for w in self.watched:
            for (topic, p), offset in committed_offsets(
                self._admin, w.group, w.partitions(), self.timeout_s
            ).items():
                committed[(w.group, topic, p)] = offset
        late = behind(self._fence, committed) if self._fence is not None else []
        self._fence = {(w.group, t, p): ends[(t, p)] for w in self.watched for t, p in w.partitions()}
        return late

    def forget(self) -> None:
        """No fact waits: the next look starts a new fence (an old one says nothing about now)."""
        self._fence = None


def topology_path(settings: Settings) -> list[Watched]:
    """The groups and topics a job's allocation line crosses on its way to the route step: raw.logs
    (the batched extract stage's own group, or the worker's with the extract agent), then
    signals.job (the correlate step learns the assignment) and topology.node (the route step)."""
    cat = settings.topics
    raw = (cat.raw_logs.name, cat.raw_logs.partitions)
    worker = (
        (cat.signals_job.name, cat.signals_job.partitions),
        (cat.topology_node.name, cat.topology_node.partitions),
    )
    if settings.extract_stage == "batched":
        return [Watched(extract_group(settings.app_id), (raw,)), Watched(settings.app_id, worker)]
    return [Watched(settings.app_id, (raw, *worker))]
