"""``sickbay collect file`` / ``collect files``: put lines from files (or stdin) on the raw-logs topic.

A line that already is a shipper record (a JSON object, as Fluent Bit or Vector
write them) is forwarded byte for byte: the raw topic keeps what shippers write.
(``collect files`` forwards it only when it reads as a shipper shape; any other
line that starts with ``{``, such as HF Trainer's ``{'loss': ...}``, is a plain line.)
A plain text line is wrapped in sickbay's own line record with the host, file,
line number and job it came from (or, with ``lines_per_record > 1``, several
consecutive lines in one :class:`~schemas.raw.SickbayLinesRecord`). The Kafka key
is the host.

:class:`FileCollector` (``collect files``) follows globs through rotation (rename +
create, copytruncate) and truncation and keeps an offsets file keyed by
device+inode with a fingerprint of each file's first bytes, so a restart neither
loses nor repeats lines. An offset only moves past a line once the producer has
delivered or spooled its record (:meth:`ReliableProducer.checkpoint`).
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import IO, Any, BinaryIO, Literal

from pydantic import BaseModel, ConfigDict, Field

from connectors.kafka import ReliableProducer
from connectors.lifecycle import StopFlag
from connectors.sources.spool import atomic_write
from schemas import codec
from schemas.base import utcnow
from schemas.collector import CollectorReport, Reach
from schemas.raw import SickbayLineRecord
from streams.extract.normalize import BadRecord, job_id_from_path, normalize_all

log = logging.getLogger("sickbay.collect.files")


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


# --- collect files: globs, rotation, truncation, offsets ------------------------------------------

FINGERPRINT_BYTES = 256
MAX_LINE_BYTES = 1 << 20
_READ_CHUNK = 1 << 20
_CRI_PARTIAL = re.compile(rb"^(\d{4}-\d\d-\d\dT\S+ (stdout|stderr) )([FP]) ?")
# Lines that need the per-line path: a JSON object (maybe a shipper record) or a CRI partial. The
# leading newline gives the regex a literal prefix to scan for (a bare ``^`` alternation is ~10x slower).
_SLOW_LINE = re.compile(rb'\n(?:[ \t]*\{[ \t]*"|\d{4}-\d\d-\d\dT\S+ (?:stdout|stderr) P )')
_SKIP_SUFFIXES = (".gz", ".xz", ".bz2", ".zst", ".zip")


class FileOffset(BaseModel):
    """Where reading stopped in one file (a line boundary), and how to recognise the file again."""

    model_config = ConfigDict(extra="forbid")

    path: str
    pos: int = Field(ge=0)
    line_no: int = Field(ge=0)
    fingerprint: str  # hex sha1 of the first fp_len bytes
    fp_len: int = Field(ge=0)


class OffsetsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    files: dict[str, FileOffset] = Field(default_factory=dict)  # "dev:inode" -> offset


class OffsetStore:
    """The offsets file: loaded once, replaced atomically on every save."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def load(self) -> dict[str, FileOffset]:
        if self.path is None or not self.path.exists():
            return {}
        try:
            return OffsetsFile.model_validate_json(self.path.read_bytes()).files
        except (OSError, ValueError) as exc:
            raise CollectError(
                f"offsets file {self.path} is unreadable ({exc}); move it away to start over"
            ) from exc

    def save(self, files: dict[str, FileOffset]) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, codec.dumps(OffsetsFile(files=files)))


class CollectError(RuntimeError):
    """A collector setting or state file that cannot be used."""


def _fingerprint(data: bytes) -> str:
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


