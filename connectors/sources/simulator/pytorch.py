"""What PyTorch, NCCL, CUDA and torchelastic print (failure-signatures.md §4.1-4.5, §5).

Forms vary by version the way the reference quotes them: the old watchdog line without
``NumelIn``, the 2.x glog prefix ``[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629]``,
torchrun's ``[rankN]:`` prefix, and the ``[PG ID 0 PG GUID 0(default_pg) Rank N]`` form.
"""

from __future__ import annotations

from datetime import datetime

from connectors.sources.simulator.fleet import Job, Node, Rank
from connectors.sources.simulator.rand import Rng

OPS = ("ALLREDUCE", "ALLREDUCE", "ALLREDUCE", "ALLGATHER", "REDUCE_SCATTER", "BROADCAST", "_ALLGATHER_BASE")


def glog(t: datetime, level: str = "E") -> str:
    return f"{level}{t:%m%d %H:%M:%S}.{t.microsecond * 1000 + (t.microsecond % 997):09d}"


def _pg(job: Job, rank: int) -> str:
    if job.torch == "2.6":
        return f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
    if job.torch == "2.4":
        return f"[PG 0 (default_pg) Rank {rank}]"
    return f"[PG 0 Rank {rank}]"


def _src(job: Job, t: datetime, line: int) -> str:
    """``[E ProcessGroupNCCL.cpp:475]`` (older) or ``[E1129 03:10:00.426415540 ProcessGroupNCCL.cpp:629]``."""
    if job.torch in ("1.13", "2.1"):
        return f"[E ProcessGroupNCCL.cpp:{line}]"
    return f"[{glog(t)} ProcessGroupNCCL.cpp:{line}]"


def work(job: Job, seq: int, op: str, numel: int) -> str:
    if job.torch == "1.13":
        return f"WorkNCCL(SeqNum={seq}, OpType={op}, Timeout(ms)={job.timeout_ms})"
    return (
        f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, "
        f"Timeout(ms)={job.timeout_ms})"
    )


def watchdog_timeout(job: Job, rank: int, t: datetime, seq: int, op: str, numel: int, ran_ms: int) -> str:
    lines = {"1.13": 458, "2.1": 475, "2.4": 607, "2.6": 632}
    who = f"[Rank {rank}]" if job.torch != "2.6" else _pg(job, rank)
    return (
        f"{_src(job, t, lines[job.torch])} {who} Watchdog caught collective operation timeout: "
        f"{work(job, seq, op, numel)} ran for {ran_ms} milliseconds before timing out."
    )


def watchdog_followups(job: Job, rank: int, t: datetime, seq: int, full: bool, rng: Rng) -> list[str]:
    """The lines that follow a watchdog timeout on one rank; ``full`` adds the fatal teardown."""
    out: list[str] = []
    if job.torch in ("2.4", "2.6"):
        out.append(
            f"{_src(job, t, 1664)} {_pg(job, rank)} Exception (either an error or timeout) detected by "
            f"watchdog at work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}."
        )
    who = f"[Rank {rank}] " if job.torch in ("2.4", "2.6") else ""
    out.append(
        f"{_src(job, t, 621 if job.torch != '2.1' else 489)} {who}Some NCCL operations have failed or timed "
        "out. "
        "Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data."
    )
    out.append(
        f"{_src(job, t, 627 if job.torch != '2.1' else 495)} {who}To avoid data inconsistency, we are taking "
        "the entire process down."
    )
    if not full:
        return out
    if job.torch in ("1.13", "2.1"):
        msg = f"[Rank {rank}] NCCL watchdog thread terminated with exception: [Rank {rank}] Watchdog caught"
        out += [
            f"[E ProcessGroupNCCL.cpp:915] {msg} collective operation timeout: see above",
            "terminate called after throwing an instance of 'std::runtime_error'",
            f"  what():  {msg} collective operation timeout",
        ]
    else:
        out += [
            f"{_src(job, t, 1478)} {_pg(job, rank)} Process group watchdog thread terminated with exception: "
            f"[Rank {rank}] Watchdog caught collective operation timeout",
            "terminate called after throwing an instance of 'c10::DistBackendError'",
            f"  what():  {_pg(job, rank)} Process group watchdog thread terminated with exception",
            "Exception raised from ncclCommWatchdog at "
            "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1521 "
            "(most recent call first):",
            f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x{rng.hexstr(12)} in "
            "/usr/local/lib/python3.10/dist-packages/torch/lib/libc10.so)",
            f"frame #1: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x{rng.hexstr(3)} (0x{rng.hexstr(12)} "
            "in "
            "/usr/local/lib/python3.10/dist-packages/torch/lib/libtorch_cuda.so)",
        ]
    return out


