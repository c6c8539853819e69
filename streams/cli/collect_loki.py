"""``sickbay collect loki``: poll Loki's query_range with a LogQL selector and a saved cursor."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from streams.cli.collect_common import Reporter, drive, finish, producer, setup_logging, sources_reached
from streams.settings import Settings


def collect_loki(
    query: Annotated[str, typer.Argument(help="LogQL log selector, e.g. '{namespace=\"llm\"}'")],
    url: Annotated[str, typer.Option(help="Loki base URL")] = "http://127.0.0.1:3100",
    cursor: Annotated[Path | None, typer.Option(help="file that keeps the position across restarts")] = None,
    lookback: Annotated[float, typer.Option(help="without a cursor, start this many seconds back")] = 300.0,
    delay: Annotated[
        float, typer.Option(help="query up to now-N s, so late-ingested lines are not skipped")
    ] = 5.0,
    limit: Annotated[int, typer.Option(help="lines per request (full pages are followed)")] = 1000,
    tenant: Annotated[str | None, typer.Option(help="X-Scope-OrgID for multi-tenant Loki")] = None,
    interval: Annotated[float, typer.Option(help="seconds between polls")] = 5.0,
    once: Annotated[bool, typer.Option(help="poll once and exit")] = False,
    stop_after: Annotated[float | None, typer.Option(help="stop after N seconds")] = None,
    report_every: Annotated[float, typer.Option(help="seconds between coverage reports")] = 60.0,
) -> None:
    """Job logs already in Loki → raw-logs (as Loki push bodies: stream labels kept)."""
    from connectors.sources.loki import LokiCollector

    s = Settings()
    setup_logging(s)
    prod = producer(s, "loki", "sickbay-collect-loki")

    def delivered() -> bool:
        return prod.flush(30) == 0  # delivered or spooled: both survive a restart

    col = LokiCollector(
        prod,
        s.topics.raw_logs.name,
        url,
        query,
        cursor_path=cursor,
        lookback_s=lookback,
        delay_s=delay,
        limit=limit,
        tenant=tenant,
        checkpoint=delivered,
    )
    cov = col.coverage
    reporter = Reporter(
        "loki",
        prod,
        s.topics.raw_logs.name,
        cov.reached,
        cov.counts,
        report_every,
        reports_topic=s.topics.collector_reports.name,
    )
    rep, left = drive(
        prod,
        reporter,
        once=col.poll_once if once else None,
        loop=col.run,
        interval_s=interval,
        stop_after_s=stop_after,
    )
    finish(prod, f"collect loki: {cov.lines} lines → {s.topics.raw_logs.name}", left)
    if not sources_reached(rep):
        raise typer.Exit(3)


def mount(collect_app: typer.Typer) -> None:
    collect_app.command("loki")(collect_loki)
