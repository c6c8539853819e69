"""A deterministic ≥1 GiB corpus of mixed cluster logs for ``make bench-extract``.

What a central log store of a GPU training fleet holds: training output (Megatron,
Lightning, Hugging Face, NCCL INFO chatter, torch warnings), kernel and syslog lines
(systemd, audit, nvidia-persistenced, mlx5, dmesg) and slurmctld/slurmd lines, with
0.1-1 % signature-bearing lines (Xid, NCCL watchdog, CUDA errors, OOM killer, IB errors,
Slurm banners and job life cycle) written in the formats quoted in
``shared/reference/failure-signatures.md``.

The lines are written by hand here and share no code with the rule catalog: the benchmark
must not measure the rules against text produced from their own patterns.

Blocks of lines are generated from their own seed, two processes at a time, and written
in order, so the file is the same bytes on every machine. It is cached under
``${SICKBAY_DOWNLOAD_CACHE:-~/.cache/sickbay}/bench/`` with a small JSON manifest and
rebuilt only when the file is missing or its size differs from the manifest.

    python -m benchmarks.extract_corpus [--force] [--bytes N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from random import Random

VERSION = 1
SEED = "sickbay-extract-corpus"
TARGET_BYTES = 1 << 30  # 1 GiB: "at least 1 GB" whichever way GB is read
BLOCK_LINES = 20_000
BLOCK_SECONDS = 600  # each block covers ten minutes of the fleet's logs
T0 = 1_773_480_000  # 2026-03-14T09:20:00Z
NODES = 512
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def cache_dir() -> Path:
    base = os.environ.get("SICKBAY_DOWNLOAD_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sickbay"
    )
    return Path(base) / "bench"


def generator_digest() -> str:
    """This file's hash: a corpus made by another version of the generator is rebuilt."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def corpus_path() -> Path:
    return cache_dir() / f"extract-corpus-v{VERSION}.log"


# --------------------------------------------------------------------------------------------
# Per-block state: the clock and the fleet
# --------------------------------------------------------------------------------------------


@dataclass
class State:
    r: Random
    t: float
    sec: int = -1
    syslog: str = ""  # "Mar 14 10:22:31"
    iso: str = ""  # "2026-03-14T10:22:31"
    day: str = ""  # "2026-03-14 10:22:31"
    glog: str = ""  # "314 10:22:31"
    hms: str = ""
    uptime0: float = 0.0
    job: int = 0
    kinds: Counter[str] = field(default_factory=Counter)

    def tick(self) -> None:
        self.t += self.r.expovariate(BLOCK_LINES / BLOCK_SECONDS)
        s = int(self.t)
        if s != self.sec:
            self.sec = s
            tm = time.gmtime(s)
            self.hms = f"{tm.tm_hour:02d}:{tm.tm_min:02d}:{tm.tm_sec:02d}"
            self.syslog = f"{MONTHS[tm.tm_mon - 1]} {tm.tm_mday:02d} {self.hms}"
            date = f"{tm.tm_year}-{tm.tm_mon:02d}-{tm.tm_mday:02d}"
            self.iso = f"{date}T{self.hms}"
            self.day = f"{date} {self.hms}"
            self.glog = f"{tm.tm_mon}{tm.tm_mday:02d} {self.hms}"

    def ms(self) -> str:
        return f"{int(self.t * 1000) % 1000:03d}"

    def uptime(self) -> str:
        return f"[{self.t - self.uptime0:12.6f}]"


def host(r: Random) -> str:
    return f"gpu-{r.randrange(1, NODES + 1):03d}"


def nodelist(r: Random) -> str:
    start = r.randrange(1, NODES - 16)
    n = r.choice((1, 2, 4, 8, 16))
    if n == 1:
        return f"gpu-{start:03d}"
    if r.random() < 0.3:
        return f"gpu-[{start:03d}-{start + n // 2 - 1:03d},{start + n:03d}-{start + n + n // 2 - 1:03d}]"
    return f"gpu-[{start:03d}-{start + n - 1:03d}]"


def pci(r: Random) -> str:
    return (
        f"0000:{r.choice(('06', '07', '0f', '10', '2b', '37', '4c', '5d', '87', '8d', 'b5', 'c1', 'da'))}:00"
    )


def pid(r: Random) -> int:
    return r.randrange(1000, 4_000_000)


def sl(s: State, h: str, tag: str) -> str:
    """A syslog/journal prefix."""
    return f"{s.syslog} {h} {tag}: "


# --------------------------------------------------------------------------------------------
# Training output
# --------------------------------------------------------------------------------------------

