"""The extractor: one normalised :class:`LogLine` in, zero or more typed :class:`Signal` out.

Pure and deterministic: no I/O, no clock except the ``observed`` time passed in.
The same function serves the Faust agent and ``sickbay diagnose``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, NamedTuple

import hostlist

from schemas.base import as_utc
from schemas.raw import LogLine
from schemas.signals import RANK_PLACEMENT_RULE, AttrValue, RankPlacement, Signal, SourceRef
from streams.extract.carriers import Carried, strip_colours, uncarried
from streams.extract.rules import Catalog, LookupEntry, Rule, load_catalog
from streams.extract.summary import Fields, render
from streams.extract.timeparse import line_time_and_host, local_clock_time

_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:|\[(?:PG [^\]]*?)?Rank (\d+)\]")
# ``srun --label`` puts the task id first ("4: RuntimeError: ..."). It is the rank when srun starts
# one task per GPU, the node's index when it starts one torchrun per node: kept apart as
# ``srun_task``; the correlator trusts it as a rank only where NCCL's own lines showed task == rank.
_SRUN_LABEL = re.compile(r"^\s*(\d+): ")
# NCCL's debug prefix names the host: ``host:pid:tid [cudaDev] ...`` (failure-signatures.md §4.2).
_NCCL_PREFIX = re.compile(r"^(?:\S+\s+){0,3}?([A-Za-z][\w.\-]*):\d+:\d+ \[\d+\] ")
MAX_TEXT = 4096
# Whether a signal is wanted, asked before it is built: (rule, job id, node, event time).
Wanted = Callable[[Rule, str | None, str | None, datetime], bool]


class Position(NamedTuple):
    """Where a record was read; makes ``signal_id`` stable under replay. A named tuple: one is built
    per record read, and a frozen dataclass's field-by-field setup cost several times as much."""

    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    file: str | None = None
    line: int | None = None
    nth: int = 0  # which line of a record that carries several (OTLP, Loki push, batches)

    def token(self) -> str | None:
        suffix = f"#{self.nth}" if self.nth else ""
        if self.topic is not None and self.offset is not None:
            return f"{self.topic}/{self.partition}/{self.offset}{suffix}"
        if self.file is not None and self.line is not None:
            return f"{self.file}:{self.line}{suffix}"
        return None


def _cast(value: str, kind: str) -> AttrValue:
    """Typed group values; a value that does not parse is kept as text rather than lost."""
    try:
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
        if kind == "hostlist":
            return list(hostlist.expand_hostlist(value))
    except (ValueError, hostlist.BadHostlist):
        return value
    return value


def _nccl_host(text: str) -> str | None:
    if ":" not in text:
        return None
    m = _NCCL_PREFIX.match(text)
    return m.group(1) if m else None


def _signal_id(line: LogLine, pos: Position, rule_id: str, event_time: datetime) -> str:
    token = pos.token() or f"{line.host}|{line.job_id}|{event_time.isoformat()}|{line.text}"
    return hashlib.blake2b(f"{token}|{rule_id}".encode(), digest_size=10).hexdigest()


_UNREAD: Any = object()


class _Prefixes:
    """What a line's prefixes say, each read once and only for a line some rule matched or wants
    without its carrier prefix (most lines are neither). Lazy by hand: Python 3.11's
    ``cached_property`` takes a lock on every read, which cost more than the reads it saved."""

    __slots__ = ("_carried", "_time_and_host", "line", "observed")

    def __init__(self, line: LogLine, observed: datetime) -> None:
        self.line = line
        self.observed = observed
        self._carried: Carried | None = _UNREAD
        self._time_and_host: tuple[datetime | None, str | None] = _UNREAD

    @property
    def carried(self) -> Carried | None:
        if self._carried is _UNREAD:
            self._carried = uncarried(self.line.text)
        return self._carried

    @property
    def time_and_host(self) -> tuple[datetime | None, str | None]:
        if self._time_and_host is _UNREAD:
            self._time_and_host = self._read_time_and_host()
        return self._time_and_host

    def _read_time_and_host(self) -> tuple[datetime | None, str | None]:
        """The time and host the line's own prefix states; behind a carrier prefix (``kubectl``'s
        time comes first, a pdsh host last: a syslog header's host is the line's own)."""
        text = self.line.text
        own = self.carried.text if self.carried is not None else text
        when, host = line_time_and_host(text, self.observed)
        if when is None and own is not text:
            when, host = line_time_and_host(own, self.observed)
        if when is None and self.line.event_time is None:
            when = local_clock_time(own, self.observed)
        if host is None and self.carried is not None:
            host = self.carried.host  # pdsh's or clush's node
        return when, host


