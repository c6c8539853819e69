"""``sickbay collect slurm`` and ``sickbay collect slurm-trigger`` (the strigger hook)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated

import typer

from streams.cli.collect_common import Reporter, drive, finish, producer, setup_logging, sources_reached
from streams.settings import Settings


def collect_slurm(
    log_file: Annotated[
        Path | None,
        typer.Option("--log", help="slurmctld.log to tail (omit: topology lines come from polling)"),
    ] = None,
    interval: Annotated[float, typer.Option(help="seconds between squeue/sinfo/sacct polls")] = 10.0,
    sacct: Annotated[bool, typer.Option("--sacct/--no-sacct", help="ask sacct for exit codes")] = True,
    from_start: Annotated[bool, typer.Option(help="read the log from its start, not its end")] = False,
    host: Annotated[str | None, typer.Option(help="controller host for the record key")] = None,
    once: Annotated[bool, typer.Option(help="poll once (plus what the log holds) and exit")] = False,
    stop_after: Annotated[float | None, typer.Option(help="stop after N seconds")] = None,
    report_every: Annotated[float, typer.Option(help="seconds between coverage reports")] = 60.0,
) -> None:
    """Slurm job and node state changes (slurmctld log, squeue/sinfo --json, sacct) → raw-logs."""
    from connectors.sources.slurm_collector import SlurmCollector, slurm_runner

    s = Settings()
    setup_logging(s)
    me = host or socket.gethostname()
    prod = producer(s, "slurm", f"sickbay-collect-slurm-{me}")
    col = SlurmCollector(
        prod,
        s.topics.raw_logs.name,
        slurm_runner(s.slurm_conf),
        controller_host=me,
        log_path=log_file,
        from_start=from_start,
        use_sacct=sacct,
        jobs_topic=s.topics.topology_jobs.name,
        cluster=s.cluster,
    )
    cov = col.coverage
    reporter = Reporter(
        "slurm",
        prod,
        s.topics.raw_logs.name,
        cov.reached,
        cov.counts,
        report_every,
        reports_topic=s.topics.collector_reports.name,
        host=me,
    )

    def one_round() -> None:
        col.poll_once()
        col.tail_log()

    rep, left = drive(
        prod,
        reporter,
        once=one_round if once else None,
        loop=col.run,
        interval_s=interval,
        stop_after_s=stop_after,
    )
    finish(prod, f"collect slurm: {cov.records} records → {s.topics.raw_logs.name}", left)
    if not sources_reached(rep):
        raise typer.Exit(3)  # reached nothing at all: the report above says why


def collect_slurm_trigger(
    event: Annotated[str, typer.Argument(help="the event the trigger was set for, e.g. node_down, job_fini")],
    args: Annotated[
        list[str] | None, typer.Argument(help="what strigger passes: node list or job id")
    ] = None,
    host: Annotated[str | None, typer.Option(help="controller host for the record key")] = None,
) -> None:
    """The program for `strigger --set ... --program`: write one record for one trigger firing."""
    from connectors.sources.slurm_collector import emit_trigger
    from schemas.base import utcnow

    s = Settings()
    prod = producer(s, "slurm-trigger", "sickbay-collect-slurm-trigger", spool=False)
    emit_trigger(
        prod, s.topics.raw_logs.name, host or socket.gethostname(), event, list(args or []), utcnow()
    )
    finish(prod, f"strigger {event}", prod.flush(30))


def mount(collect_app: typer.Typer) -> None:
    collect_app.command("slurm")(collect_slurm)
    collect_app.command("slurm-trigger")(collect_slurm_trigger)
