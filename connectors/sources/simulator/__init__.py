"""The fleet simulator: realistic, seeded event streams of GPU training jobs and their failures.

A source of records like the collectors: it writes the logs a fleet produces (kernel,
training output, scheduler, dcgm-exporter telemetry) as files or as shipper records on
Kafka, with ground truth for every injected scenario. Every message follows a real format
documented in shared/reference/failure-signatures.md; nothing here uses the rule catalog
(``streams.extract``), so a rule tuned on simulated logs still has to match the real format.

Entry points: :func:`generate` (one scenario), :data:`SCENARIOS` (the types),
:func:`background_records` (healthy traffic for the demo) and
:mod:`connectors.sources.simulator.fleetsim` (a whole fleet).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from connectors.sources.simulator.builder import JobRun, Sim, SimOptions
from connectors.sources.simulator.catalog import SCENARIO_TYPES, SCENARIOS
from connectors.sources.simulator.fleet import PLATFORMS, make_node, place_job
from connectors.sources.simulator.output import Record, parse_speed, records, timetable, write_files
from connectors.sources.simulator.rand import derive, rng
from connectors.sources.simulator.scenario import Scenario, build_scenario
from connectors.sources.simulator.shippers import Shipping
from connectors.sources.simulator.truth import GroundTruth

__all__ = [
    "SCENARIOS",
    "SCENARIO_TYPES",
    "GroundTruth",
    "Record",
    "Scenario",
    "Shipping",
    "SimOptions",
    "background_records",
    "batch_plan",
    "generate",
    "parse_speed",
    "records",
    "timetable",
    "write_files",
]


def generate(
    scenario_type: str,
    seed: int,
    *,
    t0: datetime | None = None,
    options: SimOptions | None = None,
    node_base: int | None = None,
    job_number: int | None = None,
) -> Scenario:
    """One scenario of ``scenario_type``; the same arguments give byte-identical events."""
    try:
        st = SCENARIOS[scenario_type]
    except KeyError:
        raise ValueError(f"unknown scenario type {scenario_type!r}; see `sickbay sim list`") from None
    return build_scenario(st, seed, t0=t0, options=options, node_base=node_base, job_number=job_number)


def batch_plan(count: int, seed: int, types: list[str] | None = None) -> list[tuple[int, str, int]]:
    """``count`` scenarios cycling through ``types`` (all by default): (index, type, its seed)."""
    names = types or [s.name for s in SCENARIO_TYPES]
    return [(i, names[i % len(names)], derive(seed, "batch", i) % 2**31) for i in range(count)]


def background_records(
    seed: int, nodes: list[str], job_id: str, seconds: float, t0: datetime | None = None
) -> list[bytes]:
    """Healthy shipper records for one Slurm job on ``nodes``: launcher banners, NCCL INFO, training
    progress and checkpoints, kernel noise; no telemetry and no scheduler lines (the caller has a
    real scheduler). Every record is one the pipeline can read; none of them is a fault."""
    r = rng(seed, "background", job_id)
    t0 = t0 or datetime.now(UTC)
    options = SimOptions(telemetry_every_s=0)
    platform = r.choice(PLATFORMS)
    sim_nodes = [make_node(r, name, i, platform) for i, name in enumerate(nodes)]
    sim = Sim(t0, r, options)
    job = place_job(r, job_id, sim_nodes, "slurm")
    job.nccl_debug = True
    run = JobRun(sim, job, sim_nodes, r)
    t = run.startup(t0)
    run.train(t, t0 + timedelta(seconds=seconds))
    run.background(t0, t0 + timedelta(seconds=seconds))
    shipping = Shipping(derive(seed, "background-shipping"))
    return [rec.value for rec in records(sim.sorted_events(), shipping, telemetry=False)]
