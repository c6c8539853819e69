"""The in-process driver: log lines → signals → the same attribution engine the stream uses."""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from schemas.incidents import Category
from schemas.raw import LogLine
from schemas.signals import RANK_PLACEMENT_RULE, Role, Signal
from streams.correlate.attribution import Verdict, attribute, evidence_of
from streams.correlate.correlator import apply_topology, window_from
from streams.correlate.progress import JOB_STARTING_RULES, is_checkpoint_save
from streams.correlate.restarts import failure_of, repeated
from streams.correlate.state import PastFailure, placements
from streams.diagnose.context_hosts import ContextHosts
from streams.diagnose.reader import MAX_LINE_BYTES, Chunk, RawLine, ReadReport, read_chunks
from streams.diagnose.survived import set_aside_survived
from streams.diagnose.teardown import read_teardown_hang
from streams.extract.extractor import Extractor, Position
from streams.extract.normalize import BadRecord, normalize
from streams.extract.prefilter import newline_offsets
from streams.extract.rules import Catalog

# Node-local logs collected per host (``<host>/kern.log``, ``nodes/<host>/dmesg.txt``, a sosreport's
# ``<host>/var/log/messages``): the folder names the host when the lines do not.
_NODE_LOCAL = re.compile(r"^(?:kern|kernel|dmesg|syslog|messages|journal)(?:[._\-].*)?$")
_HOSTNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.\-]{0,252}$")
_NOT_A_HOST = {"log", "logs", "var", "nodes", "hosts", "tmp", ".", "", "/"}


def host_from_path(path: str) -> str | None:
    """The host a node-local log file belongs to, from the folder it was collected into."""
    parts = Path(path).parts
    if not parts or not _NODE_LOCAL.match(parts[-1]):
        return None
    for folder in reversed(parts[:-1]):
        if folder not in _NOT_A_HOST:
            # Cluster host names follow RFC 1123 and carry a number (gpu-0042, dgx-a100-017, cn125);
            # a home or project folder (``alice``, ``run_3``) is not taken for a host.
            return folder if _HOSTNAME.match(folder) and any(c.isdigit() for c in folder) else None
    return None


POD_SCHEDULED_RULE = "kubernetes.pod_scheduled"


def pod_nodes(signals: list[Signal]) -> dict[str, str]:
    """Pod name -> the node it was bound to, from the folder's Kubernetes ``Scheduled`` events."""
    out: dict[str, str] = {}
    for s in signals:
        pod = s.attrs.get("pod")
        if s.rule == POD_SCHEDULED_RULE and isinstance(pod, str) and pod and s.node:
            out[pod] = s.node
    return out


def pod_host(path: str, pods: dict[str, str]) -> str | None:
    """The node of the pod whose log this is: the pod's name is a whole part of the file's path
    (``pods/<ns>_<pod>.log``, kubelet's ``<ns>_<pod>_<uid>/<container>/0.log``,
    ``containers/<pod>_<ns>_...``)."""
    best: str | None = None
    for pod in pods:
        for m in re.finditer(re.escape(pod), path):
            before = path[m.start() - 1] if m.start() > 0 else "/"
            after = path[m.end()] if m.end() < len(path) else "/"
            if before in "/_" and after in "/_." and (best is None or len(pod) > len(best)):
                best = pod
    return pods[best] if best is not None else None


# torchelastic's failure blocks name the host of each failed rank (failure-signatures.md §4.5).
_BLOCK_FIELD = re.compile(rb"[ \t]*(host|rank)[ \t]*:[ \t]*(\d+|\S+)")
_BLOCK_KEYS = (b"host", b"rank")


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


# A kernel message's first line as dmesg prints it: its time, then the driver's tag if it has one.
# A line of its that dmesg continued on the next line has no time there, only blanks as wide.
_DMESG_HEAD = re.compile(rb"(\[\s*\d+\.\d+\] )([A-Za-z][\w-]*: )?")
_CONTINUATION = b"\n" + b" " * 15

# A hard-wrapped line: every piece but the last is as long as the terminal was wide (shorter pieces
# are lines of their own), and one line is rarely wrapped more than a few times.
WRAP_MIN_WIDTH = 60
WRAP_MAX_PIECES = 4


