"""The event collector and the phases every simulated job shares.

:class:`Sim` collects events for a set of nodes and a controller and knows each source's
file layout (kernel log per node, slurmctld log, the job's output files, pod logs,
dcgm-exporter samples). :class:`JobRun` writes one job's life: allocation, start-up,
training progress, background noise and telemetry, and the usual teardown after a
failure (watchdog timeouts, torchelastic failure blocks, srun/slurmstepd lines).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from connectors.sources.simulator import frameworks, kernel, pytorch, scheduler
from connectors.sources.simulator.events import K8sMeta, Metric, SimEvent, SourceKind
from connectors.sources.simulator.fleet import Job, Node, Rank
from connectors.sources.simulator.rand import Rng
from connectors.sources.simulator.shippers import metric_event
from schemas import codec

TelemetryMod = Callable[[Node, int, datetime, dict[str, float | None]], None]
COUNTERS = {
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_POWER_VIOLATION",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
}
SM_CLOCK = {"volta": 1530, "ampere": 1410, "hopper": 1980}


class SimOptions(BaseModel):
    """Knobs that change volume, not meaning: the same seed with other options is another stream."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    telemetry_every_s: float = Field(
        default=60.0, ge=0, description="dcgm-exporter scrape interval; 0 = none"
    )
    telemetry_metrics: Literal["basic", "min"] = "basic"
    noise: float = Field(default=1.0, ge=0, description="multiplier on background kernel/NCCL noise")
    min_nodes: int = Field(default=2, ge=1)
    max_nodes: int = Field(default=8, ge=1)
    k8s_share: float = Field(default=0.2, ge=0, le=1, description="share of Kubernetes-flavoured jobs")
    pre_fault_min_s: float = Field(default=150.0, ge=30)
    pre_fault_max_s: float = Field(default=600.0, ge=30)


