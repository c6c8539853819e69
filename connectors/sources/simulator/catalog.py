"""The scenario types: faults with their real cascades and timing, and healthy noise.

Categories follow the corpus conventions (shared/corpus/README.md): GPU faults are
``hardware_gpu``; IB links ``hardware_network``; node loss ``hardware_host``; driver,
GSP and NCCL-version problems ``system_software``; OOM (host or GPU), NaN and shape errors
``application``; full or stale storage, truncated checkpoints, /dev/shm, time limits and
preemption ``infrastructure``; unexplained hangs and user cancellations ``unknown``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta

from connectors.sources.simulator import kernel, pytorch, scheduler
from connectors.sources.simulator.builder import JobRun
from connectors.sources.simulator.events import SimEvent
from connectors.sources.simulator.fleet import Node, Rank, place_job
from connectors.sources.simulator.frameworks import finished_lines, loss_at
from connectors.sources.simulator.scenario import Ctx, ScenarioType
from schemas.incidents import Category

HW = Category.HARDWARE_GPU
NET = Category.HARDWARE_NETWORK
HOST = Category.HARDWARE_HOST
SYS = Category.SYSTEM_SOFTWARE
APP = Category.APPLICATION
INFRA = Category.INFRASTRUCTURE
UNKNOWN = Category.UNKNOWN


def _s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def _gpu_dead_after(ctx: Ctx, node: Node, gpu: int, t: datetime) -> None:
    """dcgm-exporter can no longer read a GPU that fell off the bus: its series stop."""

    def mod(n: Node, g: int, at: datetime, values: dict[str, float | None]) -> None:
        if n.name == node.name and g == gpu and at >= t:
            for k in values:
                values[k] = None

    ctx.run.telemetry_mods.append(mod)


def _last_xid(ctx: Ctx, node: Node, gpu: int, t: datetime, code: int) -> None:
    def mod(n: Node, g: int, at: datetime, values: dict[str, float | None]) -> None:
        if n.name == node.name and g == gpu and at >= t and "DCGM_FI_DEV_XID_ERRORS" in values:
            values["DCGM_FI_DEV_XID_ERRORS"] = float(code)

    ctx.run.telemetry_mods.append(mod)


Values = Callable[[int, datetime], dict[str, float]]


def _series(
    ctx: Ctx, node: Node, t_from: datetime, t_to: datetime, every: float, value: Values
) -> list[SimEvent]:
    """Scenario-relevant dcgm samples, emitted whatever the background telemetry setting."""
    out: list[SimEvent] = []
    t = t_from
    while t <= t_to:
        for g in range(len(node.gpus)):
            for name, v in value(g, t).items():
                out.append(ctx.sim.metric(node, t, g, name, v, ctx.job))
        t += _s(every)
    return out


# -- GPU hardware ----------------------------------------------------------------------------------


def xid79(ctx: Ctx) -> None:
    rng, bad = ctx.rng, ctx.pick_rank()
    node, gpu = ctx.node(bad.node), ctx.gpu_of(bad)
    ctx.train_to_fault()
    t = ctx.t_fault
    form = rng.weighted(
        [("xid", 0.4), ("banner", 0.2), ("aer", 0.15), ("block_first", 0.15), ("xid_block", 0.1)]
    )
    xid_line = (
        kernel.xid(ctx.rng, gpu, 79, "GPU has fallen off the bus.")
        if rng.chance(0.6)
        else kernel.xid_bare(gpu, 79, "GPU has fallen off the bus.")
    )
    if form == "xid":
        msgs = [xid_line]
    elif form == "banner":
        msgs = [*kernel.gpu_banner(gpu), xid_line]
    elif form == "aer":
        msgs = [
            *kernel.aer_fatal(f"0000:{rng.choice(('00', '80', 'c0'))}:02.0", gpu),
            *kernel.gpu_banner(gpu),
            xid_line,
        ]
    elif form == "block_first":
        msgs = [*kernel.fallen_off_bus_block(gpu, node.platform.pci_id, rng), xid_line]
    else:
        msgs = [xid_line, *kernel.fallen_off_bus_block(gpu, node.platform.pci_id, rng)]
    events = ctx.sim.kernel_block(node, t, msgs)
    ctx.decisive(next(e for e in events if "fallen off" in e.line))
    _gpu_dead_after(ctx, node, bad.gpu, t)
    if rng.chance(0.35):
        ctx.run.outs(
            bad,
            t + _s(rng.uniform(0.5, 4)),
            [pytorch.cuda_error(ctx.job, "unspecified launch failure"), *pytorch.cuda_advice()],
        )
    ctx.hang(t, [bad])
    ctx.category, ctx.restartable = HW, True
    ctx.blame(bad)
    ctx.drain_and_requeue()


def _dbe_text(rng: object, part: int, sub: int, addr: int) -> str:
    return (
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr "
        f"0x{addr:x} partition {part}, subpartition {sub}"
    )


def _remap_63(node: Node) -> str:
    if node.platform.generation == "volta":
        return "Dynamic Page Retirement: New retired page, reload the driver to activate."
    return "Row Remapper: New row marked for remapping, reset gpu to activate."


def _ecc_crash(
    ctx: Ctx, bad: Rank, t: datetime, message: str = "uncorrectable ECC error encountered"
) -> None:
    ctx.exception(bad, t, pytorch.cuda_error(ctx.job, message), pytorch.cuda_advice())
    ctx.crash(t, [bad], fast_remote=0.6)


def xid48(ctx: Ctx) -> None:
    rng, bad = ctx.rng, ctx.pick_rank()
    node, gpu = ctx.node(bad.node), ctx.gpu_of(bad)
    ctx.train_to_fault()
    t = ctx.t_fault
    text = _dbe_text(rng, rng.randint(0, 7), rng.randint(0, 1), rng.randint(0x10000000, 0xFFFFFFFFF))
    msgs = [kernel.xid(rng, gpu, 48, text)]
    if rng.chance(0.7):
        msgs.append(kernel.xid(rng, gpu, 63, _remap_63(node), pid=bad.pid))
    if rng.chance(0.5):
        msgs.append(kernel.xid(rng, gpu, 45, f"Ch 0000000{rng.randint(1, 9)}", pid=bad.pid, name="python3"))
    events = ctx.sim.kernel_block(node, t, msgs)
    ctx.decisive(events[0])
    _last_xid(ctx, node, bad.gpu, t, 48)
    _ecc_crash(ctx, bad, t + _s(rng.uniform(0.05, 1.5)))
    ctx.category, ctx.restartable = HW, True
    ctx.blame(bad)
    ctx.drain_and_requeue()


def xid64(ctx: Ctx) -> None:
    rng, bad = ctx.rng, ctx.pick_rank()
    node, gpu = ctx.node(bad.node), ctx.gpu_of(bad)
    t_last = ctx.train_to_fault()
    for i in range(rng.randint(1, 3)):
        tt = ctx.t_start + (t_last - ctx.t_start) * (0.3 + 0.2 * i)
        ctx.sim.kernel(node, tt, kernel.xid(rng, gpu, 63, _remap_63(node), pid=bad.pid))
    t = ctx.t_fault
    ev = ctx.sim.kernel(
        node,
        t,
        kernel.xid(rng, gpu, 64, "Dynamic Page Retirement: Fatal error, unable to retire page", pid=bad.pid),
    )
    ctx.decisive(ev)
    _last_xid(ctx, node, bad.gpu, t, 64)
    _ecc_crash(ctx, bad, t + _s(rng.uniform(0.1, 2)))
    ctx.category, ctx.restartable = HW, True
    ctx.blame(bad)
    ctx.drain_and_requeue()


def xid94(ctx: Ctx) -> None:
    rng, bad = ctx.rng, ctx.pick_rank()
    node, gpu = ctx.node(bad.node), ctx.gpu_of(bad)
    ctx.train_to_fault()
    t = ctx.t_fault
    unit = rng.choice(("CE User Channel (0x9)", "SM (0x1)", "MMU (0xa)"))
    msgs = [
        kernel.xid(rng, gpu, 94, f"Contained: {unit}. RST: No, D-RST: No", pid=bad.pid, name="python3"),
        kernel.xid(rng, gpu, 45, f"Ch 0000000{rng.randint(1, 9)}", pid=bad.pid, name="python3"),
    ]
    events = ctx.sim.kernel_block(node, t, msgs)
    ctx.decisive(events[0])
    _last_xid(ctx, node, bad.gpu, t, 94)
    _ecc_crash(ctx, bad, t + _s(rng.uniform(0.05, 1)))
    ctx.category, ctx.restartable = HW, True
    ctx.blame(bad)
    ctx.drain_and_requeue()


def xid95(ctx: Ctx) -> None:
    rng, bad = ctx.rng, ctx.pick_rank()
    node, gpu = ctx.node(bad.node), ctx.gpu_of(bad)
    ctx.train_to_fault()
    t = ctx.t_fault
    unit = rng.choice(("FBHUB", "SM", "GPC"))
    msgs = [kernel.xid(rng, gpu, 95, f"Uncontained: {unit}. RST: Yes, D-RST: No")]
    local = ctx.job.ranks_on(node.name)
    for r in rng.sample(local, k=min(len(local), rng.randint(1, 4))):
        msgs.append(
            kernel.xid(rng, node.gpus[r.gpu], 45, f"Ch 0000000{rng.randint(1, 9)}", pid=r.pid, name="python3")
        )
    events = ctx.sim.kernel_block(node, t, msgs)
    ctx.decisive(events[0])
    _last_xid(ctx, node, bad.gpu, t, 95)
    _ecc_crash(ctx, bad, t + _s(rng.uniform(0.05, 1)))
    ctx.category, ctx.restartable = HW, True
    ctx.blame(bad)
    ctx.drain_and_requeue()


def xid119(ctx: Ctx) -> None:
    rng, bad = ctx.rng, ctx.pick_rank()
    node, gpu = ctx.node(bad.node), ctx.gpu_of(bad)
    ctx.train_to_fault()
    t = ctx.t_fault
    first = None
    for i in range(rng.randint(1, 4)):
        fn = rng.choice(
            (
                "76 (GSP_RM_CONTROL) (0x20800a4c 0x4)",
                "10 (FREE) (0xa55a0040 0x0)",
                "76 (GSP_RM_CONTROL) (0x2080014b 0x5)",
            )
        )
        detail = f" Expected function {fn}." if rng.chance(0.6) else ""
        ev = ctx.sim.kernel(
            node,
            t + _s(i * rng.uniform(5, 45)),
            kernel.xid(
                rng,
                gpu,
                119,
                f"Timeout waiting for RPC from GSP!{detail}",
                pid=rng.choice((bad.pid, rng.randint(300, 900))),
                name=rng.choice(("python3", "nv_queue")),
            ),
        )
        first = first or ev
    ctx.decisive(first)
    _last_xid(ctx, node, bad.gpu, t, 119)
    ctx.hang(t, [bad])
    ctx.category, ctx.restartable = SYS, True
    ctx.blame(bad)
    ctx.drain_and_requeue()


def xid120(ctx: Ctx) -> None:
    rng, bad = ctx.rng, ctx.pick_rank()
    node, gpu = ctx.node(bad.node), ctx.gpu_of(bad)
    ctx.train_to_fault()
    t = ctx.t_fault
    text = (
        f"GSP Error: Task {rng.choice((1, 2))} raised error code 0x{rng.choice(('5', '6', '1b'))} for reason "
        f"0x0 at 0x{rng.hexstr(6)} ({rng.randint(0, 3)} more errors skipped)"
    )
    ev = ctx.sim.kernel(node, t, kernel.xid(rng, gpu, 120, text, pid=None))
    ctx.decisive(ev)
    _last_xid(ctx, node, bad.gpu, t, 120)
    if rng.chance(0.5):
        _ecc_crash(ctx, bad, t + _s(rng.uniform(0.5, 3)), "unspecified launch failure")
    else:
        ctx.hang(t, [bad])
    ctx.category, ctx.restartable = SYS, True
    ctx.blame(bad)
    ctx.drain_and_requeue()


def ecc_cuda_only(ctx: Ctx) -> None:
    """No kernel log is collected at this site: only the rank's CUDA error and dcgm-exporter tell."""
    rng, bad = ctx.rng, ctx.pick_rank()
    node = ctx.node(bad.node)
    for n in ctx.nodes:
        ctx.sim.muted.add(n.name)
    ctx.train_to_fault()
    t = ctx.t_fault
    events = ctx.exception(
        bad, t, pytorch.cuda_error(ctx.job, "uncorrectable ECC error encountered"), pytorch.cuda_advice()
    )
    ctx.decisive(events[0])
    t_scrape = t + _s(rng.uniform(2, 25))
    _series(
        ctx,
        node,
        t_scrape,
        t_scrape,
        30,
        lambda g, _t: {
            "DCGM_FI_DEV_XID_ERRORS": 48.0 if g == bad.gpu else 0.0,
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 1.0 if g == bad.gpu else 0.0,
        },
    )
    ctx.crash(t, [bad], fast_remote=0.6)
    ctx.category, ctx.restartable = HW, True
    ctx.blame(bad)
    ctx.drain_and_requeue()