class Diagnoser:
    """Scans inputs in large chunks: one multi-literal pass finds the few lines a rule can match,
    and only those are decoded, normalised and run through the rules."""

    def __init__(self, catalog: Catalog | None = None) -> None:
        self.extractor = Extractor(catalog)
        self.prefilter = self.extractor.catalog.prefilter

    def run(
        self, paths: list[str], now: datetime, progress: Callable[[ReadReport], None] | None = None
    ) -> Diagnosis:
        report = ReadReport()
        signals: list[Signal] = []
        rank_hosts: dict[int, str] = {}
        last_host: str | None = None
        contexts = ContextHosts()
        for chunk in read_chunks(paths, report):
            if progress is not None:
                progress(report)
            contexts.scan(chunk.source, chunk.first, chunk.data)
            if b"host" in chunk.data:
                last_host = self._blocks(chunk.data, last_host, rank_hosts)
            hits, _ = self.prefilter.chunk_hits(chunk.data)
            rules_at: dict[int, set[str]] = {}
            unread: list[int] = []  # lines (from 0, in the chunk) of wrap width: a literal, no rule matched
            for hit in hits:
                if len(hit.line) > MAX_LINE_BYTES:
                    report.skipped_long += 1
                    continue
                if hit.line.find(b"\x00") >= 0:  # find(): see extract.telemetry.looks_like_metric
                    report.skipped_binary += 1
                    continue
                number = chunk.first + hit.number
                line = _log_line(RawLine(chunk.source, number, hit.line.rstrip(b"\r")))
                # Lines without a time of their own keep their order in the input.
                observed = now + timedelta(microseconds=len(signals) + number)
                extractor = self.prefilter.extractor_for(hit.literals)
                found = extractor.extract(line, observed, Position(file=chunk.source, line=number))
                if found:
                    rules_at[number] = {s.rule for s in found}
                    signals.extend(found)
                elif len(hit.line) >= WRAP_MIN_WIDTH:
                    unread.append(hit.number)
            self._unwrapped(chunk, rules_at, unread, now, signals)
            self._continued(chunk, now, signals)
        if progress is not None:
            progress(report)
        file_hosts: dict[str, str | None] = {}
        pods = pod_nodes(signals)
        signals = [self._with_host(s, rank_hosts, file_hosts, pods, contexts) for s in signals]
        signals = set_aside_survived(signals)  # errors the job went on training after
        signals = read_teardown_hang(signals)  # a watchdog stuck while ranks were exiting
        places = placements(signals)
        window = window_from(
            [s for s in signals if s.rule != RANK_PLACEMENT_RULE], cluster="diagnose", job_id="-", now=now
        )
        topology = None  # the allocation in the folder's slurmctld log, if there is one
        for sig in signals:
            if sig.role == Role.TOPOLOGY:
                topology, _ = apply_topology(topology, sig, "diagnose")
        verdict = attribute(window, topology, places.get, finished=True) if window is not None else None
        if verdict is not None:
            verdict = restart_loop(verdict, signals)
        return Diagnosis(verdict=verdict, signals=signals, report=report, rank_hosts=rank_hosts)

    def _unwrapped(
        self,
        chunk: Chunk,
        rules_at: dict[int, set[str]],
        unread: list[int],
        now: datetime,
        signals: list[Signal],
    ) -> None:
        """Lines a terminal or a pasted log hard-wrapped, read joined again. A wrap is suspected where
        a rule's literal runs from one line into the next (``Prefilter.wrapped_lines``), or where a
        line as long as a wrapped piece holds a literal but no rule matched it (the pattern may go on
        in the next line). The pieces of that wrapped line (the lines of its width before it, the
        lines of its width after it, and the next one) are joined and read; what the joined line says
        that none of its pieces did is added, numbered as its first piece. Real logs pasted into
        threads wrap NCCL's watchdog lines, XLA's out-of-memory line and Horovod's shutdown notice
        this way."""
        data = chunk.data
        ends = newline_offsets(data)
        breaks = sorted({*self.prefilter.wrapped_lines(data, ends), *unread})
        if not breaks:
            return
        count = len(ends) + 1  # the last line has no newline after it (it may be empty)

        def line_at(i: int) -> bytes:
            return data[ends[i - 1] + 1 if i else 0 : ends[i] if i < len(ends) else len(data)].rstrip(b"\r")

        done: set[int] = set()
        for k in breaks:
            width = len(line_at(k))
            # a wrapped line's pieces are as long as the terminal was wide, the last one no longer
            if width < WRAP_MIN_WIDTH or k + 1 >= count or len(line_at(k + 1)) > width:
                continue
            first = k
            while first > 0 and k - first < WRAP_MAX_PIECES - 2 and len(line_at(first - 1)) == width:
                first -= 1
            last = k + 1
            while (
                last + 1 < count
                and last - first < WRAP_MAX_PIECES - 1
                and len(line_at(last)) == width
                and len(line_at(last + 1)) <= width
            ):
                last += 1
            if first in done:
                continue
            done.add(first)
            text = b"".join(line_at(i) for i in range(first, last + 1))
            known = set().union(*(rules_at.get(chunk.first + i, set()) for i in range(first, last + 1)))
            found = self._read_joined(chunk, chunk.first + first, text, now, len(signals))
            signals.extend(s for s in found if s.rule not in known)

    def _read_joined(self, chunk: Chunk, number: int, text: bytes, now: datetime, seen: int) -> list[Signal]:
        """The signals of a line joined from pieces (a hard wrap, a dmesg message), numbered as its
        first piece, ``number``; none for a line too long, binary or without a rule's literal.
        ``seen``: signals read so far (lines without a time of their own keep their order)."""
        if len(text) > MAX_LINE_BYTES or text.find(b"\x00") >= 0:  # find(): as looks_like_metric
            return []
        if not (ids := self.prefilter.literal_ids(text)):
            return []
        line = _log_line(RawLine(chunk.source, number, text))
        observed = now + timedelta(microseconds=seen + number)
        return self.prefilter.extractor_for(ids).extract(
            line, observed, Position(file=chunk.source, line=number)
        )

    def _continued(self, chunk: Chunk, now: datetime, signals: list[Signal]) -> None:
        """Kernel messages that ``dmesg`` printed over several lines, read as one. A continuation
        line has no time of its own and is indented as wide as the first line's ``[ 1843.308145] ``
        prefix (15 characters or more); the driver's tag (``NVRM:``) it repeats is dropped. The
        classic "fallen off the bus" message names its GPU only on its first line and says what
        happened only on its last (failure-signatures.md §3.1): read joined, the signal of the last
        line gets the GPU. Candidates are found by searching for a newline and 15 blanks (a regex
        over every line was a tenth of diagnose's time on a large log); most logs have none. The
        search goes on after the message it found, so each message is read once."""
        data = chunk.data
        hit = data.find(_CONTINUATION)
        while hit >= 0:
            after = self._join_message(chunk, data.rfind(b"\n", 0, hit) + 1, now, signals)
            hit = data.find(_CONTINUATION, max(hit + 1, after - 1))

    def _join_message(self, chunk: Chunk, start: int, now: datetime, signals: list[Signal]) -> int:
        """The message whose first line starts at ``start``, when that line is dmesg's: joined with
        its continuation lines (at most ``WRAP_MAX_PIECES`` lines) and read. A rule the joined line
        fires that a piece fired too replaces that piece's signal when it names a GPU or node the
        piece's did not; a rule no piece fired is added. Returns where the message ends (``start``
        when the line is no dmesg message's first)."""
        data = chunk.data
        m = _DMESG_HEAD.match(data, start)
        end = data.find(b"\n", start)
        if m is None or end < 0:
            return start
        width, tag = m.end(1) - start, m.group(2) or b""
        pieces = [data[start:end]]
        pos = end + 1
        while len(pieces) < WRAP_MAX_PIECES and pos < len(data):
            end = data.find(b"\n", pos)
            nxt = data[pos : end if end >= 0 else len(data)]
            if len(nxt) <= width or nxt[:width].strip() or nxt[width : width + 1].isspace():
                break
            body = nxt[width:]
            pieces.append(body[len(tag) :].lstrip() if tag and body.startswith(tag) else body)
            pos = end + 1 if end >= 0 else len(data)
        if len(pieces) == 1:
            return start
        number = chunk.first + data.count(b"\n", 0, start)
        lines = range(number, number + len(pieces))
        joined = b" ".join(p.rstrip() for p in pieces)
        for sig in self._read_joined(chunk, number, joined, now, len(signals)):
            same = [
                k
                for k, s in enumerate(signals)
                if s.rule == sig.rule and s.source.file == chunk.source and s.source.line in lines
            ]
            if not same:
                signals.append(sig)
            for k in same:
                old = signals[k]
                if (sig.gpu and not old.gpu) or (sig.node and not old.node):
                    signals[k] = sig.model_copy(update={"source": old.source, "text": old.text})
        return pos

    @staticmethod
    def _blocks(data: bytes, last_host: str | None, rank_hosts: dict[int, str]) -> str | None:
        """torchelastic failure blocks: a ``host :`` line, then the ``rank :`` line of that failure.
        Only a line that starts with the key (after blanks) counts. Each key is found with
        ``bytes.find`` and only its lines are matched: a multi-line regex tried at every line start
        of every chunk was about a fifth of diagnose's time. A rank that is not a number (a log's own
        ``rank: zero``) is no block's."""
        fields: list[tuple[int, re.Match[bytes]]] = []
        for key in _BLOCK_KEYS:
            i = data.find(key)
            while i >= 0:
                start = data.rfind(b"\n", 0, i) + 1
                if not data[start:i].strip(b" \t") and (m := _BLOCK_FIELD.match(data, start)) is not None:
                    fields.append((start, m))
                i = data.find(key, i + len(key))
        fields.sort(key=lambda field: field[0])
        for _, m in fields:
            value = m.group(2)
            if m.group(1) == b"host":
                last_host = value.decode("utf-8", errors="replace")
            elif last_host is not None and value.isdigit():
                rank_hosts[int(value)] = last_host
        return last_host

    @staticmethod
    def _with_host(
        s: Signal,
        rank_hosts: dict[int, str],
        file_hosts: dict[str, str | None],
        pods: dict[str, str],
        contexts: ContextHosts,
    ) -> Signal:
        """A signal whose line names no host gets the one its rank's failure block, its file's
        folder or pod, or the file's last prompt or ``Node:`` line before it names."""
        if s.node is not None:
            return s
        if s.rank is not None and s.rank in rank_hosts:
            return s.model_copy(update={"node": rank_hosts[s.rank]})
        if s.source.file:
            if s.source.file not in file_hosts:
                file_hosts[s.source.file] = host_from_path(s.source.file) or pod_host(s.source.file, pods)
            host = file_hosts[s.source.file]
            if host is None and s.source.line is not None:
                host = contexts.host_at(s.source.file, s.source.line)
            if host is not None:
                return s.model_copy(update={"node": host})
        return s


