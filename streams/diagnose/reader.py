"""Read log inputs for diagnose: files, folders (recursively), ``-`` for stdin; plain or gzip.

Whatever comes in, nothing crashes: binary junk, over-long lines, invalid
UTF-8, a truncated gzip stream or empty input are counted and reported in
:class:`ReadReport`, and every readable line is still read.
"""

from __future__ import annotations

import io
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MAX_LINE_BYTES = 1 << 20
CHUNK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class ReadReport:
    files: int = 0
    bytes: int = 0
    lines: int = 0
    skipped_long: int = 0
    skipped_binary: int = 0
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RawLine:
    source: str
    number: int  # 1-based line number within its source
    data: bytes


def expand(paths: list[str], report: ReadReport) -> Iterator[str]:
    """Files in the order given; a folder's files sorted, recursively; ``-`` is stdin."""
    for p in paths:
        if p == "-":
            yield p
            continue
        path = Path(p)
        if path.is_dir():
            for child in sorted(x for x in path.rglob("*") if x.is_file()):
                yield str(child)
        elif path.is_file():
            yield str(path)
        else:
            report.problems.append(f"{p}: no such file or folder")


def _open(source: str) -> io.BufferedReader:
    if source == "-":
        return sys.stdin.buffer  # type: ignore[return-value]
    return open(source, "rb")


def _gunzip(fh: io.BufferedReader, source: str, report: ReadReport) -> Iterator[bytes]:
    """Decompress as we go, so a truncated or corrupt stream still yields everything before the damage."""
    d = zlib.decompressobj(wbits=31)
    while block := fh.read(CHUNK // 4):
        while block:
            try:
                out = d.decompress(block)
            except zlib.error as exc:
                report.problems.append(f"{source}: stopped reading, corrupt gzip data ({exc})")
                return
            if out:
                yield out
            block = d.unused_data if d.eof else b""
            if d.eof and block:  # another gzip member follows (concatenated .gz files)
                d = zlib.decompressobj(wbits=31)
    if not d.eof:
        report.problems.append(f"{source}: truncated gzip stream (read what was there)")


def _chunks(fh: io.BufferedReader, source: str, report: ReadReport) -> Iterator[bytes]:
    """Large chunks of the (decompressed) content; a gzip stream is told by its magic bytes."""
    stream = (
        _gunzip(fh, source, report) if fh.peek(2)[:2] == GZIP_MAGIC else iter(lambda: fh.read(CHUNK), b"")
    )
    try:
        for chunk in stream:
            report.bytes += len(chunk)
            yield chunk
    except OSError as exc:
        report.problems.append(f"{source}: stopped reading, {type(exc).__name__}: {exc}")


def read_lines(paths: list[str], report: ReadReport) -> Iterator[RawLine]:
    for source in expand(paths, report):
        report.files += 1
        fh = _open(source)
        try:
            number = 0
            pending = b""
            skipping = False  # inside a line already known to be too long
            for chunk in _chunks(fh, source, report):
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                for raw in lines:
                    number += 1
                    if skipping:
                        skipping = False  # its end: the line was counted when it overflowed
                        continue
                    line = _admit(raw, report)
                    if line is not None:
                        yield RawLine(source, number, line)
                if len(pending) > MAX_LINE_BYTES:
                    if not skipping:
                        report.skipped_long += 1
                    skipping, pending = True, b""
            if pending and not skipping:
                number += 1
                line = _admit(pending, report)
                if line is not None:
                    yield RawLine(source, number, line)
            report.lines += number
        finally:
            if source != "-":
                fh.close()


def _admit(raw: bytes, report: ReadReport) -> bytes | None:
    if len(raw) > MAX_LINE_BYTES:
        report.skipped_long += 1
        return None
    if b"\x00" in raw:
        report.skipped_binary += 1
        return None
    return raw.rstrip(b"\r")
