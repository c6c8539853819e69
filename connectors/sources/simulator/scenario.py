"""Scenario context: one job on its nodes, the fault injected into it, and the ground truth.

A scenario type is a function ``build(ctx)`` that trains the job up to the fault, writes
the fault and its cascade, and states the truth (category, culprit, restartability,
actions, the decisive signal) through the context.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from connectors.sources.simulator import pytorch
from connectors.sources.simulator.builder import JobRun, Sim, SimOptions
from connectors.sources.simulator.events import SimEvent
from connectors.sources.simulator.fleet import (
    K8S_SCHEMES,
    PLATFORM_BY_NAME,
    PLATFORMS,
    SLURM_SCHEMES,
    Flavour,
    Framework,
    Gpu,
    Job,
    Node,
    Pod,
    Rank,
    make_node,
    node_name,
    place_job,
)
from connectors.sources.simulator.rand import Rng, derive, rng
from connectors.sources.simulator.truth import GroundTruth
from schemas.incidents import Category

EPOCH = datetime(2026, 11, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ScenarioType:
    name: str
    category: Category
    description: str
    build: Callable[[Ctx], None]
    healthy: bool = False
    flavours: tuple[Flavour, ...] = ("slurm", "kubernetes")
    platform: str | None = None
    framework: Framework | None = None
    node_sets: int = 1  # disjoint node sets the scenario needs (restart loops use one per attempt)
    resume: bool = False  # the job resumes from a checkpoint (start iteration > 0)


@dataclass
class Ctx:
    seed: int
    type: ScenarioType
    rng: Rng
    sim: Sim
    run: JobRun
    job: Job
    nodes: list[Node]
    spare: list[Node]
    t0: datetime
    t_start: datetime
    t_fault: datetime
    category: Category | None = None
    culprit_node: str | None = None
    culprit_gpu: Gpu | None = None
    culprit_rank: int | None = None
    restartable: bool = True
    actions: list[str] = field(default_factory=list)
    decisive_event: SimEvent | None = None
    decisive_time: datetime | None = None
    attempts: int = 1
    all_nodes: list[str] = field(default_factory=list)

    # -- lookups -------------------------------------------------------------------------------

    def node(self, name: str) -> Node:
        return self.sim.nodes[name]

    def gpu_of(self, r: Rank) -> Gpu:
        return self.node(r.node).gpus[r.gpu]

    def pick_rank(self, *, not_first_node: bool = False) -> Rank:
        pool = [r for r in self.job.ranks if not (not_first_node and r.node == self.job.nodes[0])]
        return self.rng.choice(pool or self.job.ranks)

    def others(self, *, nodes: set[str] | None = None, ranks: set[int] | None = None) -> list[Rank]:
        return [
            r for r in self.job.ranks if not (nodes and r.node in nodes) and not (ranks and r.rank in ranks)
        ]

    # -- truth ---------------------------------------------------------------------------------

    def decisive(self, ev: SimEvent | None) -> SimEvent:
        if ev is None:
            raise RuntimeError(f"{self.type.name}: no decisive event was written")
        if self.decisive_event is None:
            ev.decisive = True
            self.decisive_event = ev
            self.decisive_time = ev.time
        return ev

    def first(self, events: list[SimEvent], needle: str) -> SimEvent:
        """The first of ``events`` whose line contains ``needle`` (the decisive one in a block)."""
        return next(e for e in events if needle in e.line)

    def blame(self, r: Rank | None = None, *, node: str | None = None, gpu: bool = True) -> None:
        if r is not None:
            self.culprit_node = r.node
            self.culprit_rank = r.rank
            if gpu:
                self.culprit_gpu = self.gpu_of(r)
        else:
            self.culprit_node = node

    def drain_and_requeue(self) -> None:
        if self.culprit_node is None:
            raise RuntimeError(f"{self.type.name}: drain without a culprit")
        self.actions = [f"drain_node {self.culprit_node}"]
        if self.restartable:
            self.actions.append(f"requeue_job {self.job.job_id} excluding {self.culprit_node}")

    def requeue(self) -> None:
        self.actions = [f"requeue_job {self.job.job_id}"]

    # -- common phases -------------------------------------------------------------------------

    def train_to_fault(self, **kw: object) -> datetime:
        return self.run.train(self.t_start, self.t_fault, **kw)  # type: ignore[arg-type]

    def keep_training(self, t_from: datetime, minutes: tuple[float, float] = (4, 12)) -> datetime:
        t_to = t_from + timedelta(minutes=self.rng.uniform(*minutes))
        return self.run.train(t_from, t_to)

    def exception(
        self, r: Rank, t: datetime, final: str, extra: list[str] | None = None, *, tb: bool = True
    ) -> list[SimEvent]:
        """A Python exception on rank ``r``: traceback, final line (returned first), advice lines."""
        lines = pytorch.traceback(pytorch.train_frames(self.job, self.rng), final) if tb else [final]
        events = self.run.outs(r, t, lines + (extra or []))
        idx = len(lines) - 1
        return [events[idx], *events[:idx], *events[idx + 1 :]]

    def crash(
        self,
        t: datetime,
        bad: list[Rank],
        *,
        fast_remote: float = 0.5,
        codes: int = 1,
        victims: list[Rank] | None = None,
    ) -> datetime:
        """``bad`` ranks died at ``t``; the rest learn of it from NCCL (remote error) or the watchdog."""
        bad_ids = {r.rank for r in bad}
        rest = victims if victims is not None else self.others(ranks=bad_ids)
        if rest and self.rng.chance(fast_remote):
            self.run.remote_errors(t, rest, bad[0])
            t_fail = t + timedelta(seconds=self.rng.uniform(2, 6))
        elif rest:
            self.run.watchdog_cascade(t, rest)
            t_fail = t + timedelta(milliseconds=self.job.timeout_ms + 1500)
        else:
            t_fail = t + timedelta(seconds=2)
        failures = [(r, codes, pytorch.signal_tb(codes, r.pid)) for r in bad]
        failures += [(r, -6, pytorch.signal_tb(-6, r.pid)) for r in rest[:3]]
        return self.run.fail(t_fail, self._by_node(failures))

    def hang(self, t: datetime, stuck: list[Rank]) -> datetime:
        """``stuck`` ranks stop answering collectives; everyone else times out ``timeout`` later."""
        ids = {r.rank for r in stuck}
        victims = self.others(ranks=ids)
        self.run.watchdog_cascade(t, victims)
        t_fail = t + timedelta(milliseconds=self.job.timeout_ms + 1500)
        failures = [(r, -6, pytorch.signal_tb(-6, r.pid)) for r in victims[:3]]
        failures += [(r, -15, pytorch.signal_tb(-15, r.pid)) for r in stuck[:2]]
        return self.run.fail(t_fail, self._by_node(failures))

    def _by_node(self, failures: list[tuple[Rank, int, str]]) -> list[tuple[Rank, int, str]]:
        """At most three failures per node, as an agent reports before it stops the rest."""
        seen: dict[str, int] = {}
        out = []
        for f in failures:
            seen[f[0].node] = seen.get(f[0].node, 0) + 1
            if seen[f[0].node] <= 3:
                out.append(f)
        return out

    # -- result --------------------------------------------------------------------------------

    def truth(self, scenario_id: str) -> GroundTruth:
        events = self.sim.events
        if self.category is None or self.decisive_time is None:
            raise RuntimeError(f"{self.type.name} set no category or no decisive signal")
        d = self.decisive_event
        return GroundTruth(
            scenario_id=scenario_id,
            scenario_type=self.type.name,
            seed=self.seed,
            flavour=self.job.flavour,
            description=self.type.description,
            job_id=self.job.job_id,
            job_nodes=self.all_nodes or list(self.job.nodes),
            attempts=self.attempts,
            category=self.category,
            healthy=self.type.healthy,
            culprit_node=self.culprit_node,
            culprit_gpu=self.culprit_gpu.pci if self.culprit_gpu else None,
            culprit_gpu_index=self.culprit_gpu.index if self.culprit_gpu else None,
            culprit_rank=self.culprit_rank,
            restartable=self.restartable,
            actions=list(self.actions),
            decisive_time=self.decisive_time,
            decisive_line=d.line if d else None,
            decisive_host=d.origin if d else None,
            decisive_source=d.kind if d else None,
            start_time=min(e.time for e in events),
            end_time=max(e.time for e in events),
        )


@dataclass
class Scenario:
    truth: GroundTruth
    events: list[SimEvent]
    job: Job
    nodes: list[Node]
    run: JobRun


def default_t0(seed: int) -> datetime:
    """A start time fixed by the seed (November 2026), so a seed gives byte-identical logs."""
    return EPOCH + timedelta(seconds=derive(seed, "t0") % (25 * 86_400))


def _node_count(r: Rng, options: SimOptions) -> int:
    choices = [n for n in (2, 3, 4, 6, 8) if options.min_nodes <= n <= options.max_nodes]
    if not choices:
        return max(options.min_nodes, min(options.max_nodes, 2))
    weights = {2: 0.35, 3: 0.15, 4: 0.3, 6: 0.1, 8: 0.1}
    return r.weighted([(n, weights[n]) for n in choices])


def build_scenario(
    st: ScenarioType,
    seed: int,
    *,
    t0: datetime | None = None,
    options: SimOptions | None = None,
    node_base: int | None = None,
    job_number: int | None = None,
    sim: Sim | None = None,
    nodes: list[Node] | None = None,
    background: bool = True,
) -> Scenario:
    """Generate one scenario. With ``sim``/``nodes`` given it is written into a larger (fleet) stream."""
    options = options or SimOptions()
    r = rng(seed, "scenario", st.name)
    t0 = t0 or default_t0(seed)
    flavour: Flavour = "slurm"
    if "kubernetes" in st.flavours and ("slurm" not in st.flavours or r.chance(options.k8s_share)):
        flavour = "kubernetes"
    platform = PLATFORM_BY_NAME[st.platform] if st.platform else r.choice(PLATFORMS)
    if nodes is None:
        scheme = r.choice(K8S_SCHEMES if flavour == "kubernetes" else SLURM_SCHEMES)
        count = _node_count(r, options)
        base = node_base if node_base is not None else 1 + derive(seed, "base", st.name) % 5000
        tag = f"{derive(seed, 'cluster') % 36**2:02x}"
        nodes = [
            make_node(r, node_name(scheme, base + i, platform, tag), base + i, platform)
            for i in range(count * st.node_sets)
        ]
    count = len(nodes) // st.node_sets
    job_nodes, spare = nodes[:count], nodes[count:]
    number = job_number if job_number is not None else 10_000 + derive(seed, "job", st.name) % 9_000_000
    if sim is None:
        controller = (
            r.choice(("slurmctl01", "head", "mgmt01", "sched-01"))
            if flavour == "slurm"
            else (f"{job_nodes[0].name.rsplit('-', 1)[0]}-sys-{r.alnum(4)}")
        )
        sim = Sim(t0, r, options, controller)
    job = place_job(r, str(number), job_nodes, flavour, framework=st.framework)
    if flavour == "kubernetes":
        job = _k8s_named(job, number)
    if st.resume and job.start_iter == 0:
        job.start_iter = job.save_interval * r.randint(2, 30)
    run = JobRun(sim, job, job_nodes, r)
    t_alloc = t0 + timedelta(seconds=r.uniform(1, 20))
    run.allocate(t0, t_alloc)
    t_start = run.startup(t_alloc + timedelta(seconds=r.uniform(3, 30)))
    t_fault = t_start + timedelta(seconds=r.uniform(options.pre_fault_min_s, options.pre_fault_max_s))
    ctx = Ctx(
        seed=seed,
        type=st,
        rng=r,
        sim=sim,
        run=run,
        job=job,
        nodes=job_nodes,
        spare=spare,
        t0=t0,
        t_start=t_start,
        t_fault=t_fault,
    )
    st.build(ctx)
    end = max([e.time for e in sim.events] + ([sim.horizon] if sim.horizon else []))
    ctx.run.background(t0, end + timedelta(seconds=60), noise=background, telemetry=background)
    scenario_id = f"{st.name}-{seed}"
    truth = ctx.truth(scenario_id)
    return Scenario(truth=truth, events=sim.sorted_events(), job=ctx.job, nodes=nodes, run=ctx.run)


def _k8s_named(job: Job, number: int) -> Job:
    """A PyTorchJob is named, not numbered: the name is the job id the labels carry."""
    name = f"{job.name}-{number}".replace(".", "-")
    pods = [
        Pod(
            f"{name}-{p.replica_type.lower()}-{p.replica_index}",
            p.node,
            p.uid,
            p.replica_type,
            p.replica_index,
        )
        for p in job.pods
    ]
    return dataclasses.replace(job, job_id=name, pods=pods)
