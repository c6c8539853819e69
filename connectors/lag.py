"""Consumer lag of every sickbay consumer group, as Prometheus series.

The sink measures its own lag from librdkafka statistics; the Faust worker and the
adapters do not expose theirs in one place. This collector asks the broker instead —
committed offsets per group against the log-end offsets — when ``/metrics`` is
scraped (at most every ``cache_s``), so one API process shows the lag of all stages:
``sickbay_group_lag{group, topic, partition}``. A broker that does not answer yields
``sickbay_group_lag_up 0`` rather than a failed scrape.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from schemas.topics import extract_group

log = logging.getLogger("sickbay.lag")


@dataclass(frozen=True)
class GroupTopics:
    group: str
    topics: tuple[str, ...]


def sickbay_groups(prefix: str, app_id: str, cat_topics: dict[str, str]) -> list[GroupTopics]:
    """The groups sickbay runs and what each consumes (names as the CLI and the worker set them)."""
    t = cat_topics
    return [
        GroupTopics(extract_group(app_id), (t["raw_logs"],)),  # the batched extract stage
        GroupTopics(app_id, (t["raw_logs"], t["signals_node"], t["signals_job"], t["incidents"])),
        GroupTopics(f"{prefix}-adapter-slurm", (t["actions"],)),
        GroupTopics(f"{prefix}-adapter-kubernetes", (t["actions"],)),
        GroupTopics(f"{prefix}-sink", (t["signals_node"], t["incidents"], t["actions"], t["audit"])),
    ]


Partition = tuple[str, int]  # (topic, partition)


def end_offsets(
    admin: AdminClient, partitions: Iterable[Partition], timeout_s: float
) -> dict[Partition, int]:
    """The log-end offset of each partition, in one request per leader broker."""
    asked = {TopicPartition(topic, p): OffsetSpec.latest() for topic, p in partitions}  # type: ignore[no-untyped-call]
    if not asked:
        return {}
    futures = admin.list_offsets(asked, request_timeout=timeout_s)
    return {(tp.topic, tp.partition): fut.result(timeout=timeout_s).offset for tp, fut in futures.items()}


def committed_offsets(
    admin: AdminClient, group: str, partitions: Iterable[Partition], timeout_s: float
) -> dict[Partition, int]:
    """The offset ``group`` last committed on each partition; a partition it never committed on is
    left out (librdkafka answers a negative offset for it)."""
    asked = [TopicPartition(topic, p) for topic, p in partitions]
    if not asked:
        return {}
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, asked)], request_timeout=timeout_s
    )
    answer = futures[group].result(timeout=timeout_s).topic_partitions or []
    return {(tp.topic, tp.partition): tp.offset for tp in answer if tp.offset >= 0}


class GroupLagCollector(Collector):
    def __init__(self, bootstrap: str, groups: Iterable[GroupTopics], cache_s: float = 10.0) -> None:
        self.bootstrap = bootstrap
        self.groups = list(groups)
        self.cache_s = cache_s
        self._lock = threading.Lock()
        self._at = 0.0
        self._cached: tuple[bool, list[tuple[str, str, int, int]]] = (False, [])
        self._admin: AdminClient | None = None

    def _client(self) -> AdminClient:
        """One admin client for the collector's life: librdkafka clients are costly to make, and
        their teardown chatter would land on stderr outside the JSON logs."""
        if self._admin is None:
            config: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "logger": log}
            self._admin = AdminClient(config)
        return self._admin

    def measure(self, timeout_s: float = 5.0) -> list[tuple[str, str, int, int]]:
        """(group, topic, partition, lag) for every partition a group has committed on; the log
        ends of them all in one request per leader broker (``end_offsets``)."""
        admin = self._client()
        rows: list[tuple[str, str, int, int]] = []
        for g in self.groups:
            futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g.group)])
            committed = futures[g.group].result(timeout=timeout_s).topic_partitions or []
            rows += [
                (g.group, tp.topic, tp.partition, tp.offset)
                for tp in committed
                if tp.topic in g.topics and tp.offset >= 0
            ]
        ends = end_offsets(admin, {(topic, p) for _, topic, p, _ in rows}, timeout_s)
        return [(group, topic, p, max(0, ends[(topic, p)] - offset)) for group, topic, p, offset in rows]

    def _current(self) -> tuple[bool, list[tuple[str, str, int, int]]]:
        with self._lock:
            if time.monotonic() - self._at >= self.cache_s:
                try:
                    self._cached = (True, self.measure())
                except Exception:
                    self._cached = (False, [])
                self._at = time.monotonic()
            return self._cached

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up, rows = self._current()
        lag = GaugeMetricFamily(
            "sickbay_group_lag",
            "Records behind the log end, per consumer group",
            labels=["group", "topic", "partition"],
        )
        for group, topic, partition, n in rows:
            lag.add_metric([group, topic, str(partition)], n)
        yield lag
        status = GaugeMetricFamily("sickbay_group_lag_up", "1 when the broker answered the last lag query")
        status.add_metric([], 1.0 if up else 0.0)
        yield status