NCCL_INFO = (
    "Channel {c:02d}/32 :    0   1   2   3   4   5   6   7",
    "Channel {c:02d}/0 : {a}[{a}] -> {b}[{b}] via P2P/CUMEM/read",
    "Channel {c:02d}/0 : {a}[{a}] -> {b}[{b}] [send] via NET/IB/{a}/GDRDMA",
    "Channel {c:02d}/0 : {b}[{b}] -> {a}[{a}] [receive] via NET/IB/{a}/GDRDMA",
    "Connected all rings",
    "Connected all trees",
    "Using network IB",
    "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [2]mlx5_4:1/IB [3]mlx5_5:1/IB ; OOB ib0:10.{a}.{b}.{c}<0>",
    "NCCL_IB_HCA set to mlx5_0,mlx5_3,mlx5_4,mlx5_5",
    "Bootstrap : Using ib0:10.{a}.{b}.{c}<0>",
    "cudaDriverVersion 12040",
    "NCCL version 2.21.5+cuda12.4",
    "comm 0x{p:x} rank {a} nranks 64 cudaDev {a} nvmlDev {a} busId {c}000 commId 0x{p:x} - Init COMPLETE",
    "ncclCommInitRank comm 0x{p:x} rank {a} nranks 64 cudaDev {a} nvmlDev {a} busId {c}000 commId 0x{p:x} "
    "- Init START",
    "Setting affinity for GPU {a} to ffff,ffff0000,00000000",
    "NVLS multicast support is not available on dev {a}",
    "P2P Chunksize set to 524288",
    "threadThresholds 8/8/64 | 512/8/64 | 512 | 512",
    "{c} coll channels, 0 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer",
    "Trees [0] {a}/-1/-1->{b}->-1 [1] {a}/-1/-1->{b}->-1",
    "comm 0x{p:x} rank {a} nRanks 64 nNodes 8 localRanks 8 localRank {a} MNNVL 0",
    "Allocated {c}0 MB of host memory for proxy buffers",
)


def nccl_info(s: State) -> str:
    r = s.r
    msg = r.choice(NCCL_INFO).format(
        a=r.randrange(8), b=r.randrange(8), c=r.randrange(32), p=r.randrange(1 << 44, 1 << 47)
    )
    dev = r.randrange(8)
    p = pid(r)
    if r.random() < 0.25:
        src = f"init.cc:{r.randrange(100, 1900)}"
        return f"{host(r)}:{p}:{p + r.randrange(1, 300)} [{dev}] {src} NCCL INFO {msg}"
    return f"{host(r)}:{p}:{p + r.randrange(1, 300)} [{dev}] NCCL INFO {msg}"


