"""Extraction speed: sickbay's extractor against ``grep -E -c -f`` with the same signatures.

Both read the same ≥1 GiB corpus (``benchmarks/extract_corpus.py``, built once and cached),
one after the other, in one run, each timed by the wall clock with the page cache warm:

- grep: ``LC_ALL=C grep -E -c -f patterns.ere corpus``, the catalog's rule patterns turned
  into POSIX EREs (see :func:`to_ere`), each checked against its rule's examples; rules that
  cannot be said in ERE (lookaround, backreferences) are left out and named. The time
  includes grep's start and pattern compilation.
- sickbay: the multi-literal prefilter (``streams.extract.prefilter``) over 4 MiB chunks;
  for each line holding a literal, the patterns of the rules those literals gate; a line one
  of them matches goes through ``Extractor.extract`` over those rules (all of its work:
  groups, casts, lookups, a ``Signal`` for every match; the same signals as the whole
  catalog's extractor gives, see ``Prefilter.extractor_for``). The time includes building
  the prefilter, not loading the catalog.

Both count the matching lines; the counts are compared and any difference explained (grep
has no literal gate; rules left out of the ERE file). One process each is the fair
comparison (grep is single-threaded) and is what the last line reports; sickbay on two
processes (the file split in two at a line start) is measured too and recorded beside it.

The last line printed is one JSON object:
``{"extract_lines_per_s": ..., "grep_lines_per_s": ..., "ratio": ...}`` (ratio = extract/grep).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import re._constants as sre_c  # type: ignore[import-not-found,unused-ignore]
import re._parser as sre_p  # type: ignore[import-not-found,unused-ignore]
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import extract_corpus
from benchmarks.machine import append_row, describe, today
from schemas.raw import LogLine
from streams.extract.extractor import Position
from streams.extract.prefilter import DEFAULT_CHUNK, Prefilter, count_newlines
from streams.extract.rules import Catalog, Rule, load_catalog

OBSERVED = datetime(2026, 3, 15, tzinfo=UTC)  # fixed: the same signals on every run
SECTION = "Extraction speed (`make bench-extract`)"
GREP_REPEAT_LIMIT_S = 30.0  # grep is timed again only when its first run was shorter
HEADER = (
    "| date | machine | corpus | rules as ERE | matching lines (sickbay / grep) | prefilter candidates | "
    "sickbay lines/s (1 proc) | grep lines/s (1 proc) | ratio (1:1) | sickbay lines/s (2 procs) | "
    "ratio (2 procs : grep 1) | prefilter | notes |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


# --------------------------------------------------------------------------------------------
# Python regex -> POSIX ERE (GNU grep, LC_ALL=C)
# --------------------------------------------------------------------------------------------


class Unconvertible(ValueError):
    """The pattern uses something ERE cannot say (lookaround, backreference, ...)."""


_SPECIAL = set(".[]()*+?{}|^$\\")
_BRACKET_SYNTAX = {ord("]"), ord("^"), ord("-"), ord("[")}
_CLASSES = {
    sre_c.CATEGORY_DIGIT: "[:digit:]",
    sre_c.CATEGORY_SPACE: "[:space:]",
    sre_c.CATEGORY_WORD: "[:alnum:]_",
}
_NOT_CLASSES = {
    sre_c.CATEGORY_NOT_DIGIT: "[:digit:]",
    sre_c.CATEGORY_NOT_SPACE: "[:space:]",
    sre_c.CATEGORY_NOT_WORD: "[:alnum:]_",
}
_AT = {
    sre_c.AT_BEGINNING: "^",
    sre_c.AT_BEGINNING_STRING: "^",
    sre_c.AT_END: "$",
    sre_c.AT_END_STRING: "$",
    sre_c.AT_BOUNDARY: "\\b",  # GNU extension; word = [[:alnum:]_] in the C locale, as Python's on ASCII
    sre_c.AT_NON_BOUNDARY: "\\B",
}
_ZERO_WIDTH = (sre_c.ASSERT, sre_c.ASSERT_NOT, sre_c.AT)
_ATOMS = (sre_c.LITERAL, sre_c.NOT_LITERAL, sre_c.ANY, sre_c.IN, sre_c.SUBPATTERN, sre_c.BRANCH)
_REFUSED = {
    "GROUPREF": "a backreference",
    "GROUPREF_EXISTS": "a conditional group",
    "ASSERT": "a lookahead/lookbehind",
    "ASSERT_NOT": "a negative lookahead/lookbehind",
    "POSSESSIVE_REPEAT": "a possessive quantifier",
    "ATOMIC_GROUP": "an atomic group",
}


def _printable(c: int) -> bool:
    return 32 <= c < 127 or c == 9


def _case_variants(c: int, icase: bool) -> set[int]:
    ch = chr(c)
    if icase and ch.isascii() and ch.isalpha():
        return {ord(ch.lower()), ord(ch.upper())}
    return {c}


def _literal(c: int, icase: bool) -> str:
    if c == 10:
        raise Unconvertible("matches a newline, which a line never holds")
    variants = _case_variants(c, icase)
    if len(variants) > 1:
        return _bracket(variants, [], [], negate=False)
    ch = chr(c)
    if not ch.isascii():
        return f"({ch})"  # several bytes in the C locale: group them for a quantifier
    if not _printable(c):
        raise Unconvertible(f"control character {c:#x} cannot be written in a pattern file")
    return "\\" + ch if ch in _SPECIAL else ch


def _bracket(chars: set[int], ranges: list[tuple[int, int]], classes: list[str], negate: bool) -> str:
    """A POSIX bracket expression: ``]`` first, ``^`` not first, ``[`` and ``-`` last; no escapes."""
    chars = set(chars) - {10}  # no line holds a newline: dropping it changes nothing
    for lo, hi in [r for r in ranges if {r[0], r[1]} & _BRACKET_SYNTAX]:
        ranges = [r for r in ranges if r != (lo, hi)]
        chars.update(range(lo, hi + 1))
    if not all(_printable(c) for c in chars) or not all(
        _printable(lo) and _printable(hi) for lo, hi in ranges
    ):
        raise Unconvertible("a set with non-printable or non-ASCII characters")
    if not (chars or ranges or classes):
        if negate:
            return "."
        raise Unconvertible("a set that only matches a newline")
    if not negate and not ranges and not classes and len(chars) == 1:
        return _literal(next(iter(chars)), False)
    body = "]" if ord("]") in chars else ""
    body += "".join(chr(c) for c in sorted(chars - _BRACKET_SYNTAX))
    body += "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in ranges)
    body += "".join(classes)  # "[:digit:]", "[:alnum:]_": class items inside the brackets
    tail = "".join(ch for ch in "^[-" if ord(ch) in chars)
    if not body and tail.startswith("^") and not negate:
        if tail == "^":
            return "\\^"
        tail = tail[1:] + "^"  # "[^" would negate
    return "[" + ("^" if negate else "") + body + tail + "]"


def _in(items: list[tuple[Any, Any]], icase: bool) -> str:
    negate = False
    chars: set[int] = set()
    ranges: list[tuple[int, int]] = []
    classes: list[str] = []
    negated: list[str] = []
    for op, av in items:
        if op is sre_c.NEGATE:
            negate = True
        elif op is sre_c.LITERAL:
            chars |= _case_variants(av, icase)
        elif op is sre_c.RANGE:
            ranges.extend(_case_ranges(av, icase))
        elif op is sre_c.CATEGORY and av in _CLASSES:
            classes.append(_CLASSES[av])
        elif op is sre_c.CATEGORY and av in _NOT_CLASSES:
            negated.append(_NOT_CLASSES[av])
        else:
            raise Unconvertible(f"{op} {av} in a set")
    if negated:
        if negate or chars or ranges or classes or len(negated) > 1:
            raise Unconvertible("a set mixing a negated class (\\S, \\D, \\W) with other members")
        return _bracket(set(), [], negated, negate=True)
    return _bracket(chars, ranges, classes, negate)


def _case_ranges(rng: tuple[int, int], icase: bool) -> list[tuple[int, int]]:
    lo, hi = rng
    out = [(lo, hi)]
    if icase:
        for a, b, shift in ((97, 122, -32), (65, 90, 32)):
            s, e = max(lo, a), min(hi, b)
            if s <= e:
                out.append((s + shift, e + shift))
    return out


def _emit(sub: Any, icase: bool) -> str:
    return "".join(_emit_one(op, av, icase) for op, av in sub)


def _repeat(av: Any, icase: bool) -> str:
    lo, hi, item = av
    items = list(item)
    if lo == 0 and all(op in _ZERO_WIDTH for op, _ in items):
        return ""  # an optional assertion always holds (used to capture fields "if present")
    text = _emit(item, icase)
    if not text:
        return ""
    atom = text if len(items) == 1 and items[0][0] in _ATOMS else f"({text})"
    if hi == sre_c.MAXREPEAT:
        return {0: atom + "*", 1: atom + "+"}.get(lo, f"{atom}{{{lo},}}")
    if (lo, hi) == (0, 1):
        return atom + "?"
    return f"{atom}{{{lo}}}" if lo == hi else f"{atom}{{{lo},{hi}}}"


def _branch(av: Any, icase: bool) -> str:
    alts = [_emit(alt, icase) for alt in av[1]]
    nonempty = [a for a in alts if a]
    if len(nonempty) == len(alts):
        return "(" + "|".join(alts) + ")"
    return "(" + "|".join(nonempty) + ")?" if nonempty else ""


def _group(av: Any, icase: bool) -> str:
    _index, add_flags, del_flags, inner = av
    if add_flags & sre_c.SRE_FLAG_IGNORECASE:
        icase = True
    if del_flags & sre_c.SRE_FLAG_IGNORECASE:
        icase = False
    return "(" + _emit(inner, icase) + ")"


def _emit_one(op: Any, av: Any, icase: bool) -> str:
    if op is sre_c.LITERAL:
        return _literal(av, icase)
    if op is sre_c.NOT_LITERAL:
        return "." if av == 10 else _bracket(_case_variants(av, icase), [], [], negate=True)
    if op is sre_c.ANY:
        return "."
    if op is sre_c.IN:
        return _in(av, icase)
    if op is sre_c.AT and av in _AT:
        return _AT[av]
    if op is sre_c.BRANCH:
        return _branch(av, icase)
    if op is sre_c.SUBPATTERN:
        return _group(av, icase)
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):  # lazy or greedy: the same lines match
        return _repeat(av, icase)
    raise Unconvertible(_REFUSED.get(str(op), f"the construct {op} {av}"))


def to_ere(pattern: str) -> str:
    """One Python ``re`` pattern as a POSIX ERE that matches the same lines under ``LC_ALL=C``.

    Named and non-capturing groups become plain groups, lazy quantifiers greedy, ``\\d``
    ``\\s`` ``\\w`` (and their negations) POSIX classes, escapes literal characters, and
    optional lookaheads (``(?=...)?``, which always hold) are dropped. Equivalence holds for
    ASCII text (Python's ``\\s``/``\\w`` on ``str`` also take non-ASCII spaces and letters).
    Raises :class:`Unconvertible` for what ERE cannot say: lookaround, backreferences,
    conditionals, possessive quantifiers and atomic groups.
    """
    parsed = sre_p.parse(pattern)
    ere = _emit(parsed, bool(parsed.state.flags & sre_c.SRE_FLAG_IGNORECASE))
    if not ere:
        raise Unconvertible("empty pattern (matches every line)")
    return ere


def _implies(sub: Any, literals: list[str], prefix: str = "") -> bool:
    """Does every match of ``sub`` (preceded by the text ``prefix``) contain one of ``literals``?

    Conservative: ``False`` when unsure (text after a group or branch is not followed).
    """
    run = [prefix]
    for op, av in [*sub, (None, None)]:
        if op is sre_c.LITERAL:
            run.append(chr(av))
            continue
        text = "".join(run)
        run = []
        if any(lit in text for lit in literals):
            return True
        if op is sre_c.SUBPATTERN and not av[1] and not av[2] and _implies(av[3], literals, text):
            return True
        if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT) and av[0] >= 1 and _implies(av[2], literals, text):
            return True
        if op is sre_c.BRANCH and all(_implies(alt, literals, text) for alt in av[1]):
            return True
    return False


def gate_implied(rule: Rule) -> bool:
    """Does every match of the pattern contain one of the rule's literals?

    When it does not, grep (which has no literal gate) can count lines that sickbay never
    tries the rule on, e.g. ``RuntimeError: expected scalar type`` for ``cuda.error``.
    """
    parsed = sre_p.parse(rule.pattern)
    if parsed.state.flags & sre_c.SRE_FLAG_IGNORECASE:
        return False
    return _implies(parsed, list(rule.literals))


@dataclass
class Conversion:
    eres: dict[str, str] = field(default_factory=dict)  # rule id -> ERE
    skipped: dict[str, str] = field(default_factory=dict)  # rule id -> why
    gate_not_implied: list[str] = field(default_factory=list)


def convert(catalog: Catalog, workdir: Path) -> Conversion:
    """Every rule as an ERE, each checked with grep against the rule's own examples."""
    conv = Conversion()
    for rule in catalog.rules:
        try:
            conv.eres[rule.id] = to_ere(rule.pattern)
        except (Unconvertible, re.error) as exc:
            conv.skipped[rule.id] = str(exc)
            continue
        if not gate_implied(rule):
            conv.gate_not_implied.append(rule.id)
    examples = workdir / "examples.txt"
    for rule in catalog.rules:
        ere = conv.eres.get(rule.id)
        if ere is None:
            continue
        lines = [ex.line for ex in rule.examples if "\n" not in ex.line and "\r" not in ex.line]
        examples.write_text("".join(f"{line}\n" for line in lines))
        proc = subprocess.run(
            ["grep", "-E", "-n", "-e", ere, str(examples)],
            capture_output=True,
            env={**os.environ, "LC_ALL": "C"},
            check=False,
        )
        if proc.returncode > 1:
            conv.skipped[rule.id] = f"grep refused the ERE: {proc.stderr.decode(errors='replace').strip()}"
            del conv.eres[rule.id]
            continue
        got = {int(x.split(b":", 1)[0]) for x in proc.stdout.splitlines()}
        want = {i + 1 for i, line in enumerate(lines) if rule.regex.search(line)}
        if got != want:
            conv.skipped[rule.id] = f"ERE disagrees with Python on its examples (grep {got}, re {want})"
            del conv.eres[rule.id]
    return conv


# --------------------------------------------------------------------------------------------
# The two contenders
# --------------------------------------------------------------------------------------------


@dataclass
class Run:
    seconds: float
    lines: int = 0
    matching: int = 0
    signals: int = 0
    candidates: int = 0
    matched: list[tuple[int, str]] = field(default_factory=list)
    by_rule: Counter[str] = field(default_factory=Counter)


def run_grep(ere_file: Path, corpus: Path, lines: int) -> Run:
    started = time.perf_counter()
    proc = subprocess.run(
        ["grep", "-E", "-c", "-f", str(ere_file), str(corpus)],
        capture_output=True,
        env={**os.environ, "LC_ALL": "C"},
        check=False,
    )
    seconds = time.perf_counter() - started
    if proc.returncode > 1:
        raise RuntimeError(f"grep failed: {proc.stderr.decode(errors='replace')}")
    return Run(seconds, lines=lines, matching=int(proc.stdout.strip() or 0))


def extract_range(
    catalog: Catalog,
    corpus: Path,
    start: int = 0,
    end: int | None = None,
    keep: bool = True,
    chunk_size: int = DEFAULT_CHUNK,
) -> Run:
    """Prefilter + rules + signals over ``corpus[start:end]`` (``start`` at a line start)."""
    started = time.perf_counter()
    first = count_newlines(corpus, 0, start) if start else 0  # line numbers of a later range
    prefilter = Prefilter.from_catalog(catalog)
    # Per set of literals found in a line: the patterns of the rules they gate, and an
    # extractor over just those rules (prefilter.extractor_for: the same signals as the full
    # catalog's for such a line, without testing every rule's literals again).
    plans: dict[tuple[int, ...], tuple[tuple[re.Pattern[str], ...], Any]] = {}
    file = str(corpus)
    run = Run(0.0)
    matched = run.matched
    signals = matching = 0
    scan = prefilter.scan_file(corpus, chunk_size, start=start, end=end, first_line=first + 1)
    for hit in scan:
        plan = plans.get(hit.literals)
        if plan is None:
            gated = tuple(rule.regex for rule in prefilter.rules_for(hit.literals))
            plan = plans[hit.literals] = (gated, prefilter.extractor_for(hit.literals).extract)
        text = hit.line.decode("utf-8", "replace").rstrip("\r")
        for regex in plan[0]:  # a line none of them matches would give no signal: skip it cheaply
            if regex.search(text) is not None:
                break
        else:
            continue
        found = plan[1](LogLine(text=text, adapter="plain"), OBSERVED, Position(file=file, line=hit.number))
        if found:
            matching += 1
            signals += len(found)
            if keep:
                matched.append((hit.number, text))
                run.by_rule.update(signal.rule for signal in found)
    run.seconds = time.perf_counter() - started
    run.lines = scan.lines
    run.candidates = scan.candidates
    run.matching = matching
    run.signals = signals
    return run


def _worker(args: tuple[Path, int, int | None]) -> Run:
    corpus, start, end = args
    return extract_range(_CATALOG, corpus, start, end)


_CATALOG: Catalog


def extract_parallel(catalog: Catalog, corpus: Path, processes: int) -> Run:
    """The file split at line starts, one range per process (each counts the lines before it)."""
    global _CATALOG  # noqa: PLW0603 - handed to forked workers without pickling the catalog
    _CATALOG = catalog
    size = corpus.stat().st_size
    cuts = [0]
    with corpus.open("rb") as fh:
        for k in range(1, processes):
            fh.seek(size * k // processes)
            fh.readline()
            cuts.append(fh.tell())
    cuts.append(size)
    ranges = [(corpus, cuts[i], cuts[i + 1]) for i in range(processes)]
    started = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        parts = pool.map(_worker, ranges)
    total = Run(time.perf_counter() - started)
    for part in parts:
        total.lines += part.lines
        total.matching += part.matching
        total.signals += part.signals
        total.candidates += part.candidates
        total.matched.extend(part.matched)
        total.by_rule.update(part.by_rule)
    return total


# --------------------------------------------------------------------------------------------
# Explaining a count difference
# --------------------------------------------------------------------------------------------


def explain(
    catalog: Catalog, conv: Conversion, ere_file: Path, corpus: Path, ours: list[tuple[int, str]]
) -> tuple[str, list[str]]:
    """Why the counts differ: a short reason for RESULTS.md and details for the log."""
    proc = subprocess.run(
        ["grep", "-E", "-n", "-f", str(ere_file), str(corpus)],
        capture_output=True,
        env={**os.environ, "LC_ALL": "C"},
        check=False,
    )
    theirs: dict[int, str] = {}
    for raw in proc.stdout.splitlines():
        num, _, rest = raw.partition(b":")
        theirs[int(num)] = rest.decode("utf-8", "replace")
    mine = dict(ours)
    grep_only = sorted(set(theirs) - set(mine))
    ours_only = sorted(set(mine) - set(theirs))
    gated = [
        n
        for n in grep_only
        if any(
            r.regex.search(theirs[n]) and not any(lit in theirs[n] for lit in r.literals)
            for r in catalog.rules
        )
    ]
    skipped_rules = [catalog.by_id(rid) for rid in conv.skipped]
    from_skipped = [n for n in ours_only if any(r.regex.search(mine[n]) for r in skipped_rules)]
    reasons = []
    details = [f"grep-only lines: {len(grep_only)}, sickbay-only lines: {len(ours_only)}"]
    if gated:
        reasons.append(
            f"{len(gated)} grep-only lines match a pattern but lack its rule's literals (literal gate)"
        )
        details.append(f"  e.g. line {gated[0]}: {theirs[gated[0]][:140]!r}")
    if from_skipped:
        reasons.append(f"{len(from_skipped)} sickbay-only lines match rules left out of the ERE file")
        details.append(f"  e.g. line {from_skipped[0]}: {mine[from_skipped[0]][:140]!r}")
    details.extend(reasons)
    other_grep = sorted(set(grep_only) - set(gated))
    other_ours = sorted(set(ours_only) - set(from_skipped))
    if other_grep or other_ours:
        reasons.append(f"{len(other_grep)} grep-only and {len(other_ours)} sickbay-only lines unexplained")
        details.extend(f"  unexplained grep-only line {n}: {theirs[n][:160]!r}" for n in other_grep[:5])
        details.extend(f"  unexplained sickbay-only line {n}: {mine[n][:160]!r}" for n in other_ours[:5])
    return "; ".join(reasons), details


# --------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    corpus: Path
    bytes: int
    rules: int
    conv: Conversion
    ours: list[Run]
    greps: list[Run]
    scan_only: float
    par: Run | None
    processes: int
    reason: str
    backend: str

    @property
    def lines(self) -> int:
        return self.ours[0].lines

    def rate(self, runs: list[Run]) -> float:
        return self.lines / min(r.seconds for r in runs)


def scan_only(catalog: Catalog, corpus: Path) -> float:
    """The prefilter alone (read, scan, number): what the extractor pays for every line."""
    started = time.perf_counter()
    for _ in Prefilter.from_catalog(catalog).scan_file(corpus):
        pass
    return time.perf_counter() - started


def measure(corpus: Path, size: int, repeat: int, processes: int) -> Outcome:
    log = sys.stderr
    catalog = load_catalog()
    ere_file = extract_corpus.cache_dir() / "extract-patterns.ere"
    with tempfile.TemporaryDirectory() as tmp:
        conv = convert(catalog, Path(tmp))
    ere_file.parent.mkdir(parents=True, exist_ok=True)
    ere_file.write_text("".join(f"{ere}\n" for ere in conv.eres.values()))
    print(f"rules: {len(catalog.rules)}, as ERE: {len(conv.eres)} ({ere_file})", file=log)
    for rid, why in conv.skipped.items():
        print(f"  left out of the ERE file: {rid}: {why}", file=log)
    if conv.gate_not_implied:
        print(f"  literal gate not implied by the pattern: {', '.join(conv.gate_not_implied)}", file=log)

    with corpus.open("rb", buffering=0) as fh:  # warm the page cache: neither side pays for the disk
        while fh.read(16 << 20):
            pass
    ours: list[Run] = []
    greps: list[Run] = []
    for i in range(max(repeat, 1)):
        ours.append(extract_range(catalog, corpus, keep=(i == 0)))
        print(f"sickbay (1 proc) run {i + 1}: {ours[-1].seconds:.3f} s", file=log)
        if i and greps[0].seconds > GREP_REPEAT_LIMIT_S:
            continue  # a long run is its own best of N: noise is small next to it
        greps.append(run_grep(ere_file, corpus, ours[0].lines))
        print(f"grep -E (1 proc) run {i + 1}: {greps[-1].seconds:.3f} s", file=log)
    scan = min(scan_only(catalog, corpus) for _ in range(max(repeat, 1)))
    print(f"prefilter alone (read + scan + line numbers): {scan:.3f} s", file=log)
    par = None
    if processes > 1:
        par = min((extract_parallel(catalog, corpus, processes) for _ in range(max(repeat, 1))), key=_secs)
        print(f"sickbay ({processes} procs) best: {par.seconds:.3f} s", file=log)
        if par.matching != ours[0].matching or par.lines != ours[0].lines:
            print(f"warning: {processes} processes saw {par.lines} lines, {par.matching} matching", file=log)
    reason = "counts equal"
    if ours[0].matching != greps[0].matching:
        why, details = explain(catalog, conv, ere_file, corpus, ours[0].matched)
        reason = f"counts differ by {ours[0].matching - greps[0].matching:+d}: {why}"
        for line in details:
            print(f"  {line}", file=log)
    backend = Prefilter.from_catalog(catalog).backend
    return Outcome(corpus, size, len(catalog.rules), conv, ours, greps, scan, par, processes, reason, backend)


def _secs(run: Run) -> float:
    return run.seconds


def _m(rate: float) -> str:
    return f"{rate / 1e6:.2f} M"


def record(out: Outcome) -> None:
    first, grep = out.ours[0], out.greps[0]
    fraction = first.matching / first.lines
    ours_rate, grep_rate = out.rate(out.ours), out.rate(out.greps)
    par = f"{_m(out.rate([out.par]))} ({out.processes} procs)" if out.par else "n/a"
    par_ratio = f"{out.rate([out.par]) / grep_rate:.2f}" if out.par else "n/a"
    left_out = f"; left out of the ERE file: {', '.join(out.conv.skipped)}" if out.conv.skipped else ""
    append_row(
        SECTION,
        HEADER,
        f"| {today()} | {describe()} | {out.bytes / 2**30:.2f} GiB, {first.lines:,} lines | "
        f"{len(out.conv.eres)}/{out.rules} | {first.matching:,} ({fraction:.2%}) / {grep.matching:,} | "
        f"{first.candidates:,} | {_m(ours_rate)} | {_m(grep_rate)} | {ours_rate / grep_rate:.2f} | {par} | "
        f"{par_ratio} | {out.backend} | wall clock, best of {len(out.ours)} (sickbay) / {len(out.greps)} "
        f"(grep), page cache warm; prefilter alone {out.scan_only:.2f} s; {out.reason}{left_out} |",
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=2, help="timed runs of each, best kept (default 2)")
    parser.add_argument("--processes", type=int, default=2, help="also time sickbay on N processes (0: skip)")
    parser.add_argument("--corpus", type=Path, default=None, help="this file instead of the cached corpus")
    parser.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args()
    if shutil.which("grep") is None:
        print(json.dumps({"error": "grep not found"}))
        return 1
    corpus = args.corpus or extract_corpus.ensure()[0]
    out = measure(corpus, corpus.stat().st_size, args.repeat, args.processes)
    first = out.ours[0]
    fraction = first.matching / first.lines if first.lines else 0.0
    top = ", ".join(f"{rule} {n:,}" for rule, n in first.by_rule.most_common(8))
    print(f"signals by rule (top 8 of {len(first.by_rule)}): {top}", file=sys.stderr)
    if not 0.001 <= fraction <= 0.01:
        print(f"warning: {fraction:.3%} of lines match, outside the intended 0.1-1 %", file=sys.stderr)
    ours_rate, grep_rate = out.rate(out.ours), out.rate(out.greps)
    print(
        f"corpus {first.lines:,} lines, {out.bytes:,} bytes; matching lines: sickbay {first.matching:,} "
        f"({fraction:.3%}; {first.signals:,} signals), grep {out.greps[0].matching:,}; prefilter candidates "
        f"{first.candidates:,} ({out.backend})\n"
        f"sickbay {_m(ours_rate)} lines/s, grep {_m(grep_rate)} lines/s, ratio {ours_rate / grep_rate:.3f}"
        + (f"; sickbay on {out.processes} procs {_m(out.rate([out.par]))} lines/s" if out.par else ""),
        file=sys.stderr,
    )
    if not args.no_record:
        record(out)
    result = {
        "extract_lines_per_s": round(ours_rate),
        "grep_lines_per_s": round(grep_rate),
        "ratio": round(ours_rate / grep_rate, 3),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
