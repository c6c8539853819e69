"""``sickbay collect file``: put lines from files (or stdin) on the raw-logs topic.

A line that already is a shipper record (a JSON object, as Fluent Bit or Vector
write them) is forwarded byte for byte: the raw topic keeps what shippers write.
A plain text line is wrapped in sickbay's own line record with the host, file,
line number and job it came from. The Kafka key is the host.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from connectors.kafka import ReliableProducer
from connectors.lifecycle import StopFlag
from schemas import codec
from schemas.base import utcnow
from schemas.raw import SickbayLineRecord
from streams.extract.normalize import job_id_from_path


@dataclass
class CollectStats:
    lines: int = 0
    forwarded_json: int = 0
    wrapped_plain: int = 0
    skipped_empty: int = 0
    by_file: dict[str, int] = field(default_factory=dict)


def _host_of(record: Any) -> str | None:
    if not isinstance(record, dict):
        return None
    k8s = record.get("kubernetes")
    if isinstance(k8s, dict):
        for key in ("host", "pod_node_name"):
            if isinstance(k8s.get(key), str):
                return str(k8s[key])
    for key in ("hostname", "host"):
        if isinstance(record.get(key), str):
            return str(record[key])
    return None


class LineSink:
    """Turns lines into raw-logs records and produces them."""

    def __init__(self, producer: ReliableProducer, topic: str, host: str | None, job_id: str | None) -> None:
        self.producer = producer
        self.topic = topic
        self.host = host
        self.job_id = job_id
        self.stats = CollectStats()

    def line(self, raw: bytes, file: str | None, line_no: int) -> None:
        stripped = raw.rstrip(b"\r\n")
        if not stripped.strip():
            self.stats.skipped_empty += 1
            return
        self.stats.lines += 1
        if file:
            self.stats.by_file[file] = self.stats.by_file.get(file, 0) + 1
        if stripped.lstrip()[:1] == b"{":
            try:
                record = codec.loads(stripped)
            except codec.JSONDecodeError:
                record = None  # forwarded as is: the extractor dead-letters it with the reason
            host = _host_of(record) or self.host
            self.producer.produce(self.topic, stripped, key=host.encode() if host else None)
            self.stats.forwarded_json += 1
            return
        text = stripped.decode("utf-8", errors="replace")
        wrapped = SickbayLineRecord(
            line=text,
            host=self.host,
            file=file,
            line_no=line_no,
            time=utcnow(),
            job_id=self.job_id or job_id_from_path(file),
        )
        self.producer.produce(self.topic, codec.dumps(wrapped), key=self.host.encode() if self.host else None)
        self.stats.wrapped_plain += 1


def _read_lines(fh: IO[bytes]) -> Iterator[bytes]:
    yield from fh


def collect_once(sink: LineSink, paths: list[str]) -> None:
    for path in paths:
        if path == "-":
            for n, raw in enumerate(_read_lines(sys.stdin.buffer), 1):
                sink.line(raw, None, n)
            continue
        with open(path, "rb") as fh:
            for n, raw in enumerate(_read_lines(fh), 1):
                sink.line(raw, path, n)


@dataclass
class _Tail:
    path: Path
    fh: IO[bytes] | None = None
    inode: int | None = None
    pos: int = 0
    line_no: int = 0
    partial: bytes = b""


def follow(
    sink: LineSink,
    paths: list[str],
    *,
    from_start: bool = True,
    poll_s: float = 0.1,
    stop_after_s: float | None = None,
) -> None:
    """Tail files until SIGTERM/SIGINT: survives truncation (copytruncate) and rotation (new inode)."""
    stopping = StopFlag()
    tails = [_Tail(Path(p)) for p in paths]
    started = time.monotonic()
    first = True
    while not stopping:
        idle = True
        for tail in tails:
            try:
                st = os.stat(tail.path)
            except FileNotFoundError:
                continue
            if tail.fh is None or st.st_ino != tail.inode or st.st_size < tail.pos:
                if tail.fh is not None:
                    tail.fh.close()
                tail.fh = open(tail.path, "rb")  # noqa: SIM115 - kept open across polls
                tail.inode = st.st_ino
                tail.pos = 0 if (from_start or not first) else st.st_size
                tail.fh.seek(tail.pos)
                tail.partial = b""
            chunk = tail.fh.read(1 << 20)
            if chunk:
                idle = False
                tail.pos += len(chunk)
                data = tail.partial + chunk
                *lines, tail.partial = data.split(b"\n")
                for raw in lines:
                    tail.line_no += 1
                    sink.line(raw, str(tail.path), tail.line_no)
        first = False
        sink.producer.poll(0)
        if stop_after_s is not None and time.monotonic() - started > stop_after_s:
            break
        if idle:
            time.sleep(poll_s)
