"""Packing a job's signals into ``SignalBatch`` messages, and unpacking them on the other side.

The extract stage packs what one read of ``raw.logs`` found for each job (``pack``); every reader
of ``signals.job`` takes a record apart with ``unpack`` and handles its signals one by one, in order,
as if each had come alone. Readers that never see a batch (a test feeding single signals) are
served by the same code.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from schemas.signals import MAX_SIGNALS_PER_BATCH, SIGNAL_BATCH_KIND, Signal, SignalBatch
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


def is_batch(value: Any) -> bool:
    return isinstance(value, dict) and value.get("kind") == SIGNAL_BATCH_KIND


def unpack(value: Any) -> list[Any]:
    """The plain records inside a ``signals.job`` value (JSON-decoded): a batch's signals, else the
    value itself. Each is still to be validated by the reader; raises :class:`BadBatch` for a batch
    whose ``signals`` is not a non-empty list."""
    if not is_batch(value):
        return [value]
    items = value.get("signals")
    if not isinstance(items, list) or not items:
        raise BadBatch("a signal_batch must hold a non-empty list of signals")
    return items


async def handle_each(
    event: Any,
    key: str,
    stage: str,
    dlq: Any,
    handle: Callable[[Any], Awaitable[None]],
    around: AbstractContextManager[Any] | None = None,
) -> None:
    """Hand each plain record of a Faust event to ``handle``, in order. A malformed
    batch is dead-lettered whole; inside a batch, a signal whose handling raises is dead-lettered
    alone and the rest are handled. ``around`` wraps a batch (the correlate step defers its table
    writes to the batch's end)."""
    try:
        items = unpack(event.value)
    except BadBatch as exc:
        await dead_letter_event(dlq, stage, event, key, exc)
        return
    if len(items) == 1:
        await handle(items[0])
        return
    with around or nullcontext():
        for item in items:
            try:
                await handle(item)
            except Exception as exc:  # one bad signal must not drop the rest of its batch
                log.exception("%s failed on a batched signal", stage)
                await dead_letter_event(dlq, stage, event, key, exc, item=item)