def async_remote_error(
    job: Job, rank: int, t: datetime, seq: int, op: str, numel: int, peer: str
) -> list[str]:
    """A collective that failed because a peer died or the network broke (§4.3)."""
    return [
        f"{_src(job, t, 552)} [Rank {rank}] Collective {work(job, seq, op, numel)} raised the following "
        "async "
        "exception: NCCL error: remote process exited or there was a network error, NCCL version "
        f"{job.nccl_version}",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
        "prematurely.",
        "Last error:",
        f"socketProgress: Connection closed by remote peer {peer}",
    ]


def dist_backend_error(job: Job, what: str, t: datetime, last: str | None) -> list[str]:
    line = {"1.13": 1191, "2.1": 1331, "2.4": 1970, "2.6": 2027}[job.torch]
    out = [
        "torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
        f"{line}, {what}, NCCL version {job.nccl_version}"
    ]
    if last:
        out += ["Last error:", last]
    return out


# -- NCCL debug lines (``host:pid:tid [cudaDev] NCCL INFO|WARN msg``, §4.2) -----------------------


def nccl(node: str, r: Rank, level: str, msg: str, where: str | None = None) -> str:
    loc = f" {where}" if where else ""
    return f"{node}:{r.pid}:{r.tid} [{r.local_rank}]{loc} NCCL {level} {msg}"


def nccl_init(job: Job, node: Node, r: Rank, rng: Rng) -> list[str]:
    """A rank's NCCL_DEBUG=INFO start-up lines (a representative subset)."""
    bus = node.gpus[r.gpu].nccl_bus_id
    comm = f"0x{rng.hexstr(12)}"
    comm_id = f"0x{rng.hexstr(16)}"
    lines = [nccl(node.name, r, "INFO", f"Bootstrap : Using {node.ifname}:{node.ip}<0>")]
    if r.rank == 0:
        lines.append(nccl(node.name, r, "INFO", f"NCCL version {job.nccl_version}+cuda{job.cuda}"))
    lines.append(
        rng.choice(
            (
                nccl(
                    node.name,
                    r,
                    "INFO",
                    "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
                ),
                nccl(
                    node.name,
                    r,
                    "INFO",
                    "NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or "
                    "directory No plugin found (libnccl-net.so), using internal implementation",
                ),
            )
        )
    )
    hcas = " ".join(f"[{i}]{h}:1/IB" for i, (h, _) in enumerate(node.hcas[:4]))
    lines.append(nccl(node.name, r, "INFO", f"NET/IB : Using {hcas} ; OOB {node.ifname}:{node.ip}<0>"))
    lines.append(nccl(node.name, r, "INFO", "Using network IB"))
    lines.append(
        nccl(
            node.name,
            r,
            "INFO",
            f"comm {comm} rank {r.rank} nranks {job.world} cudaDev {r.local_rank} nvmlDev {r.gpu} busId "
            f"{bus} "
            f"commId {comm_id} - Init START",
        )
    )
    if r.local_rank == 0:
        ring = " ".join(str(x) for x in range(min(job.world, 16)))
        lines.append(nccl(node.name, r, "INFO", f"Channel 00/32 :    {ring}"))
        peer = (r.rank + 8) % job.world
        lines.append(
            nccl(
                node.name,
                r,
                "INFO",
                f"Channel 00/0 : {peer}[{bus}] -> {r.rank}[{bus}] [receive] via NET/IB/0",
            )
        )
    lines.append(nccl(node.name, r, "INFO", "Connected all rings"))
    lines.append(
        nccl(
            node.name,
            r,
            "INFO",
            f"comm {comm} rank {r.rank} nranks {job.world} cudaDev {r.local_rank} nvmlDev {r.gpu} busId "
            f"{bus} "
            f"commId {comm_id} - Init COMPLETE",
        )
    )
    return lines


