"""``sickbay collect loki``: job logs from a Loki that a site already feeds, by polling ``query_range``.

Polling with a saved cursor, not the ``/loki/api/v1/tail`` websocket: a poll can
resume exactly where the last delivered line ended after a restart, a websocket
tail cannot. The cursor is the last timestamp delivered plus the identities of
the lines at exactly that nanosecond (Loki's ``start`` is inclusive and several
lines may share one timestamp), saved only after Kafka acknowledged the lines.

Each stream's new lines leave as one Loki push body (``{"streams": [{"stream":
labels, "values": [[ns, line], ...]}]}``), the shape the extractor reads for
Alloy/Promtail, so stream labels keep host, pod, namespace, container and job
metadata (Loki's own ``job`` label names the scrape job and is not read as a
batch job). The Kafka key is the host label when the stream has one.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from connectors.sources.polling import poll_loop
from connectors.sources.prometheus import Fetch, http_get
from schemas import codec
from schemas.collector import Reach

log = logging.getLogger("sickbay.collect.loki")

HOST_LABELS = ("node_name", "nodename", "host", "hostname", "instance")
MAX_LINES_PER_RECORD = 500
MAX_BYTES_PER_RECORD = 512 * 1024
MAX_PROBLEMS = 20


class RecordSink(Protocol):
    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> None: ...


class LokiError(ValueError):
    """An answer that is not a log-stream result (an error, a metric query, broken JSON)."""


class LokiCursor(BaseModel):
    """Where the next poll starts; persisted as JSON next to the collector."""

    model_config = ConfigDict(extra="forbid")

    query: str
    last_ns: int = Field(ge=0)
    seen_at_last: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class Entry:
    ns: int
    labels: tuple[tuple[str, str], ...]
    line: str

    @property
    def ident(self) -> str:
        raw = f"{self.ns}\x00{self.labels!r}\x00{self.line}".encode()
        return hashlib.blake2b(raw, digest_size=12).hexdigest()


def parse_streams(raw: bytes) -> list[Entry]:
    """A ``query_range`` answer with ``resultType: streams``, flattened and sorted by time."""
    try:
        doc = codec.loads(raw)
    except codec.JSONDecodeError as exc:
        raise LokiError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("status") != "success":
        raise LokiError(f"query failed: {doc.get('error') if isinstance(doc, dict) else doc!r}")
    data = doc.get("data") or {}
    if data.get("resultType") != "streams":
        raise LokiError(
            f"resultType {data.get('resultType')!r}: the query must be a log selector, not a metric query"
        )
    out: list[Entry] = []
    for stream in data.get("result") or []:
        labels = tuple(sorted((str(k), str(v)) for k, v in (stream.get("stream") or {}).items()))
        for value in stream.get("values") or []:
            if not (isinstance(value, list) and len(value) >= 2 and isinstance(value[1], str)):
                raise LokiError(f"a value is not [timestamp, line]: {str(value)[:80]}")
            out.append(Entry(int(value[0]), labels, value[1]))
    out.sort(key=lambda e: e.ns)
    return out


def load_cursor(path: Path | None, query: str) -> LokiCursor | None:
    """The saved cursor for this query; a cursor for another query (or a broken file) is not used."""
    if path is None or not path.is_file():
        return None
    try:
        cur = LokiCursor.model_validate(codec.loads(path.read_bytes()))
    except (codec.JSONDecodeError, ValidationError) as exc:
        log.warning("ignoring unreadable cursor %s: %s", path, exc)
        return None
    return cur if cur.query == query else None


def save_cursor(path: Path, cursor: LokiCursor) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(codec.dumps(cursor))
    os.replace(tmp, path)  # atomic: a crash leaves the old cursor or the new one, never half


@dataclass
class LokiCoverage:
    url: str
    polls_ok: int = 0
    polls_failed: int = 0
    last_error: str | None = None
    lines: int = 0
    records: int = 0
    duplicates_skipped: int = 0
    streams: set[str] = field(default_factory=set)
    cursor_ns: int | None = None
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        log.warning("%s", text)
        self.problems = [*self.problems[-(MAX_PROBLEMS - 1) :], text]

    def reached(self) -> list[Reach]:
        return [
            Reach(
                kind="api",
                target=self.url,
                ok=self.polls_ok > 0 and self.last_error is None,
                state=f"{self.polls_ok} ok, {self.polls_failed} failed; {len(self.streams)} streams",
                detail=self.last_error,
                position=self.cursor_ns,
            )
        ]

    def counts(self) -> dict[str, int]:
        return {
            "lines": self.lines,
            "records": self.records,
            "duplicates_skipped": self.duplicates_skipped,
            "streams": len(self.streams),
            "problems": len(self.problems),
        }


class LokiCollector:
    def __init__(
        self,
        sink: RecordSink,
        topic: str,
        base_url: str,
        query: str,
        *,
        cursor_path: Path | None = None,
        lookback_s: float = 300.0,
        delay_s: float = 0.0,
        limit: int = 1000,
        tenant: str | None = None,
        timeout_s: float = 10.0,
        fetch: Fetch = http_get,
        checkpoint: Callable[[], bool] = lambda: True,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.sink = sink
        self.topic = topic
        self.base_url = base_url.rstrip("/")
        self.query = query
        self.cursor_path = cursor_path
        self.lookback_ns = int(lookback_s * 1e9)
        self.delay_ns = int(
            delay_s * 1e9
        )  # lines Loki ingests late (out-of-order) still fall in a later window
        self.limit = limit
        self.tenant = tenant
        self.timeout_s = timeout_s
        self.fetch: Fetch = (
            functools.partial(http_get, headers={"X-Scope-OrgID": tenant})
            if tenant and fetch is http_get
            else fetch
        )
        self.checkpoint = checkpoint
        self.clock_ns = clock_ns
        self.coverage = LokiCoverage(url=self.base_url)
        self.cursor = load_cursor(cursor_path, query)

    def _url(self, start_ns: int, end_ns: int) -> str:
        params = {
            "query": self.query,
            "start": str(start_ns),
            "end": str(end_ns),
            "limit": str(self.limit),
            "direction": "forward",
        }
        return f"{self.base_url}/loki/api/v1/query_range?" + urllib.parse.urlencode(params)

    def _emit(self, entries: list[Entry]) -> None:
        by_stream: dict[tuple[tuple[str, str], ...], list[Entry]] = {}
        for e in entries:
            by_stream.setdefault(e.labels, []).append(e)
        for labels, group in by_stream.items():
            label_map = dict(labels)
            self.coverage.streams.add(repr(labels))
            host = next((label_map[k] for k in HOST_LABELS if label_map.get(k)), None)
            chunk: list[list[str]] = []
            size = 0
            for e in group:
                chunk.append([str(e.ns), e.line])
                size += len(e.line) + 32
                if len(chunk) >= MAX_LINES_PER_RECORD or size >= MAX_BYTES_PER_RECORD:
                    self._produce(label_map, chunk, host)
                    chunk, size = [], 0
            if chunk:
                self._produce(label_map, chunk, host)

    def _produce(self, labels: dict[str, str], values: list[list[str]], host: str | None) -> None:
        body = {"streams": [{"stream": labels, "values": values}]}
        self.sink.produce(self.topic, codec.dumps(body), key=host.encode() if host else None)
        self.coverage.records += 1
        self.coverage.lines += len(values)

    def poll_once(self) -> int:
        """Fetch every line since the cursor (paging while pages are full); returns new lines."""
        end_ns = self.clock_ns() - self.delay_ns
        total = 0
        for _ in range(100):  # pages per poll; the rest waits for the next poll
            cur = self.cursor
            start_ns = cur.last_ns if cur else end_ns - self.lookback_ns
            try:
                entries = parse_streams(self.fetch(self._url(start_ns, end_ns), self.timeout_s))
            except (OSError, LokiError, ValueError) as exc:
                self.coverage.polls_failed += 1
                self.coverage.last_error = str(exc)
                self.coverage.problem(f"{self.base_url}: {exc}")
                return total
            self.coverage.polls_ok += 1
            self.coverage.last_error = None
            seen = set(cur.seen_at_last) if cur else set()
            fresh = [
                e
                for e in entries
                if not cur or e.ns > cur.last_ns or (e.ns == cur.last_ns and e.ident not in seen)
            ]
            self.coverage.duplicates_skipped += len(entries) - len(fresh)
            if fresh:
                self._emit(fresh)
                if not self.checkpoint():
                    self.coverage.problem(
                        "Kafka did not acknowledge every line: the cursor stays, the lines come again"
                    )
                    return total
                last = fresh[-1].ns
                at_last = [e.ident for e in entries if e.ns == last]
                keep = (seen if cur and cur.last_ns == last else set()) | set(at_last)
                self.cursor = LokiCursor(query=self.query, last_ns=last, seen_at_last=sorted(keep))
                self.coverage.cursor_ns = last
                if self.cursor_path is not None:
                    save_cursor(self.cursor_path, self.cursor)
                total += len(fresh)
            if len(entries) < self.limit:
                return total
            if not fresh:  # a full page, all at one already-seen nanosecond: step past it
                self.coverage.problem(f"more than {self.limit} lines at {start_ns} ns: raise --limit")
                self.cursor = LokiCursor(query=self.query, last_ns=start_ns + 1)
        return total

    def run(
        self,
        interval_s: float,
        stop: Callable[[], bool],
        *,
        on_tick: Callable[[], None] | None = None,
        stop_after_s: float | None = None,
    ) -> None:
        poll_loop(self.poll_once, interval_s, stop, on_tick=on_tick, stop_after_s=stop_after_s)