def nvlink74(ctx: Ctx) -> None:
    rng, bad = ctx.rng, ctx.pick_rank()
    node, gpu = ctx.node(bad.node), ctx.gpu_of(bad)
    ctx.train_to_fault()
    t = ctx.t_fault
    link = rng.randint(0, 17)
    regs = ", ".join(rng.choice(("0x0", "0x0", "0x10000", "0x20", "0x4")) for _ in range(7))
    msgs = [kernel.xid(rng, gpu, 74, f"NVLink: fatal error detected on link {link}({regs})")]
    if rng.chance(0.4):
        peer = node.gpus[(bad.gpu + 1) % len(node.gpus)]
        msgs.append(
            kernel.xid(rng, peer, 74, f"NVLink: fatal error detected on link {rng.randint(0, 17)}({regs})")
        )
    events = ctx.sim.kernel_block(node, t, msgs)
    ctx.decisive(events[0])
    _last_xid(ctx, node, bad.gpu, t, 74)
    tt = t + _s(rng.uniform(0.1, 2))
    ctx.exception(
        bad,
        tt,
        pytorch.cuda_error(ctx.job, "uncorrectable NVLink error detected during the execution"),
        pytorch.cuda_advice(),
    )
    ctx.crash(tt, [bad], fast_remote=0.5)
    ctx.category, ctx.restartable = HW, True
    ctx.blame(bad)
    ctx.drain_and_requeue()


