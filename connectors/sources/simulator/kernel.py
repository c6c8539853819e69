"""Kernel log lines as the driver, the NIC driver and the OOM killer print them.

Every message shape is taken from failure-signatures.md (§2.1 Xid line format and its
variants, §3.1 fallen off the bus, §3.5 mlx5, §3.7 OOM killer / node-problem-detector)
or from the real excerpts in the corpus. Nothing here is shared with the rule catalog.
"""

from __future__ import annotations

from datetime import datetime

from connectors.sources.simulator.fleet import Gpu, Node
from connectors.sources.simulator.rand import Rng

# -- prefixes -----------------------------------------------------------------------------------


def syslog_stamp(t: datetime, zero_pad: bool) -> str:
    """``Nov 29 03:00:00`` (journalctl pads the day with 0) or ``Nov  9 03:00:00`` (rsyslog: space)."""
    day = f"{t.day:02d}" if zero_pad else f"{t.day:2d}"
    return f"{t:%b} {day} {t:%H:%M:%S}"


def dmesg_stamp(uptime: float) -> str:
    whole = int(uptime)
    return f"[{whole:5d}.{int((uptime - whole) * 1e6):06d}]"


def ctime_stamp(t: datetime) -> str:
    return f"[{t:%a %b} {t.day:2d} {t:%H:%M:%S %Y}]"


def file_line(node: Node, t: datetime, uptime: float, msg: str, tid: int | None) -> tuple[str, str, str]:
    """(line as in the node's kernel log file, file name, body as journald/kmsg keep it).

    The style is the node's: syslog ``kern.log`` (optionally with the ``[ T1946]`` caller tag of
    newer kernels), ``journalctl -k`` (no uptime stamp), plain ``dmesg`` (uptime only, no host,
    no wall time) or ``dmesg -T`` (ctime).
    """
    stamp = dmesg_stamp(uptime)
    if node.kernel_style == "syslog":
        body = f"{stamp} {msg}"
        return f"{syslog_stamp(t, False)} {node.name} kernel: {body}", "kern.log", body
    if node.kernel_style == "syslog_tid":
        body = f"{stamp} [ T{tid or node.boot_tid}] {msg}"
        return f"{syslog_stamp(t, False)} {node.name} kernel: {body}", "kern.log", body
    if node.kernel_style == "journal":
        return f"{syslog_stamp(t, True)} {node.name} kernel: {msg}", "journal-kernel.log", msg
    if node.kernel_style == "dmesg":
        return f"{stamp} {msg}", "dmesg.log", f"{stamp} {msg}"
    return f"{ctime_stamp(t)} {msg}", "dmesg-T.log", f"{stamp} {msg}"


# -- NVIDIA driver ------------------------------------------------------------------------------


def xid_pid_part(rng: Rng, pid: int | None, name: str | None) -> str:
    """The ``pid=…, name=…`` part in the forms the drivers print (or none at all, older drivers)."""
    if pid is None:
        form = rng.weighted([("unknown_quoted", 0.45), ("unknown_bare", 0.35), ("none", 0.2)])
        if form == "unknown_quoted":
            return "pid='<unknown>', name=<unknown>, "
        if form == "unknown_bare":
            return "pid=<unknown>, name=<unknown>, "
        return ""
    form = rng.weighted([("quoted", 0.3), ("bare", 0.5), ("pid_only", 0.2)])
    if form == "quoted":
        return f"pid='{pid}', name='{name or 'python3'}', "
    if form == "bare":
        return f"pid={pid}, name={name or 'python3'}, "
    return f"pid={pid}, "


def xid(rng: Rng, gpu: Gpu, code: int, text: str, pid: int | None = None, name: str | None = None) -> str:
    pci = gpu.pci_full if rng.chance(0.12) else gpu.pci
    return f"NVRM: Xid (PCI:{pci}): {code}, {xid_pid_part(rng, pid, name)}{text}"


def xid_bare(gpu: Gpu, code: int, text: str) -> str:
    """Older drivers: no pid/name at all (``NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.``)."""
    return f"NVRM: Xid (PCI:{gpu.pci}): {code}, {text}"


def gpu_banner(gpu: Gpu) -> list[str]:
    return [f"NVRM: GPU at PCI:{gpu.pci}: {gpu.uuid}", f"NVRM: GPU Board Serial Number: {gpu.serial}"]


def fallen_off_bus_block(gpu: Gpu, pci_id: str, rng: Rng) -> list[str]:
    """The multi-line banner that precedes or replaces Xid 79 (§3.1), or one of its one-line variants."""
    form = rng.weighted([("block", 0.5), ("gpu_at", 0.25), ("gpu_colon", 0.25)])
    if form == "block":
        return [
            f"NVRM: The NVIDIA GPU {gpu.pci_full}",
            f"NVRM: (PCI ID: {pci_id}) installed in this system has",
            "NVRM: fallen off the bus and is not responding to commands.",
        ]
    if form == "gpu_at":
        return [f"NVRM: GPU at {gpu.pci_full} has fallen off the bus."]
    return [f"NVRM: GPU {gpu.pci_full}: GPU has fallen off the bus."]


