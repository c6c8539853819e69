"""``sickbay sim``: seeded, realistic fleet logs with ground truth, as files or on Kafka."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from schemas import codec
from streams.cli.errors import fail

if TYPE_CHECKING:
    from connectors.sources.simulator import GroundTruth, SimOptions
    from connectors.sources.simulator.events import SimEvent
    from connectors.sources.simulator.output import Record

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


def _fail(message: str, code: int = 2) -> None:
    fail(message, code, prefix="sickbay sim")


def _options(telemetry_s: float, noise: float, k8s_share: float) -> SimOptions:
    from connectors.sources.simulator import SimOptions

    return SimOptions(telemetry_every_s=telemetry_s, noise=noise, k8s_share=k8s_share)


TelemetryOpt = Annotated[float, typer.Option("--telemetry-s", help="dcgm-exporter scrape interval; 0 = none")]
NoiseOpt = Annotated[float, typer.Option(help="multiplier on background noise")]
K8sOpt = Annotated[float, typer.Option("--k8s-share", help="share of Kubernetes-flavoured jobs")]


@app.command("list")
def list_types(fmt: Annotated[str, typer.Option("--format", help="text or json")] = "text") -> None:
    """The scenario types, their category and what they simulate."""
    from connectors.sources.simulator import SCENARIO_TYPES

    for st in SCENARIO_TYPES:
        if fmt == "json":
            typer.echo(
                codec.dumps(
                    {
                        "type": st.name,
                        "category": st.category.value,
                        "healthy": st.healthy,
                        "flavours": list(st.flavours),
                        "description": st.description,
                    }
                ).decode()
            )
        else:
            tag = " (healthy noise)" if st.healthy else ""
            typer.echo(f"{st.name:28} {st.category.value:17} {st.description}{tag}")


@app.command()
def scenario(
    scenario_type: Annotated[str, typer.Argument(help="a type from `sickbay sim list`")],
    seed: Annotated[int, typer.Option(help="the seed: same seed, same bytes")] = 1,
    out: Annotated[Path, typer.Option(help="folder to write <id>/logs and <id>/truth.json into")] = Path(
        "sim-out"
    ),
    telemetry_s: TelemetryOpt = 60.0,
    noise: NoiseOpt = 1.0,
    k8s_share: K8sOpt = 0.2,
) -> None:
    """Write one scenario's logs (for `sickbay diagnose <out>/<id>/logs`) and its ground truth."""
    from connectors.sources.simulator import generate, write_files

    try:
        sc = generate(scenario_type, seed, options=_options(telemetry_s, noise, k8s_share))
    except ValueError as exc:
        _fail(str(exc))
    folder = write_files(sc, out)
    typer.echo(f"{len(sc.events)} events → {folder}/logs", err=True)
    typer.echo(codec.dumps(sc.truth).decode())


@app.command()
def truth(
    scenario_type: Annotated[str, typer.Argument(help="a type from `sickbay sim list`")],
    seed: Annotated[int, typer.Option()] = 1,
) -> None:
    """Print one scenario's ground truth (JSON) without writing its logs."""
    from connectors.sources.simulator import generate

    try:
        typer.echo(codec.dumps(generate(scenario_type, seed).truth).decode())
    except ValueError as exc:
        _fail(str(exc))


@app.command()
def batch(
    count: Annotated[int, typer.Option(help="how many scenarios (cycling through the types)")] = 34,
    seed: Annotated[int, typer.Option()] = 1,
    out: Annotated[Path, typer.Option()] = Path("sim-out"),
    types: Annotated[str | None, typer.Option(help="comma-separated types (default: all)")] = None,
    telemetry_s: TelemetryOpt = 60.0,
    noise: NoiseOpt = 1.0,
    k8s_share: K8sOpt = 0.2,
) -> None:
    """Write many seeded scenarios, one folder each, plus truth.jsonl with every ground truth."""
    from connectors.sources.simulator import SCENARIOS, batch_plan, generate, write_files

    names = types.split(",") if types else None
    unknown = [n for n in names or [] if n not in SCENARIOS]
    if unknown:
        _fail(f"unknown scenario types: {', '.join(unknown)}")
    out.mkdir(parents=True, exist_ok=True)
    opts = _options(telemetry_s, noise, k8s_share)
    with (out / "truth.jsonl").open("wb") as fh:
        for i, name, s in batch_plan(count, seed, names):
            sc = generate(name, s, options=opts, node_base=1 + i * 32, job_number=200_000 + i)
            write_files(sc, out)
            fh.write(codec.dumps(sc.truth) + b"\n")
    typer.echo(f"{count} scenarios → {out}", err=True)


