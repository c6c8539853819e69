"""Score ``sickbay diagnose`` on real, labelled failure logs: tests/corpus/real-failures.jsonl (the
82 cases given with the project) or another file of the same format (thread-failures.jsonl)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from schemas import codec
from streams.diagnose.driver import Diagnoser, summary

CORPUS = Path(__file__).with_name("real-failures.jsonl")
THREADS = Path(__file__).with_name("thread-failures.jsonl")


@dataclass(frozen=True)
class Outcome:
    id: str
    want_category: str
    got_category: str
    want_restartable: bool
    got_restartable: bool
    want_isolate: bool
    got_isolate: bool
    rule: str | None
    want_culprit: str | None = None
    got_culprit: str | None = None

    @property
    def culprit_named(self) -> bool:
        """The verdict's culprit names what the label's does: one of its PCI addresses (the bus and
        device; the function and the domain's zeros aside), ranks, IPv4 addresses or host names.
        Only for a case whose label names a culprit."""
        return culprit_named(self.want_culprit or "", self.got_culprit or "")


_PCI = re.compile(r"(?:[0-9a-f]{4,8}:)?([0-9a-f]{2}:[0-9a-f]{2})(?:\.[0-7])?", re.IGNORECASE)
_RANK = re.compile(r"\brank (\d+)", re.IGNORECASE)
_HOST = re.compile(r"[A-Za-z][A-Za-z0-9-]*\d[A-Za-z0-9.-]*")
_WORD_HOST = re.compile(r"[A-Za-z][A-Za-z0-9.-]*[A-Za-z0-9]|[A-Za-z]")
_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")


def culprit_named(want: str, got: str) -> bool:
    """Whether ``got`` names one of the things ``want`` names (``Outcome.culprit_named``)."""
    pci_want = {m.lower() for m in _PCI.findall(want)}
    if pci_want & {m.lower() for m in _PCI.findall(got)}:
        return True
    if set(_RANK.findall(want)) & set(_RANK.findall(got)):
        return True
    if set(_IPV4.findall(want)) & set(_IPV4.findall(got)):  # a node known by its address (Ray's)
        return True
    if _short_names(_HOST, _PCI.sub(" ", want)) & _short_names(_HOST, _PCI.sub(" ", got)):
        return True
    # A host named without a digit ("errol", "bock") is one only as the culprit's first word, the
    # node ``culprit_text`` puts first, and as a whole word of the label.
    words = got.split(maxsplit=1)
    first = _short(words[0]) if words else ""
    if not first or first in ("gpu", "rank") or not _WORD_HOST.fullmatch(first):
        return False
    return first in _short_names(_WORD_HOST, want)


def _short(host: str) -> str:
    """A host name as the matcher compares it: its first label, lower case."""
    return host.split(".", maxsplit=1)[0].lower()


def _short_names(pattern: re.Pattern[str], text: str) -> set[str]:
    return {_short(h) for h in pattern.findall(text)}


def rate(outcomes: list[Outcome], ok: Callable[[Outcome], bool]) -> float:
    """The share of ``outcomes`` for which ``ok`` holds."""
    return sum(1 for o in outcomes if ok(o)) / len(outcomes)


def score(tmp: Path, corpus: Path = CORPUS) -> list[Outcome]:
    diagnoser = Diagnoser()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    out: list[Outcome] = []
    for raw in corpus.read_text().splitlines():
        case = codec.loads(raw)
        path = tmp / f"{case['id']}.log"
        path.write_text(case["excerpt"] + "\n")
        s = summary(diagnoser.run([str(path)], now))
        root = s["root_cause"]
        out.append(
            Outcome(
                id=case["id"],
                want_category=case["category"],
                got_category=str(s["category"]),
                want_restartable=bool(case["restartable"]),
                got_restartable=bool(s["restartable"]),
                want_isolate=bool(case["isolate_node"]),
                got_isolate=bool(s["isolate"]),
                rule=root["rule"] if isinstance(root, dict) else None,
                want_culprit=case.get("culprit"),
                got_culprit=str(s["culprit"]) if s.get("culprit") else None,
            )
        )
    return out


def table(outcomes: list[Outcome]) -> str:
    by_cat: Counter[str] = Counter(o.want_category for o in outcomes)
    right: Counter[str] = Counter(o.want_category for o in outcomes if o.got_category == o.want_category)
    lines = ["category           right / cases"]
    lines += [f"{c:18} {right[c]:5} / {n}" for c, n in sorted(by_cat.items())]
    n = len(outcomes)
    lines.append(f"{'all':18} {sum(right.values()):5} / {n}")
    lines.append(f"restartable right: {sum(o.got_restartable == o.want_restartable for o in outcomes)} / {n}")
    lines.append(f"isolate right:     {sum(o.got_isolate == o.want_isolate for o in outcomes)} / {n}")
    lines += [
        f"  miss {o.id}: want {o.want_category}, got {o.got_category} ({o.rule})"
        for o in outcomes
        if o.got_category != o.want_category
    ]
    return "\n".join(lines)