class Extractor:
    def __init__(self, catalog: Catalog | None = None) -> None:
        self.catalog = catalog or load_catalog()

    def match(self, rule: Rule, text: str) -> tuple[dict[str, AttrValue], int] | None:
        """The rule's typed fields and where its match starts, or None."""
        m = rule.regex.search(text)
        if m is None:
            return None
        fields = {k: _cast(v, rule.casts.get(k, "str")) for k, v in m.groupdict().items() if v is not None}
        return fields, m.start()

    def extract(
        self,
        line: LogLine,
        observed: datetime,
        pos: Position | None = None,
        wanted: Wanted | None = None,
        within: tuple[int, ...] | None = None,
        placements: list[RankPlacement] | None = None,
    ) -> list[Signal]:
        """The line's signals. ``wanted`` (the streaming stage's) is asked before each is built and
        may decline it (a repeat the stage would drop, a lead only ``diagnose`` uses): a declined
        signal is not built or returned but still counts as the line's (its group fired, no catch-all
        speaks), so the other signals are those of a call without ``wanted``. ``within``: literal ids
        holding every literal of the line's text (``Catalog.candidates``). ``placements``: where the
        streaming stage wants rank placements in their compact form (``RankPlacement``, appended
        there instead of returned as ``nccl.rank_placement`` signals; one without a node or a rank
        count is returned as a signal, as it was found)."""
        pos = pos or Position()
        if "\x1b" in line.text:  # terminal colours hide word boundaries and split literals
            line = line.model_copy(update={"text": strip_colours(line.text)})
            within = None  # the stripped text may hold a literal the colours split
        text = line.text
        signals: list[Signal] = []
        fired = False
        fired_groups: set[str] = set()
        prefixes = _Prefixes(line, observed)
        for rule in self.catalog.candidates(text, within):
            if rule.group and rule.group in fired_groups:
                continue
            if rule.fallback and fired:
                break  # catch-alls come last and only speak when nothing else did
            matched = self.match(rule, text)
            if matched is None and rule.anchored:
                matched = self._match_carried(rule, prefixes.carried)
            if matched is None:
                continue
            fields, start = matched
            fired = True
            if rule.group:
                fired_groups.add(rule.group)
            line_time, line_host = prefixes.time_and_host
            rank_end = start if rule.rank_scope == "before" else None
            sig = self._signal(
                rule, fields, line, pos, observed, line_time, line_host, rank_end, wanted, placements
            )
            if sig is not None:
                signals.append(sig)
        return signals

    def _match_carried(self, rule: Rule, carried: Carried | None) -> tuple[dict[str, AttrValue], int] | None:
        """A rule anchored at the line's start, tried on the line without the prefix kubectl,
        compose, Ray, srun or pdsh put before it (``carriers.py``); where it matches, counted from
        the start of the whole line."""
        if carried is None or (matched := self.match(rule, carried.text)) is None:
            return None
        return matched[0], matched[1] + carried.offset

    def _signal(
        self,
        rule: Rule,
        fields: dict[str, AttrValue],
        line: LogLine,
        pos: Position,
        observed: datetime,
        line_time: datetime | None,
        line_host: str | None,
        rank_end: int | None = None,
        wanted: Wanted | None = None,
        placements: list[RankPlacement] | None = None,
    ) -> Signal | None:
        entry = self._lookup(rule, fields)  # before the pops: a site rule may key its table on any group
        event_time = as_utc(line_time or line.event_time or observed)
        # A line may name the node it is about (a controller reporting a failed node): that node
        # is the subject, not the host that logged the line.
        subject = fields.pop("node", None)
        job_id = fields.pop("job_id", None) or line.job_id
        node = str(subject) if subject is not None else (line.host or line_host or _nccl_host(line.text))
        job = str(job_id) if job_id is not None else None
        if wanted is not None and not wanted(rule, job, node, event_time):
            return None
        rank = fields.pop("rank", None)
        if rank is None:
            m = (
                _RANK_PREFIX.search(line.text)
                if rank_end is None
                else _RANK_PREFIX.search(line.text, 0, rank_end)
            )
            if m:
                rank = int(m.group(1) or m.group(2))
        if placements is not None and rule.id == RANK_PLACEMENT_RULE:
            placed = _placement(fields, line, pos, rule, event_time, node, job, rank)
            if placed is not None:
                placements.append(placed)
                return None
        # srun --label's task id, kept beside a rank: where the two agree, tasks are ranks
        task: int | None = None
        if (m := _SRUN_LABEL.match(line.text)) is not None:
            task = int(m.group(1))
        gpu = fields.pop("gpu", None)
        summary_template = (entry.summary if entry and entry.summary else None) or rule.summary
        all_fields = Fields(fields, gpu=gpu, rank=rank, job_id=job_id)
        if subject is not None:
            all_fields["node"] = subject  # popped above, still named in summaries
        attrs = dict(fields)
        if task is not None and "task" not in attrs:
            attrs["srun_task"] = task
        if entry is not None and entry.name:
            attrs["meaning"] = entry.name
        if entry is not None and entry.action:
            attrs["vendor_action"] = entry.action

        def pick(name: str, default: Any) -> Any:
            value = getattr(entry, name, None) if entry is not None else None
            return default if value is None else value

        return Signal(
            signal_id=_signal_id(line, pos, rule.id, event_time),
            rule=rule.id,
            role=pick("role", rule.role),
            category=pick("category", rule.category),
            summary=render(summary_template, all_fields),
            event_time=event_time,
            observed_time=observed,
            node=node,
            job_id=job,
            rank=int(rank) if isinstance(rank, (int, str)) else None,
            gpu=str(gpu) if gpu is not None else None,
            attrs=attrs,
            restartable=pick("restartable", rule.restartable),
            isolation=pick("isolation", rule.isolation),
            decisive=pick("decisive", rule.decisive),
            weight=pick("weight", rule.weight),
            context=pick("context", rule.context),
            text=line.text[:MAX_TEXT],
            source=SourceRef(
                kind=rule.source,
                adapter=line.adapter,
                topic=pos.topic,
                partition=pos.partition,
                offset=pos.offset,
                file=pos.file or line.file,
                line=pos.line,
            ),
        )

    def _lookup(self, rule: Rule, fields: dict[str, AttrValue]) -> LookupEntry | None:
        if rule.lookup is None or rule.lookup_key is None:
            return None
        return self.catalog.lookups[rule.lookup].get(str(fields.get(rule.lookup_key)))