def thermal_straggler(ctx: Ctx) -> None:
    rng, bad = ctx.rng, ctx.pick_rank()
    node = ctx.node(bad.node)
    t = ctx.t_fault
    factor = rng.uniform(1.25, 1.7)
    t_last = ctx.run.train(
        ctx.t_start, t + _s(rng.uniform(480, 900)), slow=lambda at: factor if at >= t else 1.0
    )
    del t_last
    clock = {"volta": 1530, "ampere": 1410, "hopper": 1980}[node.platform.generation]
    decoy = ctx.rng.choice([n for n in ctx.nodes if n.name != node.name] or [node])

    def values(hot: bool) -> Values:
        def f(g: int, at: datetime) -> dict[str, float]:
            throttled = hot and g == bad.gpu and at >= t
            return {
                "DCGM_FI_DEV_GPU_TEMP": float(rng.randint(88, 93) if throttled else rng.randint(58, 71)),
                "DCGM_FI_DEV_SM_CLOCK": float(rng.randint(1005, 1305) if throttled else clock),
                "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": float(rng.choice((64, 96)) if throttled else 0),
            }

        return f

    start = ctx.t_start + _s(15)
    end = max(ctx.run.t_progress or t, t + _s(240))  # the exporter keeps scraping a slow job
    hot = _series(ctx, node, start, end, 60, values(True))
    if decoy is not node:
        _series(ctx, decoy, start + _s(7), end, 60, values(False))
    ctx.decisive(
        next(
            e
            for e in hot
            if e.metric and e.metric.name == "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" and e.metric.value > 0
        )
    )
    ctx.category, ctx.restartable = HW, True
    ctx.blame(bad)
    ctx.drain_and_requeue()