def megatron_iteration(s: State) -> str:
    r = s.r
    it = r.randrange(1, 500_000)
    return (
        f" [{s.day}] iteration {it:>8d}/  500000 | consumed samples: {it * 2048:>12d} | "
        f"elapsed time per iteration (ms): {r.uniform(900, 2200):.1f} | "
        f"throughput per GPU (TFLOP/s/GPU): {r.uniform(300, 480):.1f} | "
        f"learning rate: {r.uniform(1e-5, 3e-4):.6E} | global batch size:  2048 | "
        f"lm loss: {r.uniform(1.5, 3.5):.6E} | loss scale: 1.0 | grad norm: {r.uniform(0.2, 2.0):.3f} | "
        f"number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def megatron_misc(s: State) -> str:
    r = s.r
    return r.choice(
        (
            f"[{s.day}] retrieved checkpoint metadata; loading optimizer state",
            f" > number of parameters on (tensor, pipeline) model parallel rank ({r.randrange(8)}, "
            f"{r.randrange(4)}): {r.randrange(10**9, 9 * 10**9)}",
            f"(min, max) time across ranks (ms):    forward-backward ...: ({r.uniform(800, 1200):.2f}, "
            f"{r.uniform(1200, 1600):.2f})",
            f"[after training is done] datetime: {s.day}",
            f"building GPT model ... > number of parameters: {r.randrange(10**9, 8 * 10**10)}",
        )
    )


def megatron_checkpoint(s: State) -> str:
    r = s.r
    it = r.randrange(1000, 500000, 1000)
    if r.random() < 0.5:
        return f"saving checkpoint at iteration {it:>7d} to /lustre/ckpt/llama-70b in torch_dist format"
    return (
        f"  successfully saved checkpoint from iteration {it:>7d} to /lustre/ckpt/llama-70b [ t 1/8, p 1/4 ]"
    )


def lightning(s: State) -> str:
    r = s.r
    done = r.randrange(1, 10000)
    pct = done * 100 // 10000
    bar = "█" * (pct // 10) + "▌" * (pct % 10 >= 5) + " " * (10 - pct // 10 - (pct % 10 >= 5))
    return (
        f"Epoch {r.randrange(20)}:  {pct:>2d}%|{bar}| {done}/10000 "
        f"[{r.randrange(60):02d}:{r.randrange(60):02d}"
        f"<{r.randrange(60):02d}:{r.randrange(60):02d},  {r.uniform(2, 9):.2f}it/s, v_num={r.randrange(40)}, "
        f"train_loss={r.uniform(1.5, 3.5):.3f}]"
    )


def hf(s: State) -> str:
    r = s.r
    msg = r.choice(
        (
            "***** Running training *****",
            f"  Num examples = {r.randrange(10**5, 10**7):,}",
            f"  Total optimization steps = {r.randrange(1000, 100000):,}",
            "Configuration saved in /scratch/out/config.json",
            f"tokenizer config file saved in /scratch/out/checkpoint-{r.randrange(500, 50000, 500)}/"
            "tokenizer_config.json",
            "loading weights file model.safetensors from cache at "
            "/root/.cache/huggingface/hub/model.safetensors",
        )
    )
    return f"[INFO|trainer.py:{r.randrange(600, 4000)}] {s.day},{s.ms()} >> {msg}"


def hf_progress(s: State) -> str:
    """The Trainer's periodic loss log (every ``logging_steps``) and its checkpoint saves."""
    r = s.r
    if r.random() < 0.85:
        return (
            f"{{'loss': {r.uniform(0.5, 3):.4f}, 'grad_norm': {r.uniform(0.1, 3):.4f}, "
            f"'learning_rate': {r.uniform(1e-6, 5e-5):.3e}, 'epoch': {r.uniform(0, 3):.2f}}}"
        )
    return (
        f"[INFO|trainer.py:{r.randrange(600, 4000)}] {s.day},{s.ms()} >> Saving model checkpoint to "
        f"/scratch/out/checkpoint-{r.randrange(500, 50000, 500)}"
    )


TORCH_WARN = (
    "/usr/local/lib/python3.10/dist-packages/torch/distributed/c10d_logger.py:79: FutureWarning: You are "
    "using "
    "`torch.load` with `weights_only=False`",
    "/usr/local/lib/python3.10/dist-packages/torch/utils/checkpoint.py:464: UserWarning: "
    "torch.utils.checkpoint: "
    "the use_reentrant parameter should be passed explicitly.",
    "/usr/local/lib/python3.10/dist-packages/transformer_engine/pytorch/attention.py:4712: UserWarning: "
    "flash-attn "
    "v3 may provide important feature support or performance improvement. Please install flash-attn v3",
    "  warnings.warn(",
    "/opt/megatron/megatron/core/tensor_parallel/layers.py:280: UserWarning: async_grad_allreduce is "
    "deprecated",
    "UserWarning: TypedStorage is deprecated. It will be removed in the future and UntypedStorage will be "
    "the "
    "only storage class.",
)


def torch_warning(s: State) -> str:
    r = s.r
    if r.random() < 0.5:
        rank = r.randrange(64)
        return (
            f"[rank{rank}]:[W{s.glog}.{r.randrange(10**9):09d} "
            f"ProcessGroupNCCL.cpp:{r.randrange(900, 4500)}] "
            + r.choice(
                (
                    "Warning: WARNING: process group has NOT been destroyed before we destruct "
                    "ProcessGroupNCCL.",
                    f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] using GPU {rank % 8} to perform barrier as "
                    "devices used by this process are currently unknown.",
                    "Warning: TORCH_NCCL_AVOID_RECORD_STREAMS=1 has no effect for point-to-point "
                    "collectives.",
                )
            )
        )
    return r.choice(TORCH_WARN)


def train_misc(s: State) -> str:
    r = s.r
    rank = r.randrange(64)
    return r.choice(
        (
            f"[rank{rank}]: step {r.randrange(100000)} data loader wait {r.uniform(0, 40):.1f} ms",
            f"INFO:torch.distributed.run:Using nproc_per_node=8, rank {rank}",
            f"W{s.glog}.{r.randrange(10**6):06d} {pid(r)} torch/distributed/run.py:793] Setting "
            "OMP_NUM_THREADS "
            "environment variable for each process to be 1 in default",
            f"[{s.day},{s.ms()}] [INFO] [real_accelerator.py:203:get_accelerator] Setting ds_accelerator "
            "to cuda",
            "wandb: Run data is saved locally in "
            f"/scratch/wandb/run-{s.day[:10].replace('-', '')}-{r.randrange(99999)}",
            f"> rank {rank} tokens per second: {r.uniform(3000, 9000):.1f}",
            f"[rank{rank}]: > finished loading batch {r.randrange(10**6)} from "
            f"/lustre/data/shard-{r.randrange(4096):05d}",
        )
    )


# --------------------------------------------------------------------------------------------
# Kernel and syslog
# --------------------------------------------------------------------------------------------


def systemd(s: State) -> str:
    r = s.r
    h = host(r)
    n = r.randrange(1, 99999)
    msg = r.choice(
        (
            f"Started Session {n} of User slurm.",
            f"session-{n}.scope: Deactivated successfully.",
            "Starting Cleanup of Temporary Directories...",
            "systemd-tmpfiles-clean.service: Deactivated successfully.",
            "Finished Cleanup of Temporary Directories.",
            f"Started slurmstepd-job{n}.scope.",
            "Started Daily apt download activities.",
            "Reached target Timers.",
            f"user@{r.randrange(1000, 1100)}.service: Consumed {r.uniform(0, 9):.3f}s CPU time.",
        )
    )
    if r.random() < 0.2:
        return sl(s, h, f"systemd-logind[{r.randrange(800, 1200)}]") + f"New session {n} of user root."
    return sl(s, h, "systemd[1]") + msg


def audit(s: State) -> str:
    r = s.r
    stamp = f"{s.sec}.{r.randrange(1000):03d}:{r.randrange(10**6)}"
    if r.random() < 0.5:
        return sl(s, host(r), "kernel") + (
            f'audit: type=1400 audit({stamp}): apparmor="DENIED" operation="open" class="file" '
            f'profile="/usr/sbin/chronyd" name="/proc/{pid(r)}/status" pid={pid(r)} comm="chronyd" '
            'requested_mask="r" denied_mask="r" fsuid=0 ouid=0'
        )
    return sl(s, host(r), f"audit[{pid(r)}]") + (
        f"USER_ACCT pid={pid(r)} uid=0 auid=4294967295 ses=4294967295 subj=unconfined "
        'msg=\'op=PAM:accounting grantors=pam_permit acct="root" exe="/usr/sbin/cron" hostname=? addr=? '
        "terminal=cron res=success'"
    )


def persistenced(s: State) -> str:
    r = s.r
    return sl(s, host(r), f"nvidia-persistenced[{r.randrange(1000, 3000)}]") + r.choice(
        (
            "Verbose syslog connection opened",
            f"device {pci(r)}.0 - registered",
            f"device {pci(r)}.0 - persistence mode enabled.",
            f"device {pci(r)}.0 - NUMA memory onlined.",
            "Local RPC services initialized",
        )
    )


def mlx5_info(s: State) -> str:
    r = s.r
    dev = f"0000:{r.choice(('0c', '4b', '8a', 'c9'))}:00.{r.randrange(2)}"
    msg = r.choice(
        (
            f"mlx5_core {dev}: E-Switch: Total vports 2, per vport: max uc(128) max mc(2048)",
            f"mlx5_core {dev}: mlx5_pcie_event:301:(pid {pid(r)}): PCIe slot advertised sufficient power "
            "(75W).",
            f"mlx5_core {dev}: firmware version: 28.39.1002",
            f"mlx5_core {dev}: MLX5E: StrdRq(1) RqSz(8) StrdSz(2048) RxCqeCmprss(0 basic)",
        )
    )
    if r.random() < 0.5:
        return f"{s.uptime()} {msg}"
    return sl(s, host(r), "kernel") + msg


def link_event(s: State) -> str:
    """Port and link events: rare in steady state, and signals (recovery, diagnostics) to the rules."""
    r = s.r
    dev = f"0000:{r.choice(('0c', '4b', '8a', 'c9'))}:00.{r.randrange(2)}"
    msg = r.choice(
        (
            f"mlx5_core {dev}: Port module event: module 0, Cable plugged",
            f"mlx5_core {dev} ibp{r.randrange(12, 220)}s0: Link up",
            f"mlx5_core {dev}: Port module event: module 0, Cable unplugged",
        )
    )
    return sl(s, host(r), "kernel") + msg


def dmesg_misc(s: State) -> str:
    r = s.r
    msg = r.choice(
        (
            f"EXT4-fs (nvme0n1p{r.randrange(1, 4)}): mounted filesystem with ordered data mode. Quota "
            "mode: none.",
            "IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready",
            f"perf: interrupt took too long ({r.randrange(2500, 9000)} > {r.randrange(2500, 9000)}), "
            "lowering "
            f"kernel.perf_event_max_sample_rate to {r.randrange(20000, 80000)}",
            "nvidia-nvlink: Nvlink Core is being initialized, major device number 511",
            "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024",
            f"NVRM: GPU at PCI:{pci(r)}: GPU-{r.randrange(16**8):08x}-7b5c-1a2b-3c4d-5e6f7a8b9c0d",
            "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  550.54.15",
            f"lustre: Lustre: {r.randrange(1000, 9999)}:0:(client.c:2310:ptlrpc_expire_one_request()) "
            "@@@ Request sent has timed out for slow reply",
            f"TCP: request_sock_TCP: Possible SYN flooding on port {r.randrange(1024, 65535)}. Sending "
            "cookies.",
        )
    )
    if r.random() < 0.3:
        return f"{s.uptime()} [ T{r.randrange(1, 9999)}] {msg}"
    if r.random() < 0.6:
        return f"{s.uptime()} {msg}"
    return sl(s, host(r), "kernel") + msg


def daemons(s: State) -> str:
    r = s.r
    h = host(r)
    k = r.randrange(5)
    if k == 0:
        return sl(s, h, f"sshd[{pid(r)}]") + (
            f"Accepted publickey for slurm from 10.{r.randrange(256)}.{r.randrange(256)}.{r.randrange(256)} "
            f"port {r.randrange(1024, 65535)} ssh2: ED25519 SHA256:{r.randrange(16**12):012x}"
        )
    if k == 1:
        return sl(s, h, f"CRON[{pid(r)}]") + "(root) CMD (/usr/local/sbin/nhc >/dev/null 2>&1)"
    if k == 2:
        return sl(s, h, f"chronyd[{r.randrange(900, 1500)}]") + (
            f"Selected source 10.0.0.{r.randrange(1, 5)} (ntp{r.randrange(1, 5)}.cluster)"
        )
    if k == 3:
        return sl(s, h, f"nv-hostengine[{r.randrange(2000, 5000)}]") + (
            f"DCGM health check passed for GPU {r.randrange(8)}: PCIe, memory, InfoROM, thermal, power, "
            "NVLink"
        )
    return sl(s, h, f"rsyslogd[{r.randrange(700, 900)}]") + (
        f"imjournal: {r.randrange(10, 9999)} messages lost due to rate-limiting (20000 allowed within 600 "
        "seconds)"
    )


# --------------------------------------------------------------------------------------------
# Slurm
# --------------------------------------------------------------------------------------------


def ctld(s: State, msg: str) -> str:
    if s.r.random() < 0.2:
        return sl(s, "slurm-head", f"slurmctld[{483}]") + "slurmctld: " + msg
    return f"[{s.iso}.{s.ms()}] {msg}"


def slurmctld_chatter(s: State) -> str:
    r = s.r
    j = s.job + r.randrange(-2000, 50)
    msg = r.choice(
        (
            "backfill: beginning",
            f"backfill: reached end of job queue, {r.randrange(30, 900)} jobs tested",
            f"sched: _slurm_rpc_allocate_resources JobId={j} NodeList=(null) usec={r.randrange(100, 9000)}",
            f"_slurm_rpc_submit_batch_job: JobId={j} InitPrio={r.randrange(1, 50000)} "
            f"usec={r.randrange(100, 9000)}",
            f"_slurm_rpc_complete_batch_script JobId={j} usec={r.randrange(10, 900)}",
            f"prolog_running_decr: Configuration for JobId={j} is complete",
            f"Node {host(r)} now responding",
            f"SchedulerParameters=default_queue_depth=100,max_rpc_cnt=0,max_sched_time={r.randrange(2, 9)}",
            f"_build_node_list: No nodes satisfy JobId={j} requirements in partition gpu",
            f"job_time_limit: inactivity time limit reached for JobId={j}",
            f"sched/backfill: _start_job: JobId={j} reservation conflict",
            f"error: _slurm_rpc_node_registration node={host(r)}: Invalid argument",
        )
    )
    return ctld(s, msg)


def slurmd(s: State) -> str:
    r = s.r
    j = s.job + r.randrange(-2000, 50)
    return sl(s, host(r), f"slurmd[{r.randrange(1000, 9999)}]") + r.choice(
        (
            f"slurmd: launch task StepId={j}.0 request from UID:{r.randrange(1000, 9000)} GID:100 "
            "HOST:10.0.0.1 "
            "PORT:55470",
            f"slurmd: task/affinity: lllp_distribution: JobId={j} manual binding: none,one_thread",
            f"slurmd: done with job {j}",
            f"slurmd: _run_prolog: prolog with lock for job {j} ran for 0 seconds",
            f"slurmd: task/affinity: batch_bind: job {j} CPU input mask for node: 0xFFFFFFFFFFFF",
        )
    )


def slurm_lifecycle(s: State) -> str:
    """Job life cycle lines (allocation, start, completion, requeue): facts the scheduler rules read."""
    r = s.r
    s.job += r.randrange(1, 4)
    j = s.job
    k = r.random()
    if k < 0.30:
        return ctld(
            s,
            f"sched: Allocate JobId={j} NodeList={nodelist(r)} #CPUs={r.choice((8, 64, 128, 256))} "
            "Partition=gpu",
        )
    if k < 0.45:
        return ctld(s, f"sched/backfill: _start_job: Started JobId={j} in gpu on {nodelist(r)}")
    done = j - r.randrange(1, 500)
    if k < 0.70:  # slurmctld writes the exit status, then "done", for every job
        if r.random() < 0.8:
            return ctld(s, f"_job_complete: JobId={done} WEXITSTATUS {r.choice((0, 0, 0, 1))}")
        return ctld(s, f"_job_complete: JobId={done} WTERMSIG {r.choice((9, 15))}")
    if k < 0.95:
        return ctld(s, f"_job_complete: JobId={done} done")
    return ctld(s, f"Requeuing JobId={done}")


# --------------------------------------------------------------------------------------------
# Faults, in the formats of failure-signatures.md
# --------------------------------------------------------------------------------------------

XID_TEXT = (
    (79, "GPU has fallen off the bus."),
    (
        48,
        "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU "
        "in "
        "the framebuffer at physAddr 0x7fdf0de80 partition 5, subpartition 1",
    ),
    (63, "pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate."),
    (95, "pid=5171, Uncontained: FBHUB. RST: Yes, D-RST: No"),
    (119, "pid=430, name=nv_queue, Timeout waiting for RPC from GSP!"),
    (
        13,
        "pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range "
        "Address",
    ),
    (
        31,
        "pid=1942, name=python3, channel 0x00000002, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC6 "
        "GPCCLIENT_T1_13 faulted @ 0x6f6f_320c2000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    ),
    (74, "pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 1"),
    (45, "pid=2201, name=python3, Ch 00000010"),
    (94, "pid=2201, name=python3, Contained: SM (0x1). RST: No, D-RST: No"),
    (
        145,
        "RLW_REMAP Nonfatal XC0 i0 Link 02 (0x00000002 0x80000000 0x00000000 0x00000000 0x00000000 "
        "0x00000000)",
    ),
)


def xid(s: State) -> str:
    r = s.r
    code, text = r.choice(XID_TEXT)
    body = f"NVRM: Xid (PCI:{pci(r)}): {code}, {text}"
    k = r.random()
    if k < 0.4:
        return sl(s, host(r), "kernel") + body
    if k < 0.7:
        return f"{s.uptime()} {body}"
    if k < 0.85:
        return f"{s.uptime()} [ T{r.randrange(1, 9999)}] {body}"
    return sl(s, host(r), "kernel") + f"{s.uptime()} {body}"


def gpu_other(s: State) -> str:
    r = s.r
    h = host(r)
    return sl(s, h, "kernel") + r.choice(
        (
            f"NVRM: GPU at {pci(r)}.0 has fallen off the bus.",
            f"NVRM: GPU {pci(r)}.0: GPU has fallen off the bus.",
            f"nvidia-nvswitch{r.randrange(4)}: SXid (PCI:0000:06:00.0): 20009, Non-fatal, Link 04 RX Short "
            "Error Rate",
            f"nvidia-nvswitch{r.randrange(4)}: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 28 sourcetrack "
            "timeout "
            "error (First)",
            f"NVRM: Xid (PCI:{pci(r)}): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node "
            "Reboot Required)",
            "WARNING: infoROM is corrupted at gpu 0000:07:00.0",
        )
    )


def nccl_watchdog(s: State) -> str:
    r = s.r
    rank = r.randrange(256)
    seq = r.randrange(1, 2_000_000)
    op = r.choice(("ALLREDUCE", "ALLGATHER", "BROADCAST", "REDUCE_SCATTER", "_ALLGATHER_BASE"))
    timeout = r.choice((600000, 1800000))
    ran = timeout + r.randrange(10, 900)
    k = r.random()
    if k < 0.25:
        return (
            f"[E ProcessGroupNCCL.cpp:458] [Rank {rank}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum={seq}, OpType={op}, Timeout(ms)={timeout}) ran for {ran} milliseconds before "
            "timing out."
        )
    numel = r.choice((8, 131072000, 1048576))
    work = (
        f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel * 8}, Timeout(ms)={timeout})"
    )
    if k < 0.7:
        return (
            f"[rank{rank}]:[E{s.glog}.{r.randrange(10**9):09d} "
            f"ProcessGroupNCCL.cpp:{r.choice((629, 632, 1537))}] "
            f"[Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds "
            "before timing out."
        )
    return (
        f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Watchdog caught collective operation timeout: {work} "
        f"ran for {ran} milliseconds before timing out."
    )


