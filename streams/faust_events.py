"""Which Faust event a table write belongs to, when a stage handles several events at once.

Faust files a table write under the partition of the event being processed: the changelog
message goes to that partition and RocksDB keeps the key in that partition's store, both read
from ``faust.streams.current_event()``, which Faust sets while a stream iterates event by event.
A stage that takes a batch of events (``Stream.take_events``) from several partitions and writes
its tables once, at the batch's end, must say for each write which event it came from, or every
key would be filed under the batch's last event. ``as_current`` does that; ``current`` reads it.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from faust.streams import _current_event, current_event


def current() -> Any:
    """The event table writes are filed under now (``None`` outside a stream, e.g. in a timer)."""
    return current_event()


@contextmanager
def as_current(event: Any) -> Iterator[None]:
    """Table reads and writes inside belong to ``event``'s partition; ``None`` changes nothing."""
    if event is None:
        yield
        return
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)
