"""``sickbay``: run any role (worker, collectors, adapters, sink), query the store, manage the dev stack."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from streams.cli import analytics, collect_sources
from streams.cli import kubernetes as kubernetes_cli
from streams.cli import policy as policy_cli
from streams.cli.errors import fail as _fail
from streams.cli.sim import app as sim_app
from streams.settings import REPO_ROOT, Settings

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
collect_app = typer.Typer(no_args_is_help=True, help="Collectors: put records on the raw topics.")
adapter_app = typer.Typer(no_args_is_help=True, help="Scheduler adapters: carry out actions.")
sink_app = typer.Typer(no_args_is_help=True, help="Sinks: topics into ClickHouse.")
dev_app = typer.Typer(no_args_is_help=True, help="The local stack: real Kafka and Slurm on this host.")
topics_app = typer.Typer(no_args_is_help=True, help="The topic catalog.")
app.add_typer(collect_app, name="collect")
app.add_typer(adapter_app, name="adapter")
app.add_typer(sink_app, name="sink")
app.add_typer(dev_app, name="dev")
app.add_typer(topics_app, name="topics")
analytics.mount(app)  # serve, api, report
policy_cli.mount(app)  # modes, policy
collect_sources.mount(collect_app)  # slurm, prometheus, loki, nvml
collect_app.command("kubernetes")(kubernetes_cli.collect_kubernetes)
adapter_app.command("kubernetes")(kubernetes_cli.adapter_kubernetes)
app.add_typer(sim_app, name="sim", help="Simulated fleet logs with ground truth (files or Kafka).")


def _logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@topics_app.command("create")
def topics_create() -> None:
    """Create every catalog topic with its partition count (idempotent)."""
    from connectors.kafka import KafkaUnavailable, ensure_topics, wait_for_broker

    s = Settings()
    try:
        wait_for_broker(s.kafka_bootstrap, 30)
        created = ensure_topics(s.kafka_bootstrap, s.topics.all(), s.replication_factor)
    except (KafkaUnavailable, RuntimeError) as exc:
        _fail(str(exc))
    typer.echo(f"topics ready ({len(created)} created) on {s.kafka_bootstrap}")


@topics_app.command("list")
def topics_list() -> None:
    """Show the catalog: name, key, partitions, retention."""
    for spec in Settings().topics.all():
        typer.echo(
            f"{spec.name:32} key={spec.key:10} partitions={spec.partitions:<3} "
            f"retention={spec.retention_ms // 3_600_000}h  {spec.description}"
        )


@app.command()
def worker(loglevel: Annotated[str, typer.Option("--loglevel", "-l")] = "info") -> None:
    """Run the Faust worker (extract, route, correlate, decide)."""
    from streams.worker import app as faust_app

    sys.argv = ["sickbay-worker", "worker", "-l", loglevel]
    if not Settings().faust_web_enabled:
        sys.argv.append("--without-web")
    faust_app.main()


@collect_app.command("file")
def collect_file(
    paths: Annotated[list[str], typer.Argument(help="files, or - for stdin")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep tailing")] = False,
    host: Annotated[str | None, typer.Option(help="host of plain lines (default: none)")] = None,
    job: Annotated[str | None, typer.Option(help="job id of plain lines")] = None,
    from_end: Annotated[bool, typer.Option(help="with --follow, skip what is already there")] = False,
    stop_after: Annotated[float | None, typer.Option(help="with --follow, stop after N seconds")] = None,
) -> None:
    """Lines from files or stdin → raw-logs. Shipper JSON records pass through unchanged."""
    from connectors.kafka import ReliableProducer
    from connectors.sources.files import LineSink, collect_once
    from connectors.sources.files import follow as tail

    s = Settings()
    _logging(s)
    missing = [p for p in paths if p != "-" and not follow and not Path(p).is_file()]
    if missing:
        _fail(f"no such file: {', '.join(missing)}")
    producer = ReliableProducer(s.kafka_bootstrap, f"sickbay-collect-{host or 'file'}", linger_ms=5)
    sink = LineSink(producer, s.topics.raw_logs.name, host, job)
    if follow:
        tail(sink, paths, from_start=not from_end, stop_after_s=stop_after)
    else:
        collect_once(sink, paths)
    left = producer.flush(30)
    st = sink.stats
    typer.echo(
        f"collected {st.lines} lines ({st.forwarded_json} shipper records, {st.wrapped_plain} plain) "
        f"→ {s.topics.raw_logs.name}; delivered {producer.delivered}, failed {producer.failed}",
        err=True,
    )
    if left or producer.failed:
        _fail(f"{left + producer.failed} records were not delivered: {producer.last_error}", 1)


@collect_app.command("files")
def collect_files(
    paths: Annotated[list[str], typer.Argument(help="files or globs (quote them: 'DIR/*.log')")],
    follow: Annotated[bool, typer.Option("--follow/--once", help="keep following, or stop when done")] = True,
    host: Annotated[str | None, typer.Option(help="host of plain lines and the Kafka key")] = None,
    job: Annotated[str | None, typer.Option(help="job id of plain lines")] = None,
    state_dir: Annotated[
        Path | None, typer.Option(help="offsets.json and spool/ (default $SICKBAY_STATE_DIR/collect-files)")
    ] = None,
    from_end: Annotated[bool, typer.Option(help="files without a saved offset: skip what is there")] = False,
    lines_per_record: Annotated[int, typer.Option(min=1, help="plain lines per Kafka record")] = 1,
    stop_after: Annotated[float | None, typer.Option(help="stop after N seconds")] = None,
    report_every: Annotated[float, typer.Option(help="coverage report on stderr every N seconds")] = 60.0,
    report_file: Annotated[Path | None, typer.Option(help="also keep the latest report here")] = None,
) -> None:
    """Follow files and globs → raw-logs through rotation and truncation; offsets + spool survive restarts."""
    import time

    from connectors.kafka import ReliableProducer
    from connectors.lifecycle import StopFlag
    from connectors.sources.files import CollectError, FileCollector
    from connectors.sources.spool import Spool, SpoolError, atomic_write
    from schemas import codec

    s = Settings()
    _logging(s)
    state = state_dir or s.state_dir / "collect-files"
    try:
        spool = Spool(state / "spool")
        producer = ReliableProducer(s.kafka_bootstrap, f"sickbay-collect-{host or 'files'}", spool=spool)
        collector = FileCollector(
            producer,
            s.topics.raw_logs.name,
            paths,
            host=host,
            job_id=job,
            offsets=state / "offsets.json",
            from_end=from_end,
            lines_per_record=lines_per_record,
        )
    except (CollectError, SpoolError) as exc:
        _fail(str(exc))
    next_report = time.monotonic() + report_every

    def tick() -> None:
        nonlocal next_report
        if time.monotonic() >= next_report:
            next_report = time.monotonic() + report_every
            rep = codec.dumps(collector.report())
            logging.getLogger("sickbay.collect").info("coverage %s", rep.decode())
            producer.produce(s.topics.collector_reports.name, rep, key=(host or "-").encode())
            if report_file:
                atomic_write(report_file, rep)

    stop = StopFlag()
    idle_exit = None if follow else 0.5
    collector.run(lambda: bool(stop), stop_after_s=stop_after, idle_exit_s=idle_exit, on_tick=tick)
    left = collector.close()
    final = codec.dumps(collector.report(final=True))
    producer.produce(s.topics.collector_reports.name, final, key=(host or "-").encode())
    producer.flush(10)
    if report_file:
        atomic_write(report_file, final)
    typer.echo(f"coverage {final.decode()}", err=True)
    st = collector.stats
    typer.echo(
        f"collected {st.lines} lines in {st.records} records → {s.topics.raw_logs.name}; "
        f"delivered {producer.delivered}, in spool {spool.depth} (replayed {producer.replayed}), "
        f"failed {producer.failed}",
        err=True,
    )
    if left:
        _fail(f"{left} records were neither delivered nor spooled: {producer.last_error}", 1)
    if not follow and not st.files_opened:
        _fail(f"no file matched: {', '.join(paths)}")


def _slurm_adapter(s: Settings) -> Any:
    """The Slurm adapter over the executor SICKBAY_SLURM_MODE selects (local, ssh, rest)."""
    from connectors.actuators.slurm_adapter import SlurmAdapter
    from connectors.actuators.slurm_modes import SlurmModeError, backend_from_settings, describe

    try:
        backend = backend_from_settings(s)
    except SlurmModeError as exc:
        _fail(f"Slurm adapter settings: {exc}", 2)
    logging.getLogger("sickbay.adapter").info("slurm executor: %s", describe(s))
    return SlurmAdapter(backend, retries=s.slurm_retries, backoff_s=s.slurm_retry_backoff_s)


@adapter_app.command("slurm")
def adapter_slurm(
    idle_exit: Annotated[float | None, typer.Option(help="exit after N idle seconds")] = None,
    sweep_every: Annotated[
        float | None, typer.Option(help="every N seconds, resume nodes whose sickbay drain expired")
    ] = None,
) -> None:
    """Execute actions on Slurm (local scontrol, SSH or slurmrestd); publish results and audit records."""
    from connectors.actuators.runner import run_adapter

    s = Settings()
    _logging(s)
    n = run_adapter(
        s.kafka_bootstrap,
        s.topics,
        _slurm_adapter(s),
        s.cluster,
        group_id=f"{s.topic_prefix}-adapter-slurm",
        idle_exit_s=idle_exit,
        sweep_every_s=sweep_every,
    )
    typer.echo(f"adapter slurm: handled {n} actions", err=True)


@adapter_app.command("slurm-sweep")
def adapter_slurm_sweep(
    dry_run: Annotated[bool, typer.Option(help="only say which nodes would be resumed")] = False,
) -> None:
    """Resume nodes whose sickbay drain expired ('sickbay... expires <time>'); one JSON line per node."""
    from schemas import codec

    s = Settings()
    _logging(s)
    adapter = _slurm_adapter(s)  # outside the try: typer's Exit is a RuntimeError too
    try:
        results = adapter.sweep_expired(s.cluster, dry_run=dry_run)
    except RuntimeError as exc:
        _fail(str(exc), 1)
    for result in results:
        typer.echo(codec.dumps(result).decode())
    typer.echo(f"adapter slurm-sweep: {len(results)} expired sickbay drain(s)", err=True)
    if any(r.status.value == "failed" for r in results):
        raise typer.Exit(1)


@sink_app.command("clickhouse")
def sink_clickhouse(
    idle_exit: Annotated[float | None, typer.Option(help="exit after N idle seconds")] = None,
) -> None:
    """Write signals, incidents, actions, results, audit and dead letters to ClickHouse."""
    from connectors.sinks.sink import run_sink

    s = Settings()
    _logging(s)
    stats = run_sink(
        s.kafka_bootstrap,
        s.clickhouse_dsn,
        s.clickhouse_database,
        s.topics,
        group_id=f"{s.topic_prefix}-sink",
        idle_exit_s=idle_exit,
    )
    typer.echo(
        f"sink: consumed {stats.consumed}, written {stats.written}, dead-lettered {stats.dead_lettered}",
        err=True,
    )


@app.command()
def query(
    sql: Annotated[str, typer.Argument(help="SQL; the database is SICKBAY_CLICKHOUSE_DATABASE")],
    fmt: Annotated[str, typer.Option("--format", help="table or json")] = "table",
) -> None:
    """Run one SQL query on sickbay's ClickHouse store (embedded or server) and print the rows."""
    from connectors.sinks.clickhouse_schema import get_client, migrate
    from schemas import codec

    s = Settings()
    client = get_client(s.clickhouse_dsn)
    migrate(client, s.clickhouse_database)
    result = client.query(sql.replace("{db}", s.clickhouse_database))
    names = list(result.column_names)
    if fmt == "json":
        for row in result.result_rows:
            typer.echo(codec.dumps(dict(zip(names, row, strict=True))).decode())
        return
    rendered = [[str(v) for v in row] for row in result.result_rows]
    widths = [max([len(n), *(len(r[i]) for r in rendered)]) for i, n in enumerate(names)]
    typer.echo("  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)))
    for r in rendered:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))


