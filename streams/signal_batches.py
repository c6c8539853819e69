"""Packing job signals into ``SignalBatch`` messages, and unpacking them on the other side; the
same for the job ↔ node assignments of ``topology.node`` (``AssignmentBatch``).

The extract stage packs what one read of ``raw.logs`` found for the jobs of each partition of
``signals.job`` (``pack_partitions``; ``pack`` for one job); every reader
of ``signals.job`` takes a record apart with ``unpack`` and handles its signals one by one, in order,
as if each had come alone. Readers that never see a batch (a test feeding single signals) are
served by the same code. The correlate stage packs the assignments one of its batches learnt per
partition of ``topology.node`` (``pack_assignments``); the route step takes them apart with
``unpack_assignments``. Rank placements travel in their compact form, ``PlacementBatch``
(``pack_placements``): per partition of ``signals.node`` from the extract stage, per partition of
``signals.job`` from the route step (or from extract, where the record named the job).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, Literal, TypeVar

from schemas.signals import (
    ASSIGNMENT_BATCH_KIND,
    MAX_ASSIGNMENTS_PER_BATCH,
    MAX_PLACEMENTS_PER_BATCH,
    MAX_SIGNALS_PER_BATCH,
    PLACEMENT_BATCH_KIND,
    SIGNAL_BATCH_KIND,
    AssignmentBatch,
    JobNodeAssignment,
    PlacementBatch,
    RankPlacement,
    Signal,
    SignalBatch,
)
from streams.deadletters import dead_letter_event

log = logging.getLogger("sickbay.batches")


class BadBatch(ValueError):
    """A record that says it is a batch but does not hold a list of signals."""


def pack(job_id: str, signals: list[Signal]) -> list[Signal | SignalBatch]:
    """One job's signals, in order, as few messages as the batch bound allows (a lone signal is
    sent as itself)."""
    if len(signals) == 1:
        return [signals[0]]
    return [
        SignalBatch(job_id=job_id, signals=signals[i : i + MAX_SIGNALS_PER_BATCH])
        for i in range(0, len(signals), MAX_SIGNALS_PER_BATCH)
    ]


def pack_jobs(by_job: dict[bytes, list[Signal]]) -> Iterator[tuple[bytes, Signal | SignalBatch]]:
    """(key, message) for every job's signals held by ``record.hold_job_signals``, each job packed."""
    for key, signals in by_job.items():
        for value in pack(key.decode(), signals):
            yield key, value


T = TypeVar("T")


def _per_partition(
    groups: Iterable[tuple[bytes, list[T]]], partition_of: Callable[[bytes], int], bound: int
) -> Iterator[tuple[int, list[T]]]:
    """(partition, chunk): the items of the keys that share a partition, in the order given (each
    key's items stay in order), in chunks of at most ``bound``."""
    shared: dict[int, list[T]] = {}
    for key, items in groups:
        shared.setdefault(partition_of(key), []).extend(items)
    for partition, flat in shared.items():
        for i in range(0, len(flat), bound):
            yield partition, flat[i : i + bound]


def pack_partitions(
    by_job: dict[bytes, list[Signal]], partition_of: Callable[[bytes], int]
) -> Iterator[tuple[int, bytes, Signal | SignalBatch]]:
    """(partition, key, message) for every job's signals held by ``record.hold_job_signals``: the jobs
    that share a partition go out together, as few messages as the batch bound allows, each job's
    signals in order. A message of one job keeps the plain shape (a lone signal, or a batch naming its
    job); one of several jobs is a batch without a ``job_id`` whose key is one of its jobs. Either way
    the message goes to the partition its jobs' keys hash to, so every reader keyed by job sees it
    where it would have seen each signal alone."""
    for partition, chunk in _per_partition(by_job.items(), partition_of, MAX_SIGNALS_PER_BATCH):
        first = chunk[0].job_id or ""
        if len(chunk) == 1:
            yield partition, first.encode(), chunk[0]
        elif all(s.job_id == first for s in chunk):
            yield partition, first.encode(), SignalBatch(job_id=first, signals=chunk)
        else:
            yield partition, first.encode(), SignalBatch(job_id=None, signals=chunk)


def pack_assignments(
    assignments: list[JobNodeAssignment], partition_of: Callable[[bytes], int]
) -> Iterator[tuple[int, bytes, JobNodeAssignment | AssignmentBatch]]:
    """(partition, key, message) for assignments bound for ``topology.node``: the nodes that share a
    partition go out together, in the order given (so a node's release stays ahead of its next
    assignment), as few messages as the batch bound allows; a lone assignment is sent as itself. The
    key is the first assignment's node, the partition the one every node of the message hashes to."""
    groups = ((a.node.encode(), [a]) for a in assignments)
    for partition, chunk in _per_partition(groups, partition_of, MAX_ASSIGNMENTS_PER_BATCH):
        key = chunk[0].node.encode()
        yield partition, key, chunk[0] if len(chunk) == 1 else AssignmentBatch(assignments=chunk)