def restart_loop(verdict: Verdict, signals: list[Signal]) -> Verdict:
    """A folder holding several attempts of one job: the first root like the verdict's in each
    attempt (split at the scheduler's start lines) and the last checkpoint save; whether they make a
    restart loop is ``restarts.repeated`` (the stream reads the same history from its tables)."""
    starts = sorted(
        {s.event_time for s in signals if s.role == Role.TOPOLOGY and s.rule in JOB_STARTING_RULES}
    )
    if len(starts) < 2:
        return verdict
    attempt_of = functools.partial(bisect.bisect_right, starts)
    root = verdict.root
    failure = failure_of(root.rule, root.summary, root.node, root.gpu)
    same = sorted(
        (
            s
            for s in signals
            if s.role == Role.ROOT_CANDIDATE and failure_of(s.rule, s.summary, s.node, s.gpu) == failure
        ),
        key=lambda s: s.event_time,
    )
    firsts: dict[int, Signal] = {}
    for s in same:
        firsts.setdefault(attempt_of(s.event_time), s)
    root_attempt = attempt_of(root.event_time)
    others = [
        PastFailure(attempt=a, failure=failure, root=evidence_of(firsts[a]))
        for a in sorted(firsts)
        if a > 0 and a != root_attempt
    ]
    saves = [s.event_time for s in signals if is_checkpoint_save(s)]
    return repeated(verdict, others, max(saves, default=None))


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