@dataclass
class _File:
    """One open file (one inode) being followed."""

    key: str
    path: str
    fh: BinaryIO
    read_pos: int = 0  # bytes read so far
    line_no: int = 0  # lines read so far
    partial: bytes = b""
    skipping: bool = False  # inside an over-long line: drop bytes to the next newline
    head: bytes = b""  # the first FINGERPRINT_BYTES bytes (for the fingerprint)
    committed_pos: int = 0
    committed_line: int = 0
    marks: deque[tuple[int, int, int]] = field(default_factory=deque)  # (ticket, pos, line_no)
    rotated_at: float | None = None
    last_data: float = 0.0
    cri: dict[bytes, list[bytes]] = field(default_factory=dict)  # stream -> partial pieces
    cri_hold: tuple[int, int] | None = None  # (pos, line_no) before the first unfinished piece
    batch: list[str] = field(default_factory=list)
    batch_first: int = 0
    batch_bytes: int = 0
    batch_end: tuple[int, int] = (0, 0)
    lines_sent: int = 0
    state: str = "reading"

    def offset(self) -> FileOffset:
        return FileOffset(
            path=self.path,
            pos=self.committed_pos,
            line_no=self.committed_line,
            fingerprint=_fingerprint(self.head),
            fp_len=len(self.head),
        )


@dataclass
class FilesStats:
    lines: int = 0
    records: int = 0
    forwarded_json: int = 0
    skipped_empty: int = 0
    skipped_oversize: int = 0
    cri_joined: int = 0
    rotations: int = 0
    truncations: int = 0
    files_opened: int = 0


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


