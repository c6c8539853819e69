"""A whole fleet over a stretch of time: N nodes x 8 GPUs, several concurrent multi-node jobs,
some of them hit by a scenario, background kernel noise and dcgm-exporter telemetry for every GPU.

Jobs and their faults are built up front (they are small); per-node noise and telemetry are
generated lazily, one time bucket at a time, so 10,000 nodes stream in bounded memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from connectors.sources.simulator import kernel
from connectors.sources.simulator.builder import JobRun, Sim, SimOptions, _poisson
from connectors.sources.simulator.catalog import SCENARIO_TYPES, SCENARIOS
from connectors.sources.simulator.events import SimEvent
from connectors.sources.simulator.fleet import (
    K8S_SCHEMES,
    PLATFORMS,
    SLURM_SCHEMES,
    Node,
    make_node,
    node_name,
)
from connectors.sources.simulator.rand import derive, rng
from connectors.sources.simulator.scenario import Ctx, ScenarioType, build_scenario, default_t0
from connectors.sources.simulator.truth import GroundTruth
from schemas.incidents import Category


class FleetOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: int = Field(default=64, ge=2, le=100_000)
    jobs: int = Field(default=6, ge=0)
    faults: int = Field(default=3, ge=0)
    minutes: float = Field(default=30.0, gt=0)
    flavour: Literal["slurm", "kubernetes"] = "slurm"
    telemetry_every_s: float = Field(default=60.0, ge=0)
    telemetry_metrics: Literal["basic", "min"] = "basic"
    noise: float = Field(default=1.0, ge=0)
    types: list[str] | None = None
    max_job_nodes: int = Field(default=32, ge=2)


def _healthy(ctx: Ctx) -> None:
    """A job that trains through the window (and sometimes finishes inside it)."""
    t_end = ctx.sim.horizon or ctx.t_fault
    t_last = ctx.run.train(ctx.t_start, t_end)
    if ctx.rng.chance(0.3):
        ctx.run.end(t_last + timedelta(seconds=ctx.rng.uniform(5, 30)), ("WEXITSTATUS", 0), failed=False)
    ctx.decisive_time = ctx.t_start
    ctx.category = Category.UNKNOWN


HEALTHY = ScenarioType("healthy_run", Category.UNKNOWN, "a job that trains normally", _healthy, healthy=True)


@dataclass
class FleetRun:
    seed: int
    options: FleetOptions
    t0: datetime
    t_end: datetime
    nodes: list[Node]
    sim: Sim
    truths: list[GroundTruth] = field(default_factory=list)
    runs: dict[str, JobRun] = field(default_factory=dict)
    static: list[SimEvent] = field(default_factory=list)

    def events(self, bucket_s: float = 10.0) -> Iterator[SimEvent]:
        """Every event of the fleet in time order, built one bucket at a time."""
        opts = self.options
        r = rng(self.seed, "fleet-background")
        every = opts.telemetry_every_s
        bucket = timedelta(seconds=bucket_s)
        static = iter(self.static)
        pending = next(static, None)
        t = self.t0
        bg = Sim(
            self.t0,
            r,
            SimOptions(telemetry_every_s=every, telemetry_metrics=opts.telemetry_metrics, noise=opts.noise),
            self.sim.controller,
        )
        bg.nodes = self.sim.nodes
        while t < self.t_end:
            t_next = min(t + bucket, self.t_end)
            bg.events = []
            span = (t_next - t).total_seconds()
            for _ in range(_poisson(r, len(self.nodes) * span * opts.noise / 240.0)):
                node = r.choice(self.nodes)
                at = t + timedelta(seconds=r.uniform(0, span))
                bg.kernel_block(node, at, kernel.noise(r, node, at.timestamp()))
            if every > 0:
                self._telemetry(bg, t, t_next, every)
            batch = bg.events
            while pending is not None and pending.time < t_next:
                batch.append(pending)
                pending = next(static, None)
            batch.sort(key=SimEvent.sort_key)
            yield from batch
            t = t_next

    def _telemetry(self, bg: Sim, t_from: datetime, t_to: datetime, every: float) -> None:
        lo = (t_from - self.t0).total_seconds()
        hi = (t_to - self.t0).total_seconds()
        for node in self.nodes:
            offset = (node.index * 7.3) % every
            k = max(0, int((lo - offset) // every))
            while True:
                at = offset + k * every
                if at >= hi:
                    break
                if at >= lo:
                    when = self.t0 + timedelta(seconds=at)
                    run = self.runs.get(node.name)
                    for g in range(len(node.gpus)):
                        values = run.sample(node, g, when) if run else _idle(bg, node, g)
                        for name, value in values.items():
                            if value is not None:
                                bg.metric(node, when, g, name, value, run.job if run else None)
                k += 1


def _idle(sim: Sim, node: Node, gpu: int) -> dict[str, float | None]:
    values: dict[str, float | None] = {"DCGM_FI_DEV_GPU_TEMP": float(sim.rng.randint(30, 38))}
    if sim.options.telemetry_metrics == "basic":
        values["DCGM_FI_DEV_GPU_UTIL"] = 0.0
        values["DCGM_FI_DEV_XID_ERRORS"] = 0.0
    return values


def simulate_fleet(seed: int, options: FleetOptions | None = None, t0: datetime | None = None) -> FleetRun:
    opts = options or FleetOptions()
    r = rng(seed, "fleet")
    t0 = t0 or default_t0(seed)
    t_end = t0 + timedelta(minutes=opts.minutes)
    platform = r.choice(PLATFORMS)
    scheme = r.choice(K8S_SCHEMES if opts.flavour == "kubernetes" else SLURM_SCHEMES)
    tag = f"{derive(seed, 'fleet-tag') % 36**2:02x}"
    nodes = [
        make_node(r, node_name(scheme, i + 1, platform, tag), i + 1, platform) for i in range(opts.nodes)
    ]
    controller = "slurmctl01" if opts.flavour == "slurm" else f"k8s-system-{r.alnum(5)}"
    sim_opts = SimOptions(
        telemetry_every_s=opts.telemetry_every_s,
        telemetry_metrics=opts.telemetry_metrics,
        noise=opts.noise,
        k8s_share=1.0 if opts.flavour == "kubernetes" else 0.0,
        pre_fault_min_s=max(30.0, min(120.0, opts.minutes * 60 * 0.2)),
        pre_fault_max_s=max(30.0, min(120.0, opts.minutes * 60 * 0.2), opts.minutes * 60 * 0.5),
    )
    sim = Sim(t0, r, sim_opts, controller)
    sim.horizon = t_end
    run = FleetRun(seed=seed, options=opts, t0=t0, t_end=t_end, nodes=nodes, sim=sim)
    for n in nodes:
        sim.nodes[n.name] = n
    # lay jobs over disjoint node ranges
    free = list(range(len(nodes)))
    sizes: list[int] = []
    for _ in range(opts.jobs):
        cap = max(2, min(opts.max_job_nodes, len(free) // max(1, opts.jobs - len(sizes))))
        size = min(len(free), r.choice([s for s in (2, 4, 8, 16, 32, 64) if s <= cap] or [2]))
        if size < 2:
            break
        sizes.append(size)
        free = free[size:]
    names = opts.types or [s.name for s in SCENARIO_TYPES if s.node_sets == 1 and opts.flavour in s.flavours]
    faulty = set(r.sample(range(len(sizes)), k=min(opts.faults, len(sizes))))
    start = 0
    for k, size in enumerate(sizes):
        job_nodes = nodes[start : start + size]
        start += size
        st = SCENARIOS[names[k % len(names)]] if k in faulty else HEALTHY
        t_job = t0 + timedelta(seconds=r.uniform(0, opts.minutes * 60 * 0.15))
        sc = build_scenario(
            st,
            derive(seed, "fleet-job", k) % 2**31,
            t0=t_job,
            options=sim_opts,
            sim=sim,
            nodes=job_nodes,
            job_number=100_000 + derive(seed, "fleet-jobno", k) % 800_000 + k,
            background=False,
        )
        for name in sc.job.nodes:
            run.runs[name] = sc.run
        if k in faulty and sc.truth.decisive_time < t_end:  # a fault past the window is not in the stream
            run.truths.append(sc.truth.model_copy(update={"scenario_id": f"fleet-{seed}-{k}-{st.name}"}))
    run.static = [e for e in sim.sorted_events() if e.time < t_end]
    return run