class Sim:
    """Events of one simulated stretch of time, with each source's file layout."""

    def __init__(self, t0: datetime, rng: Rng, options: SimOptions, controller: str = "slurmctl01") -> None:
        self.t0 = t0
        self.rng = rng
        self.options = options
        self.controller = controller
        self.ctld_style: Literal["file", "syslog"] = rng.weighted([("file", 0.7), ("syslog", 0.3)])
        self.ctld_pid = rng.randint(400, 3000)
        self.events: list[SimEvent] = []
        self.nodes: dict[str, Node] = {}
        self.muted: set[str] = set()  # nodes whose kernel log is not collected
        self.silenced: dict[str, datetime] = {}  # nodes that write nothing from this time on (dead)
        self.horizon: datetime | None = None  # the stream goes on (silently) until then
        self._seq = 0

    def add(
        self,
        t: datetime,
        kind: SourceKind,
        origin: str,
        ship_host: str,
        path: str,
        rel: str,
        line: str,
        *,
        body: str | None = None,
        msg: str | None = None,
        decisive: bool = False,
        metric: Metric | None = None,
        k8s: K8sMeta | None = None,
        job_id: str | None = None,
        tag: str = "",
    ) -> SimEvent:
        self._seq += 1
        ev = SimEvent(
            time=t,
            seq=self._seq,
            kind=kind,
            origin=origin,
            ship_host=ship_host,
            path=path,
            rel=rel,
            line=line,
            body=line if body is None else body,
            msg=line if msg is None else msg,
            decisive=decisive,
            metric=metric,
            k8s=k8s,
            job_id=job_id,
            tag=tag,
        )
        dead = self.silenced.get(origin)
        if (kind == "kernel" and origin in self.muted) or (dead is not None and t >= dead):
            return ev  # written nowhere anyone collects
        self.events.append(ev)
        return ev

    def kernel(
        self, node: Node, t: datetime, msg: str, *, tid: int | None = None, decisive: bool = False
    ) -> SimEvent:
        uptime = node.uptime_at((t - self.t0).total_seconds())
        line, fname, body = kernel.file_line(node, t, uptime, msg, tid)
        path = "/var/log/kern.log" if fname == "kern.log" else "/var/log/journal"
        return self.add(
            t,
            "kernel",
            node.name,
            node.name,
            path,
            f"nodes/{node.name}/{fname}",
            line,
            body=body,
            msg=msg,
            decisive=decisive,
            tag="kernel",
        )

    def kernel_block(
        self,
        node: Node,
        t: datetime,
        msgs: list[str],
        *,
        decisive_at: int | None = None,
        tid: int | None = None,
    ) -> list[SimEvent]:
        return [
            self.kernel(node, t + timedelta(microseconds=17 * i), m, tid=tid, decisive=i == decisive_at)
            for i, m in enumerate(msgs)
        ]

    def ctld(self, t: datetime, msg: str, *, decisive: bool = False) -> SimEvent:
        if self.ctld_style == "file":
            line = f"{scheduler.ctld_stamp(t)} {msg}"
            path, rel, body = "/var/log/slurm/slurmctld.log", "controller/slurmctld.log", msg
        else:
            body = f"slurmctld: {msg}"
            line = f"{kernel.syslog_stamp(t, True)} {self.controller} slurmctld[{self.ctld_pid}]: {body}"
            path, rel = "/var/log/syslog", "controller/syslog"
        return self.add(
            t,
            "scheduler",
            self.controller,
            self.controller,
            path,
            rel,
            line,
            body=body,
            msg=msg,
            decisive=decisive,
            tag=f"slurmctld[{self.ctld_pid}]",
        )

    def k8s_event(self, t: datetime, text: str, *, decisive: bool = False) -> SimEvent:
        meta = K8sMeta(
            pod=f"event-exporter-{self.controller[-5:]}",
            namespace="monitoring",
            container="event-exporter",
            node=self.controller,
            uid="6f1c2d3e-0000-4000-8000-00000000e0e0",
            labels={"app": "event-exporter"},
        )
        return self.add(
            t,
            "scheduler",
            self.controller,
            self.controller,
            "/var/log/pods/monitoring_event-exporter_6f1c2d3e/event-exporter/0.log",
            "k8s/events.jsonl",
            text,
            decisive=decisive,
            k8s=meta,
        )

    def metric(self, node: Node, t: datetime, gpu: int, name: str, value: float, job: Job | None) -> SimEvent:
        g = node.gpus[gpu]
        pod = job.pod_of(node.name) if job is not None and job.flavour == "kubernetes" else None
        m = Metric(
            name=name,
            value=value,
            kind="counter" if name in COUNTERS else "gauge",
            gpu=gpu,
            uuid=g.uuid,
            pci_bus_id=g.dcgm_bus_id,
            model=node.platform.model,
            driver=node.driver,
            hpc_job=job.job_id if job is not None and job.flavour == "slurm" else None,
            pod=pod.name if pod else None,
            namespace=job.namespace if pod and job else None,
        )
        text = codec.dumps(metric_event(m, node.name, t)).decode()
        return self.add(
            t,
            "telemetry",
            node.name,
            node.name,
            "dcgm-exporter:9400/metrics",
            f"telemetry/{node.name}.jsonl",
            text,
            metric=m,
        )

    def noise(self, nodes: list[Node], t_from: datetime, t_to: datetime, per_node_s: float = 240.0) -> None:
        """Benign kernel messages on every node, about one per ``per_node_s`` seconds each."""
        span = (t_to - t_from).total_seconds()
        if span <= 0 or self.options.noise <= 0:
            return
        for node in nodes:
            n = _poisson(self.rng, span * self.options.noise / per_node_s)
            for _ in range(n):
                t = t_from + timedelta(seconds=self.rng.uniform(0, span))
                self.kernel_block(node, t, kernel.noise(self.rng, node, t.timestamp()))

    def sorted_events(self) -> list[SimEvent]:
        return sorted(self.events, key=SimEvent.sort_key)


def _poisson(rng: Rng, lam: float) -> int:
    if lam <= 0:
        return 0
    if lam > 30:
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