class FileCollector:
    """Follow files matched by paths or globs into the raw-logs topic.

    ``step()`` does one pass (rescan globs when due, read what is new, produce);
    ``run()`` loops until stopped. ``lines_per_record`` > 1 batches consecutive plain
    lines of a file into one record: per-record costs (JSON, librdkafka, the broker)
    are paid once per batch.
    """

    def __init__(
        self,
        producer: ReliableProducer,
        topic: str,
        patterns: list[str],
        *,
        host: str | None = None,
        job_id: str | None = None,
        offsets: Path | None = None,
        from_end: bool = False,
        lines_per_record: int = 1,
        max_record_bytes: int = 512 << 10,
        rescan_s: float = 1.0,
        rotate_grace_s: float = 2.0,
        checkpoint_s: float = 1.0,
    ) -> None:
        if not patterns:
            raise CollectError("no paths or globs to collect")
        if lines_per_record < 1:
            raise CollectError("lines_per_record must be at least 1")
        self.producer = producer
        self.topic = topic
        self.patterns = patterns
        self.host = host
        self.key = host.encode() if host else None
        self.job_id = job_id
        self.store = OffsetStore(offsets)
        self.from_end = from_end
        self.lines_per_record = lines_per_record
        self.max_record_bytes = max_record_bytes
        self.rescan_s = rescan_s
        self.rotate_grace_s = rotate_grace_s
        self.checkpoint_s = checkpoint_s
        self.stats = FilesStats()
        self.started = utcnow()
        self._saved = self.store.load()
        self._last_saved: dict[str, FileOffset] = {}
        self._files: dict[str, _File] = {}
        self._by_path: dict[str, str] = {}  # path -> key of the inode it names now
        self._unreadable: dict[str, str] = {}
        self._skipped: set[str] = set()
        self._unmatched: list[str] = []
        self._first_scan = True
        self._next_scan = 0.0
        self._next_checkpoint = time.monotonic() + checkpoint_s
        self._now_iso = utcnow()

    # -- discovery ----------------------------------------------------------------------------------

    def _expand(self) -> list[str]:
        found: list[str] = []
        self._unmatched = []
        for pattern in self.patterns:
            paths = sorted(glob.glob(pattern, recursive=True)) if _is_glob(pattern) else [pattern]
            paths = [p for p in paths if os.path.isfile(p)]
            if not paths:
                self._unmatched.append(pattern)
            for p in paths:
                if p.endswith(_SKIP_SUFFIXES):
                    self._skipped.add(p)
                    continue
                found.append(p)
        return found

    def rescan(self) -> None:
        """Open files that appeared, notice rotated ones (their name now points to another inode)."""
        now = time.monotonic()
        live: dict[str, str] = {}
        for path in self._expand():
            try:
                st = os.stat(path)
            except OSError:
                continue
            key = f"{st.st_dev}:{st.st_ino}"
            live[path] = key
            if key in self._files:
                self._files[key].path = path  # renamed into another matched name: same file
                continue
            self._open(path, key, st.st_size)
        for key, f in self._files.items():
            if f.rotated_at is None and live.get(f.path) != key:
                f.rotated_at = now  # renamed away or deleted: finish what was written, then close
                f.state = "rotated"
                self.stats.rotations += 1
        self._by_path = live
        if self._first_scan:
            self._first_scan = False
            self._saved = {}  # entries of files that are gone are not carried forward

    def _open(self, path: str, key: str, size: int) -> None:
        try:
            fh = open(path, "rb")  # noqa: SIM115 - kept open while the file is followed
        except OSError as exc:
            self._unreadable[path] = f"{type(exc).__name__}: {exc.strerror or exc}"
            return
        self._unreadable.pop(path, None)
        f = _File(key=key, path=path, fh=fh, last_data=time.monotonic())
        head = fh.read(FINGERPRINT_BYTES)
        saved = self._saved.get(key)
        start = 0
        line_no = 0
        if (
            saved is not None
            and saved.fp_len <= len(head)
            and _fingerprint(head[: saved.fp_len]) == saved.fingerprint
        ):
            if saved.pos <= size:
                start, line_no = saved.pos, saved.line_no
            else:
                self.stats.truncations += 1  # shrank while we were away: read it again from the top
        elif self._first_scan and self.from_end and size:
            fh.seek(max(0, size - (64 << 10)))
            tail = fh.read(size)
            start = size - len(tail) + tail.rfind(b"\n") + 1  # after the last whole line (0: none)
        f.head = head
        f.read_pos = f.committed_pos = start
        f.line_no = f.committed_line = line_no
        fh.seek(start)
        self._files[key] = f
        self.stats.files_opened += 1

    # -- reading ------------------------------------------------------------------------------------

    def step(self) -> int:
        """One pass over every file; returns how many lines were read."""
        now = time.monotonic()
        if now >= self._next_scan:
            self.rescan()
            self._next_scan = now + self.rescan_s
        self._now_iso = utcnow()
        lines = 0
        for key in list(self._files):
            f = self._files[key]
            if f.state == "closed":
                continue  # kept until its last records are acknowledged (see checkpoint)
            lines += self._read(f)
            if (
                f.rotated_at is not None
                and now - f.last_data >= self.rotate_grace_s
                and now - f.rotated_at >= self.rotate_grace_s
            ):
                self._close(f)
        self.producer.poll(0)
        if time.monotonic() >= self._next_checkpoint:
            self.checkpoint()
        return lines

    def _read(self, f: _File) -> int:
        try:
            size = os.fstat(f.fh.fileno()).st_size
        except OSError:
            return 0
        if size < f.read_pos:  # truncated in place (copytruncate, or `> file`)
            self._truncated(f)
        n = 0
        budget = 8  # chunks per file per pass, so one busy file cannot starve the others
        while budget:
            budget -= 1
            chunk = f.fh.read(_READ_CHUNK)
            if not chunk:
                break
            if len(f.head) < FINGERPRINT_BYTES:  # the file was short when opened: let it grow
                f.head = os.pread(f.fh.fileno(), FINGERPRINT_BYTES, 0)
            base = f.read_pos - len(f.partial)
            f.read_pos += len(chunk)
            f.last_data = time.monotonic()
            data = f.partial + chunk if f.partial else chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                f.partial = data
                if len(f.partial) > MAX_LINE_BYTES:
                    self._oversize(f)
                continue
            f.partial = data[cut + 1 :]
            if f.skipping:
                nl = data.find(b"\n")
                f.skipping = False
                f.line_no += 1
                base += nl + 1
                data = data[nl + 1 : cut + 1]
                if not data:
                    continue
                cut = len(data) - 1
            n += self._block(f, data[:cut], base)
            if len(f.partial) > MAX_LINE_BYTES:
                self._oversize(f)
        self._flush_batch(f)
        return n

    def _oversize(self, f: _File) -> None:
        """A line longer than 1 MiB is dropped (and counted): no record may exceed the broker's limit."""
        if not f.skipping:
            self.stats.skipped_oversize += 1
            log.warning("%s: line %d is over %d bytes: skipped", f.path, f.line_no + 1, MAX_LINE_BYTES)
        f.skipping = True
        f.partial = b""

    def _truncated(self, f: _File) -> None:
        log.info("%s was truncated: reading it again from the start", f.path)
        self.stats.truncations += 1
        self._flush_batch(f)
        f.fh.seek(0)
        f.read_pos = f.committed_pos = 0
        f.line_no = f.committed_line = 0
        f.partial = b""
        f.skipping = False
        f.cri.clear()
        f.cri_hold = None
        f.marks.clear()  # lines of the old content in flight do not move the new content's offset
        f.head = b""

    def _block(self, f: _File, block: bytes, base: int) -> int:
        """Complete lines (``block`` has no final newline; it starts at file offset ``base``): runs of
        plain lines take the batched path, lines that need a look of their own the per-line one."""
        if self.lines_per_record == 1 or b"\r" in block:
            return self._lines(f, block.split(b"\n"), base)
        n = 0
        at = 0  # start of the first line not handled yet
        for m in _SLOW_LINE.finditer(b"\n" + block):
            start = m.start()  # the match's newline is the one before the line: in `block` it starts here
            if f.cri:
                break  # an unfinished CRI line: everything after it goes line by line
            end = block.find(b"\n", m.start())
            end = len(block) if end < 0 else end
            if start > at:
                n += self._plain_block(f, block[at : start - 1], base + at)
            n += self._lines(f, [block[start:end]], base + start)
            at = end + 1
        if at <= len(block):
            rest = block[at:]
            if f.cri:
                n += self._lines(f, rest.split(b"\n"), base + at)
            else:
                n += self._plain_block(f, rest, base + at)
        return n

    def _plain_block(self, f: _File, block: bytes, base: int) -> int:
        """Batch a block of plain lines with per-line work only in C and comprehensions: one decode,
        one split, one slice per record. Same records and offsets as the per-line path."""
        self._flush_batch(f)
        raws = block.split(b"\n")
        texts = block.decode("utf-8", errors="replace").split("\n")  # a newline byte never decodes away
        ends = list(accumulate([len(r) + 1 for r in raws], initial=base))
        keep = [i for i, r in enumerate(raws) if r and not r.isspace()]
        first = f.line_no + 1  # line number of raws[0]
        step = self.lines_per_record
        j = 0
        while j < len(keep):
            idx = keep[j : j + step]
            size = ends[idx[-1] + 1] - ends[idx[0]]
            while size > self.max_record_bytes and len(idx) > 1:  # long lines: fewer per record
                idx = idx[: len(idx) // 2]
                size = ends[idx[-1] + 1] - ends[idx[0]]
            j += len(idx)
            rec = {
                "schema_version": 1,
                "lines": [texts[i] for i in idx],
                "host": self.host,
                "file": f.path,
                "line_no": first + idx[0],
                "time": self._now_iso,
                "job_id": self.job_id or job_id_from_path(f.path),
            }
            ticket = self.producer.send(self.topic, codec.dumps(rec), key=self.key)
            f.marks.append((ticket, ends[idx[-1] + 1], first + idx[-1]))
            self.stats.records += 1
        f.line_no += len(raws)
        self.stats.lines += len(keep)
        self.stats.skipped_empty += len(raws) - len(keep)
        f.lines_sent += len(keep)
        return len(keep)

    def _lines(self, f: _File, raws: list[bytes], base: int) -> int:
        pos = base
        n = 0
        for line in raws:
            pos += len(line) + 1
            f.line_no += 1
            raw = line[:-1] if line[-1:] == b"\r" else line
            if not raw or raw.isspace():
                self.stats.skipped_empty += 1
                continue
            head = raw[:1]
            if head.isdigit() and raw[10:11] == b"T":
                m = _CRI_PARTIAL.match(raw)
                if m is not None:
                    stream = m.group(2)
                    pieces = f.cri.get(stream)
                    if m.group(3) == b"P":
                        if not f.cri:  # offsets stay before the first piece until the line is whole
                            f.cri_hold = (pos - len(line) - 1, f.line_no - 1)
                        if pieces is None:
                            f.cri[stream] = [m.group(1) + b"F ", raw[m.end() :]]
                        else:
                            pieces.append(raw[m.end() :])
                        continue
                    if pieces is not None:
                        pieces.append(raw[m.end() :])
                        raw = b"".join(pieces)
                        del f.cri[stream]
                        self.stats.cri_joined += 1
            n += 1
            self._emit(f, raw, pos)
        return n

    def _emit(self, f: _File, raw: bytes, pos: int) -> None:
        mark = f.cri_hold or (pos, f.line_no)
        if not f.cri:
            f.cri_hold = None
        head = raw[:1]
        if head == b"{" or (head in (b" ", b"\t") and raw.lstrip()[:1] == b"{"):
            stripped = raw.strip()
            if stripped[1:].lstrip()[:1] != b'"':  # not a JSON object with keys: a log line
                self._plain(f, raw.decode("utf-8", errors="replace"), mark)
                return
            try:
                lines = normalize_all(stripped)
            except BadRecord:
                lines = []  # e.g. HF Trainer's {'loss': ...}: a log line that merely starts with a brace
            if lines:
                self._flush_batch(f)
                self._forward_json(f, stripped, lines[0].host, mark)
                return
        self._plain(f, raw.decode("utf-8", errors="replace"), mark)

    def _forward_json(self, f: _File, raw: bytes, host: str | None, mark: tuple[int, int]) -> None:
        """A shipper record in a file (read back from a shipper's own buffer) passes byte for byte."""
        host = host or self.host
        ticket = self.producer.send(self.topic, raw, key=host.encode() if host else None)
        f.marks.append((ticket, *mark))
        self.stats.lines += 1
        self.stats.records += 1
        self.stats.forwarded_json += 1
        f.lines_sent += 1

    def _plain(self, f: _File, text: str, mark: tuple[int, int]) -> None:
        self.stats.lines += 1
        f.lines_sent += 1
        if self.lines_per_record == 1:
            rec = {
                "schema_version": 1,
                "line": text,
                "host": self.host,
                "file": f.path,
                "line_no": f.line_no,
                "time": self._now_iso,
                "job_id": self.job_id or job_id_from_path(f.path),
            }
            ticket = self.producer.send(self.topic, codec.dumps(rec), key=self.key)
            f.marks.append((ticket, *mark))
            self.stats.records += 1
            return
        if not f.batch:
            f.batch_first = f.line_no
        f.batch.append(text)
        f.batch_bytes += len(text) + 4
        f.batch_end = mark
        if len(f.batch) >= self.lines_per_record or f.batch_bytes >= self.max_record_bytes:
            self._flush_batch(f)

    def _flush_batch(self, f: _File) -> None:
        if not f.batch:
            return
        pos, line_no = f.batch_end
        rec = {
            "schema_version": 1,
            "lines": f.batch,
            "host": self.host,
            "file": f.path,
            "line_no": f.batch_first,
            "time": self._now_iso,
            "job_id": self.job_id or job_id_from_path(f.path),
        }
        ticket = self.producer.send(self.topic, codec.dumps(rec), key=self.key)
        f.marks.append((ticket, pos, line_no))
        self.stats.records += 1
        f.batch = []
        f.batch_bytes = 0

    def _close(self, f: _File) -> None:
        """A rotated file went quiet: its last line, even without a newline, is complete now."""
        if f.partial and not f.skipping:
            self._lines(f, [f.partial], f.read_pos - len(f.partial))
            f.partial = b""
        for stream in list(f.cri):  # an unfinished CRI line will never end now: send what there is
            self._emit(f, b"".join(f.cri.pop(stream)), f.read_pos)
        self._flush_batch(f)
        f.fh.close()
        f.state = "closed"

    # -- offsets ------------------------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Advance offsets to lines delivered or spooled, then save them atomically."""
        done = self.producer.checkpoint()
        for f in self._files.values():
            while f.marks and f.marks[0][0] <= done:
                _, f.committed_pos, f.committed_line = f.marks.popleft()
        for key in [k for k, f in self._files.items() if f.state == "closed" and not f.marks]:
            del self._files[key]
        offsets = dict(self._saved)
        offsets.update({k: f.offset() for k, f in self._files.items()})
        if offsets != self._last_saved:
            self.store.save(offsets)
            self._last_saved = offsets
        self._next_checkpoint = time.monotonic() + self.checkpoint_s

    def run(
        self,
        should_stop: Callable[[], bool],
        *,
        poll_s: float = 0.1,
        stop_after_s: float | None = None,
        idle_exit_s: float | None = None,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        started = idle_since = time.monotonic()
        while not should_stop():
            n = self.step()
            now = time.monotonic()
            if on_tick is not None:
                on_tick()
            if stop_after_s is not None and now - started >= stop_after_s:
                break
            if n:
                idle_since = now
                continue
            if idle_exit_s is not None and now - idle_since >= idle_exit_s and self.producer.mode == "direct":
                break
            self.producer.poll(poll_s)

    def close(self, timeout_s: float = 30.0) -> int:
        """Send what is batched, flush (spooling what the broker cannot take), save offsets.
        Returns how many records are neither delivered nor spooled."""
        for f in self._files.values():
            self._flush_batch(f)
        left = self.producer.flush(timeout_s)
        self.checkpoint()
        for f in self._files.values():
            if not f.fh.closed:
                f.fh.close()
        return left

    # -- coverage -----------------------------------------------------------------------------------

    def report(self, *, final: bool = False) -> CollectorReport:
        reached: list[Reach] = []
        for f in self._files.values():
            try:
                size: int | None = os.fstat(f.fh.fileno()).st_size if not f.fh.closed else None
            except OSError:
                size = None
            reached.append(
                Reach(kind="file", target=f.path, ok=True, state=f.state, position=f.committed_pos, size=size)
            )
        for path, why in sorted(self._unreadable.items()):
            reached.append(Reach(kind="file", target=path, ok=False, state="unreadable", detail=why))
        for path in sorted(self._skipped):
            reached.append(Reach(kind="file", target=path, ok=False, state="skipped", detail="compressed"))
        prod = self.producer
        reachable = prod.mode == "direct" and not prod.broker_down
        reached.append(
            Reach(kind="broker", target=self.topic, ok=reachable, state=prod.mode, detail=prod.last_error)
        )
        spool = prod.spool
        if spool is not None:
            reached.append(
                Reach(kind="spool", target=str(spool.dir), ok=True, state=f"{spool.depth} entries")
            )
        st = self.stats
        return CollectorReport(
            collector="files",
            host=self.host,
            time=utcnow(),
            started=self.started,
            final=final,
            reached=reached,
            unmatched=list(self._unmatched),
            broker_reachable=reachable,
            producer_mode=prod.mode,
            spool_depth=spool.depth if spool else 0,
            spool_bytes=spool.size_bytes if spool else 0,
            counts={
                "lines": st.lines,
                "records": st.records,
                "forwarded_json": st.forwarded_json,
                "skipped_empty": st.skipped_empty,
                "skipped_oversize": st.skipped_oversize,
                "cri_joined": st.cri_joined,
                "rotations": st.rotations,
                "truncations": st.truncations,
                "files_opened": st.files_opened,
                "delivered": prod.delivered,
                "spooled": prod.spooled,
                "replayed": prod.replayed,
                "failed": prod.failed,
            },
        )
