"""The simulated fleet: GPU platforms, node naming schemes, nodes, and jobs with rank → node → GPU.

Hostnames follow the schemes real clusters use (failure-signatures.md and the corpus quote
``gpu-03``, ``dgx-17``, ``node23``, ``ip-10-1-39-175``, GKE/AKS node names); PCI bus ids are
the ones the platforms really use, so Xid lines, ``nvidia-smi`` ids and dcgm-exporter labels
agree with each other for the same GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import hostlist

from connectors.sources.simulator.rand import Rng, derive

Flavour = Literal["slurm", "kubernetes"]
Generation = Literal["volta", "ampere", "hopper"]
KernelStyle = Literal["syslog", "syslog_tid", "journal", "dmesg", "dmesg_ctime"]
Launcher = Literal["torchrun", "srun", "srun_label", "pytorchjob"]
Framework = Literal["megatron", "nemo", "lightning", "hf", "aidot"]
TorchVersion = Literal["1.13", "2.1", "2.4", "2.6"]

SLURM_SCHEMES = ("gpu", "dgx", "node", "ip")
K8S_SCHEMES = ("gke", "aks", "eks")


@dataclass(frozen=True)
class Platform:
    name: str
    model: str  # dcgm-exporter ``modelName``
    pci_id: str  # vendor:device
    buses: tuple[str, ...]  # PCI bus of GPU 0..7 (domain 0000, device 00)
    generation: Generation
    hca_buses: tuple[str, ...]  # ConnectX HCAs (one per GPU pair or per GPU)
    short: str


PLATFORMS: tuple[Platform, ...] = (
    Platform(
        "dgx-a100",
        "NVIDIA A100-SXM4-80GB",
        "10de:20b2",
        ("07", "0f", "47", "4e", "87", "90", "b7", "bd"),
        "ampere",
        ("0c", "12", "4b", "54", "8d", "94", "ba", "cc"),
        "a100",
    ),
    Platform(
        "dgx-h100",
        "NVIDIA H100 80GB HBM3",
        "10de:2330",
        ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db"),
        "hopper",
        ("19", "29", "3b", "5e", "9b", "aa", "bb", "da"),
        "h100",
    ),
    Platform(
        "hgx-h200",
        "NVIDIA H200",
        "10de:2335",
        ("19", "3b", "4c", "5d", "9b", "bb", "cb", "db"),
        "hopper",
        ("1a", "3c", "4d", "5e", "9c", "bc", "cc", "dc"),
        "h200",
    ),
    Platform(
        "dgx1-v100",
        "Tesla V100-SXM2-32GB",
        "10de:1db5",
        ("06", "07", "0a", "0b", "85", "86", "89", "8a"),
        "volta",
        ("05", "84"),
        "v100",
    ),
)
PLATFORM_BY_NAME = {p.name: p for p in PLATFORMS}
DRIVERS = {
    "volta": ("470.223.02", "535.161.08"),
    "ampere": ("535.129.03", "535.183.01", "550.54.15"),
    "hopper": ("550.54.15", "550.127.05", "560.35.03", "570.86.15"),
}


@dataclass(frozen=True)
class Gpu:
    index: int
    bus: str  # "18"
    uuid: str
    serial: str

    @property
    def pci(self) -> str:
        """As the kernel's Xid lines print it: ``0000:18:00``."""
        return f"0000:{self.bus}:00"

    @property
    def pci_full(self) -> str:
        """``0000:18:00.0`` (``nvidia-smi``, NVRM banners)."""
        return f"0000:{self.bus}:00.0"

    @property
    def dcgm_bus_id(self) -> str:
        """dcgm-exporter's ``pci_bus_id`` label: ``00000000:18:00.0``."""
        return f"00000000:{self.bus.upper()}:00.0"

    @property
    def nccl_bus_id(self) -> str:
        """NCCL's ``busId`` in INFO lines: ``18000``."""
        return f"{self.bus}000"


@dataclass
class Node:
    name: str
    index: int
    platform: Platform
    gpus: list[Gpu]
    ip: str  # IB / data-plane address
    ifname: str
    hcas: list[tuple[str, str]]  # (mlx5_N, pci "0000:0c:00.0")
    netdevs: list[str]
    uptime_s: float  # uptime at the simulation's t0, for dmesg stamps
    kernel_style: KernelStyle
    driver: str
    boot_tid: int

    def uptime_at(self, seconds_since_t0: float) -> float:
        return self.uptime_s + seconds_since_t0