class JobRun:
    """One job's events in :class:`Sim`: its files, its phases, its progress state."""

    def __init__(self, sim: Sim, job: Job, nodes: list[Node], rng: Rng) -> None:
        self.sim = sim
        self.job = job
        self.nodes = {n.name: n for n in nodes}
        self.rng = rng
        self.it = job.start_iter
        self.t_progress: datetime | None = None
        self.seq = rng.randint(800, 90_000)  # NCCL collective sequence number
        self.telemetry_mods: list[TelemetryMod] = []
        self.busy: tuple[datetime, datetime] | None = None  # when the GPUs were working
        aidot_ranks = [r for r in job.ranks if r.local_rank == 0] if job.framework == "aidot" else []
        self.aidot = {r.rank: frameworks.Aidot(job, r, rng) for r in aidot_ranks}
        for n in nodes:
            sim.nodes[n.name] = n

    # -- files ---------------------------------------------------------------------------------

    def _task(self, r: Rank) -> int:
        if self.job.launcher in ("torchrun", "pytorchjob"):
            return self.job.nodes.index(r.node)
        return r.rank

    def _prefix(self, r: Rank) -> str:
        job = self.job
        if job.launcher in ("torchrun", "pytorchjob") and job.torch in ("2.4", "2.6"):
            return f"[rank{r.rank}]:"
        if job.launcher == "srun_label":
            return f"{r.rank}: "
        return ""

    def _target(self, node: str, task: int | None) -> tuple[str, str, str, K8sMeta | None]:
        job = self.job
        if job.output == "pods":
            pod = job.pod_of(node)
            if pod is None:
                raise RuntimeError(f"no pod of {job.job_id} on {node}")
            meta = K8sMeta(
                pod=pod.name,
                namespace=job.namespace,
                container="pytorch",
                node=node,
                uid=pod.uid,
                labels={
                    "training.kubeflow.org/job-name": job.job_id,
                    "training.kubeflow.org/replica-type": pod.replica_type.lower(),
                    "training.kubeflow.org/replica-index": str(pod.replica_index),
                },
            )
            path = f"/var/log/pods/{job.namespace}_{pod.name}_{pod.uid}/pytorch/0.log"
            return node, path, f"pods/{job.namespace}_{pod.name}.log", meta
        if job.output == "per_task" and task is not None:
            name = f"slurm-{job.job_id}.{task}.out"
            return node, f"/local/scratch/{job.user}/{job.job_id}/{name}", f"nodes/{node}/{name}", None
        return job.batch_host, f"{job.workdir}/{job.out_name}", f"job/{job.out_name}", None

    def out(
        self,
        r: Rank | None,
        t: datetime,
        text: str,
        *,
        node: str | None = None,
        decisive: bool = False,
        prefix: bool = True,
    ) -> SimEvent:
        """One line of job output, written by rank ``r`` (or by the node's launcher/agent)."""
        origin = r.node if r is not None else (node or self.job.batch_host)
        task = (
            self._task(r)
            if r is not None
            else (
                self.job.nodes.index(origin)
                if origin in self.job.nodes and self.job.launcher in ("torchrun", "pytorchjob")
                else None
            )
        )
        if r is not None and prefix:
            text = self._prefix(r) + text
        ship, path, rel, meta = self._target(origin, task)
        return self.sim.add(
            t, "training", origin, ship, path, rel, text, decisive=decisive, k8s=meta, job_id=self.job.job_id
        )

    def outs(
        self,
        r: Rank | None,
        t: datetime,
        lines: list[str],
        *,
        node: str | None = None,
        decisive_at: int | None = None,
        prefix: bool = True,
        step_us: int = 23,
    ) -> list[SimEvent]:
        return [
            self.out(
                r,
                t + timedelta(microseconds=step_us * i),
                line,
                node=node,
                decisive=i == decisive_at,
                prefix=prefix,
            )
            for i, line in enumerate(lines)
        ]

    def batch(self, t: datetime, lines: list[str], *, decisive_at: int | None = None) -> list[SimEvent]:
        """srun / slurmstepd lines: the batch step's output file on the batch host."""
        job = self.job
        name = f"slurm-{job.job_id}.out" if job.output == "per_task" else job.out_name
        path = f"{job.workdir}/{name}"
        return [
            self.sim.add(
                t + timedelta(microseconds=31 * i),
                "training",
                job.batch_host,
                job.batch_host,
                path,
                f"job/{name}",
                line,
                decisive=i == decisive_at,
                job_id=job.job_id,
            )
            for i, line in enumerate(lines)
        ]

    # -- phases --------------------------------------------------------------------------------

    def allocate(self, t_submit: datetime, t_alloc: datetime) -> SimEvent:
        job, sim = self.job, self.sim
        if job.flavour == "kubernetes":
            ev = None
            for i, pod in enumerate(job.pods):
                t = t_alloc + timedelta(milliseconds=40 * i)
                e = sim.k8s_event(
                    t,
                    scheduler.k8s_event(
                        self.rng,
                        t,
                        job.namespace,
                        "Pod",
                        pod.name,
                        pod.uid,
                        "Scheduled",
                        f"Successfully assigned {job.namespace}/{pod.name} to {pod.node}",
                        controller="default-scheduler",
                        action="Binding",
                    ),
                )
                ev = ev or e
                t2 = t + timedelta(seconds=self.rng.uniform(2, 9))
                sim.k8s_event(
                    t2,
                    scheduler.k8s_event(
                        self.rng,
                        t2,
                        job.namespace,
                        "Pod",
                        pod.name,
                        pod.uid,
                        "Started",
                        "Started container pytorch",
                    ),
                )
            if ev is None:
                raise RuntimeError(f"Kubernetes job {job.job_id} has no pods")
            return ev
        sim.ctld(t_submit, scheduler.submit(job, self.rng))
        if self.rng.chance(0.2):
            return sim.ctld(t_alloc, scheduler.backfill_start(job, job.nodelist))
        return sim.ctld(t_alloc, scheduler.allocate(job, job.nodelist))

    def startup(self, t: datetime) -> datetime:
        """Launcher banners, NCCL init (when NCCL_DEBUG=INFO), framework start-up, checkpoint load."""
        job, rng = self.job, self.rng
        if job.launcher in ("torchrun", "pytorchjob"):
            for n, node in enumerate(job.nodes):
                tt = t + timedelta(milliseconds=90 * n)
                pid = rng.randint(100000, 999999)
                stamp = f"W{tt:%m%d %H:%M:%S}.{tt.microsecond:06d} {pid} torch/distributed/run.py:793]"
                self.outs(
                    None,
                    tt,
                    [
                        f"{stamp} ",
                        f"{stamp} *****************************************",
                        f"{stamp} Setting OMP_NUM_THREADS environment variable for each process to be 1 in "
                        "default, "
                        "to avoid your system being overloaded, please further tune the variable for optimal "
                        "performance in your application as needed. ",
                        f"{stamp} *****************************************",
                    ],
                    node=node,
                )
        t += timedelta(seconds=rng.uniform(4, 15))
        lead = job.ranks[0]
        for r in self.aidot.values():
            self.outs(r.rank, t, r.startup(t))
            self.out(r.rank, t + timedelta(milliseconds=5), r.main_start(t, r.rank.node))
        if job.framework == "megatron":
            self.outs(
                lead,
                t,
                [
                    "> initializing torch distributed ...",
                    f"> initialized tensor model parallel with size {rng.choice((1, 2, 4, 8))}",
                    f"> setting random seeds to {rng.choice((1234, 42, 3407))} ...",
                ],
            )
        elif job.framework == "hf":
            self.outs(
                lead,
                t,
                [
                    "***** Running training *****",
                    f"  Num examples = {rng.randint(10**5, 10**7):,}",
                    "  Num Epochs = 1",
                    f"  Total optimization steps = {job.train_iters:,}",
                ],
            )
        elif job.framework in ("lightning", "nemo"):
            self.outs(
                lead,
                t,
                [
                    "GPU available: True (cuda), used: True",
                    "TPU available: False, using: 0 TPU cores",
                    "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0,1,2,3,4,5,6,7]",
                ],
            )
        if job.nccl_debug:
            speakers = [r for r in job.ranks if r.local_rank in (0, 7) or rng.chance(0.15)]
            for speaker in speakers:
                tt = t + timedelta(seconds=rng.uniform(1, 6))
                self.outs(speaker, tt, pytorch.nccl_init(job, self.nodes[speaker.node], speaker, rng))
        t += timedelta(seconds=rng.uniform(8, 60))
        self.outs(lead, t, frameworks.checkpoint_load_lines(job, t, self.it))
        t += timedelta(seconds=rng.uniform(2, 20))
        self.busy = (t, t)
        return t

    def train(
        self,
        t_from: datetime,
        t_to: datetime,
        *,
        slow: Callable[[datetime], float] | None = None,
        loss: Callable[[int], float | None] | None = None,
    ) -> datetime:
        """Progress lines (and checkpoints) from ``t_from`` until the next one would pass ``t_to``."""
        job, rng = self.job, self.rng
        t = t_from
        logger = job.logging_rank()
        aidot_every = max(
            job.log_interval, int(60 / job.iter_s) // max(job.log_interval, 1) * job.log_interval
        )
        while True:
            factor = slow(t) if slow else 1.0
            iter_s = job.iter_s * factor * rng.uniform(0.97, 1.03)
            step = iter_s * job.log_interval
            if t + timedelta(seconds=step) > t_to:
                break
            t += timedelta(seconds=step)
            before = self.it
            self.it += job.log_interval
            value = loss(self.it) if loss else None
            if job.framework == "aidot":
                if self.it // aidot_every != before // aidot_every:
                    for a in self.aidot.values():
                        lv = frameworks.loss_at(job, self.it, rng) if value is None else value
                        self.out(
                            a.rank,
                            t + timedelta(milliseconds=rng.uniform(0, 400)),
                            a.iterations(t, self.it, aidot_every, iter_s, lv),
                        )
            else:
                self.outs(logger, t, frameworks.iteration_lines(job, t, self.it, iter_s, rng, value))
            if self.it // job.save_interval != before // job.save_interval:
                t = self._checkpoint(t)
            self.t_progress = t
        if self.busy is not None:
            self.busy = (self.busy[0], max(self.busy[1], t))
        return t

    def _checkpoint(self, t: datetime) -> datetime:
        job, rng = self.job, self.rng
        saved = self.it - self.it % job.save_interval
        took = rng.uniform(3, 45)
        if job.framework == "aidot":
            for a in self.aidot.values():
                self.out(a.rank, t + timedelta(seconds=took), a.checkpoint(t, saved, took, job.save_interval))
            return t + timedelta(seconds=took)
        start, done = frameworks.checkpoint_save_lines(job, t, saved, rng)
        self.outs(job.ranks[0], t, start)
        self.outs(job.ranks[0], t + timedelta(seconds=took), done)
        return t + timedelta(seconds=took)

    def background(
        self, t_from: datetime, t_to: datetime, *, noise: bool = True, telemetry: bool = True
    ) -> None:
        """Kernel noise on the job's nodes, NCCL chatter (NCCL_DEBUG=INFO jobs) and telemetry."""
        sim, rng, job = self.sim, self.rng, self.job
        if noise:
            sim.noise(list(self.nodes.values()), t_from, t_to)
        busy = self.busy
        if job.nccl_debug and busy is not None and sim.options.noise > 0:
            span = (busy[1] - busy[0]).total_seconds()
            for _ in range(_poisson(rng, span * sim.options.noise / 90)):
                r = rng.choice(job.ranks)
                t = busy[0] + timedelta(seconds=rng.uniform(0, span))
                self.out(r, t, pytorch.nccl_chatter(self.nodes[r.node], r, rng))
        if telemetry:
            self.telemetry(t_from, t_to)

    def telemetry(self, t_from: datetime, t_to: datetime) -> None:
        every = self.sim.options.telemetry_every_s
        if every <= 0:
            return
        for node in self.nodes.values():
            offset = (node.index * 7.3) % every
            t = t_from + timedelta(seconds=offset)
            while t <= t_to:
                for g in range(len(node.gpus)):
                    for name, value in self.sample(node, g, t).items():
                        if value is not None:
                            self.sim.metric(node, t, g, name, value, self.job)
                t += timedelta(seconds=every)

    def sample(self, node: Node, gpu: int, t: datetime) -> dict[str, float | None]:
        rng = self.rng
        working = self.busy is not None and self.busy[0] <= t <= self.busy[1]
        temp = rng.uniform(58, 71) if working else rng.uniform(31, 39)
        values: dict[str, float | None] = {"DCGM_FI_DEV_GPU_TEMP": float(round(temp))}
        if self.sim.options.telemetry_metrics == "basic":
            values["DCGM_FI_DEV_GPU_UTIL"] = float(rng.randint(94, 100) if working else 0)
            values["DCGM_FI_DEV_XID_ERRORS"] = 0.0
        for mod in self.telemetry_mods:
            mod(node, gpu, t, values)
        return values

    # -- teardown ------------------------------------------------------------------------------

    def watchdog_cascade(
        self, t_fault: datetime, victims: list[Rank], *, full_ranks: int = 4, t_first: datetime | None = None
    ) -> list[SimEvent]:
        """Every victim times out on the same collective ``timeout`` after the fault, with follow-ups."""
        job, rng = self.job, self.rng
        op = rng.choice(pytorch.OPS)
        numel = rng.choice((1, 8, 131072000, 67108864, 1048576))
        first = t_first or (t_fault + timedelta(milliseconds=job.timeout_ms))
        out: list[SimEvent] = []
        for i, r in enumerate(victims):
            t = first + timedelta(milliseconds=rng.uniform(0, 900))
            ran = job.timeout_ms + int((t - first).total_seconds() * 1000) + rng.randint(5, 120)
            lines = [pytorch.watchdog_timeout(job, r.rank, t, self.seq, op, numel, ran)]
            lines += pytorch.watchdog_followups(job, r.rank, t, self.seq, i < full_ranks, rng)
            out += self.outs(r, t, lines)
        return out

    def remote_errors(self, t: datetime, victims: list[Rank], dead: Rank) -> list[SimEvent]:
        """The ranks that notice quickly that a peer process died (ncclRemoteError)."""
        op = self.rng.choice(pytorch.OPS)
        peer = f"{dead.node}<{self.rng.randint(30000, 60000)}>"
        out: list[SimEvent] = []
        for r in victims:
            tt = t + timedelta(milliseconds=self.rng.uniform(50, 2500))
            out += self.outs(
                r, tt, pytorch.async_remote_error(self.job, r.rank, tt, self.seq, op, 1048576, peer)
            )
        return out

    def fail(
        self,
        t: datetime,
        failures: list[tuple[Rank, int, str]],
        *,
        exit_code: int = 1,
        slurm_how: tuple[str, int] | None = None,
    ) -> datetime:
        """Workers died: torchelastic blocks (or srun errors), the other agents stop theirs, the job ends."""
        job, rng = self.job, self.rng
        t_end = t + timedelta(seconds=rng.uniform(2, 8))
        failed_nodes = list(dict.fromkeys(r.node for r, _, _ in failures))
        if job.launcher in ("torchrun", "pytorchjob"):
            for n, node in enumerate(job.nodes):
                tt = t + timedelta(milliseconds=200 + 70 * n)
                mine = [f for f in failures if f[0].node == node]
                if mine:
                    self.outs(
                        None,
                        tt,
                        [
                            "Traceback (most recent call last):",
                            '  File "/usr/local/bin/torchrun", line 8, in <module>',
                            "    sys.exit(main())",
                            *pytorch.child_failed(job, tt, mine),
                        ],
                        node=node,
                    )
                else:
                    self.outs(
                        None, tt, pytorch.elastic_sigterm([r.pid for r in job.ranks_on(node)]), node=node
                    )
        elif job.flavour == "slurm":
            lines = [
                scheduler.srun_exit(r.node, r.rank, max(code, 1) if code >= 0 else 1)
                for r, code, _ in failures[:6]
            ]
            lines += scheduler.srun_abort(rng.choice((32, 47, 60)))
            lines.append(scheduler.stepd_cancelled(job, failed_nodes[0], t_end, None, step="0"))
            self.batch(t + timedelta(milliseconds=300), lines)
        self.end(t_end, ("WEXITSTATUS", exit_code) if slurm_how is None else slurm_how, failed=True)
        return t_end

    def end(self, t: datetime, how: tuple[str, int], *, failed: bool) -> None:
        job, sim = self.job, self.sim
        if job.flavour == "slurm":
            lines = scheduler.job_complete(job, *how)
            for i, line in enumerate(lines):
                sim.ctld(t + timedelta(milliseconds=i), line)
        elif failed:
            pod = job.pods[-1]
            sim.k8s_event(
                t,
                scheduler.k8s_event(
                    self.rng,
                    t,
                    job.namespace,
                    "PyTorchJob",
                    job.job_id,
                    pod.uid,
                    "PyTorchJobFailed",
                    f"PyTorchJob {job.namespace}/{job.job_id} has failed because 1 Worker replica(s) failed.",
                    type_="Warning",
                    controller="pytorchjob-controller",
                ),
            )
        if self.busy is not None:
            self.busy = (self.busy[0], min(self.busy[1], t))
