"""Which lines of a large text can match a rule at all, found without a Python loop per line.

Every rule names literals, one of which must occur in a line for its pattern to possibly
match (:class:`~streams.extract.rules.Rule`). Over a file or a batch of records, most lines
contain none, so the work that scales with the input is one multi-literal search over big
byte chunks; Python only sees the few lines that contain a literal, and only those get
decoded and run through the full rule patterns.

Two interchangeable back ends, chosen at run time:

- ``hyperscan`` (PyPI ``hyperscan``, Intel's SIMD multi-pattern matcher): all literals
  compiled into one database, one ``scan`` per chunk that reports every occurrence.
  Measured on the benchmark corpus at 1.4-2.3 GB/s for 10-150 literals.
- ``re``: Python's ``re`` on the literals as one trie-shaped alternation, one ``search``
  per candidate line. Same lines, 10-100x slower; used when the wheel is missing.

Line numbers need the newlines counted; NumPy counts them at memory speed when it is
installed, ``bytes.count`` otherwise.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, cast

if TYPE_CHECKING:
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

    index: int  # 0-based index of the line in the chunk, or 1-based line number in a file scan
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
        self.rules: tuple[Rule, ...] = ()
        self._rules_of: list[tuple[int, ...]] = [() for _ in self.literals]
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
            self._rx = re.compile(_trie_pattern(sorted(self._blits)))

    @classmethod
    def from_catalog(cls, catalog: Catalog, backend: Backend | None = None) -> Prefilter:
        """All literals of the catalog, remembering which rules each one gates."""
        pf = cls((lit for rule in catalog.rules for lit in rule.literals), backend)
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

    # ---------------------------------------------------------------------------------------
    # One chunk
    # ---------------------------------------------------------------------------------------

    def _lines(self, buf: bytes | bytearray, n: int) -> list[tuple[int, int, tuple[int, ...]]]:
        """(start, end, literal ids) of each line of ``buf[:n]`` holding a literal, in order."""
        out: list[tuple[int, int, tuple[int, ...]]] = []
        if self.backend == "hyperscan":
            ends: list[tuple[int, int]] = []
            add = ends.append

            def on_match(lit: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
                add((end, lit))

            # hyperscan reads any buffer; its stub says str | bytes
            view = cast(bytes, memoryview(buf)[:n])
            self._db.scan(view, match_event_handler=on_match, scratch=self._scratch)
            ends.sort()
            line_end = -1
            ids: list[int] = []
            start = 0
            for end, lit in ends:
                if end <= line_end:  # another literal in the same line
                    if lit not in ids:
                        ids.append(lit)
                    continue
                if ids:
                    out.append((start, line_end, tuple(sorted(ids))))
                start = buf.rfind(b"\n", 0, end) + 1
                line_end = buf.find(b"\n", end, n)
                if line_end < 0:
                    line_end = n
                ids = [lit]
            if ids:
                out.append((start, line_end, tuple(sorted(ids))))
            return out
        search = self._rx.search
        blits = self._blits
        pos = 0
        while True:
            m = search(buf, pos, n)
            if m is None:
                return out
            start = buf.rfind(b"\n", 0, m.start()) + 1
            line_end = buf.find(b"\n", m.end(), n)
            if line_end < 0:
                line_end = n
            line = buf[start:line_end]
            out.append((start, line_end, tuple(i for i, lit in enumerate(blits) if lit in line)))
            pos = line_end + 1

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

    def hits(self, chunk: bytes | bytearray) -> Iterator[Hit]:
        """The lines of ``chunk`` that contain a literal, with their 0-based index in it."""
        yield from self.chunk_hits(chunk)[0]

    def candidate_lines(self, chunk: bytes | bytearray) -> Iterator[tuple[int, bytes]]:
        """(0-based line index in ``chunk``, line without newline) for each line holding a literal.

        A last line without a trailing newline counts like any other.
        """
        for hit in self.chunk_hits(chunk)[0]:
            yield hit.index, hit.line

    # ---------------------------------------------------------------------------------------
    # A file
    # ---------------------------------------------------------------------------------------

    def scan_file(self, path: str | Path, chunk_size: int = DEFAULT_CHUNK) -> FileScan:
        """Iterate over the candidate lines of a plain or gzip file, numbered from 1."""
        return FileScan(self, Path(path), chunk_size)


class FileScan:
    """Candidate lines of one file; ``lines`` and ``bytes_read`` are complete once iterated.

    The file is read in ``chunk_size`` blocks cut after their last newline (the partial
    last line moves to the front of the next block), so no line is ever split and the
    per-chunk work is C-level: one scan, one newline count.
    """

    def __init__(self, prefilter: Prefilter, path: Path, chunk_size: int = DEFAULT_CHUNK) -> None:
        self.prefilter = prefilter
        self.path = path
        self.chunk_size = max(chunk_size, 1024)
        self.lines = 0
        self.bytes_read = 0
        self.candidates = 0

    def _open(self) -> Any:
        with self.path.open("rb") as probe:
            magic = probe.read(2)
        return gzip.open(self.path, "rb") if magic == _GZIP_MAGIC else self.path.open("rb", buffering=0)

    def __iter__(self) -> Iterator[Hit]:
        pf = self.prefilter
        self.lines = self.bytes_read = self.candidates = 0
        buf = bytearray(self.chunk_size)
        scratch = _np.empty(len(buf), dtype=bool) if _np is not None else None
        carry = 0  # bytes of an unfinished line at the front of buf
        with self._open() as fh:
            while True:
                with memoryview(buf) as mv:
                    got = fh.readinto(mv[carry:])
                self.bytes_read += got
                total = carry + got
                if got == 0:  # end of file: what is left is a last line without a newline
                    if carry:
                        hits, _ = pf.chunk_hits(buf, carry, self.lines + 1, scratch)
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
                hits, newlines = pf.chunk_hits(buf, cut, self.lines + 1, scratch)
                self.candidates += len(hits)
                self.lines += newlines
                yield from hits
                carry = total - cut
                buf[:carry] = buf[cut:total]
