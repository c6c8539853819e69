"""The in-process driver: log lines → signals → the same attribution engine the stream uses."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from schemas.incidents import Category
from schemas.raw import LogLine
from schemas.signals import Signal
from streams.correlate.attribution import Verdict, attribute
from streams.correlate.correlator import window_from
from streams.diagnose.reader import RawLine, ReadReport, read_lines
from streams.extract.extractor import Extractor, Position
from streams.extract.normalize import BadRecord, normalize
from streams.extract.rules import Catalog

# torchelastic's failure blocks name the host of each failed rank (failure-signatures.md §4.5).
_BLOCK_HOST = re.compile(rb"^\s*host\s*:\s*(\S+)")
_BLOCK_RANK = re.compile(rb"^\s*rank\s*:\s*(\d+)")


@dataclass
class Diagnosis:
    verdict: Verdict | None
    signals: list[Signal]
    report: ReadReport
    rank_hosts: dict[int, str] = field(default_factory=dict)

    @property
    def coverage(self) -> list[str]:
        return sorted({s.source.kind for s in self.signals})


def _log_line(raw: RawLine) -> LogLine:
    text = raw.data
    if text.lstrip()[:1] == b"{":
        try:
            return normalize(text)
        except BadRecord:
            pass  # JSON-looking text that is no shipper record is still a log line
    return LogLine(text=text.decode("utf-8", errors="replace"), adapter="plain", file=raw.source)


class Diagnoser:
    def __init__(self, catalog: Catalog | None = None) -> None:
        self.extractor = Extractor(catalog)

    def run(
        self, paths: list[str], now: datetime, progress: Callable[[ReadReport], None] | None = None
    ) -> Diagnosis:
        report = ReadReport()
        signals: list[Signal] = []
        rank_hosts: dict[int, str] = {}
        last_host: str | None = None
        prefilter = self.extractor.catalog.prefilter_bytes
        for index, raw in enumerate(read_lines(paths, report)):
            if progress is not None and index % 200_000 == 0:
                progress(report)
            if b"host" in raw.data or b"rank" in raw.data:
                last_host = self._block(raw.data, last_host, rank_hosts)
            # Cheap test first: most lines match no literal and are never decoded or normalised.
            if prefilter.search(raw.data) is None:
                continue
            line = _log_line(raw)
            # Lines without a time of their own keep their order in the input.
            observed = now + timedelta(microseconds=index)
            signals.extend(self.extractor.extract(line, observed, Position(file=raw.source, line=raw.number)))
        if progress is not None:
            progress(report)
        signals = [self._with_host(s, rank_hosts) for s in signals]
        window = window_from(signals, cluster="diagnose", job_id="-", now=now)
        verdict = attribute(window, None) if window is not None else None
        return Diagnosis(verdict=verdict, signals=signals, report=report, rank_hosts=rank_hosts)

    @staticmethod
    def _block(data: bytes, last_host: str | None, rank_hosts: dict[int, str]) -> str | None:
        m = _BLOCK_HOST.match(data)
        if m:
            return m.group(1).decode("utf-8", errors="replace")
        r = _BLOCK_RANK.match(data)
        if r and last_host:
            rank_hosts[int(r.group(1))] = last_host
        return last_host

    @staticmethod
    def _with_host(s: Signal, rank_hosts: dict[int, str]) -> Signal:
        if s.node is None and s.rank is not None and s.rank in rank_hosts:
            return s.model_copy(update={"node": rank_hosts[s.rank]})
        return s


def culprit_text(verdict: Verdict) -> str | None:
    """The culprit as operators (and the corpus labels) write it: ``node GPU pci``, ``rank N``."""
    c = verdict.culprit
    if c is None:
        return None
    parts = [p for p in (c.node, f"GPU {c.gpu}" if c.gpu else None) if p]
    if not parts and c.rank is not None:
        parts = [f"rank {c.rank}"]
    return " ".join(parts) or None


def summary(d: Diagnosis) -> dict[str, object]:
    """The ``--format json`` object: exactly the documented top-level keys."""
    v = d.verdict
    if v is None:
        return {
            "category": Category.UNKNOWN.value,
            "restartable": True,
            "isolate": [],
            "culprit": None,
            "root_cause": None,
            "supporting": [],
            "evidence": [],
            "confidence": 0.0,
            "coverage": d.coverage,
        }
    root = v.root
    by_id = {s.signal_id: s for s in d.signals}
    evidence = []
    for e in v.evidence:
        src = by_id.get(e.signal_id)
        evidence.append(
            {
                "rule": e.rule,
                "source": src.source.file if src else None,
                "line": src.source.line if src else None,
                "text": e.text,
            }
        )
    return {
        "category": v.category.value,
        "restartable": v.restartable,
        "isolate": v.isolate,
        "culprit": culprit_text(v),
        "root_cause": {
            "rule": root.rule,
            "summary": root.summary,
            "text": root.text,
            "source": root.source.file,
            "line": root.source.line,
        },
        "supporting": [
            {
                "rule": s.rule,
                "summary": s.summary,
                "count": s.count,
                "nodes": s.nodes,
                "ranks": s.ranks,
                "sample": s.sample,
            }
            for s in v.supporting
        ],
        "evidence": evidence,
        "confidence": round(v.confidence, 3),
        "coverage": d.coverage,
    }
