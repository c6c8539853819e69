"""A local, append-only spool for records the broker could not take (yet).

When Kafka is unreachable or a delivery fails, a collector must neither block its
sources forever nor drop lines. It appends them here, in order, and replays them
when the broker answers again. Segments are plain files named by sequence number
(``0000000000000001.spool``); each entry is framed as::

    u32 length | u32 crc32(payload) | payload
    payload = u16 len(topic) | topic | i32 len(key) (-1: no key) | key | value

A torn tail (a crash in the middle of an append) fails the length or CRC check and
is cut off when the spool is opened. What has been replayed *and* acknowledged by
the broker is recorded in ``cursor.json`` (written atomically); segments wholly
before the cursor are deleted. Delivery is exactly-once while the process lives;
across a crash, entries acknowledged after the last cursor write are sent again.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from schemas import codec

_HEAD = struct.Struct(">II")
_TOPIC = struct.Struct(">H")
_KEY = struct.Struct(">i")
SUFFIX = ".spool"
CURSOR = "cursor.json"


class SpoolError(RuntimeError):
    """The spool directory cannot be used (not writable, or a segment is unreadable)."""


@dataclass(frozen=True, order=True)
class SpoolPos:
    """A place in the spool: byte ``offset`` in segment ``segment`` (the entry *after* it starts there)."""

    segment: int
    offset: int


@dataclass(frozen=True)
class SpoolEntry:
    topic: str
    key: bytes | None
    value: bytes
    end: SpoolPos  # the position just after this entry: ack it once the broker has it


def _encode(topic: str, key: bytes | None, value: bytes) -> bytes:
    t = topic.encode()
    payload = b"".join(
        (_TOPIC.pack(len(t)), t, _KEY.pack(-1 if key is None else len(key)), key or b"", value)
    )
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def _decode(payload: bytes) -> tuple[str, bytes | None, bytes]:
    (tlen,) = _TOPIC.unpack_from(payload, 0)
    at = _TOPIC.size
    topic = payload[at : at + tlen].decode()
    at += tlen
    (klen,) = _KEY.unpack_from(payload, at)
    at += _KEY.size
    key = None if klen < 0 else payload[at : at + klen]
    at += max(klen, 0)
    return topic, key, payload[at:]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so a reader sees the old or the new content, never a mix."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class Spool:
    """Append-only segment files; entries are read back in the order they were written."""

    def __init__(self, directory: Path | str, *, segment_bytes: int = 8 << 20) -> None:
        self.dir = Path(directory)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpoolError(f"cannot create spool directory {self.dir}: {exc}") from exc
        if not os.access(self.dir, os.W_OK):
            raise SpoolError(f"spool directory {self.dir} is not writable")
        self.segment_bytes = segment_bytes
        self._acked = self._read_cursor()
        self._segments = self._scan()
        self._fh: BinaryIO | None = None
        self._write_seg = self._segments[-1] if self._segments else max(self._acked.segment, 0) + 1
        self._write_off = self._repair_tail(self._write_seg) if self._segments else 0
        self.appended = 0
        self._pending_entries = self._count_pending()
        self._cursor_dirty = False

    # -- layout -------------------------------------------------------------------------------------

    def _path(self, segment: int) -> Path:
        return self.dir / f"{segment:016d}{SUFFIX}"

    def _scan(self) -> list[int]:
        segs = []
        for p in self.dir.glob(f"*{SUFFIX}"):
            try:
                segs.append(int(p.name[: -len(SUFFIX)]))
            except ValueError:
                continue
        return sorted(s for s in segs if s >= self._acked.segment)

    def _read_cursor(self) -> SpoolPos:
        path = self.dir / CURSOR
        if not path.exists():
            return SpoolPos(0, 0)
        try:
            obj = codec.loads(path.read_bytes())
            return SpoolPos(int(obj["segment"]), int(obj["offset"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SpoolError(f"unreadable spool cursor {path}: {exc}") from exc

    def _repair_tail(self, segment: int) -> int:
        """Cut a torn last entry off the newest segment; return its good length."""
        path = self._path(segment)
        good = 0
        for entry_end, _ in self._iter_segment(segment, 0):
            good = entry_end
        if path.stat().st_size != good:
            with open(path, "r+b") as fh:
                fh.truncate(good)
        return good

    def _iter_segment(self, segment: int, offset: int) -> Iterator[tuple[int, bytes]]:
        try:
            data = self._path(segment).read_bytes()
        except FileNotFoundError:
            return
        at = offset
        while at + _HEAD.size <= len(data):
            length, crc = _HEAD.unpack_from(data, at)
            start, end = at + _HEAD.size, at + _HEAD.size + length
            if end > len(data) or zlib.crc32(data[start:end]) != crc:
                return  # a torn tail: the entry was never fully written
            yield end, data[start:end]
            at = end

    def _count_pending(self) -> int:
        return sum(1 for _ in self.entries(self._acked))

    # -- writing --------------------------------------------------------------------------------------

    def append(self, topic: str, key: bytes | None, value: bytes) -> SpoolPos:
        """Append one entry (buffered: call :meth:`sync` before relying on it after a crash)."""
        if self._fh is None or self._write_off >= self.segment_bytes:
            self._roll()
        frame = _encode(topic, key, value)
        if self._fh is None:
            raise SpoolError(f"spool segment in {self.dir} is not open")
        self._fh.write(frame)
        self._write_off += len(frame)
        self.appended += 1
        self._pending_entries += 1
        return SpoolPos(self._write_seg, self._write_off)

    def _roll(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            self._write_seg += 1
            self._write_off = 0
        elif self._write_off >= self.segment_bytes:
            self._write_seg += 1
            self._write_off = 0
        self._fh = open(self._path(self._write_seg), "ab")  # noqa: SIM115 - kept open for appends
        if self._write_seg not in self._segments:
            self._segments.append(self._write_seg)
            _fsync_dir(self.dir)

    def sync(self) -> None:
        """Make every appended entry durable (flush + fsync)."""
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())

    # -- reading and acknowledging ----------------------------------------------------------------

    @property
    def acked(self) -> SpoolPos:
        return self._acked

    def entries(self, start: SpoolPos) -> Iterator[SpoolEntry]:
        """Entries from ``start`` to the current end, oldest first (flushes buffered appends first)."""
        if self._fh is not None:
            self._fh.flush()
        for seg in list(self._segments):
            if seg < start.segment:
                continue
            offset = start.offset if seg == start.segment else 0
            for end, payload in self._iter_segment(seg, offset):
                topic, key, value = _decode(payload)
                yield SpoolEntry(topic, key, value, SpoolPos(seg, end))

    def ack(self, pos: SpoolPos, count: int = 1) -> None:
        """Everything up to ``pos`` reached the broker; persisted by :meth:`commit`."""
        if pos > self._acked:
            self._acked = pos
            self._pending_entries = max(0, self._pending_entries - count)
            self._cursor_dirty = True

    def commit(self) -> None:
        """Persist the ack cursor and delete segments that are wholly acknowledged."""
        if not self._cursor_dirty:
            return
        self._cursor_dirty = False
        if self._pending_entries == 0 and self._acked >= SpoolPos(self._write_seg, self._write_off):
            self._reset()
            return
        atomic_write(
            self.dir / CURSOR, codec.dumps({"segment": self._acked.segment, "offset": self._acked.offset})
        )
        for seg in [s for s in self._segments if s < self._acked.segment]:
            self._path(seg).unlink(missing_ok=True)
            self._segments.remove(seg)

    def _reset(self) -> None:
        """All delivered: start over with the next segment number, so no old cursor can point into it."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        next_seg = self._write_seg + 1
        atomic_write(self.dir / CURSOR, codec.dumps({"segment": next_seg, "offset": 0}))
        for seg in self._segments:
            self._path(seg).unlink(missing_ok=True)
        self._segments = []
        self._acked = SpoolPos(next_seg, 0)
        self._write_seg, self._write_off = (
            next_seg - 1,
            self.segment_bytes,
        )  # the next append rolls to next_seg
        self._pending_entries = 0

    @property
    def depth(self) -> int:
        """Entries waiting to be replayed or acknowledged."""
        return self._pending_entries

    @property
    def size_bytes(self) -> int:
        total = 0
        for seg in self._segments:
            try:
                total += self._path(seg).stat().st_size
            except FileNotFoundError:
                continue
        return total

    def close(self) -> None:
        self.sync()
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self.commit()
