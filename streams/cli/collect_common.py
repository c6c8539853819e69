"""What every source collector's CLI shares: the spooling producer and the coverage report.

Records go through :class:`connectors.kafka.ReliableProducer` with a local spool
(``$SICKBAY_STATE_DIR/collect-<name>/spool``): when the broker is unreachable the
collector keeps reading and the spool replays in order once it answers.

The coverage report is a :class:`schemas.collector.CollectorReport`: what the
collector reached (its sources, plus the broker), counts, and what answered but
matched nothing. It is logged as ``coverage {json}`` on stderr every
``report_every`` seconds and once at exit, like ``sickbay collect files``.
"""

from __future__ import annotations

import logging
import socket
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

import typer

from connectors.kafka import ReliableProducer
from connectors.sources.spool import Spool, SpoolError
from schemas import codec
from schemas.base import utcnow
from schemas.collector import CollectorReport, Reach
from streams.cli.errors import fail
from streams.settings import Settings

log = logging.getLogger("sickbay.collect")


def setup_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def producer(settings: Settings, name: str, client_id: str, *, spool: bool = True) -> ReliableProducer:
    """A producer spooling under the state dir; an unreachable broker is not an error at start.

    ``spool=False`` for short-lived processes that may run concurrently (the strigger hook):
    one spool directory belongs to one process at a time.
    """
    if not spool:
        return ReliableProducer(settings.kafka_bootstrap, client_id, linger_ms=5)
    try:
        local = Spool(settings.state_dir / f"collect-{name}" / "spool")
    except (SpoolError, OSError) as exc:
        fail(f"collect {name}: spool: {exc}")
    return ReliableProducer(settings.kafka_bootstrap, client_id, linger_ms=20, spool=local)


class Reporter:
    """Builds the CollectorReport; logs it every ``every_s`` s (call :meth:`tick` often) and at the end."""

    def __init__(
        self,
        name: str,
        prod: ReliableProducer,
        topic: str,
        reached: Callable[[], list[Reach]],
        counts: Callable[[], dict[str, int]],
        every_s: float,
        *,
        reports_topic: str,
        host: str | None = None,
        unmatched: Callable[[], list[str]] = list,
    ) -> None:
        self.name = name
        self.prod = prod
        self.topic = topic
        self.reports_topic = reports_topic
        self.reached = reached
        self.counts = counts
        self.unmatched = unmatched
        self.host = host or socket.gethostname()
        self.every_s = every_s
        self.started: datetime = utcnow()
        self._next = time.monotonic() + every_s

    def report(self, *, final: bool = False) -> CollectorReport:
        prod = self.prod
        reachable = prod.mode == "direct" and not prod.broker_down
        broker = Reach(
            kind="broker", target=self.topic, ok=reachable, state=prod.mode, detail=prod.last_error
        )
        spool = prod.spool
        return CollectorReport(
            collector=self.name,
            host=self.host,
            time=utcnow(),
            started=self.started,
            final=final,
            reached=[*self.reached(), broker],
            unmatched=self.unmatched(),
            broker_reachable=reachable,
            producer_mode=prod.mode,
            spool_depth=spool.depth if spool else 0,
            spool_bytes=spool.size_bytes if spool else 0,
            counts={
                **self.counts(),
                "delivered": prod.delivered,
                "spooled": prod.spooled,
                "failed": prod.failed,
            },
        )

    def publish(self, rep: CollectorReport) -> None:
        """Reports go on the reports topic too (the sink stores them; the API shows them with verdicts)."""
        self.prod.produce(self.reports_topic, codec.dumps(rep), key=(rep.host or "-").encode())

    def tick(self) -> None:
        if time.monotonic() >= self._next:
            self._next = time.monotonic() + self.every_s
            rep = self.report()
            log.info("coverage %s", codec.dumps(rep).decode())
            self.publish(rep)

    def final(self) -> CollectorReport:
        rep = self.report(final=True)
        typer.echo("coverage " + codec.dumps(rep).decode(), err=True)
        self.publish(rep)
        return rep


class Loop(Protocol):
    def __call__(
        self,
        interval_s: float,
        stop: Callable[[], bool],
        *,
        on_tick: Callable[[], None] | None = None,
        stop_after_s: float | None = None,
    ) -> None: ...


def drive(
    prod: ReliableProducer,
    reporter: Reporter,
    *,
    once: Callable[[], object] | None,
    loop: Loop,
    interval_s: float,
    stop_after_s: float | None,
) -> tuple[CollectorReport, int]:
    """Run a collector once (``once``) or until SIGTERM/SIGINT (``loop``), serving deliveries and
    reports between rounds; then flush and publish the final report. Returns it and the number of
    records neither delivered nor spooled."""
    if once is not None:
        once()
    else:
        from connectors.lifecycle import StopFlag

        stop = StopFlag()

        def tick() -> None:
            prod.poll(0)
            reporter.tick()

        loop(interval_s, lambda: bool(stop), on_tick=tick, stop_after_s=stop_after_s)
    left = prod.flush(30)
    return reporter.final(), left


def sources_reached(rep: CollectorReport) -> bool:
    """Whether any source (anything but the broker and the spool) answered."""
    return any(r.ok for r in rep.reached if r.kind not in ("broker", "spool"))


def finish(prod: ReliableProducer, what: str, left: int) -> None:
    """Exit 1 when ``left`` (what ``flush`` left) records are neither delivered nor spooled."""
    spool = prod.spool
    typer.echo(
        f"{what}: delivered {prod.delivered}, in spool {spool.depth if spool else 0}, failed {prod.failed}",
        err=True,
    )
    if left:
        fail(f"{left} records were neither delivered nor spooled: {prod.last_error}", 1)