@app.command()
def fleet(
    nodes: Annotated[int, typer.Option(help="nodes (8 GPUs each)")] = 64,
    jobs: Annotated[int, typer.Option(help="concurrent multi-node jobs")] = 6,
    faults: Annotated[int, typer.Option(help="jobs that get a scenario")] = 3,
    minutes: Annotated[float, typer.Option(help="simulated time span")] = 30.0,
    seed: Annotated[int, typer.Option()] = 1,
    flavour: Annotated[str, typer.Option(help="slurm or kubernetes")] = "slurm",
    out: Annotated[Path | None, typer.Option(help="write log files here")] = None,
    kafka: Annotated[bool, typer.Option("--kafka", help="produce to <prefix>.raw.logs instead")] = False,
    speed: Annotated[str, typer.Option(help="realtime, xN or max (with --kafka)")] = "max",
    telemetry_s: TelemetryOpt = 60.0,
) -> None:
    """A whole fleet: background for every node and GPU, concurrent jobs, some of them failing."""
    from connectors.sources.simulator.fleetsim import FleetOptions, simulate_fleet

    if flavour not in ("slurm", "kubernetes"):
        _fail("--flavour must be slurm or kubernetes")
    opts = FleetOptions(
        nodes=nodes,
        jobs=jobs,
        faults=faults,
        minutes=minutes,
        flavour=flavour,
        telemetry_every_s=telemetry_s,
    )
    run = simulate_fleet(seed, opts, t0=datetime.now(UTC) if kafka else None)
    if kafka:
        n = _stream(run.events(), seed, speed, telemetry=True)
        typer.echo(f"{n} records produced", err=True)
    else:
        from connectors.sources.simulator.output import write_events

        target = out or Path(f"sim-fleet-{seed}")
        logs = target / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        n = 0
        chunk: list[SimEvent] = []
        for ev in run.events():
            chunk.append(ev)
            if len(chunk) >= 50_000:
                n += write_events(chunk, logs)
                chunk = []
        n += write_events(chunk, logs)
        (target / "truth.jsonl").write_bytes(b"".join(codec.dumps(t) + b"\n" for t in run.truths))
        typer.echo(f"{n} events → {logs}", err=True)
    for t in run.truths:
        typer.echo(codec.dumps(t).decode())


@app.command()
def stream(
    scenario_type: Annotated[str, typer.Argument(help="a type, or `all` for one of each")],
    seed: Annotated[int, typer.Option()] = 1,
    speed: Annotated[str, typer.Option(help="realtime, xN (e.g. x60) or max")] = "x60",
    max_gap: Annotated[float | None, typer.Option(help="cap any one wait at this many seconds")] = None,
    telemetry: Annotated[bool, typer.Option(help="include dcgm-exporter samples")] = True,
    telemetry_s: TelemetryOpt = 60.0,
) -> None:
    """Produce scenario records to <prefix>.raw.logs in shipper shapes, paced by event time."""
    from connectors.sources.simulator import SCENARIOS, generate

    names = list(SCENARIOS) if scenario_type == "all" else [scenario_type]
    if any(n not in SCENARIOS for n in names):
        _fail(f"unknown scenario type {scenario_type!r}; see `sickbay sim list`")
    now = datetime.now(UTC)
    events: list[SimEvent] = []
    truths: list[GroundTruth] = []
    for i, name in enumerate(names):
        sc = generate(
            name,
            seed + i,
            t0=now,
            options=_options(telemetry_s, 1.0, 0.2),
            node_base=1 + 32 * i,
            job_number=400_000 + seed * 100 + i,
        )
        events += sc.events
        truths.append(sc.truth)
    events.sort(key=lambda e: e.sort_key())
    n = _stream(iter(events), seed, speed, telemetry=telemetry, max_gap=max_gap)
    typer.echo(f"{n} records produced", err=True)
    for t in truths:
        typer.echo(codec.dumps(t).decode())


def _stream(
    events: Iterable[SimEvent], seed: int, speed: str, *, telemetry: bool, max_gap: float | None = None
) -> int:
    from connectors.kafka import KafkaUnavailable, wait_for_broker
    from connectors.sources.simulator import Shipping, parse_speed
    from connectors.sources.simulator.output import KafkaOut, iter_records, pace, play
    from streams.settings import Settings

    try:
        factor = parse_speed(speed)
    except ValueError as exc:
        _fail(str(exc))
    s = Settings()
    try:
        wait_for_broker(s.kafka_bootstrap, 30)
    except KafkaUnavailable as exc:
        _fail(str(exc))
    out = KafkaOut(s.kafka_bootstrap, s.topics.raw_logs.name)
    sent = 0

    def send(_offset: float, rec: Record) -> None:
        nonlocal sent
        out.send(rec)
        sent += 1

    recs = iter_records(events, Shipping(seed), telemetry=telemetry)
    play(
        pace(recs, speed=factor, max_gap_s=max_gap), send, poll=lambda: out.producer.poll(0), sleep=time.sleep
    )
    if out.close():
        _fail(f"records were not delivered: {out.producer.last_error}", 1)
    return sent


if __name__ == "__main__":
    app(sys.argv[1:])