def nccl_other(s: State) -> str:
    r = s.r
    rank = r.randrange(256)
    p = pid(r)
    return r.choice(
        (
            "Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
            "subsequent GPU operations might run on corrupted/incomplete data.",
            f"[rank{rank}]:[E{s.glog}.{r.randrange(10**9):09d} ProcessGroupNCCL.cpp:1595] [PG 0 Rank {rank}] "
            "To avoid data inconsistency, we are taking the entire process down.",
            f"[PG 1 Rank {rank}] Exception (either an error or timeout) detected by watchdog at work: "
            "1580, last "
            "enqueued NCCL work: 1582, last completed NCCL work: 1579.",
            f"{host(r)}:{p}:{p + 126} [{rank % 8}] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got "
            "completion from "
            f"peer 10.2.0.{r.randrange(2, 250)}<{r.randrange(30000, 60000)}> with error 12, opcode 0, len 0, "
            "vendor err 129 (Recv)",
            f"{host(r)}:{p}:{p + 126} [{rank % 8}] enqueue.cc:1556 NCCL WARN Cuda failure 'an illegal "
            "memory access "
            "was encountered'",
            "torch.distributed.DistBackendError: NCCL error in: "
            "../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
            f"[Rank {rank}] NCCL watchdog thread terminated with exception: NCCL error: remote process "
            "exited or "
            "there was a network error, NCCL version 2.19.3",
            "terminate called after throwing an instance of 'c10::DistBackendError'",
        )
    )


