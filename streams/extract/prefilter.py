"""Which lines of a large text can match a rule at all, found without a Python loop per line.

Every rule names literals, one of which must occur in a line for its pattern to possibly
match (:class:`~streams.extract.rules.Rule`). Over a file or a batch of records, most lines
contain none, so the work that scales with the input is one multi-literal search over big
byte chunks; Python only sees the few lines that contain a literal, and only those get
decoded and run through the full rule patterns.

Two interchangeable back ends, chosen at run time (both give exactly the same hits):

- ``hyperscan`` (PyPI ``hyperscan``, Intel's SIMD multi-pattern matcher): all literals in
  one database, one ``scan`` per chunk reporting every occurrence with its literal id.
  Measured here at 1.4-2.3 GB/s for 10-150 literals; pyahocorasick (0.04-0.07 GB/s, on
  decoded text), ahocorasick-rs (0.3-0.6) and google-re2 (0.2-0.6) were slower.
- ``re``: one trie-shaped pattern per first byte, so that each starts with a literal byte
  that ``re`` scans for quickly; the literal ids of a hit line are then tested one by one.
  About 25-40 MB/s with 300 literals; used when the hyperscan wheel is missing.

Line numbers need the newlines counted; NumPy counts them at memory speed (~10 GB/s) when
it is installed, ``bytes.count`` (~2 GB/s) otherwise. One ``Prefilter`` scans in one
thread at a time (it owns a hyperscan scratch space).

:meth:`Prefilter.extractor_for` then hands each hit line to an extractor over only the
rules its literals gate, which gives the same signals as the full catalog's.
"""

from __future__ import annotations

import gzip
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import compress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, cast

if TYPE_CHECKING:
    from streams.extract.extractor import Extractor
    from streams.extract.rules import Catalog, Rule

try:
    import hyperscan as _hs
except ImportError:  # pragma: no cover - depends on a wheel for the platform
    _hs = None  # type: ignore[assignment]

try:
    import numpy as _np
except ImportError:  # pragma: no cover - NumPy only makes newline counting faster
    _np = None  # type: ignore[assignment]

Backend = Literal["hyperscan", "re"]
DEFAULT_CHUNK = 4 << 20  # fits the L2/L3 caches: the scan and the newline count read it while it is hot
NL = 10
_GZIP_MAGIC = b"\x1f\x8b"


class Hit(NamedTuple):
    """A line that contains at least one literal."""

    number: int  # 0-based index of the line in the chunk, or its line number in a file scan (from 1)
    line: bytes  # without its newline (a ``\\r`` before it is kept)
    literals: tuple[int, ...]  # ids into ``Prefilter.literals`` of the literals in the line, ascending


def available_backends() -> list[Backend]:
    return ["hyperscan", "re"] if _hs is not None else ["re"]


def _trie_pattern(words: Sequence[bytes]) -> bytes:
    """One alternation shaped as a trie: ``re`` tries a shared prefix once, not once per word."""
    trie: dict[int, Any] = {}
    for word in words:
        node = trie
        for byte in word:
            node = node.setdefault(byte, {})
        node[-1] = {}  # end of a word

    def emit(node: dict[int, Any]) -> bytes:
        alts = [re.escape(bytes([b])) + emit(sub) for b, sub in sorted(node.items()) if b >= 0]
        if not alts:
            return b""
        body = alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"
        if -1 in node:  # a word ends here: whatever follows is optional
            body = (body if len(alts) > 1 else b"(?:" + body + b")") + b"?"
        return body

    return emit(trie)