def _stack(*args: str) -> None:
    script = REPO_ROOT / "deploy" / "local" / "stack.sh"
    if not script.is_file():
        _fail(f"{script} not found: `sickbay dev` needs a source checkout")
    raise typer.Exit(subprocess.call(["bash", str(script), *args]))


@dev_app.command("up")
def dev_up() -> None:
    """Start real Kafka (KRaft) and Slurm (slurmctld + 4 slurmd) and create the topics."""
    _stack("up")


@dev_app.command("down")
def dev_down() -> None:
    """Stop what `dev up` started."""
    _stack("down")


@dev_app.command("status")
def dev_status() -> None:
    """Show what is running."""
    _stack("status")


@app.command()
def demo(
    keep: Annotated[bool, typer.Option(help="leave the stack running and the node drained")] = False,
    mode: Annotated[str, typer.Option(help="act (drain and requeue for real) or observe (dry run)")] = "act",
    scheduler: Annotated[
        str, typer.Option(help="slurm, or kubernetes (a PyTorchJob on the local kube-apiserver)")
    ] = "slurm",
) -> None:
    """The end-to-end walking skeleton: one GPU fault, from log line to drained node."""
    from streams.cli.demo import run_demo

    if mode not in ("act", "observe"):
        _fail(f"--mode must be act or observe, not {mode!r}")
    if scheduler == "kubernetes":
        from streams.cli.demo_kubernetes import run_kube_demo

        raise typer.Exit(run_kube_demo(keep=keep, mode=mode))
    if scheduler != "slurm":
        _fail(f"--scheduler must be slurm or kubernetes, not {scheduler!r}")
    raise typer.Exit(run_demo(keep=keep, mode=mode))