def cuda_fault(s: State) -> str:
    r = s.r
    k = r.random()
    if k < 0.3:
        what = (
            "an illegal memory access was encountered",
            "unspecified launch failure",
            "misaligned address",
        )
        return f"RuntimeError: CUDA error: {r.choice((*what, 'device-side assert triggered'))}"
    if k < 0.4:
        return "torch.AcceleratorError: CUDA error: unspecified launch failure"
    if k < 0.5:
        return "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    if k < 0.7:
        gib = r.choice(("146.00 MiB", "2.00 GiB", "1.53 GiB", "512.00 MiB"))
        return (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {gib}. GPU {r.randrange(8)} "
            "has a total "
            f"capacity of 79.15 GiB of which {r.randrange(1, 900)}.00 MiB is free. Including non-PyTorch "
            "memory, "
            f"this process has 78.{r.randrange(10, 99)} GiB memory in use."
        )
    if k < 0.85:
        return (
            "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
            "below "
            "might be incorrect."
        )
    if k < 0.93:
        return "For debugging consider passing CUDA_LAUNCH_BLOCKING=1."
    return "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."


def app_fault(s: State) -> str:
    r = s.r
    rank = r.randrange(64)
    return r.choice(
        (
            f"[rank{rank}]: RuntimeError: expected scalar type Half but found Float",
            "RuntimeError: one of the variables needed for gradient computation has been modified by an "
            "inplace "
            "operation",
            f"RuntimeError: DataLoader worker (pid {pid(r)}) is killed by signal: Killed.",
            "FileNotFoundError: [Errno 2] No such file or directory: "
            f"'/lustre/ckpt/iter_{r.randrange(10**7):07d}'",
            f"Rank{rank}: (1) segmentation fault: artificial segfault",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
            f"  exitcode  : -6 (pid: {pid(r)})",
            f"  traceback : Signal 11 (SIGSEGV) received by PID {pid(r)}",
            "Root Cause (first observed failure):",
        )
    )