def _placement(
    fields: dict[str, AttrValue],
    line: LogLine,
    pos: Position,
    rule: Rule,
    event_time: datetime,
    node: str | None,
    job: str | None,
    rank: Any,
) -> RankPlacement | None:
    """The compact form of an ``nccl.rank_placement`` match (``Extractor.extract``'s
    ``placements``); None where it would not place a rank (no node, rank or rank count)."""
    nranks, dev = fields.get("nranks"), fields.get("cuda_dev")
    bus, task = fields.get("bus_id"), fields.get("task")
    if node is None or not isinstance(rank, int) or not isinstance(nranks, int) or nranks < 1 or rank < 0:
        return None
    return RankPlacement(
        signal_id=_signal_id(line, pos, rule.id, event_time),
        event_time=event_time,
        node=node,
        job_id=job,
        rank=rank,
        nranks=nranks,
        cuda_dev=dev if isinstance(dev, int) else None,
        bus_id=bus if isinstance(bus, str) else None,
        task=task if isinstance(task, int) else None,
        text=line.text[:MAX_TEXT],
        source=SourceRef(
            kind=rule.source,
            adapter=line.adapter,
            topic=pos.topic,
            partition=pos.partition,
            offset=pos.offset,
            file=pos.file or line.file,
            line=pos.line,
        ),
    )