def _base36(n: int, width: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    for _ in range(width):
        n, r = divmod(n, 36)
        out = digits[r] + out
    return out


def node_name(scheme: str, index: int, platform: Platform, cluster_tag: str = "a") -> str:
    """A unique name for node ``index`` under one naming scheme."""
    if scheme == "gpu":
        return f"gpu-{index:04d}"
    if scheme == "dgx":
        return f"dgx-{platform.short}-{index:03d}"
    if scheme == "node":
        return f"node{index}"
    if scheme == "ip":
        return f"ip-10-{1 + (index >> 16) % 250}-{(index >> 8) & 255}-{index & 255}"
    if scheme == "eks":
        return f"ip-10-{1 + (index >> 16) % 250}-{(index >> 8) & 255}-{index & 255}.ec2.internal"
    if scheme == "gke":
        group = f"{derive(0, 'gke', cluster_tag, index // 64) & 0xFFFFFFFF:08x}"
        return f"gke-ml-{cluster_tag}-a3-{platform.short}-pool-{group}-{_base36(index, 4)}"
    if scheme == "aks":
        return f"aks-gpu{platform.short}-{derive(0, 'aks', cluster_tag) % 10**8:08d}-vmss{index:06x}"
    raise ValueError(f"unknown naming scheme {scheme!r}")


def make_node(rng: Rng, name: str, index: int, platform: Platform) -> Node:
    gpus = [
        Gpu(
            index=i,
            bus=bus,
            uuid=f"GPU-{rng.hexstr(8)}-{rng.hexstr(4)}-{rng.hexstr(4)}-{rng.hexstr(4)}-{rng.hexstr(12)}",
            serial=str(rng.randint(10**12, 10**13 - 1)),
        )
        for i, bus in enumerate(platform.buses)
    ]
    hcas = [(f"mlx5_{i}", f"0000:{bus}:00.0") for i, bus in enumerate(platform.hca_buses)]
    netdevs = [f"ibp{int(bus, 16)}s0" for bus in platform.hca_buses]
    style: KernelStyle = rng.weighted(
        [("syslog", 0.45), ("syslog_tid", 0.1), ("journal", 0.2), ("dmesg", 0.12), ("dmesg_ctime", 0.13)]
    )
    return Node(
        name=name,
        index=index,
        platform=platform,
        gpus=gpus,
        ip=f"10.{64 + (index >> 16) % 64}.{(index >> 8) & 255}.{index & 255}",
        ifname=rng.choice(("ib0", "ibp12s0", "bond0", "eth0", "ens1f0np0")),
        hcas=hcas,
        netdevs=netdevs,
        uptime_s=rng.uniform(3_600, 90 * 86_400),
        kernel_style=style,
        driver=rng.choice(DRIVERS[platform.generation]),
        boot_tid=rng.randint(800, 4000),
    )


@dataclass(frozen=True)
class Rank:
    rank: int
    node: str
    local_rank: int
    gpu: int
    pid: int
    tid: int


@dataclass
class Pod:
    name: str
    node: str
    uid: str
    replica_type: str
    replica_index: int


@dataclass
class Job:
    """One training job: where each rank runs, how it was launched and what it prints."""

    job_id: str
    name: str
    user: str
    flavour: Flavour
    nodes: list[str]
    ranks: list[Rank]
    launcher: Launcher
    framework: Framework
    torch: TorchVersion
    nccl_version: str
    cuda: str
    nccl_debug: bool
    timeout_ms: int
    iter_s: float  # seconds per iteration
    log_interval: int
    save_interval: int
    start_iter: int
    train_iters: int
    global_batch: int
    seq_len: int
    ckpt_dir: str
    workdir: str
    output: Literal["shared", "per_task", "pods"]
    out_name: str  # output file name pattern (job output), e.g. slurm-1234.out
    partition: str
    namespace: str = "default"
    pods: list[Pod] = field(default_factory=list)
    master_port: int = 29500
    attempt: int = 1

    @property
    def batch_host(self) -> str:
        return self.nodes[0]

    @property
    def world(self) -> int:
        return len(self.ranks)

    @property
    def gpus_per_node(self) -> int:
        return len(self.ranks) // max(1, len(self.nodes))

    @property
    def nodelist(self) -> str:
        return str(hostlist.collect_hostlist(self.nodes))

    def ranks_on(self, node: str) -> list[Rank]:
        return [r for r in self.ranks if r.node == node]

    def pod_of(self, node: str) -> Pod | None:
        return next((p for p in self.pods if p.node == node), None)

    def logging_rank(self) -> Rank:
        """Megatron prints from the last rank (``print_rank_last``); the others from rank 0."""
        return self.ranks[-1] if self.framework == "megatron" else self.ranks[0]


USERS = ("alee", "mkumar", "jchen", "svc-train", "rgarcia", "tnguyen", "pwang", "ekowalski")
MODELS = (
    "llama3-70b",
    "gpt-22b",
    "mixtral-8x7b",
    "llama2-13b",
    "nemotron-15b",
    "t5-xxl",
    "gpt3-175b",
    "qwen2-72b",
)


def place_job(
    rng: Rng,
    job_id: str,
    nodes: list[Node],
    flavour: Flavour,
    *,
    framework: Framework | None = None,
    launcher: Launcher | None = None,
) -> Job:
    """Lay a job over ``nodes``: ranks, launcher, framework, timeouts and output files."""
    gpn = 8
    model = rng.choice(MODELS)
    user = rng.choice(USERS)
    launchers: list[tuple[Launcher, float]] = [("torchrun", 0.55), ("srun", 0.3), ("srun_label", 0.15)]
    frameworks: list[tuple[Framework, float]] = [
        ("megatron", 0.35),
        ("nemo", 0.2),
        ("lightning", 0.15),
        ("hf", 0.15),
        ("aidot", 0.15),
    ]
    launch: Launcher = "pytorchjob"
    if flavour != "kubernetes":
        launch = launcher if launcher is not None else rng.weighted(launchers)
    fw: Framework = framework if framework is not None else rng.weighted(frameworks)
    torch: TorchVersion = rng.weighted([("1.13", 0.1), ("2.1", 0.25), ("2.4", 0.4), ("2.6", 0.25)])
    if launch == "torchrun" and torch == "1.13":
        torch = "2.1"
    nccl = {"1.13": "2.14.3", "2.1": "2.18.1", "2.4": "2.20.5", "2.6": "2.21.5"}[torch]
    cuda = {"1.13": "11.7", "2.1": "12.1", "2.4": "12.4", "2.6": "12.4"}[torch]
    ranks: list[Rank] = []
    for n, node in enumerate(nodes):
        base_pid = rng.randint(2_000, 3_500_000)
        for local in range(gpn):
            pid = base_pid + local * 4 + rng.randint(0, 3)
            ranks.append(
                Rank(
                    rank=n * gpn + local,
                    node=node.name,
                    local_rank=local,
                    gpu=local,
                    pid=pid,
                    tid=pid + rng.randint(40, 400),
                )
            )
    run = f"{model}-{rng.alnum(4)}"
    pods: list[Pod] = []
    namespace = rng.choice(("ml-training", "research", "llm", "team-a"))
    if flavour == "kubernetes":
        for n, node in enumerate(nodes):
            kind, idx = ("master", 0) if n == 0 else ("worker", n - 1)
            pods.append(Pod(f"{job_id}-{kind}-{idx}", node.name, rng.uuid(), kind.capitalize(), idx))
    if flavour == "kubernetes":
        output: Literal["shared", "per_task", "pods"] = "pods"
        out_name = "0.log"
    else:
        output = rng.weighted([("shared", 0.7), ("per_task", 0.3)])
        out_name = rng.weighted([(f"slurm-{job_id}.out", 0.85), (f"{model}-{job_id}.out", 0.15)])
    iter_s = rng.uniform(0.8, 9.0)
    return Job(
        job_id=job_id,
        name=model,
        user=user,
        flavour=flavour,
        nodes=[n.name for n in nodes],
        ranks=ranks,
        launcher=launch,
        framework=fw,
        torch=torch,
        nccl_version=nccl,
        cuda=cuda,
        nccl_debug=rng.chance(0.3),
        timeout_ms=rng.weighted([(600_000, 0.55), (1_800_000, 0.2), (300_000, 0.15), (900_000, 0.1)]),
        iter_s=iter_s,
        log_interval=rng.choice((1, 5, 10, 10, 20, 50)) if iter_s > 3 else rng.choice((10, 20, 50, 100)),
        save_interval=rng.choice((200, 500, 1000)),
        start_iter=rng.choice((0, 0, rng.randint(1, 40) * 500)),
        train_iters=rng.choice((100_000, 250_000, 500_000)),
        global_batch=rng.choice((256, 512, 1024, 1536)),
        seq_len=rng.choice((2048, 4096, 8192)),
        ckpt_dir=rng.choice(("/lustre/fs1", "/checkpoints", "/mnt/weka/ckpt", "/nfs/ckpt"))
        + f"/{user}/{run}",
        workdir=rng.choice(("/lustre/fs1/home", "/scratch", "/home")) + f"/{user}/{run}",
        output=output,
        out_name=out_name,
        partition=rng.choice(("gpu", "batch", "h100", "a100", "train")),
        namespace=namespace,
        pods=pods,
        master_port=rng.choice((29500, 29500, 6000, 12355, 29400)),
    )