def host_fault(s: State) -> str:
    r = s.r
    h = host(r)
    p = pid(r)
    vm = r.randrange(10**7, 10**9)
    k = r.randrange(7)
    if k == 0:
        return sl(s, h, "kernel") + (
            f"Out of memory: Killed process {p} (python) total-vm:{vm}kB, anon-rss:{vm // 3}kB, "
            f"file-rss:{r.randrange(10**6)}kB, shmem-rss:{r.randrange(10**6)}kB, "
            f"UID:{r.randrange(1000, 9000)} "
            f"pgtables:{r.randrange(10**5)}kB oom_score_adj:0"
        )
    if k == 1:
        return (
            f"{s.uptime()} Memory cgroup out of memory: Killed process {p} (pt_main_thread) total-vm:{vm}kB, "
            f"anon-rss:{vm // 2}kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:{r.randrange(10**5)}kB "
            "oom_score_adj:0"
        )
    if k == 2:
        return sl(s, h, "kernel") + f"INFO: task python:{p} blocked for more than 120 seconds."
    if k == 3:
        return (
            sl(s, h, "kernel")
            + f"mlx5_core 0000:{r.choice(('0c', '4b'))}:00.{r.randrange(8)} ens9f0v5: Link down"
        )
    if k == 4:
        return sl(s, h, "kernel") + (
            f"mlx5_core 0000:08:01.0: wait_func:1203:(pid {p}): ENABLE_HCA(0x104) timeout. Will cause a "
            "leak of a "
            "command resource"
        )
    if k == 5:
        return sl(s, h, "kernel") + (
            "mlx5_core 0000:4b:00.0: mlx5_health_try_recover:343:(pid 88): health recovery flow aborted, "
            "PCI reads "
            "still not working"
        )
    return (
        sl(s, h, "kernel")
        + f"EXT4-fs error (device nvme0n1p2): ext4_find_entry:1455: inode #{r.randrange(10**6)}: "
        "comm python: reading directory lblock 0"
    )