@app.command()
def diagnose(
    paths: Annotated[
        list[str],
        typer.Argument(help="files, folders (recursive), - for stdin; plain, gzip, bzip2, xz or zstd"),
    ],
    fmt: Annotated[str, typer.Option("--format", help="text or json")] = "text",
    colour: Annotated[bool | None, typer.Option("--colour/--no-colour", help="default: on a TTY")] = None,
) -> None:
    """Attribute a failure from log files, in-process: no Kafka, no services."""
    from datetime import UTC, datetime

    from schemas import codec
    from streams.diagnose.driver import Diagnoser, summary
    from streams.diagnose.render import render_text, skipped_lines

    if fmt not in ("text", "json"):
        _fail(f"--format must be text or json, not {fmt!r}")
    total = sum(Path(p).stat().st_size for p in paths if p != "-" and Path(p).is_file())
    show_progress = sys.stderr.isatty() and total > 50_000_000

    def progress(report: Any) -> None:
        if show_progress:
            pct = min(100.0, 100.0 * report.bytes / total) if total else 0.0
            sys.stderr.write(f"\rreading {report.bytes / 1e6:8.0f} MB  {pct:5.1f}%")
            sys.stderr.flush()

    result = Diagnoser().run(paths, datetime.now(UTC), progress=progress)
    if show_progress:
        sys.stderr.write("\n")
    if fmt == "json":
        if result.report.files:  # with no input at all, the error below names the problems
            for problem in result.report.problems:  # stdout keeps the one JSON line
                typer.echo(f"warning: {problem}", err=True)
            for skipped in skipped_lines(result.report):
                typer.echo(f"warning: skipped {skipped}", err=True)
        typer.echo(codec.dumps(summary(result)).decode())
    else:
        typer.echo(render_text(result, colour=sys.stdout.isatty() if colour is None else colour))
    if result.report.files == 0:
        _fail("no input: " + "; ".join(result.report.problems or ["nothing to read"]), 2)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