def nccl_chatter(node: Node, r: Rank, rng: Rng) -> str:
    """Benign INFO/WARN lines a running job prints with NCCL_DEBUG=INFO."""
    return rng.choice(
        (
            nccl(node.name, r, "INFO", f"NCCL_SOCKET_IFNAME set by environment to {node.ifname}"),
            nccl(node.name, r, "INFO", "NCCL_IB_DISABLE set by environment to 0."),
            nccl(node.name, r, "INFO", "Using non-device net plugin version 0"),
            nccl(
                node.name,
                r,
                "INFO",
                f"Ring 0{rng.randint(0, 7)} : {r.rank}[{node.gpus[r.gpu].nccl_bus_id}] -> "
                f"{r.rank + 1}[{node.gpus[(r.gpu + 1) % 8].nccl_bus_id}] via P2P/IPC",
            ),
            nccl(
                node.name,
                r,
                "INFO",
                f"comm 0x{rng.hexstr(12)} rank {r.rank} nranks 8 cudaDev {r.local_rank} "
                f"busId {node.gpus[r.gpu].nccl_bus_id} - Destroy COMPLETE",
            ),
            nccl(
                node.name,
                r,
                "WARN",
                f"Could not find real path of /sys/class/pci_bus/0000:{node.gpus[r.gpu].bus}/../../"
                f"0000:{node.gpus[r.gpu].bus}:00.0",
                "misc/utils.cc:87",
            ),
            nccl(
                node.name,
                r,
                "INFO",
                f"Channel {rng.randint(0, 31):02d}/{rng.choice((16, 32))} : "
                f"{r.rank}[{node.gpus[r.gpu].nccl_bus_id}] -> "
                f"{r.rank + 1}[{node.gpus[(r.gpu + 1) % 8].nccl_bus_id}] "
                "via P2P/CUMEM/read",
            ),
        )
    )


def ib_completion_error(node: str, r: Rank, peer_ip: str, rng: Rng, status: int = 12) -> str:
    vendor = 129 if status == 12 else 244
    return nccl(
        node,
        r,
        "WARN",
        f"NET/IB : Got completion from peer {peer_ip}<{rng.randint(30000, 60000)}> with error {status}, "
        f"opcode {rng.choice((0, 1, 48))}, len {rng.choice((0, 32764, 4096))}, vendor err {vendor} (Recv)",
        f"transport/net_ib.cc:{rng.choice((1296, 881, 1353))}",
    )


# -- Python exceptions --------------------------------------------------------------------------


def traceback(frames: list[tuple[str, int, str, str]], final: str) -> list[str]:
    out = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        out += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
    out.append(final)
    return out


def train_frames(job: Job, rng: Rng) -> list[tuple[str, int, str, str]]:
    site = rng.choice(("/usr/local/lib/python3.10/dist-packages", "/opt/conda/lib/python3.11/site-packages"))
    if job.framework == "megatron":
        return [
            (f"{job.workdir}/pretrain_gpt.py", 247, "<module>", "pretrain("),
            (
                "/opt/megatron-lm/megatron/training/training.py",
                395,
                "pretrain",
                "iteration, num_floating_point_operations_so_far = train(",
            ),
            (
                "/opt/megatron-lm/megatron/training/training.py",
                1411,
                "train",
                "train_step(forward_step_func,",
            ),
        ]
    if job.framework in ("nemo", "lightning"):
        return [
            (f"{job.workdir}/train.py", 88, "main", "trainer.fit(model)"),
            (f"{site}/lightning/pytorch/trainer/trainer.py", 538, "fit", "call._call_and_handle_interrupt("),
            (f"{site}/lightning/pytorch/loops/fit_loop.py", 216, "run", "self.advance()"),
        ]
    if job.framework == "hf":
        return [
            (
                f"{job.workdir}/run_clm.py",
                612,
                "main",
                "train_result = trainer.train(resume_from_checkpoint=checkpoint)",
            ),
            (f"{site}/transformers/trainer.py", 2052, "train", "return inner_training_loop("),
            (
                f"{site}/transformers/trainer.py",
                2388,
                "_inner_training_loop",
                "tr_loss_step = self.training_step(model, inputs)",
            ),
        ]
    return [
        (f"{job.workdir}/train.py", 104, "main", "train()"),
        (f"{site}/training_telemetry/context.py", 52, "timed_span", "yield span"),
        (f"{job.workdir}/train.py", 123, "train", "loss = model(batch)"),
    ]