def slurm_fault(s: State) -> str:
    r = s.r
    j = s.job - r.randrange(0, 500)
    h = host(r)
    when = s.iso
    k = r.randrange(10)
    if k < 5:
        why = r.choice(
            (
                " DUE TO TIME LIMIT",
                " DUE TO PREEMPTION",
                " DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS",
                " DUE TO JOB REQUEUE",
                "",
            )
        )
        return f"slurmstepd: error: *** JOB {j} ON {h} CANCELLED AT {when}{why} ***"
    if k == 5:
        return (
            f"slurmstepd: error: *** STEP {j}.0 ON {h} FAILED (non-zero exit code or other failure mode) ***"
        )
    if k == 6:
        why = r.choice(("Exited with exit code 1", "Out Of Memory"))
        return f"srun: error: {h}: task {r.randrange(64)}: {why}"
    if k == 7:
        return (
            f"slurmstepd: error: Detected 1 oom_kill event in StepId={j}.0. Some of the step tasks have been "
            "OOM Killed."
        )
    if k == 8:
        return ctld(s, f"error: Nodes {h} not responding, setting DOWN")
    return ctld(
        s,
        r.choice(
            (
                f"requeue job JobId={j} due to failure of node {h}",
                f"Killing JobId={j} on failed node {h}",
                f"update_node: node {h} reason set to: Xid 79",
                f"node {h} returned to service",
            )
        ),
    )


# --------------------------------------------------------------------------------------------
# The mix (weights are lines per 100 000)
# --------------------------------------------------------------------------------------------