def degrading_gpu(ctx: Ctx) -> None:
    rng, bad = ctx.rng, ctx.pick_rank()
    node, gpu = ctx.node(bad.node), ctx.gpu_of(bad)
    ctx.train_to_fault()
    t = ctx.t_fault
    span = (t - ctx.t_start).total_seconds()

    def ecc(g: int, at: datetime) -> dict[str, float]:
        if g != bad.gpu:
            return {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0.0}
        x = max(0.0, (at - ctx.t_start).total_seconds() / span)
        return {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": float(int(3 * math.exp(4 * x)) + int(x * 40))}

    _series(ctx, node, ctx.t_start + _s(20), t + _s(60), 60, ecc)
    for i in range(rng.randint(1, 3)):
        tt = ctx.t_start + _s(span * (0.55 + 0.15 * i))
        ctx.sim.kernel(node, tt, kernel.xid(rng, gpu, 92, "High single-bit ECC error rate", pid=None))
    text = _dbe_text(rng, rng.randint(0, 7), rng.randint(0, 1), rng.randint(0x10000000, 0xFFFFFFFFF))
    events = ctx.sim.kernel_block(
        node, t, [kernel.xid(rng, gpu, 48, text), kernel.xid(rng, gpu, 63, _remap_63(node), pid=bad.pid)]
    )
    ctx.decisive(events[0])
    _last_xid(ctx, node, bad.gpu, t, 48)
    _ecc_crash(ctx, bad, t + _s(rng.uniform(0.05, 1.5)))
    ctx.category, ctx.restartable = HW, True
    ctx.blame(bad)
    ctx.drain_and_requeue()


# -- network and host --------------------------------------------------------------------------------


def _ib_port(ctx: Ctx, node: Node) -> tuple[str, str]:
    i = ctx.rng.randrange(len(node.hcas))
    return node.hcas[i][1], node.netdevs[i]


def _ib_errors(ctx: Ctx, node: Node, t: datetime, ranks: int = 6) -> None:
    """NCCL on the peers sees retry-exceeded completions from the dead port's address (§3.5)."""
    if not ctx.job.nccl_debug and not ctx.rng.chance(0.6):
        return
    peers = [r for r in ctx.job.ranks if r.node != node.name]
    for r in ctx.rng.sample(peers, k=min(ranks, len(peers))):
        tt = t + _s(ctx.rng.uniform(0.5, 20))
        ctx.run.out(r, tt, pytorch.ib_completion_error(r.node, r, node.ip, ctx.rng))


def ib_port_down(ctx: Ctx) -> None:
    rng = ctx.rng
    node = ctx.node(ctx.pick_rank().node)
    pci, dev = _ib_port(ctx, node)
    ctx.train_to_fault()
    t = ctx.t_fault
    msgs = [kernel.mlx5_link(pci, dev, up=False)]
    if rng.chance(0.4):
        msgs.insert(0, kernel.mlx5_module_unplugged(pci, rng.randint(0, 7)))
    events = ctx.sim.kernel_block(node, t, msgs)
    ctx.decisive(ctx.first(events, "Link down"))
    _ib_errors(ctx, node, t)
    if ctx.job.flavour == "slurm" and rng.chance(0.4):
        ctx.sim.ctld(
            t + _s(rng.uniform(20, 90)),
            scheduler.drain_reason(node.name, "check_hw_ib: No IB port is ACTIVE (LinkUp 100 Gb/sec)."),
        )
    local = ctx.job.ranks_on(node.name)
    if rng.chance(0.5):
        ctx.crash(t + _s(rng.uniform(20, 60)), local[:2], fast_remote=1.0, codes=1)
    else:
        ctx.hang(t, local[:1])
    ctx.category, ctx.restartable = NET, True
    ctx.blame(node=node.name)
    ctx.drain_and_requeue()


def ib_port_flapping(ctx: Ctx) -> None:
    rng = ctx.rng
    node = ctx.node(ctx.pick_rank().node)
    pci, dev = _ib_port(ctx, node)
    t = ctx.t_fault
    flaps = rng.randint(3, 6)
    t_last = ctx.run.train(ctx.t_start, t)
    tt = t
    for i in range(flaps):
        down = ctx.sim.kernel(node, tt, kernel.mlx5_link(pci, dev, up=False))
        if i == 0:
            ctx.decisive(down)
        _ib_errors(ctx, node, tt, ranks=2)
        tt += _s(rng.uniform(2, 12))
        ctx.sim.kernel(node, tt, kernel.mlx5_link(pci, dev, up=True))
        t_next = tt + _s(rng.uniform(20, 120))
        if i < flaps - 1:
            t_last = ctx.run.train(t_last, t_next)
        tt = t_next
    local = ctx.job.ranks_on(node.name)
    ctx.crash(tt, local[:1], fast_remote=1.0, codes=1)
    ctx.category, ctx.restartable = NET, True
    ctx.blame(node=node.name)
    ctx.drain_and_requeue()


def node_down(ctx: Ctx) -> None:
    rng, job, sim = ctx.rng, ctx.job, ctx.sim
    node = ctx.node(ctx.pick_rank(not_first_node=True).node)
    ctx.train_to_fault()
    t = ctx.t_fault
    sim.silenced[node.name] = t  # a dead node writes nothing more
    victims = ctx.others(nodes={node.name})
    ctx.run.watchdog_cascade(t, victims, t_first=t + _s(job.timeout_ms / 1000))
    if job.flavour == "slurm":
        t_down = t + _s(rng.uniform(60, 300))
        if rng.chance(0.25):
            ev = sim.ctld(
                t_down,
                scheduler.unexpected_reboot(node.name, int(t_down.timestamp()) - 95, int(t.timestamp())),
            )
        else:
            ev = sim.ctld(t_down, scheduler.node_not_responding(node.name))
        ctx.decisive(ev)
        requeue = rng.chance(0.5)
        if requeue:
            for i, line in enumerate(scheduler.requeue_node_failure(job, node.name)):
                sim.ctld(t_down + _s(0.001 * (i + 1)), line)
        else:
            sim.ctld(t_down + _s(0.001), scheduler.killing_on_failed(job, node.name))
        ctx.run.batch(
            t_down + _s(0.5),
            [
                scheduler.stepd_cancelled(
                    job, job.batch_host, t_down, "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS"
                )
            ],
        )
        if not requeue:
            ctx.run.end(t_down + _s(1), ("WTERMSIG", 9), failed=True)
    else:
        t_down = t + _s(rng.uniform(40, 60))
        ev = sim.k8s_event(
            t_down,
            scheduler.k8s_event(
                rng,
                t_down,
                "default",
                "Node",
                node.name,
                rng.uuid(),
                "NodeNotReady",
                f"Node {node.name} status is now: NodeNotReady",
                controller="node-controller",
            ),
        )
        ctx.decisive(ev)
        pod = job.pod_of(node.name)
        if pod is None:
            raise RuntimeError(f"no pod of {job.job_id} on {node.name}")
        t_ev = t_down + _s(rng.uniform(280, 320))
        sim.k8s_event(
            t_ev,
            scheduler.k8s_event(
                rng,
                t_ev,
                job.namespace,
                "Pod",
                pod.name,
                pod.uid,
                "TaintManagerEviction",
                f"Marking for deletion Pod {job.namespace}/{pod.name}",
                controller="taint-eviction-controller",
            ),
        )
        ctx.run.end(t_ev + _s(2), ("WTERMSIG", 9), failed=True)
    ctx.category, ctx.restartable = HOST, True
    ctx.blame(node=node.name)
    ctx.drain_and_requeue()


def host_oom(ctx: Ctx) -> None:
    rng, job = ctx.rng, ctx.job
    bad = ctx.pick_rank()
    node = ctx.node(bad.node)
    ctx.train_to_fault()
    t = ctx.t_fault
    cgroup = job.flavour == "kubernetes" or rng.chance(0.4)
    events = ctx.sim.kernel_block(
        node, t, kernel.oom_kill(rng, bad.pid, "python3", rng.randint(1000, 60000), cgroup)
    )
    ctx.decisive(events[1])
    t2 = t + _s(rng.uniform(0.5, 3))
    if job.flavour == "slurm":
        lines = (
            [scheduler.stepd_oom(job, "0"), scheduler.srun_oom(node.name, bad.rank)]
            if job.launcher != "torchrun"
            else [scheduler.stepd_oom(job, "0")]
        )
        ctx.run.batch(t2, lines)
    else:
        ctx.sim.k8s_event(
            t2,
            scheduler.k8s_event(
                rng,
                t2,
                "default",
                "Node",
                node.name,
                rng.uuid(),
                "OOMKilling",
                f"Memory cgroup out of memory: Killed process {bad.pid} (python3)",
                type_="Warning",
                controller="kernel-monitor",
            ),
        )
    ctx.crash(t2, [bad], fast_remote=0.7, codes=-9)
    ctx.category, ctx.restartable = APP, False


def nccl_hung_rank(ctx: Ctx) -> None:
    bad = ctx.pick_rank()
    ctx.train_to_fault()
    ctx.hang(ctx.t_fault, [bad])
    first = min(
        (e for e in ctx.sim.events if "Watchdog caught collective operation timeout" in e.line),
        key=lambda e: e.sort_key(),
    )
    ctx.decisive(first)
    ctx.category, ctx.restartable = UNKNOWN, True
    ctx.blame(bad, gpu=False)
    ctx.requeue()


def nccl_slow_rank0(ctx: Ctx) -> None:
    rng, job = ctx.rng, ctx.job
    lead = job.ranks[0]
    # rank-0-only work (dataset preparation or evaluation) outlasts the collective timeout
    t = ctx.t_start + _s(rng.uniform(5, 30))
    total = rng.randint(60, 3_000_000)
    what = rng.choice(("Running tokenizer on dataset", "Preparing test set...", "Evaluating"))
    span = job.timeout_ms / 1000 + rng.uniform(30, 300)
    for k in range(1, 9):
        tt = t + _s(span * k / 9)
        n = int(total * k / 20)
        ctx.run.out(
            lead,
            tt,
            f"{what}: {int(100 * n / total):3d}%|{'█' * (k // 2):<10}| {n}/{total} "
            f"[{int((tt - t).total_seconds()) // 60:02d}:{int((tt - t).total_seconds()) % 60:02d}<"
            f"{rng.randint(1, 5)}:{rng.randint(10, 59)}:{rng.randint(10, 59)}, "
            f"{rng.uniform(1, 400):.2f} examples/s]",
        )
    ctx.run.seq = rng.randint(1, 4)
    victims = ctx.others(ranks={0})
    events = ctx.run.watchdog_cascade(t, victims)
    ctx.decisive(min(events, key=lambda e: e.sort_key()))
    t_fail = t + _s(job.timeout_ms / 1000 + 1.5)
    ctx.run.fail(t_fail, ctx._by_node([(r, -6, pytorch.signal_tb(-6, r.pid)) for r in victims[:3]]))
    ctx.category, ctx.restartable = APP, False


# -- application -----------------------------------------------------------------------------------------


def shape_mismatch(ctx: Ctx) -> None:
    rng, job = ctx.rng, ctx.job
    form = rng.choice(("matmul", "state_dict", "index"))
    t = ctx.t_start + _s(rng.uniform(1, 20))
    if form == "matmul":
        a, b = rng.choice((4096, 5120, 8192)), rng.choice((1024, 2048, 4096))
        final = f"RuntimeError: mat1 and mat2 shapes cannot be multiplied ({a}x{b} and {b * 2}x{a})"
        extra: list[str] = []
    elif form == "state_dict":
        model = rng.choice(("GPTModel", "LlamaForCausalLM", "MegatronGPTModel"))
        final = f"RuntimeError: Error(s) in loading state_dict for {model}:"
        extra = [
            f"\tsize mismatch for embedding.word_embeddings.weight: copying a param with shape "
            f"torch.Size([{rng.choice((50304, 128256))}, 4096]) from checkpoint, the shape in current model "
            "is "
            f"torch.Size([{rng.choice((32000, 32768))}, 4096])."
        ]
    else:
        final = (
            "RuntimeError: shape mismatch: value tensor of shape [8, 1024] cannot be broadcast to indexing "
            "result of shape [8, 2048]"
        )
        extra = []
    failing = rng.sample(job.ranks, k=min(len(job.ranks), rng.randint(1, 8)))
    failing.sort(key=lambda r: r.rank)
    first = None
    for i, r in enumerate(failing):
        events = ctx.exception(r, t + _s(0.01 * i + rng.uniform(0, 0.05)), final, extra)
        first = first or events[0]
    ctx.decisive(first)
    ctx.crash(t + _s(0.3), failing[:2], fast_remote=0.8, victims=[r for r in job.ranks if r not in failing])
    ctx.category, ctx.restartable = APP, False


_NAN_MARKS = ("nan iterations:   1", "'loss': nan", "loss=nan", "event.metrics.loss=nan")


def nan_loss(ctx: Ctx) -> None:
    rng, job = ctx.rng, ctx.job
    t_nan = ctx.t_fault
    t_last = ctx.run.train(ctx.t_start, t_nan)
    blow = ctx.run.it + job.log_interval
    t_end = ctx.run.train(
        t_last,
        t_nan + _s(max(job.iter_s * job.log_interval * 4, 30)),
        loss=lambda it: math.nan if it >= blow else loss_at(job, it, rng) * 3,
    )
    nan_lines = [
        e
        for e in ctx.sim.events
        if e.time > t_last and e.kind == "training" and any(m in e.line for m in _NAN_MARKS)
    ]
    lead = job.ranks[0]
    form = rng.choice(("deepspeed", "megatron", "lg_loss_scale"))
    if form == "deepspeed":
        lines = [
            f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {2 ** rng.randint(0, 3)}, "
            "reducing to 1"
        ] * 2
        final = (
            "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."
        )
        ev = ctx.run.outs(lead, t_end + _s(1), lines)
        events = ctx.exception(lead, t_end + _s(2), final)
        events = [*ev, *events]
    elif form == "megatron":
        r = ctx.pick_rank()
        final = (
            f"RuntimeError: Rank {r.rank}, node {r.node}, device {r.local_rank}, iteration {blow}: "
            "Unexpected "
            "result nan (message='found NaN in local grad norm in backward pass before data-parallel "
            "communication collective')"
        )
        events = ctx.exception(r, t_end + _s(1), final)
    else:
        scale = -rng.uniform(16000, 16300)
        lines = [f"Found NaN, decreased lg_loss_scale to {scale - i:.3f}" for i in range(rng.randint(3, 8))]
        events = ctx.run.outs(lead, t_end + _s(1), lines)
        events += ctx.exception(lead, t_end + _s(3), "ValueError: non-finite loss, stopping training")
    candidates = nan_lines or events
    ctx.decisive(min(candidates, key=lambda e: e.sort_key()))
    ctx.crash(t_end + _s(3.5), [lead], fast_remote=0.8)
    ctx.category, ctx.restartable = APP, False


def cuda_oom(ctx: Ctx) -> None:
    rng, job = ctx.rng, ctx.job
    ctx.train_to_fault()
    t = ctx.t_fault
    bad = sorted(rng.sample(job.ranks, k=rng.randint(1, min(4, len(job.ranks)))), key=lambda r: r.rank)
    first = None
    for i, r in enumerate(bad):
        events = ctx.exception(r, t + _s(0.02 * i), pytorch.cuda_oom(job, r.local_rank, rng))
        first = first or events[0]
    ctx.decisive(first)
    ctx.crash(t + _s(0.2), bad, fast_remote=0.6)
    ctx.category, ctx.restartable = APP, False


def corrupt_checkpoint(ctx: Ctx) -> None:
    """The checkpoint to resume from is truncated: an earlier attempt died mid-save or its disk
    filled. All three messages are what a short file gives (no zip directory, zero bytes, a short
    header). The real corpus labels this ``infrastructure`` (dddd_trainer#36: the disk filled and
    left a truncated checkpoint), and so does this truth; it said ``application`` until
    2026-11-30."""
    rng, job = ctx.rng, ctx.job
    t = ctx.t_start - _s(rng.uniform(1, 5))
    final = rng.choice(
        (
            "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory",
            "_pickle.UnpicklingError: invalid load key, '\\x00'.",
            "safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer",
        )
    )
    failing = sorted(rng.sample(job.ranks, k=min(len(job.ranks), rng.randint(1, 8))), key=lambda r: r.rank)
    first = None
    for i, r in enumerate(failing):
        events = ctx.exception(r, t + _s(0.05 * i), final)
        first = first or events[0]
    ctx.decisive(first)
    ctx.crash(t + _s(0.5), failing[:2], fast_remote=0.7, victims=[r for r in job.ranks if r not in failing])
    ctx.category, ctx.restartable = INFRA, False


# -- infrastructure ---------------------------------------------------------------------------------------


def _save_started(ctx: Ctx, t: datetime) -> None:
    job = ctx.job
    if job.framework == "megatron":
        ctx.run.out(job.ranks[0], t, f"saving checkpoint at iteration {ctx.run.it:7d} to {job.ckpt_dir}")
    elif job.framework == "hf":
        ctx.run.out(job.ranks[0], t, f"Saving model checkpoint to {job.ckpt_dir}/checkpoint-{ctx.run.it}")


def enospc(ctx: Ctx) -> None:
    rng, job = ctx.rng, ctx.job
    ctx.train_to_fault()
    t = ctx.t_fault
    _save_started(ctx, t)
    writer = job.ranks[0]
    form = rng.choice(("oserror", "enforce", "safetensors"))
    tt = t + _s(rng.uniform(5, 60))
    if form == "oserror":
        events = ctx.exception(writer, tt, "OSError: [Errno 28] No space left on device")
    elif form == "enforce":
        pos = rng.randint(10**9, 4 * 10**9)
        events = ctx.exception(
            writer,
            tt,
            f"RuntimeError: [enforce fail at inline_container.cc:595] . unexpected "
            f"pos {pos} vs {pos - rng.randint(64, 4096)}",
        )
    else:
        events = ctx.exception(
            writer,
            tt,
            "safetensors_rust.SafetensorError: Error while serializing: IoError(Os { "
            'code: 28, kind: StorageFull, message: "No space left on device" })',
        )
    ctx.decisive(events[0])
    ctx.crash(tt, [writer], fast_remote=0.4)
    ctx.category, ctx.restartable = INFRA, False


def stale_nfs(ctx: Ctx) -> None:
    rng, job = ctx.rng, ctx.job
    ctx.train_to_fault()
    t = ctx.t_fault
    node = rng.choice(job.nodes)
    local = job.ranks_on(node)
    failing = rng.sample(local, k=rng.randint(1, len(local)))
    target = rng.choice(
        (f"{job.ckpt_dir}/iter_{ctx.run.it:07d}/", f"{job.workdir}/.cache/datasets/", job.ckpt_dir)
    )
    first = None
    for i, r in enumerate(sorted(failing, key=lambda r: r.rank)):
        events = ctx.exception(r, t + _s(0.03 * i), f"OSError: [Errno 116] Stale file handle: '{target}'")
        first = first or events[0]
    ctx.decisive(first)
    ctx.crash(t + _s(0.2), failing[:2], fast_remote=0.6)
    ctx.category, ctx.restartable = INFRA, False


def dev_shm(ctx: Ctx) -> None:
    rng, job = ctx.rng, ctx.job
    t = ctx.t_start - _s(rng.uniform(1, 5))
    first = None
    seg = f"/dev/shm/nccl-{rng.alnum(6)}"  # noqa: S108 - a path in a simulated log line
    size = rng.choice((7340384, 9637888, 4460544))
    for i, r in enumerate(job.ranks[: min(16, len(job.ranks))]):
        tt = t + _s(0.01 * i)
        lines: list[str] = []
        if job.nccl_debug:
            lines += [
                pytorch.nccl(
                    r.node,
                    r,
                    "WARN",
                    f"Error: failed to extend {seg} to {size + 4} bytes, error: No space left on device (28)",
                    "misc/shmutils.cc:88",
                ),
                pytorch.nccl(
                    r.node,
                    r,
                    "WARN",
                    f"Error while creating shared memory segment {seg} (size {size}), "
                    "error: No space left on device (28)",
                    "misc/shmutils.cc:132",
                ),
            ]
        lines += pytorch.dist_backend_error(
            job,
            "unhandled system error (run with NCCL_DEBUG=INFO for details)",
            tt,
            f"Error while creating shared memory segment {seg} (size {size})",
        )
        lines.insert(
            len(lines) - 2,
            "ncclSystemError: System call (e.g. socket, malloc) or external library call "
            "failed or device error. ",
        )
        events = ctx.run.outs(r, tt, lines)
        first = first or events[0]
    ctx.decisive(first)
    ctx.run.fail(t + _s(3), ctx._by_node([(r, 1, pytorch.signal_tb(1, r.pid)) for r in job.ranks[:6]]))
    ctx.category, ctx.restartable = INFRA, False


def preemption(ctx: Ctx) -> None:
    rng, job, sim = ctx.rng, ctx.job, ctx.sim
    ctx.train_to_fault()
    t = ctx.t_fault
    if job.flavour == "slurm":
        events = ctx.run.batch(
            t,
            [
                scheduler.stepd_cancelled(job, job.batch_host, t, "PREEMPTION"),
                scheduler.stepd_cancelled(job, job.batch_host, t, "PREEMPTION", step="0"),
            ],
        )
        ctx.decisive(events[0])
        sim.ctld(t + _s(rng.uniform(0.5, 3)), scheduler.requeuing(job))
    else:
        pod = job.pods[0]
        ev = sim.k8s_event(
            t,
            scheduler.k8s_event(
                rng,
                t,
                job.namespace,
                "Workload",
                f"pytorchjob-{job.job_id}-{rng.alnum(5)}",
                rng.uuid(),
                "Preempted",
                f"Preempted to accommodate a workload (UID: {rng.uuid()}) due to prioritization in the "
                "ClusterQueue",
                controller="kueue-admission",
                type_="Normal",
            ),
        )
        ctx.decisive(ev)
        sim.k8s_event(
            t + _s(1),
            scheduler.k8s_event(
                rng,
                t + _s(1),
                job.namespace,
                "Pod",
                pod.name,
                pod.uid,
                "Killing",
                "Stopping container pytorch",
            ),
        )
    for n, node in enumerate(job.nodes):
        if job.launcher in ("torchrun", "pytorchjob"):
            ctx.run.outs(
                None,
                t + _s(0.2 + 0.05 * n),
                pytorch.elastic_sigterm([r.pid for r in job.ranks_on(node)]),
                node=node,
            )
    ctx.category, ctx.restartable = INFRA, True


def time_limit(ctx: Ctx) -> None:
    rng, job, sim = ctx.rng, ctx.job, ctx.sim
    ctx.train_to_fault()
    t = ctx.t_fault
    if job.flavour == "slurm":
        events = ctx.run.batch(
            t,
            [
                *scheduler.srun_abort(rng.choice((32, 47, 60))),
                scheduler.stepd_cancelled(job, job.batch_host, t, "TIME LIMIT"),
                scheduler.stepd_cancelled(job, job.batch_host, t, "TIME LIMIT", step="0"),
            ],
        )
        ctx.decisive(events[1])
        for i, line in enumerate(scheduler.job_complete(job, "WTERMSIG", 15)):
            sim.ctld(t + _s(rng.uniform(30, 60) + 0.001 * i), line)
    else:
        ev = sim.k8s_event(
            t,
            scheduler.k8s_event(
                rng,
                t,
                job.namespace,
                "PyTorchJob",
                job.job_id,
                rng.uuid(),
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
                type_="Warning",
                controller="pytorchjob-controller",
            ),
        )
        ctx.decisive(ev)
    for n, node in enumerate(job.nodes):
        if job.launcher in ("torchrun", "pytorchjob"):
            ctx.run.outs(
                None,
                t + _s(0.3 + 0.05 * n),
                pytorch.elastic_sigterm([r.pid for r in job.ranks_on(node)]),
                node=node,
            )
    ctx.category, ctx.restartable = INFRA, True


# -- system software --------------------------------------------------------------------------------------


def driver_mismatch(ctx: Ctx) -> None:
    rng, job = ctx.rng, ctx.job
    node = ctx.node(rng.choice(job.nodes))
    t = ctx.t_start - _s(rng.uniform(2, 8))
    newer = rng.choice(
        [d for d in ("550.127.05", "560.35.03", "570.86.15", "535.216.01") if d != node.driver]
    )
    events = ctx.sim.kernel_block(node, t, kernel.api_mismatch(newer, node.driver))
    ctx.decisive(events[0])
    local = job.ranks_on(node.name)
    failing = rng.sample(local, k=rng.randint(1, len(local)))
    for i, r in enumerate(sorted(failing, key=lambda r: r.rank)):
        ctx.exception(
            r,
            t + _s(0.2 + 0.02 * i),
            "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you "
            "run some cuda functions before calling NumCudaDevices() that might have already set an error? "
            "Error 803: system has unsupported display driver / cuda driver combination",
        )
    ctx.crash(t + _s(0.5), failing[:2], fast_remote=0.9)
    ctx.category, ctx.restartable = SYS, True
    ctx.blame(node=node.name)
    ctx.drain_and_requeue()


def nccl_version_mismatch(ctx: Ctx) -> None:
    rng, job = ctx.rng, ctx.job
    node = ctx.node(rng.choice(job.nodes[1:] or job.nodes))
    old = rng.choice([v for v in ("2.18.1", "2.19.3", "2.17.1") if v != job.nccl_version])
    t = ctx.t_start - _s(rng.uniform(1, 4))
    local = job.ranks_on(node.name)
    first = None
    for i, r in enumerate(local[: rng.randint(1, len(local))]):
        tt = t + _s(0.02 * i)
        lines = []
        if job.nccl_debug:
            lines.append(pytorch.nccl(node.name, r, "INFO", f"NCCL version {old}+cuda{job.cuda}"))
        err = pytorch.dist_backend_error(
            job,
            "internal error - please report this issue to the NCCL developers",
            tt,
            f"Message truncated : received {rng.choice((1024, 2048, 4096))} bytes "
            f"instead of {rng.choice((256, 512))}",
        )
        err[0] = err[0].replace(f"NCCL version {job.nccl_version}", f"NCCL version {old}")
        err.insert(1, "ncclInternalError: Internal check failed.")
        events = ctx.run.outs(r, tt, lines + err)
        ev = events[len(lines)]
        first = first or ev
    ctx.decisive(first)
    ctx.crash(t + _s(0.4), local[:1], fast_remote=1.0)
    ctx.category, ctx.restartable = SYS, True
    ctx.blame(node=node.name)
    ctx.drain_and_requeue()


# -- unknown ----------------------------------------------------------------------------------------------


def hang_no_error(ctx: Ctx) -> None:
    rng = ctx.rng
    t_last = ctx.train_to_fault()
    job = ctx.job
    # every rank blocks outside any collective (e.g. in its data loader): nothing prints, nothing times out
    due = t_last + _s(job.iter_s * job.log_interval)
    t_end = due + _s(rng.uniform(900, 1500))
    ctx.run.busy = (ctx.run.busy[0] if ctx.run.busy else ctx.t_start, t_last)
    ctx.decisive_time = due
    ctx.sim.horizon = max(ctx.sim.horizon or t_end, t_end)
    ctx.category, ctx.restartable = UNKNOWN, True
    ctx.requeue()


def restart_loop(ctx: Ctx) -> None:
    """Three attempts load the same checkpoint, crash before the next save, and are requeued."""
    rng, sim = ctx.rng, ctx.sim
    run, job = ctx.run, ctx.job
    start_iter = job.start_iter
    width = len(ctx.nodes)
    sets = [ctx.nodes, *(ctx.spare[i : i + width] for i in range(0, len(ctx.spare), width))]
    all_nodes: list[str] = []
    t = ctx.t_start
    last: SimEvent | None = None
    for attempt, nodes in enumerate(sets[:3], 1):
        if attempt > 1:
            job = place_job(
                rng, ctx.job.job_id, nodes, "slurm", framework=ctx.job.framework, launcher=ctx.job.launcher
            )
            job.start_iter = start_iter
            job.attempt = attempt
            run = JobRun(sim, job, nodes, rng)
            t_alloc = t + _s(rng.uniform(20, 120))
            sim.ctld(t_alloc, scheduler.allocate(job, job.nodelist))
            t = run.startup(t_alloc + _s(rng.uniform(3, 30)))
        all_nodes += job.nodes
        # crash before the next save: counted from the iteration the attempt resumes at, which need
        # not be a multiple of the save interval; 0.9 keeps the +-3 % iteration jitter short of it
        to_save = (run.it // job.save_interval + 1) * job.save_interval - run.it
        room = max(0, to_save - job.log_interval) * job.iter_s * 0.9
        t_crash = t + _s(min(room, rng.uniform(120, 600)))
        run.train(t, t_crash)
        bad = rng.choice(job.ranks)
        node = sim.nodes[bad.node]
        sim.kernel(
            node,
            t_crash - _s(0.01),
            kernel.xid(
                rng,
                node.gpus[bad.gpu],
                31,
                f"channel 0x0000000{rng.randint(2, 9)}, intr 00000000. MMU Fault: ENGINE "
                f"GRAPHICS GPC{rng.randint(0, 7)} GPCCLIENT_T1_{rng.randint(0, 15)} faulted @ "
                f"0x{rng.hexstr(4)}_"
                f"{rng.hexstr(8)}. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
                pid=bad.pid,
                name="python3",
            ),
        )
        events = run.outs(
            bad,
            t_crash,
            [pytorch.cuda_error(job, "an illegal memory access was encountered"), *pytorch.cuda_advice()],
        )
        last = events[0]
        ctx.run, ctx.job = run, job
        t_end = ctx.crash(t_crash, [bad], fast_remote=0.8)
        if attempt < 3:
            sim.ctld(t_end + _s(rng.uniform(1, 10)), scheduler.requeuing(job))
        t = t_end
    ctx.decisive(last)
    ctx.attempts = 3
    ctx.all_nodes = all_nodes
    ctx.category, ctx.restartable = APP, False


# -- healthy noise ----------------------------------------------------------------------------------------


def _finish_normally(ctx: Ctx, t: datetime) -> None:
    job = ctx.job
    ctx.run.outs(job.ranks[0], t, finished_lines(job, ctx.run.it))
    ctx.run.end(t + _s(ctx.rng.uniform(5, 20)), ("WEXITSTATUS", 0), failed=False)


def noise_xid13(ctx: Ctx) -> None:
    rng, job = ctx.rng, ctx.job
    t_last = ctx.train_to_fault()
    node = ctx.node(rng.choice(job.nodes))
    gpu = rng.choice(node.gpus)
    gpc, tpc = rng.randint(0, 7), rng.randint(0, 8)
    msgs = [
        kernel.xid(
            rng,
            gpu,
            13,
            f"Graphics SM Warp Exception on (GPC {gpc}, TPC {tpc}, SM 0): Out Of Range Address",
            pid=rng.randint(2000, 900000),
            name=rng.choice(("llama-bench", "nbody", "dcgmproftester12", "cuda-memcheck", "a.out")),
        )
    ]
    if rng.chance(0.5):
        msgs.append(
            f"NVRM: Xid (PCI:{gpu.pci}): 13, Graphics SM Global Exception on (GPC {gpc}, TPC {tpc}, SM 0): "
            "Multiple Warp Errors"
        )
    events = ctx.sim.kernel_block(node, ctx.t_fault, msgs)
    ctx.decisive(events[0])
    t_end = ctx.keep_training(t_last)
    if rng.chance(0.5):
        _finish_normally(ctx, t_end)
    ctx.category, ctx.restartable = UNKNOWN, True


def noise_single_sbe(ctx: Ctx) -> None:
    rng, job = ctx.rng, ctx.job
    t_last = ctx.train_to_fault()
    node = ctx.node(rng.choice(job.nodes))
    gpu = rng.randrange(len(node.gpus))
    t_end = max(ctx.keep_training(t_last), ctx.t_fault + _s(180))
    samples = _series(
        ctx,
        node,
        ctx.t_start + _s(30),
        t_end,
        60,
        lambda g, at: {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 1.0 if g == gpu and at >= ctx.t_fault else 0.0},
    )
    ctx.decisive(next(e for e in samples if e.metric and e.metric.value > 0))
    ctx.category, ctx.restartable = UNKNOWN, True


def noise_nccl_chatter(ctx: Ctx) -> None:
    rng, job = ctx.rng, ctx.job
    job.nccl_debug = True
    t_last = ctx.train_to_fault()
    first = None
    for _ in range(rng.randint(8, 30)):
        r = rng.choice(job.ranks)
        tt = ctx.t_start + _s(rng.uniform(0, (t_last - ctx.t_start).total_seconds()))
        ev = ctx.run.out(r, tt, pytorch.nccl_chatter(ctx.node(r.node), r, rng))
        if first is None or ev.sort_key() < first.sort_key():
            first = ev
    t_end = ctx.keep_training(t_last)
    _finish_normally(ctx, t_end)
    ctx.decisive(first)
    ctx.category, ctx.restartable = UNKNOWN, True


def noise_scancel(ctx: Ctx) -> None:
    rng, job, sim = ctx.rng, ctx.job, ctx.sim
    ctx.train_to_fault()
    t = ctx.t_fault
    if job.flavour == "slurm":
        events = ctx.run.batch(
            t,
            [
                scheduler.stepd_cancelled(job, job.batch_host, t, None),
                scheduler.stepd_cancelled(job, job.batch_host, t, None, step="0"),
            ],
        )
        ctx.decisive(events[0])
        for i, line in enumerate(scheduler.job_complete(job, "WTERMSIG", 15)):
            sim.ctld(t + _s(rng.uniform(1, 5) + 0.001 * i), line)
    else:
        first = None
        for pod in job.pods:
            ev = sim.k8s_event(
                t,
                scheduler.k8s_event(
                    rng, t, job.namespace, "Pod", pod.name, pod.uid, "Killing", "Stopping container pytorch"
                ),
            )
            first = first or ev
        ctx.decisive(first)
    for n, node in enumerate(job.nodes):
        if job.launcher in ("torchrun", "pytorchjob"):
            ctx.run.outs(
                None,
                t + _s(0.2 + 0.05 * n),
                pytorch.elastic_sigterm([r.pid for r in job.ranks_on(node)]),
                node=node,
            )
    ctx.category, ctx.restartable = UNKNOWN, False  # the user wanted it stopped


SCENARIO_TYPES: tuple[ScenarioType, ...] = (
    ScenarioType(
        "xid79_fallen_off_bus", HW, "Xid 79: a GPU falls off the bus; the other ranks time out", xid79
    ),
    ScenarioType(
        "xid48_ecc_dbe", HW, "Xid 48 double-bit ECC error (+63 row remap), CUDA ECC error, cascade", xid48
    ),
    ScenarioType(
        "xid64_remap_failure",
        HW,
        "pages retired (Xid 63), then Xid 64: retirement failed",
        xid64,
        platform="dgx1-v100",
    ),
    ScenarioType("xid94_contained_ecc", HW, "Xid 94 contained memory error with Xid 45 cleanup", xid94),
    ScenarioType(
        "xid95_uncontained_ecc", HW, "Xid 95 uncontained memory error: several processes hit", xid95
    ),
    ScenarioType(
        "xid119_gsp_timeout", SYS, "Xid 119 GSP RPC timeouts; the rank hangs, the others time out", xid119
    ),
    ScenarioType("xid120_gsp_error", SYS, "Xid 120 GSP error", xid120),
    ScenarioType(
        "ecc_dbe_cuda_only",
        HW,
        "uncorrectable ECC seen only by CUDA and dcgm-exporter (no kernel log)",
        ecc_cuda_only,
    ),
    ScenarioType("nvlink_xid74", HW, "Xid 74 fatal NVLink error, CUDA NVLink error on the rank", nvlink74),
    ScenarioType(
        "ib_port_down",
        NET,
        "an IB port goes down (mlx5 Link down); NCCL retry-exceeded on the peers",
        ib_port_down,
    ),
    ScenarioType(
        "ib_port_flapping", NET, "an IB port flaps down/up several times, then the job dies", ib_port_flapping
    ),
    ScenarioType(
        "node_down", HOST, "a node stops responding (or reboots); the scheduler marks it down", node_down
    ),
    ScenarioType(
        "host_oom_kill",
        APP,
        "the kernel OOM killer kills a rank (host memory too small for the job)",
        host_oom,
    ),
    ScenarioType(
        "nccl_timeout_hung_rank",
        UNKNOWN,
        "one rank hangs without an error; the others time out",
        nccl_hung_rank,
    ),
    ScenarioType(
        "nccl_timeout_slow_rank0", APP, "rank-0-only work outlasts the collective timeout", nccl_slow_rank0
    ),
    ScenarioType(
        "app_shape_mismatch", APP, "shape mismatch in the model or the loaded state dict", shape_mismatch
    ),
    ScenarioType("app_nan_loss", APP, "loss diverges to NaN and the run stops", nan_loss),
    ScenarioType("app_cuda_oom", APP, "CUDA out of memory on one or more ranks", cuda_oom),
    # kept at its old place in the list: a seed draws the same scenarios as before the relabel
    ScenarioType(
        "infra_corrupt_checkpoint", INFRA, "the checkpoint to resume from is truncated", corrupt_checkpoint
    ),
    ScenarioType("infra_enospc_checkpoint", INFRA, "checkpoint save hits ENOSPC", enospc),
    ScenarioType("infra_stale_nfs", INFRA, "stale NFS file handle on one node's mount", stale_nfs),
    ScenarioType("infra_dev_shm", INFRA, "/dev/shm too small for NCCL's shared memory segments", dev_shm),  # noqa: S108
    ScenarioType("infra_preemption", INFRA, "the job is preempted by a higher-priority one", preemption),
    ScenarioType("infra_time_limit", INFRA, "the job hits its time limit", time_limit),
    ScenarioType("sw_driver_mismatch", SYS, "one node's driver user/kernel versions differ", driver_mismatch),
    ScenarioType(
        "sw_nccl_version_mismatch", SYS, "one node loads another NCCL version", nccl_version_mismatch
    ),
    ScenarioType(
        "thermal_straggler", HW, "one GPU thermally throttles and slows the whole job", thermal_straggler
    ),
    ScenarioType(
        "hang_no_error", UNKNOWN, "every rank stops making progress, with no error at all", hang_no_error
    ),
    ScenarioType(
        "restart_loop_no_progress",
        APP,
        "three attempts crash before the next checkpoint, each on other nodes (illegal memory access)",
        restart_loop,
        flavours=("slurm",),
        node_sets=3,
        resume=True,
    ),
    ScenarioType(
        "degrading_gpu",
        HW,
        "rising correctable ECC (Xid 92, SBE counters) before a fatal Xid 48",
        degrading_gpu,
    ),
    ScenarioType(
        "noise_xid13_single",
        UNKNOWN,
        "one Xid 13 from another application; training goes on",
        noise_xid13,
        healthy=True,
    ),
    ScenarioType(
        "noise_single_sbe",
        UNKNOWN,
        "a single correctable ECC error in telemetry",
        noise_single_sbe,
        healthy=True,
    ),
    ScenarioType(
        "noise_nccl_chatter",
        UNKNOWN,
        "NCCL INFO/WARN chatter in a run that completes",
        noise_nccl_chatter,
        healthy=True,
    ),
    ScenarioType("noise_user_scancel", UNKNOWN, "the user cancels the job", noise_scancel, healthy=True),
)
SCENARIOS: dict[str, ScenarioType] = {s.name: s for s in SCENARIO_TYPES}
