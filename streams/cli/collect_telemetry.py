"""``sickbay collect prometheus`` (dcgm-exporter / PromQL) and ``sickbay collect nvml`` (node agent)."""

from __future__ import annotations

import socket
from typing import Annotated

import typer

from streams.cli.collect_common import Reporter, drive, finish, producer, setup_logging, sources_reached
from streams.cli.errors import fail
from streams.settings import Settings


def collect_prometheus(
    metrics_url: Annotated[
        list[str] | None, typer.Option("--metrics-url", help="a dcgm-exporter /metrics URL (repeatable)")
    ] = None,
    prometheus: Annotated[str | None, typer.Option(help="Prometheus base URL for --query")] = None,
    query: Annotated[
        list[str] | None, typer.Option("--query", help="PromQL instant query (repeatable)")
    ] = None,
    interval: Annotated[float, typer.Option(help="seconds between scrapes")] = 15.0,
    timeout: Annotated[float, typer.Option(help="HTTP timeout per request, seconds")] = 10.0,
    once: Annotated[bool, typer.Option(help="scrape once and exit")] = False,
    stop_after: Annotated[float | None, typer.Option(help="stop after N seconds")] = None,
    report_every: Annotated[float, typer.Option(help="seconds between coverage reports")] = 60.0,
) -> None:
    """GPU telemetry from dcgm-exporter text or PromQL → raw-telemetry (fault counter changes → raw-logs)."""
    from connectors.sources.prometheus import PrometheusCollector

    s = Settings()
    setup_logging(s)
    if not metrics_url and not (prometheus and query):
        fail("give --metrics-url, or --prometheus with at least one --query")
    prod = producer(s, "prometheus", f"sickbay-collect-prometheus-{socket.gethostname()}")
    col = PrometheusCollector(
        prod,
        s.topics.raw_telemetry.name,
        s.topics.raw_logs.name,
        metrics_urls=metrics_url,
        prometheus_url=prometheus,
        queries=query,
        cluster=s.cluster,
        timeout_s=timeout,
    )
    cov = col.coverage
    topic = s.topics.raw_telemetry.name
    reporter = Reporter(
        "prometheus",
        prod,
        topic,
        cov.reached,
        cov.counts,
        report_every,
        reports_topic=s.topics.collector_reports.name,
        unmatched=cov.unmatched,
    )
    rep, left = drive(
        prod,
        reporter,
        once=col.scrape_once if once else None,
        loop=col.run,
        interval_s=interval,
        stop_after_s=stop_after,
    )
    finish(prod, f"collect prometheus: {cov.telemetry_records} GPU samples → {topic}", left)
    if not sources_reached(rep):
        raise typer.Exit(3)  # no target answered: the report above says why


def collect_nvml(
    node: Annotated[str | None, typer.Option(help="node name (default: this host's name)")] = None,
    interval: Annotated[
        float, typer.Option(help="seconds between samples; Xid events arrive in between")
    ] = 10.0,
    once: Annotated[bool, typer.Option(help="sample once, take queued Xid events, exit")] = False,
    stop_after: Annotated[float | None, typer.Option(help="stop after N seconds")] = None,
    report_every: Annotated[float, typer.Option(help="seconds between coverage reports")] = 60.0,
) -> None:
    """Node agent on NVML: GPU samples → raw-telemetry; Xid / ECC / row-remap / lost GPU → raw-logs."""
    from connectors.sources.nvml.agent import NvmlAgent
    from connectors.sources.nvml.api import NvmlError, NvmlLibraryMissing
    from connectors.sources.nvml.nvml_binding import PynvmlApi

    s = Settings()
    setup_logging(s)
    try:
        api = PynvmlApi()
        api.init()  # before Kafka: a host without a driver fails at once, with the reason
    except NvmlLibraryMissing as exc:
        fail(f"collect nvml: {exc}")
    except NvmlError as exc:
        fail(f"collect nvml: NVML init failed: {exc}")
    host = node or socket.gethostname()
    prod = producer(s, "nvml", f"sickbay-collect-nvml-{host}")
    agent = NvmlAgent(
        prod, s.topics.raw_telemetry.name, s.topics.raw_logs.name, api, node=host, cluster=s.cluster
    )
    try:
        agent.start()
        topic = s.topics.raw_telemetry.name
        reporter = Reporter(
            "nvml",
            prod,
            topic,
            agent.reached,
            agent.coverage.counts,
            report_every,
            reports_topic=s.topics.collector_reports.name,
            host=host,
        )

        def one_round() -> None:
            agent.sample_once()
            agent.wait_events(0)

        _rep, left = drive(
            prod,
            reporter,
            once=one_round if once else None,
            loop=agent.run,
            interval_s=interval,
            stop_after_s=stop_after,
        )
    finally:
        agent.close()
    finish(prod, f"collect nvml: {agent.coverage.samples} GPU samples → {topic}", left)


def mount(collect_app: typer.Typer) -> None:
    collect_app.command("prometheus")(collect_prometheus)
    collect_app.command("nvml")(collect_nvml)
