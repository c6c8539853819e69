"""Parsed copies of a Faust table's values, for the one stage that writes the table.

The table holds each value as its JSON bytes (``value_type=bytes``: the raw codec), which is what
its changelog carries; the stage works on pydantic models. Validating a job's incident window
(tens of KB) on every signal was the correlate step's largest cost, so the writer keeps the models
it last read or wrote: write-through, bounded (the oldest entry goes first), misses included. A
write serializes once: a table of dicts cost a dump and a load here, then a dump for the changelog
and another for the store. A rebalance must ``clear()`` the cache: a recovery then refills the
table behind the writer's back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from schemas import codec
from streams.faust_events import as_current, current
from streams.pipeline import key_str

M = TypeVar("M", bound=BaseModel)


def remember(cache: dict[str, Any], key: str, value: Any, bound: int) -> None:
    """Write-through entry; when full, the oldest entry goes (dicts keep insertion order)."""
    cache.pop(key, None)
    if len(cache) >= bound:
        cache.pop(next(iter(cache)))
    cache[key] = value


V = TypeVar("V")


class DeferredWrites(Generic[V]):
    """A batch's table writes, held back: inside ``around()`` each key keeps only its last value
    (``None``: delete), and ``write`` gets each key once on the way out. Only around the handling of
    events not yet acknowledged (one event, or one take of several): the writes land before their
    offsets can be committed, so a crash replays the whole batch. Nested blocks write with the
    outermost one. Each key is written under the Faust event it was held under
    (``faust_events``), so a batch of events from several partitions files each key in its own
    partition's store and changelog."""

    def __init__(self, write: Callable[[str, V | None], None]) -> None:
        self.write = write
        self.pending: dict[str, V | None] | None = None
        self.events: dict[str, Any] = {}

    def hold(self, key: str, value: V | None) -> bool:
        """Keep the write for the batch's end; ``False`` outside a batch (the caller writes now)."""
        if self.pending is None:
            return False
        self.pending[key] = value
        self.events[key] = current()
        return True

    @contextmanager
    def around(self) -> Iterator[None]:
        if self.pending is not None:
            yield
            return
        self.pending = {}
        try:
            yield
        finally:
            pending, self.pending = self.pending, None
            events, self.events = self.events, {}
            for key, value in pending.items():
                with as_current(events.get(key)):
                    self.write(key, value)


class TableCache(Generic[M]):
    def __init__(self, table: Any, model: type[M], bound: int) -> None:
        self.table = table
        self.model = model
        self.bound = bound
        self.parsed: dict[str, M | None] = {}
        self._held: DeferredWrites[M] = DeferredWrites(self._write)
        self._unacked: list[Awaitable[Any]] = []  # delivery of the changelog writes (``track_acks``)
        self._tracking = False

    def _write(self, key: str, value: M | None) -> None:
        if value is None:
            self.table.pop(key, None)
        else:
            self.table[key] = codec.dumps(value)

    def get(self, key: str) -> M | None:
        pending = self._held.pending
        if pending is not None and key in pending:
            return pending[key]
        if key in self.parsed:
            return self.parsed[key]
        raw = self.table.get(key)
        value = self.model.model_validate(codec.loads(raw)) if raw else None
        remember(self.parsed, key, value, self.bound)
        return value

    def put(self, key: str, value: M) -> None:
        if not self._held.hold(key, value):
            self._write(key, value)
        remember(self.parsed, key, value, self.bound)

    def drop(self, key: str) -> None:
        """Forget the key; a key the table does not hold writes nothing to the changelog."""
        if not self._held.hold(key, None):
            self._write(key, None)
        remember(self.parsed, key, None, self.bound)

    @property
    def deferring(self) -> bool:
        return self._held.pending is not None

    def deferred(self) -> AbstractContextManager[None]:
        """Inside, reads see every put and drop at once, and the table (its store and changelog) gets
        each key's last value once, on the way out: a batch of one job's signals rewrites the job's
        incident window once, not once per signal (``DeferredWrites``)."""
        return self._held.around()

    def clear(self) -> None:
        self.parsed.clear()

    def track_acks(self) -> None:
        """Keep the delivery future of each changelog record this table sends, so ``acked`` can wait
        for this table's writes alone. The producer's flush waits for every record in flight, every
        table's and topic's, and under load the busy route step keeps it waiting: a caller that must
        not act before one table's writes are on the broker is quicker with those writes' futures.
        Faust's public ``send_changelog``, which every write of the table goes through and which
        returns that future, is wrapped on this table only."""
        if self._tracking:
            return
        send = self.table.send_changelog

        def sending(*args: Any, **kwargs: Any) -> Any:
            future = send(*args, **kwargs)
            self._unacked.append(future)
            return future

        self.table.send_changelog = sending
        self._tracking = True

    async def acked(self) -> list[BaseException]:
        """Wait until every changelog record sent since the last call (or ``forget_acks``) is on the
        broker; the errors of those that failed."""
        pending, self._unacked = self._unacked, []
        results = await asyncio.gather(*pending, return_exceptions=True)
        return [r for r in results if isinstance(r, BaseException)]

    def forget_acks(self) -> None:
        """Stop keeping the writes sent so far (nobody waits for them)."""
        self._unacked.clear()

    def stored_items(self) -> list[tuple[str, Any]]:
        """Every (key, plain JSON value) in the table's active partitions, read from the store."""
        items = {key_str(k) or "": codec.loads(raw) for k, raw in list(self.table.items()) if raw}
        for key, value in (self._held.pending or {}).items():  # a timer may read between a batch's signals
            if value is None:
                items.pop(key, None)
            else:
                items[key] = codec.loads(codec.dumps(value))
        return list(items.items())
