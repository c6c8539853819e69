"""Where simulated events go: a folder of log files (for ``sickbay diagnose``), or shipper
records on ``<prefix>.raw.logs`` (for the streaming pipeline), replayed at a chosen speed."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from connectors.sources.simulator.events import SimEvent
from connectors.sources.simulator.scenario import Scenario
from connectors.sources.simulator.shippers import Shipping
from schemas import codec


@dataclass(frozen=True, slots=True)
class Record:
    time: datetime
    key: bytes
    value: bytes
    decisive: bool
    kind: str


def write_events(events: Iterable[SimEvent], logs: Path) -> int:
    """Append each event's line to its file under ``logs`` (events in time order); returns lines written."""
    by_file: dict[str, list[str]] = {}
    n = 0
    for ev in events:
        by_file.setdefault(ev.rel, []).append(ev.line)
        n += 1
    for rel, lines in by_file.items():
        path = logs / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
    return n


def write_files(scenario: Scenario, root: Path) -> Path:
    """``root/<scenario_id>/logs/...`` (what a collector would have gathered) and ``truth.json`` beside it."""
    folder = root / scenario.truth.scenario_id
    logs = folder / "logs"
    if logs.exists():
        for p in sorted(logs.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
    logs.mkdir(parents=True, exist_ok=True)
    write_events(scenario.events, logs)
    (folder / "truth.json").write_bytes(codec.dumps(scenario.truth) + b"\n")
    return folder


def iter_records(
    events: Iterable[SimEvent], shipping: Shipping, *, telemetry: bool = True
) -> Iterator[Record]:
    """Each event as its shipper writes it to Kafka (key = the shipping host)."""
    for ev in events:
        if ev.kind == "telemetry" and not telemetry:
            continue
        yield Record(ev.time, ev.ship_host.encode(), shipping.record(ev), ev.decisive, ev.kind)


def records(events: Iterable[SimEvent], shipping: Shipping, *, telemetry: bool = True) -> list[Record]:
    return list(iter_records(events, shipping, telemetry=telemetry))


_SPEED = re.compile(r"^(?:x\s*(?P<a>[\d.]+)|(?P<b>[\d.]+)\s*x?)$")


def parse_speed(text: str) -> float | None:
    """``realtime`` → 1.0, ``x60`` / ``60x`` / ``60`` → 60.0, ``max`` → None (as fast as possible)."""
    t = text.strip().lower()
    if t in ("max", "fast", "asap"):
        return None
    if t in ("realtime", "real-time", "1x", "x1"):
        return 1.0
    m = _SPEED.match(t)
    if not m:
        raise ValueError(f"speed must be realtime, xN or max, not {text!r}")
    value = float(m.group("a") or m.group("b"))
    if value <= 0:
        raise ValueError("speed must be positive")
    return value


def pace(
    recs: Iterable[Record], *, speed: float | None, max_gap_s: float | None = None, start_s: float = 0.0
) -> Iterator[tuple[float, Record]]:
    """Wall-clock offsets for ``recs`` (time-ordered): event-time gaps divided by ``speed``, each capped
    at ``max_gap_s``; ``speed=None`` (max) sends everything at ``start_s``."""
    offset, prev = start_s, None
    for r in recs:
        if prev is not None and speed is not None:
            gap = max(0.0, (r.time - prev).total_seconds()) / speed
            offset += min(gap, max_gap_s) if max_gap_s is not None else gap
        yield offset, r
        prev = r.time


def timetable(
    recs: Iterable[Record], *, speed: float | None, max_gap_s: float | None = None, start_s: float = 0.0
) -> list[tuple[float, Record]]:
    return list(pace(recs, speed=speed, max_gap_s=max_gap_s, start_s=start_s))


def play(
    table: Iterable[tuple[float, Record]],
    send: Callable[[float, Record], None],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll: Callable[[], None] | None = None,
) -> float:
    """Send each record at its offset from now (offsets ascending); ``send`` gets the offset used."""
    t0 = clock()
    for offset, rec in table:
        wait = t0 + offset - clock()
        while wait > 0:
            if poll is not None:
                poll()
            sleep(min(wait, 0.05))
            wait = t0 + offset - clock()
        send(clock() - t0, rec)
    return t0


class KafkaOut:
    """Produce records to the raw-logs topic of a catalog with connectors.kafka.ReliableProducer."""

    def __init__(self, bootstrap: str, topic: str, client_id: str = "sickbay-sim") -> None:
        from connectors.kafka import ReliableProducer

        self.topic = topic
        self.producer = ReliableProducer(bootstrap, client_id, linger_ms=2)

    def send(self, rec: Record) -> None:
        self.producer.produce(self.topic, rec.value, key=rec.key)

    def close(self, timeout_s: float = 30.0) -> int:
        left = self.producer.flush(timeout_s)
        return left + self.producer.failed