class Prefilter:
    """A multi-literal matcher over byte chunks; see the module docstring."""

    def __init__(self, literals: Iterable[str], backend: Backend | None = None) -> None:
        self.literals: tuple[str, ...] = tuple(dict.fromkeys(literals))
        if not self.literals:
            raise ValueError("a prefilter needs at least one literal")
        for lit in self.literals:
            if not lit or "\n" in lit or "\r" in lit:
                raise ValueError(f"a literal must be non-empty and within one line: {lit!r}")
        self._blits = [lit.encode() for lit in self.literals]
        if backend is None:
            backend = "hyperscan" if _hs is not None else "re"
        if backend == "hyperscan" and _hs is None:
            raise RuntimeError("the hyperscan back end needs the 'hyperscan' package")
        self.backend: Backend = backend
        self.catalog: Catalog | None = None
        self.rules: tuple[Rule, ...] = ()
        self._rules_of: list[tuple[int, ...]] = [() for _ in self.literals]
        self._extractors: dict[tuple[int, ...], Extractor] = {}
        if backend == "hyperscan":
            db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
            db.compile(
                expressions=self._blits,
                ids=list(range(len(self._blits))),
                elements=len(self._blits),
                flags=0,
                literal=True,
            )
            self._db = db
            self._scratch = _hs.Scratch(db)
        else:
            by_first: dict[int, list[bytes]] = {}
            for lit_bytes in self._blits:
                by_first.setdefault(lit_bytes[0], []).append(lit_bytes)
            self._rxs = [re.compile(_trie_pattern(sorted(group))) for group in by_first.values()]

    @classmethod
    def from_catalog(cls, catalog: Catalog, backend: Backend | None = None) -> Prefilter:
        """All literals of the catalog, remembering which rules each one gates."""
        pf = cls((lit for rule in catalog.rules for lit in rule.literals), backend)
        pf.catalog = catalog
        pf.rules = tuple(catalog.rules)
        index = {lit: i for i, lit in enumerate(pf.literals)}
        rules_of: list[list[int]] = [[] for _ in pf.literals]
        for r, rule in enumerate(catalog.rules):
            for lit in rule.literals:
                rules_of[index[lit]].append(r)
        pf._rules_of = [tuple(rs) for rs in rules_of]
        return pf

    def rules_for(self, literal_ids: Sequence[int]) -> list[Rule]:
        """The catalog's rules, in catalog order, that one of these literals gates."""
        if len(literal_ids) == 1:
            return [self.rules[r] for r in self._rules_of[literal_ids[0]]]
        return [self.rules[r] for r in sorted({r for i in literal_ids for r in self._rules_of[i]})]

    def extractor_for(self, literal_ids: tuple[int, ...]) -> Extractor:
        """An extractor over only the rules these literals gate (one per literal set, cached).

        For a line whose literals are exactly ``literal_ids`` (a :class:`Hit`'s), it returns
        the same signals as the full catalog's extractor: the rules it leaves out are those
        ``Catalog.candidates`` would drop for want of a literal. It spares ``extract`` that
        test of every rule's literals, which grows with the catalog.
        """
        extractor = self._extractors.get(literal_ids)
        if extractor is None:
            from streams.extract.extractor import Extractor
            from streams.extract.rules import Catalog

            if self.catalog is None:
                raise RuntimeError("extractor_for needs a prefilter made by from_catalog")
            extractor = Extractor(Catalog(self.rules_for(literal_ids), self.catalog.lookups))
            self._extractors[literal_ids] = extractor
        return extractor

    # ---------------------------------------------------------------------------------------
    # One chunk
    # ---------------------------------------------------------------------------------------

    def _lines(self, buf: bytes | bytearray, n: int) -> list[tuple[int, int, tuple[int, ...]]]:
        """(start, end, literal ids) of each line of ``buf[:n]`` holding a literal, in order."""
        if self.backend == "hyperscan":
            ends: list[tuple[int, int]] = []
            add = ends.append

            def on_match(lit: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
                add((end - 1, lit))

            # hyperscan reads any buffer; its stub says str | bytes
            self._db.scan(
                cast(bytes, memoryview(buf)[:n]), match_event_handler=on_match, scratch=self._scratch
            )
            ends.sort()
            return self._group(buf, n, ends)
        # One search per first byte: each pattern then starts with a literal byte, which ``re``
        # finds with its fast literal scan; an alternation of everything would not.
        offsets = sorted({(m.start(), -1) for rx in self._rxs for m in rx.finditer(buf, 0, n)})
        return self._group(buf, n, offsets)

    def _group(
        self, buf: bytes | bytearray, n: int, offsets: list[tuple[int, int]]
    ) -> list[tuple[int, int, tuple[int, ...]]]:
        """Lines holding these (offset inside a literal, literal id or -1: unknown) matches."""
        out: list[tuple[int, int, tuple[int, ...]]] = []
        line_end = -1
        ids: list[int] = []
        start = 0
        for offset, lit in offsets:
            if offset < line_end:  # another literal in the same line
                if lit not in ids:
                    ids.append(lit)
                continue
            if ids:
                out.append((start, line_end, self._ids(buf, start, line_end, ids)))
            start = buf.rfind(b"\n", 0, offset) + 1
            line_end = buf.find(b"\n", offset, n)
            if line_end < 0:
                line_end = n
            ids = [lit]
        if ids:
            out.append((start, line_end, self._ids(buf, start, line_end, ids)))
        return out

    def _ids(self, buf: bytes | bytearray, start: int, end: int, ids: list[int]) -> tuple[int, ...]:
        if -1 not in ids:
            return tuple(sorted(ids))
        line = buf[start:end]  # the re back end only knows a literal is there: name them all
        return tuple(compress(range(len(self._blits)), map(line.__contains__, self._blits)))

    def chunk_hits(
        self, buf: bytes | bytearray, n: int | None = None, first: int = 0, scratch: Any = None
    ) -> tuple[list[Hit], int]:
        """The hits of ``buf[:n]`` numbered from ``first``, and how many newlines it holds.

        ``scratch``: a reusable NumPy bool array of at least ``n`` items (saves an allocation).
        """
        n = len(buf) if n is None else n
        lines = self._lines(buf, n)
        hits: list[Hit] = []
        add = hits.append
        index, pos = first, 0
        if _np is not None:
            eq = (scratch if scratch is not None and len(scratch) >= n else _np.empty(n, dtype=bool))[:n]
            _np.equal(_np.frombuffer(buf, dtype=_np.uint8, count=n), NL, out=eq)
            nonzero = _np.count_nonzero
            for start, end, ids in lines:
                index += int(nonzero(eq[pos:start]))
                pos = start
                add(Hit(index, bytes(buf[start:end]), ids))
            return hits, int(nonzero(eq))
        count = buf.count
        for start, end, ids in lines:
            index += count(b"\n", pos, start)
            pos = start
            add(Hit(index, bytes(buf[start:end]), ids))
        return hits, count(b"\n", 0, n)

    def wrapped_lines(self, buf: bytes, ends: list[int] | None = None) -> list[int]:
        """Indices (from 0, in ``buf``) of the lines a literal runs on from into the next line once
        the newline between them is taken out: a terminal or a pasted log hard-wrapped the line it is
        in ("... [Rank 2] Watchdog caught " / "collective operation timeout: ..."). One more scan of
        the chunk with its newlines removed; a literal wholly inside one line is not reported (the
        usual scan has it). ``ends``: ``newline_offsets(buf)``, when the caller has them."""
        if b"\n" not in buf:
            return []
        joined = buf.replace(b"\n", b"")
        ends = newline_offsets(buf) if ends is None else ends
        # where the newline after line k stood in ``joined``
        if _np is not None:
            cuts: list[int] = (_np.asarray(ends, dtype=_np.int64) - _np.arange(len(ends))).tolist()
        else:
            cuts = [end - k for k, end in enumerate(ends)]
        found: set[int] = set()

        def spanning(start: int, end: int) -> None:
            k = bisect_right(cuts, start)  # the first cut after the literal's first byte
            if k < len(cuts) and cuts[k] < end:
                found.add(k)

        if self.backend == "hyperscan":
            blits = self._blits

            def on_match(lit: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
                spanning(end - len(blits[lit]), end)

            self._db.scan(joined, match_event_handler=on_match, scratch=self._scratch)
        else:
            for rx in self._rxs:
                for m in rx.finditer(joined):
                    spanning(m.start(), m.end())
        return sorted(found)

    def literal_ids(self, data: bytes) -> tuple[int, ...]:
        """Ids of the literals anywhere in ``data`` (one record or line), ascending; () for none."""
        lines = self._lines(data, len(data))
        if not lines:
            return ()
        if len(lines) == 1:
            return lines[0][2]
        return tuple(sorted({i for _s, _e, ids in lines for i in ids}))

    def records_with_literals(self, values: Sequence[bytes]) -> list[bool]:
        """For each record of a batch, whether a literal occurs anywhere in its bytes."""
        return [bool(ids) for ids in self.record_literals(values)]

    def record_literals(self, values: Sequence[bytes]) -> list[tuple[int, ...]]:
        """For each record of a batch, the ids of the literals anywhere in its bytes (ascending, ``()``
        for none; ``literal_ids`` of each record): one scan of the batch joined by newlines (no
        literal holds a newline, so none can span two records), not one call per record, whose fixed
        cost was most of the scan."""
        if not values:
            return []
        starts: list[int] = []
        pos = 0
        for value in values:
            starts.append(pos)
            pos += len(value) + 1
        buf = b"\n".join(values)
        out: list[tuple[int, ...]] = [()] * len(values)
        for start, _end, ids in self._lines(buf, len(buf)):
            k = bisect_right(starts, start) - 1
            out[k] = tuple(sorted({*out[k], *ids})) if out[k] else ids
        return out

    def hits(self, chunk: bytes | bytearray) -> Iterator[Hit]:
        """The lines of ``chunk`` that contain a literal, with their 0-based index in it."""
        yield from self.chunk_hits(chunk)[0]

    def candidate_lines(self, chunk: bytes | bytearray) -> Iterator[tuple[int, bytes]]:
        """(0-based line index in ``chunk``, line without newline) for each line holding a literal.

        A last line without a trailing newline counts like any other.
        """
        for hit in self.chunk_hits(chunk)[0]:
            yield hit.number, hit.line

    # ---------------------------------------------------------------------------------------
    # A file
    # ---------------------------------------------------------------------------------------

    def scan_file(
        self,
        path: str | Path,
        chunk_size: int = DEFAULT_CHUNK,
        start: int = 0,
        end: int | None = None,
        first_line: int = 1,
    ) -> FileScan:
        """Iterate over the candidate lines of a plain or gzip file, numbered from ``first_line``.

        ``start``/``end`` (plain files only) restrict the scan to a byte range; ``start``
        must be the start of a line and ``first_line`` its number.
        """
        return FileScan(self, Path(path), chunk_size, start, end, first_line)


def newline_offsets(buf: bytes) -> list[int]:
    """The offset of every newline in ``buf``, in order (NumPy when it is there)."""
    if _np is not None:
        offsets: list[int] = _np.flatnonzero(_np.frombuffer(buf, dtype=_np.uint8) == NL).tolist()
        return offsets
    out, i = [], buf.find(b"\n")
    while i >= 0:
        out.append(i)
        i = buf.find(b"\n", i + 1)
    return out


def _open(path: Path) -> Any:
    with path.open("rb") as probe:
        magic = probe.read(2)
    return gzip.open(path, "rb") if magic == _GZIP_MAGIC else path.open("rb", buffering=0)


def count_newlines(
    path: str | Path, start: int = 0, end: int | None = None, chunk_size: int = DEFAULT_CHUNK
) -> int:
    """Newlines in ``path[start:end]`` (a gzip file is counted whole, decompressed)."""
    path = Path(path)
    buf = bytearray(chunk_size)
    scratch = _np.empty(chunk_size, dtype=bool) if _np is not None else None
    total = 0
    with _open(path) as fh:
        remaining = _seek(fh, path, start, end)
        while remaining is None or remaining > 0:
            with memoryview(buf) as mv:
                got = fh.readinto(mv if remaining is None else mv[: min(chunk_size, remaining)])
            if not got:
                break
            if remaining is not None:
                remaining -= got
            if scratch is not None:
                eq = scratch[:got]
                _np.equal(_np.frombuffer(buf, dtype=_np.uint8, count=got), NL, out=eq)
                total += int(_np.count_nonzero(eq))
            else:
                total += buf.count(b"\n", 0, got)
    return total


def _seek(fh: Any, path: Path, start: int, end: int | None) -> int | None:
    """Position ``fh`` at ``start``; how many bytes to read (``None``: to the end)."""
    if (start or end is not None) and isinstance(fh, gzip.GzipFile):
        raise ValueError(f"{path}: byte ranges need a plain file, not gzip")
    if start:
        fh.seek(start)
    return None if end is None else max(end - start, 0)


class FileScan:
    """Candidate lines of one file; ``lines``, ``bytes_read`` and ``candidates`` are complete once iterated.

    The file is read in ``chunk_size`` blocks cut after their last newline (the partial
    last line moves to the front of the next block), so no line is ever split and the
    per-chunk work is C-level: one scan, one newline count.
    """

    def __init__(
        self,
        prefilter: Prefilter,
        path: Path,
        chunk_size: int = DEFAULT_CHUNK,
        start: int = 0,
        end: int | None = None,
        first_line: int = 1,
    ) -> None:
        self.prefilter = prefilter
        self.path = path
        self.chunk_size = max(chunk_size, 1024)
        self.start, self.end, self.first_line = start, end, first_line
        self.lines = 0
        self.bytes_read = 0
        self.candidates = 0

    def __iter__(self) -> Iterator[Hit]:
        pf = self.prefilter
        self.lines = self.bytes_read = self.candidates = 0
        first = self.first_line
        buf = bytearray(self.chunk_size)
        scratch = _np.empty(len(buf), dtype=bool) if _np is not None else None
        carry = 0  # bytes of an unfinished line at the front of buf
        with _open(self.path) as fh:
            remaining = _seek(fh, self.path, self.start, self.end)
            while True:
                with memoryview(buf) as mv:
                    room = (
                        mv[carry:]
                        if remaining is None
                        else mv[carry : carry + min(len(buf) - carry, remaining)]
                    )
                    got = fh.readinto(room) if len(room) else 0
                if remaining is not None:
                    remaining -= got
                self.bytes_read += got
                total = carry + got
                if got == 0:  # end of input: what is left is a last line without a newline
                    if carry:
                        hits, _ = pf.chunk_hits(buf, carry, first + self.lines, scratch)
                        self.candidates += len(hits)
                        self.lines += 1
                        yield from hits
                    return
                cut = buf.rfind(b"\n", 0, total) + 1
                if cut == 0:
                    if total == len(buf):  # one line longer than the buffer: make room
                        bigger = bytearray(2 * len(buf))
                        bigger[:total] = buf
                        buf = bigger
                        scratch = _np.empty(len(buf), dtype=bool) if _np is not None else None
                    carry = total
                    continue
                hits, newlines = pf.chunk_hits(buf, cut, first + self.lines, scratch)
                self.candidates += len(hits)
                self.lines += newlines
                yield from hits
                carry = total - cut
                buf[:carry] = buf[cut:total]