def aer_corrected(rng: Rng, port: str) -> list[str]:
    """A corrected PCIe AER report (benign on its own; seen before real link failures too)."""
    return [
        f"pcieport {port}: AER: Corrected error received: id=00{rng.choice(('10', '18', '08'))}",
        f"pcieport {port}: PCIe Bus Error: severity=Corrected, type=Data Link Layer, id=0010(Transmitter ID)",
        f"pcieport {port}:   device [8086:{rng.choice(('6f04', '2030', '347a'))}] error "
        "status/mask=00001000/00002000",
        f"pcieport {port}:    [12] Replay Timer Timeout  ",
    ]


def aer_fatal(port: str, gpu: Gpu) -> list[str]:
    return [
        f"pcieport {port}: AER: Uncorrected (Fatal) error received: id=0010",
        f"pcieport {port}: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
        "id=0010(Receiver ID)",
        f"pcieport {port}:   device [8086:6f04] error status/mask=00000020/00000000",
        f"pcieport {port}:    [ 5] Surprise Down Error    (First)",
        f"pcieport {port}: broadcast error_detected message",
        f"nvidia {gpu.pci_full}: device has no AER-aware driver",
    ]


def api_mismatch(client: str, module: str) -> list[str]:
    """The driver's user/kernel version mismatch banner, one kernel line per row."""
    return [
        f"NVRM: API mismatch: the client has the version {client}, but",
        f"NVRM: this kernel module has the version {module}.  Please",
        "NVRM: make sure that this kernel module and all NVIDIA driver",
        "NVRM: components have the same version.",
    ]


# -- NIC (mlx5) -------------------------------------------------------------------------------


def mlx5_link(pci: str, netdev: str, up: bool) -> str:
    return f"mlx5_core {pci} {netdev}: Link {'up' if up else 'down'}"


def mlx5_module_unplugged(pci: str, module: int) -> str:
    return f"mlx5_core {pci}: Port module event: module {module}, Cable unplugged"


def mlx5_slot_power(pci: str, pid: int) -> str:
    return f"mlx5_core {pci}: mlx5_pcie_event:301:(pid {pid}): PCIe slot advertised sufficient power (75W)."


# -- memory -----------------------------------------------------------------------------------


def oom_kill(rng: Rng, pid: int, comm: str, uid: int, cgroup: bool) -> list[str]:
    vm = rng.randint(60, 400) * 1_048_576
    anon = rng.randint(40, 200) * 1_048_576
    mask = rng.choice(("cc0", "140cca", "100cca"))
    head = f"{comm} invoked oom-killer: gfp_mask=0x{mask}(GFP_KERNEL), order=0, oom_score_adj=0"
    kill = (
        f"{'Memory cgroup out of memory' if cgroup else 'Out of memory'}: Killed process {pid} ({comm}) "
        f"total-vm:{vm}kB, anon-rss:{anon}kB, file-rss:{rng.randint(100_000, 900_000)}kB, "
        f"shmem-rss:{rng.randint(0, 4_000_000)}kB, UID:{uid} pgtables:{rng.randint(100_000, 400_000)}kB "
        "oom_score_adj:0"
    )
    return [head, kill]


def hung_task(comm: str, pid: int, seconds: int) -> str:
    return f"INFO: task {comm}:{pid} blocked for more than {seconds} seconds."


# -- background -------------------------------------------------------------------------------


def noise(rng: Rng, node: Node, epoch: float) -> list[str]:
    """One benign kernel message (or a short benign burst) of the kinds every GPU node logs."""
    kind = rng.weighted(
        [
            ("perf", 0.22),
            ("syn", 0.1),
            ("audit", 0.2),
            ("mlx5_power", 0.12),
            ("execstack", 0.1),
            ("lustre", 0.14),
            ("banner", 0.06),
            ("aer", 0.06),
        ]
    )
    if kind == "perf":
        a = rng.randint(2501, 9000)
        return [
            f"perf: interrupt took too long ({a} > {rng.randint(2500, a - 1)}), lowering "
            f"kernel.perf_event_max_sample_rate to {rng.choice((79750, 63750, 50000, 39750, 31750))}"
        ]
    if kind == "syn":
        return [
            f"TCP: request_sock_TCP: Possible SYN flooding on port {rng.choice((29500, 6000, 8265, 22))}. "
            "Sending cookies.  Check SNMP counters."
        ]
    if kind == "audit":
        pid = rng.randint(1000, 900_000)
        return [
            f'audit: type=1400 audit({epoch:.3f}:{rng.randint(100, 9999)}): apparmor="DENIED" '
            'operation="open" '
            f'profile="snap.lxd.daemon" name="/proc/{pid}/mountinfo" pid={pid} comm="lxd" '
            'requested_mask="r" denied_mask="r" fsuid=0 ouid=0'
        ]
    if kind == "mlx5_power":
        return [mlx5_slot_power(rng.choice(node.hcas)[1], rng.randint(300, 2000))]
    if kind == "execstack":
        return ["process 'usr/bin/python3' started with executable stack"]
    if kind == "lustre":
        ost = f"fs1-OST{rng.randint(0, 63):04x}"
        peer = f"10.{rng.randint(1, 3)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}@o2ib"
        return [f"Lustre: {ost}-osc-ffff{rng.hexstr(8)}: Connection restored to {peer} (at {peer})"]
    if kind == "banner":
        return gpu_banner(rng.choice(node.gpus))
    return aer_corrected(rng, f"0000:{rng.choice(('00', '80', 'c0'))}:0{rng.randint(1, 3)}.0")
