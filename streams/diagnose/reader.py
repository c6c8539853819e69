"""Read log inputs for diagnose: files, folders (recursively), ``-`` for stdin; plain, gzip,
bzip2, xz or zstd (what logrotate's ``compresscmd`` and support bundles use), told by their magic
bytes.

Whatever comes in, nothing crashes: binary junk, over-long lines, invalid
UTF-8, a truncated or corrupt compressed stream or empty input are counted and reported in
:class:`ReadReport`, and every readable line is still read.
"""

from __future__ import annotations

import bz2
import io
import lzma
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zstandard

from streams.extract.carriers import clean_chunk

MAX_LINE_BYTES = 1 << 20
CHUNK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"
BZIP2_MAGIC = b"BZh"
XZ_MAGIC = b"\xfd7zXZ\x00"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


@dataclass
class ReadReport:
    files: int = 0
    bytes: int = 0
    lines: int = 0
    skipped_long: int = 0
    skipped_binary: int = 0
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Chunk:
    """Whole lines of one source: ``first`` is the 1-based number of the first line in ``data``."""

    source: str
    first: int
    data: bytes


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


# magic bytes -> (format name, a new streaming decompressor, the errors a corrupt stream raises)
_FORMATS: list[tuple[bytes, str, Callable[[], Any], tuple[type[Exception], ...]]] = [
    (GZIP_MAGIC, "gzip", lambda: zlib.decompressobj(wbits=31), (zlib.error,)),
    (BZIP2_MAGIC, "bzip2", bz2.BZ2Decompressor, (OSError, ValueError)),
    (XZ_MAGIC, "xz", lzma.LZMADecompressor, (lzma.LZMAError,)),
    (ZSTD_MAGIC, "zstd", lambda: zstandard.ZstdDecompressor().decompressobj(), (zstandard.ZstdError,)),
]


def _decompress(
    fh: io.BufferedReader,
    source: str,
    report: ReadReport,
    name: str,
    new: Callable[[], Any],
    errors: tuple[type[Exception], ...],
) -> Iterator[bytes]:
    """Decompress as we go, so a truncated or corrupt stream still yields everything before the damage."""
    d = new()
    while block := fh.read(CHUNK // 4):
        while block:
            try:
                out = d.decompress(block)
            except errors as exc:
                report.problems.append(f"{source}: stopped reading, corrupt {name} data ({exc})")
                return
            if out:
                yield out
            block = d.unused_data if d.eof else b""
            if d.eof and block:  # another member follows (concatenated files, pigz/pbzip2 output)
                d = new()
    if not d.eof:
        report.problems.append(f"{source}: truncated {name} stream (read what was there)")


def _chunks(fh: io.BufferedReader, source: str, report: ReadReport) -> Iterator[bytes]:
    """Large chunks of the (decompressed) content; a compressed stream is told by its magic bytes."""
    head = fh.peek(6)[:6]
    stream: Iterator[bytes] = next(
        (
            _decompress(fh, source, report, name, new, errors)
            for magic, name, new, errors in _FORMATS
            if head.startswith(magic)
        ),
        iter(lambda: fh.read(CHUNK), b""),
    )
    try:
        for chunk in stream:
            report.bytes += len(chunk)
            yield chunk
    except OSError as exc:
        report.problems.append(f"{source}: stopped reading, {type(exc).__name__}: {exc}")


def read_chunks(paths: list[str], report: ReadReport) -> Iterator[Chunk]:
    """Newline-aligned chunks of every source, for scanning many lines at once.

    A line over 1 MiB is replaced by an empty line (numbering stays right) and counted. CRLF line
    ends are read as LF and terminal colours are taken off (``carriers.clean_chunk``): a hard-wrapped
    paste is joined again and a coloured literal still found.
    """
    for source in expand(paths, report):
        report.files += 1
        fh = _open(source)
        try:
            number = 1  # the number of the first line of the next chunk
            pending = b""
            skipping = False  # inside a line already known to be too long
            for piece in _chunks(fh, source, report):
                if skipping:
                    nl = piece.find(b"\n")
                    if nl < 0:
                        continue
                    piece, skipping = b"\n" + piece[nl + 1 :], False  # noqa: PLW2901 - the rest of it
                data = pending + piece
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    pending = data
                else:
                    first_nl = data.find(b"\n")
                    if pending and first_nl > MAX_LINE_BYTES:  # the line carried over is too long
                        report.skipped_long += 1
                        data, cut = data[first_nl:], cut - first_nl
                    whole, pending = data[:cut], data[cut:]
                    yield Chunk(source, number, clean_chunk(whole))
                    number += whole.count(b"\n")
                if len(pending) > MAX_LINE_BYTES:
                    report.skipped_long += 1
                    skipping, pending = True, b""
            if skipping:
                number += 1
            if pending:
                yield Chunk(source, number, clean_chunk(pending))
                number += 1
            report.lines += number - 1
        finally:
            if source != "-":
                fh.close()


def read_lines(paths: list[str], report: ReadReport) -> Iterator[RawLine]:
    """Every line, one by one (for callers that want all of them; diagnose scans chunks)."""
    for chunk in read_chunks(paths, report):
        lines = chunk.data.split(b"\n")
        if chunk.data.endswith(b"\n"):
            lines.pop()
        for offset, raw in enumerate(lines):
            line = _admit(raw, report)
            if line is not None:
                yield RawLine(chunk.source, chunk.first + offset, line)


def _admit(raw: bytes, report: ReadReport) -> bytes | None:
    if len(raw) > MAX_LINE_BYTES:
        report.skipped_long += 1
        return None
    if raw.find(b"\x00") >= 0:  # find(): see extract.telemetry.looks_like_metric
        report.skipped_binary += 1
        return None
    return raw.rstrip(b"\r")