Gen = Callable[[State], str]
MIX: tuple[tuple[str, Gen, float], ...] = (
    ("nccl_info", nccl_info, 26_000),
    ("torch_warning", torch_warning, 6_000),
    ("train_misc", train_misc, 9_000),
    ("hf", hf, 6_000),
    ("megatron_misc", megatron_misc, 2_000),
    ("systemd", systemd, 13_000),
    ("audit", audit, 6_000),
    ("persistenced", persistenced, 2_000),
    ("mlx5_info", mlx5_info, 2_500),
    ("dmesg_misc", dmesg_misc, 6_000),
    ("daemons", daemons, 9_000),
    ("slurmctld_chatter", slurmctld_chatter, 5_000),
    ("slurmd", slurmd, 4_000),
    # Lines a rule is meant for, about 0.7 % together: training progress (one rank logs it,
    # every few steps), job life cycle, link events, faults.
    ("megatron_iteration", megatron_iteration, 100),
    ("megatron_checkpoint", megatron_checkpoint, 15),
    ("hf_progress", hf_progress, 80),
    ("lightning", lightning, 50),
    ("slurm_lifecycle", slurm_lifecycle, 200),
    ("link_event", link_event, 30),
    ("xid", xid, 60),
    ("gpu_other", gpu_other, 15),
    ("nccl_watchdog", nccl_watchdog, 45),
    ("nccl_other", nccl_other, 40),
    ("cuda_fault", cuda_fault, 50),
    ("app_fault", app_fault, 20),
    ("host_fault", host_fault, 30),
    ("slurm_fault", slurm_fault, 40),
)


def _block(index: int) -> tuple[bytes, int, dict[str, int]]:
    r = Random(f"{SEED}-v{VERSION}:{index}")
    s = State(r=r, t=float(T0 + index * BLOCK_SECONDS), uptime0=float(T0 - 86_400 * 3))
    s.job = 1_000_000 + index * 40
    names = [name for name, _, _ in MIX]
    gens = [gen for _, gen, _ in MIX]
    cum: list[float] = []
    total = 0.0
    for _, _, w in MIX:
        total += w
        cum.append(total)
    picks = r.choices(range(len(MIX)), cum_weights=cum, k=BLOCK_LINES)
    out: list[str] = []
    for i in picks:
        s.tick()
        out.append(gens[i](s))
    counts = Counter(names[i] for i in picks)
    data = ("\n".join(out) + "\n").encode()
    return data, len(out), dict(counts)


def build(path: Path, target: int = TARGET_BYTES, processes: int = 2) -> dict[str, object]:
    """Write the corpus to ``path`` (via a temporary name) and its manifest beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    size = lines = blocks = 0
    kinds: Counter[str] = Counter()
    started = time.perf_counter()
    try:
        with tmp.open("wb") as fh, multiprocessing.get_context("fork").Pool(processes) as pool:
            for data, n, counts in pool.imap(_block, range(1 << 20), chunksize=1):
                fh.write(data)
                size += len(data)
                lines += n
                blocks += 1
                kinds.update(counts)
                if size >= target:
                    break
            pool.terminate()
        manifest: dict[str, object] = {
            "version": VERSION,
            "generator": generator_digest(),
            "seed": SEED,
            "bytes": size,
            "lines": lines,
            "blocks": blocks,
            "kinds": dict(sorted(kinds.items())),
            "build_s": round(time.perf_counter() - started, 1),
        }
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    meta = _manifest_path(path)
    meta_tmp = meta.with_name(f".{meta.name}.{os.getpid()}.tmp")
    meta_tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(meta_tmp, meta)
    return manifest


def _manifest_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def ensure(
    path: Path | None = None, target: int = TARGET_BYTES, force: bool = False
) -> tuple[Path, dict[str, object]]:
    """The cached corpus and its manifest, built first when missing, of the wrong size or stale."""
    path = path or corpus_path()
    meta = _manifest_path(path)
    if not force and path.exists() and meta.exists():
        try:
            manifest = json.loads(meta.read_text())
        except (OSError, ValueError):
            manifest = {}
        same = manifest.get("version") == VERSION and manifest.get("generator") == generator_digest()
        if same and manifest.get("bytes") == path.stat().st_size >= target:
            return path, manifest
    print(f"building the extraction corpus at {path} (one time; about a minute per GiB) ...", file=sys.stderr)
    manifest = build(path, target)
    print(
        f"corpus: {manifest['bytes']:,} bytes, {manifest['lines']:,} lines in {manifest['build_s']} s",
        file=sys.stderr,
    )
    return path, manifest


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--force", action="store_true", help="rebuild even when the cached corpus is right")
    parser.add_argument("--bytes", type=int, default=TARGET_BYTES, help="target size (default 1 GiB)")
    parser.add_argument("--out", type=Path, default=None, help="write here instead of the cache")
    args = parser.parse_args()
    path, manifest = ensure(args.out, args.bytes, args.force)
    print(json.dumps({"path": str(path), "bytes": manifest["bytes"], "lines": manifest["lines"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
