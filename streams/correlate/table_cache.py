"""Parsed copies of a Faust table's values, for the one stage that writes the table.

A table holds plain dicts (what its changelog carries); the stage works on pydantic models.
Validating a job's incident window (tens of KB) from its dict on every signal was the correlate
step's largest cost, so the writer keeps the models it last read or wrote: write-through, bounded
(the oldest entry goes first), misses included. A rebalance must ``clear()`` it: a recovery then
refills the table behind the writer's back.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from schemas import codec

M = TypeVar("M", bound=BaseModel)


def remember(cache: dict[str, Any], key: str, value: Any, bound: int) -> None:
    """Write-through entry; when full, the oldest entry goes (dicts keep insertion order)."""
    cache.pop(key, None)
    if len(cache) >= bound:
        cache.pop(next(iter(cache)))
    cache[key] = value


def as_table_value(model: BaseModel) -> Any:
    """The plain JSON value a table stores for a model (what its changelog carries)."""
    return codec.loads(codec.dumps(model))


class TableCache(Generic[M]):
    def __init__(self, table: Any, model: type[M], bound: int) -> None:
        self.table = table
        self.model = model
        self.bound = bound
        self.parsed: dict[str, M | None] = {}

    def get(self, key: str) -> M | None:
        if key in self.parsed:
            return self.parsed[key]
        raw = self.table.get(key)
        value = self.model.model_validate(raw) if raw else None
        remember(self.parsed, key, value, self.bound)
        return value

    def put(self, key: str, value: M) -> None:
        self.table[key] = as_table_value(value)
        remember(self.parsed, key, value, self.bound)

    def drop(self, key: str) -> None:
        self.table.pop(key, None)
        remember(self.parsed, key, None, self.bound)

    def clear(self) -> None:
        self.parsed.clear()
