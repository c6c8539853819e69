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

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from schemas import codec
from streams.pipeline import key_str

M = TypeVar("M", bound=BaseModel)


def remember(cache: dict[str, Any], key: str, value: Any, bound: int) -> None:
    """Write-through entry; when full, the oldest entry goes (dicts keep insertion order)."""
    cache.pop(key, None)
    if len(cache) >= bound:
        cache.pop(next(iter(cache)))
    cache[key] = value


class TableCache(Generic[M]):
    def __init__(self, table: Any, model: type[M], bound: int) -> None:
        self.table = table
        self.model = model
        self.bound = bound
        self.parsed: dict[str, M | None] = {}
        self._pending: dict[str, M | None] | None = None  # inside ``deferred``: key -> last value

    def get(self, key: str) -> M | None:
        if self._pending is not None and key in self._pending:
            return self._pending[key]
        if key in self.parsed:
            return self.parsed[key]
        raw = self.table.get(key)
        value = self.model.model_validate(codec.loads(raw)) if raw else None
        remember(self.parsed, key, value, self.bound)
        return value

    def put(self, key: str, value: M) -> None:
        if self._pending is not None:
            self._pending[key] = value
        else:
            self.table[key] = codec.dumps(value)
        remember(self.parsed, key, value, self.bound)

    def drop(self, key: str) -> None:
        """Forget the key; a key the table does not hold writes nothing to the changelog."""
        if self._pending is not None:
            self._pending[key] = None
        else:
            self.table.pop(key, None)
        remember(self.parsed, key, None, self.bound)

    @property
    def deferring(self) -> bool:
        return self._pending is not None

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Inside, reads see every put and drop at once, and the table (its store and changelog) gets
        each key's last value once, on the way out: a batch of one job's signals rewrites the job's
        incident window once, not once per signal. Only around the handling of one event: the
        writes land before its offset can be committed, so a crash replays the whole event."""
        if self._pending is not None:  # nested: the outer block writes
            yield
            return
        self._pending = {}
        try:
            yield
        finally:
            pending, self._pending = self._pending, None
            for key, value in pending.items():
                if value is None:
                    self.table.pop(key, None)
                else:
                    self.table[key] = codec.dumps(value)

    def clear(self) -> None:
        self.parsed.clear()

    def stored_items(self) -> list[tuple[str, Any]]:
        """Every (key, plain JSON value) in the table's active partitions, read from the store."""
        items = {key_str(k) or "": codec.loads(raw) for k, raw in list(self.table.items()) if raw}
        for key, value in (self._pending or {}).items():  # a timer may read between a batch's signals
            if value is None:
                items.pop(key, None)
            else:
                items[key] = codec.loads(codec.dumps(value))
        return list(items.items())
