"""Observe/act mode per scope, switchable at runtime.

Operators switch a scope (cluster, optionally narrowed to a partition and/or a
verdict category) through the API or ``sickbay modes set``; the change lands on the
compacted ``control.modes`` topic. Every worker must see every change — the
decide step for any job may need it — so each worker follows the whole topic from
the beginning with its own group-less consumer (Faust's GlobalTable is known to
miss updates with several workers: faust-streaming/faust#283).

Resolution: the most specific scope wins, then the newest change; with no change
for a scope the worker's configured default applies.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from schemas import codec
from schemas.actions import Mode, ModeChange
from schemas.incidents import Category

log = logging.getLogger("sickbay.modes")

ScopeKey = tuple[str, str | None, str | None]


class ModeRegistry:
    """The latest mode change per scope; thread-safe reads while a follower applies changes."""

    def __init__(self, default: Mode) -> None:
        self.default = default
        self._by_scope: dict[ScopeKey, ModeChange] = {}
        self._lock = threading.Lock()

    def apply(self, change: ModeChange) -> bool:
        """Keep the change if it is newer than what the scope has; True when it took effect."""
        scope = change.scope
        key: ScopeKey = (scope.cluster, scope.partition, scope.category.value if scope.category else None)
        with self._lock:
            current = self._by_scope.get(key)
            if current is not None and current.time > change.time:
                return False  # an older change replayed after a newer one
            self._by_scope[key] = change
            return True

    def resolve(self, cluster: str, partition: str | None, category: Category | None) -> tuple[Mode, str]:
        """The mode for a decision, and which scope set it (for the audit trail)."""
        cat = category.value if category else None
        candidates: list[ScopeKey] = []
        if partition and cat:
            candidates.append((cluster, partition, cat))
        if partition:
            candidates.append((cluster, partition, None))
        if cat:
            candidates.append((cluster, None, cat))
        candidates.append((cluster, None, None))
        with self._lock:
            for key in candidates:
                change = self._by_scope.get(key)
                if change is not None:
                    return change.mode, f"{key[0]}/{key[1] or '*'}/{key[2] or '*'} by {change.actor}"
        return self.default, "default"

    def snapshot(self) -> list[ModeChange]:
        with self._lock:
            return list(self._by_scope.values())


class ModeFollower:
    """Reads ``control.modes`` from offset 0 into a registry, on a daemon thread."""

    def __init__(
        self,
        registry: ModeRegistry,
        bootstrap: str,
        topic: str,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.registry = registry
        self.topic = topic
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "sickbay-modes-follower",  # required by the client; never committed or joined
                "enable.auto.commit": False,
                "enable.partition.eof": False,
            }
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sickbay-modes", daemon=True)
        self._on_error = on_error or (lambda msg: log.warning("modes: %s", msg))
        self.applied = 0

    def start(self) -> None:
        meta = self._consumer.list_topics(self.topic, timeout=10)
        parts = meta.topics[self.topic].partitions if self.topic in meta.topics else {0: None}
        self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in parts])
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._consumer.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self._on_error(str(err))
                continue
            value = msg.value()
            if value is None:
                continue  # a tombstone: the scope was cleared by compaction
            try:
                change = ModeChange.model_validate(codec.loads(value))
            except Exception as exc:  # a bad record must not stop mode changes behind it
                self._on_error(f"ignored unreadable mode change at offset {msg.offset()}: {exc}")
                continue
            if self.registry.apply(change):
                self.applied += 1
                log.info("mode %s for %s (by %s)", change.mode.value, change.scope.key(), change.actor)