def cuda_advice() -> list[str]:
    return [
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    ]


def cuda_error(job: Job, message: str) -> str:
    cls = "torch.AcceleratorError" if job.torch == "2.6" else "RuntimeError"
    return f"{cls}: CUDA error: {message}"


def cuda_oom(job: Job, gpu: int, rng: Rng) -> str:
    tried = rng.choice(("146.00 MiB", "2.00 GiB", "1.53 GiB", "512.00 MiB", "8.00 GiB", "388.00 MiB"))
    total = rng.choice(("79.11", "79.33", "139.81", "31.74"))
    free = rng.choice(("0 bytes", "95.75 MiB", "1.02 GiB", "13.06 MiB"))
    if job.torch == "1.13":
        return (
            f"RuntimeError: CUDA out of memory. Tried to allocate {tried} (GPU {gpu}; {total} GiB total "
            "capacity; "
            f"{rng.randint(60, 75)}.{rng.randint(10, 99)} GiB already allocated; {free} free; "
            f"{rng.randint(70, 78)}.{rng.randint(10, 99)} GiB reserved in total by PyTorch) If reserved "
            "memory is >> "
            "allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for "
            "Memory "
            "Management and PYTORCH_CUDA_ALLOC_CONF"
        )
    cls = "torch.OutOfMemoryError" if job.torch in ("2.4", "2.6") else "torch.cuda.OutOfMemoryError"
    return (
        f"{cls}: CUDA out of memory. Tried to allocate {tried}. GPU {gpu} has a total capacity of {total} "
        "GiB of "
        f"which {free} is free. Including non-PyTorch memory, this process has "
        f"{rng.randint(70, 79)}.{rng.randint(10, 99)} "
        f"GiB memory in use. Of the allocated memory {rng.randint(60, 74)}.{rng.randint(10, 99)} GiB is "
        "allocated by "
        f"PyTorch, and {rng.randint(1, 4)}.{rng.randint(10, 99)} GiB is reserved by PyTorch but unallocated. "
        "If "
        "reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
        "avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


# -- torchelastic (§4.5) ----------------------------------------------------------------------


def child_failed(
    job: Job, t: datetime, failures: list[tuple[Rank, int, str]], script: str = "train.py"
) -> list[str]:
    """The ``ChildFailedError`` block one agent prints: ``failures`` = (rank, exitcode, traceback text)."""
    stamp = f"{t:%Y-%m-%d_%H:%M:%S}"
    out = [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "=" * 60,
        f"{script} FAILED",
        "-" * 60,
        "Failures:",
    ]
    rest = failures[1:]
    if not rest:
        out.append("  <NO_OTHER_FAILURES>")
    for i, (r, code, tb) in enumerate(rest, 1):
        out += _block(i, stamp, r, code, tb)
    out += ["-" * 60, "Root Cause (first observed failure):"]
    r, code, tb = failures[0]
    out += _block(0, stamp, r, code, tb)
    out.append("=" * 60)
    return out


def _block(i: int, stamp: str, r: Rank, code: int, tb: str) -> list[str]:
    return [
        f"[{i}]:",
        f"  time      : {stamp}",
        f"  host      : {r.node}",
        f"  rank      : {r.rank} (local_rank: {r.local_rank})",
        f"  exitcode  : {code} (pid: {r.pid})",
        "  error_file: <N/A>",
        f"  traceback : {tb}",
    ]


def signal_tb(code: int, pid: int) -> str:
    names = {-6: "SIGABRT", -9: "SIGKILL", -11: "SIGSEGV", -15: "SIGTERM"}
    if code < 0:
        return f"Signal {-code} ({names.get(code, 'SIG')}) received by PID {pid}"
    return "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"


def elastic_sigterm(pids: list[int], signum: int = 15) -> list[str]:
    name = {15: "SIGTERM", 1: "SIGHUP", 2: "SIGINT"}[signum]
    out = [
        f"WARNING:torch.distributed.elastic.agent.server.api:Received {signum} death signal, shutting down "
        "workers"
    ]
    out += [
        f"WARNING:torch.distributed.elastic.multiprocessing.api:Sending process {p} closing signal {name}"
        for p in pids
    ]
    return out