def node_of(signal: Signal) -> str:
    """The key a node fact travels under on ``signals.node`` (the extract stage's, the route step's)."""
    return signal.node or "_unknown"


def pack_node_partitions(
    by_node: dict[bytes, list[Signal]], partition_of: Callable[[bytes], int]
) -> Iterator[tuple[int, bytes, Signal | SignalBatch]]:
    """(partition, key, message) for node facts held per node key, like ``pack_partitions`` for jobs:
    the nodes that share a partition of ``signals.node`` go out together, each node's facts in order,
    a lone fact as itself, several as a ``SignalBatch`` keyed by node whose key is its first node."""
    for partition, chunk in _per_partition(by_node.items(), partition_of, MAX_SIGNALS_PER_BATCH):
        key = node_of(chunk[0]).encode()
        yield partition, key, chunk[0] if len(chunk) == 1 else SignalBatch(keyed_by="node", signals=chunk)


def pack_placements(
    by_key: dict[bytes, list[RankPlacement]],
    partition_of: Callable[[bytes], int],
    keyed_by: Literal["job", "node"],
    observed: datetime,
) -> Iterator[tuple[int, bytes, PlacementBatch]]:
    """(partition, key, message) for rank placements held per job key (``keyed_by`` ``job``, bound
    for ``signals.job``) or per node key (``node``, bound for ``signals.node``): the keys that share a
    partition go out together, in order, as few ``PlacementBatch`` messages as its bound allows (a
    lone placement too: it has no shape of its own on the wire). The key is the first placement's."""
    for partition, chunk in _per_partition(by_key.items(), partition_of, MAX_PLACEMENTS_PER_BATCH):
        first = chunk[0]
        key = (first.job_id or "" if keyed_by == "job" else first.node).encode()
        yield partition, key, PlacementBatch(keyed_by=keyed_by, observed_time=observed, placements=chunk)


def is_placement_batch(value: Any) -> bool:
    return _is_packed(value, PLACEMENT_BATCH_KIND)


def _is_packed(value: Any, kind: str) -> bool:
    return isinstance(value, dict) and value.get("kind") == kind


def is_assignment_batch(value: Any) -> bool:
    return _is_packed(value, ASSIGNMENT_BATCH_KIND)


def unpack_assignments(value: Any) -> list[Any]:
    """The plain assignments inside a ``topology.node`` value (JSON-decoded), each still to be validated;
    raises :class:`BadBatch` for a batch whose ``assignments`` is not a non-empty list."""
    return _items(value, ASSIGNMENT_BATCH_KIND, "assignments")


def _items(value: Any, kind: str, field: str) -> list[Any]:
    """A packed value's items (``field``), or the value itself when it is not of the packed ``kind``."""
    if not _is_packed(value, kind):
        return [value]
    items = value.get(field)
    if not isinstance(items, list) or not items:
        raise BadBatch(f"a {kind} must hold a non-empty list of {field}")
    return items


def is_batch(value: Any) -> bool:
    return _is_packed(value, SIGNAL_BATCH_KIND)


def unpack(value: Any) -> list[Any]:
    """The plain records inside a ``signals.job`` or ``signals.node`` value (JSON-decoded): a batch's
    signals, else the value itself. Each is still to be validated by the reader; raises
    :class:`BadBatch` for a batch whose ``signals`` is not a non-empty list."""
    return _items(value, SIGNAL_BATCH_KIND, "signals")


def _item_key(batch: dict[str, Any], item: Any, key: str) -> str:
    """The key one record of a batch is handled under: a node fact of a batch keyed by node under its
    node (``_unknown`` without one, as the extract stage keyed it: ``node_of``), a signal of a batch
    of several jobs under its job, anything else under the message's key."""
    if batch.get("keyed_by") == "node":
        node = item.get("node") if isinstance(item, dict) else None
        return node if isinstance(node, str) and node else "_unknown"
    if batch.get("job_id") is None and isinstance(item, dict) and isinstance(job := item.get("job_id"), str):
        return job
    return key


async def handle_each(
    event: Any,
    key: str,
    stage: str,
    dlq: Any,
    handle: Callable[[Any, str], Awaitable[None]],
) -> None:
    """Hand each plain record of a Faust event to ``handle`` with its key (the event's; in a batch of
    several jobs the signal's own job, in a batch of node facts the fact's own node), in order. A
    malformed batch is dead-lettered whole; inside a batch, a record whose handling raises is
    dead-lettered alone and the rest are handled. (The stateful agents wrap a take of events
    themselves: their table writes and verdicts wait for the take's end.)"""
    try:
        items = unpack(event.value)
    except BadBatch as exc:
        await dead_letter_event(dlq, stage, event, key, exc)
        return
    if len(items) == 1:
        await handle(items[0], key)
        return
    for item in items:
        item_key = _item_key(event.value, item, key)
        try:
            await handle(item, item_key)
        except Exception as exc:  # one bad record must not drop the rest of its batch
            log.exception("%s failed on a batched record", stage)
            await dead_letter_event(dlq, stage, event, item_key, exc, item=item)
