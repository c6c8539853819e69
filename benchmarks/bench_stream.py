"""``make bench-stream``: one Faust worker process, end to end on the local broker.

In one run, on one fresh set of topics (``bench<time>.*``):

(a) **events/s end to end.** ``raw.logs`` is pre-loaded with a realistic simulator mix before
    the worker starts: Slurm allocation lines for ``--jobs`` concurrent jobs spread over
    ``--nodes`` nodes, healthy background traffic of those jobs (launcher banners, NCCL INFO,
    iteration lines, checkpoints, kernel noise: ``simulator.background_records``) and
    ``--faults`` fault scenarios (``simulator.generate``, the scoreboard's profile) mixed in.
    The clock runs from the worker's "Ready" to the moment its consumer group has committed
    every offset of ``raw.logs`` and of the topics the stages feed each other
    (``signals.node``, ``topology.node``, ``signals.job``, ``incidents``): everything read was
    processed and every incident it caused was decided on.
(b) **raw consume rate.** A bare confluent-kafka consumer reads the same ``raw.logs`` from the
    start (batches of 1,000, values touched, nothing parsed), ``--raw-reads`` times (3): the best
    read is the ceiling (a) is compared with. Until 2026-12-02 this read stalled for whole seconds
    (librdkafka's 1 s ``fetch.queue.backoff.ms`` once a partition's local queue was full, and
    ``consume()`` waiting out its timeout for a last batch it could not fill), so the rows before
    then show 92-238 k/s where the topic reads at 1.1-1.3 M/s: their ratios are not comparable.
(c) **incident latency at a sustained rate.** With the worker still running and its state
    loaded, more background traffic and ``--latency-faults`` new fault scenarios are produced
    paced at ``--rate`` events/s for ``--seconds``; for each fault, the time from sending its
    decisive record to seeing its job's first incident with the right category.
(d) **RSS** of the worker (VmRSS, and the peak VmHWM) after (c), holding the state of
    ``--nodes`` nodes and ``--jobs`` jobs (node → jobs, job topology, incident windows).

"The worker" is the worker process and the processes it starts (its extract process,
``streams/extract/process.py``): CPU seconds and RSS are summed over all of them. With the local
stack's broker, (a) also prints the broker's CPU seconds (``broker_cpu_s``): on two cores, what the
broker takes is what the worker's processes do not get.

The last line printed is one JSON object: ``events_per_s``, ``raw_consume_per_s``, ``ratio``
(a / b), ``latency_p50_s``, ``latency_p99_s``, ``rss_mb`` (plus a few context fields). A row
goes to benchmarks/RESULTS.md with the machine and date.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.machine import append_row, describe, today
from connectors.sources.simulator import SCENARIOS, SimOptions, background_records, generate
from connectors.sources.simulator.output import iter_records
from connectors.sources.simulator.shippers import Shipping
from schemas import codec
from schemas.topics import extract_group
from streams.settings import REPO_ROOT, Settings

SECTION = "Streaming worker (`make bench-stream`)"
HEADER = (
    "| date | machine | records (a) | end-to-end events/s (a) | events per worker CPU-s (a) "
    "| raw consume/s (b) | ratio | paced rate (c) "
    "| achieved | latency p50 s | latency p99 s | faults seen (c) | RSS MB (peak) | state | notes |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)
# The scoreboard's profile: jobs of 2-4 nodes, a few minutes of training before the fault.
FAULT_OPTIONS = SimOptions(
    telemetry_every_s=0.0, max_nodes=4, pre_fault_min_s=60.0, pre_fault_max_s=120.0, k8s_share=0.0
)
# Faults whose verdict is a decisive line (timer-driven verdicts would measure the timers).
FAULT_TYPES = [
    "xid79_fallen_off_bus",
    "xid48_ecc_dbe",
    "xid95_uncontained_ecc",
    "nvlink_xid74",
    "app_cuda_oom",
    "app_shape_mismatch",
    "infra_enospc_checkpoint",
]
NODES_PER_JOB = 10


@dataclass
class Fault:
    job_id: str
    category: str
    records: list[tuple[bytes, bytes, bool]]  # key, value, decisive
    scenario: str = ""


@dataclass
class Mix:
    records: list[tuple[bytes, bytes]] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)


def _alloc_line(job: str, nodes: str, at: datetime) -> bytes:
    ts = at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}"
    return f"[{ts}] sched: Allocate JobId={job} NodeList={nodes} #CPUs=80 Partition=gpu".encode()


def fleet_jobs(jobs: int, nodes: int) -> list[tuple[str, list[str]]]:
    per = max(1, nodes // jobs)
    return [(str(900_000 + j), [f"bn{(j * per + k) % nodes:05d}" for k in range(per)]) for j in range(jobs)]


def build_mix(
    fleet: list[tuple[str, list[str]]],
    t0: datetime,
    seconds: float,
    faults: int,
    fault_base: int,
    allocate: bool,
) -> Mix:
    """Background traffic of every fleet job over ``seconds`` plus ``faults`` fault scenarios,
    interleaved the way many shippers' records meet on one topic."""
    mix = Mix()
    if allocate:
        for job, nodes in fleet:
            first, last = nodes[0], nodes[-1]
            hl = f"bn[{first[2:]}-{last[2:]}]" if len(nodes) > 1 else first
            mix.records.append((b"slurmctl01", _alloc_line(job, hl, t0)))
    streams: list[list[tuple[bytes, bytes]]] = []
    for i, (job, nodes) in enumerate(fleet):
        healthy = background_records(fault_base + i, nodes, job, seconds, t0=t0 + timedelta(seconds=1))
        streams.append([(nodes[i % len(nodes)].encode(), v) for v in healthy])
    for k in range(faults):
        name = FAULT_TYPES[k % len(FAULT_TYPES)]
        index = fault_base + k
        sc = generate(
            name,
            index,
            t0=t0 - timedelta(minutes=3),
            options=FAULT_OPTIONS,
            node_base=100_000 + index * 8 * 3 * SCENARIOS[name].node_sets,
            job_number=500_000 + index,
        )
        recs = [(r.key, r.value, r.decisive) for r in iter_records(sc.events, Shipping(index))]
        mix.faults.append(Fault(sc.truth.job_id, sc.truth.category.value, recs, name))
        streams.append([(key, value) for key, value, _ in recs])
    # round-robin across the per-job streams (each stays in its own order)
    longest = max((len(s) for s in streams), default=0)
    for n in range(longest):
        for s in streams:
            if n < len(s):
                mix.records.append(s[n])
    return mix


# -- the worker ------------------------------------------------------------------------------------


# The worker as `sickbay worker` runs it, plus Faust setting overrides for A/B runs (--faust).
WORKER = """
import json, sys
from streams.app import create_app, tune_the_gc
from streams.pipeline import build
from streams.settings import Settings
settings = Settings()
app = create_app(settings, **json.loads(sys.argv[1]))
build(app, settings)
tune_the_gc()
sys.argv = ["sickbay-worker", "worker", "-l", "info", "--without-web"]
app.main()
"""


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of one process (``/proc/<pid>/stat``), or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


class Worker:
    def __init__(self, env: dict[str, str], log: Path, overrides: dict[str, Any]) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, json.dumps(overrides)],
            env=env,
            cwd=REPO_ROOT,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if "Worker]: Ready" in self.log.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)
        raise RuntimeError("worker not ready")

    def pids(self) -> list[int]:
        """The worker and every process under it (its extract process, multiprocessing's helper)."""
        found, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            for task in Path(f"/proc/{pid}/task").glob("*/children"):
                try:
                    todo.extend(int(c) for c in task.read_text().split())
                except OSError:  # the process ended between the listing and the read
                    continue
        return found

    def cpu_s(self) -> float:
        """User + system CPU seconds the worker's processes have used (robust to other load on the box)."""
        return sum(self.cpu_by_process().values())

    def cpu_by_process(self) -> dict[int, float]:
        """CPU seconds per process of the worker (the worker's own pid first)."""
        out: dict[int, float] = {}
        for pid in self.pids():
            if (cpu := process_cpu_s(pid)) is not None:  # None: it ended between the listing and the read
                out[pid] = cpu
        return out

    def rss_mb(self) -> tuple[float, float]:
        """VmRSS and VmHWM summed over the worker's processes (the peak: each process's own peak)."""
        fields: dict[str, float] = {"VmRSS": 0.0, "VmHWM": 0.0}
        for pid in self.pids():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                name, _, value = line.partition(":")
                if name in fields:
                    fields[name] += int(value.split()[0]) / 1024
        return fields["VmRSS"], fields["VmHWM"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


# -- Kafka helpers -------------------------------------------------------------------------------------


def _producer(bootstrap: str) -> Any:
    from confluent_kafka import Producer

    from connectors.kafka import producer_config

    conf = producer_config(bootstrap, "bench-stream", linger_ms=50)
    conf.update({"queue.buffering.max.messages": 1_000_000, "batch.size": 1_000_000})
    return Producer(conf)


def produce_all(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    p = _producer(bootstrap)
    for key, value in records:
        while True:
            try:
                p.produce(topic, value, key)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    if p.flush(120) != 0:
        raise RuntimeError("raw.logs pre-load was not fully delivered")


def _end_offsets(bootstrap: str, topics: list[str], partitions: int) -> dict[tuple[str, int], int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    out = {}
    for t in topics:
        for p in range(partitions):
            out[(t, p)] = c.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
    c.close()
    return out


def wait_caught_up(
    bootstrap: str,
    owners: dict[str, str],
    topics: list[str],
    partitions: int,
    timeout_s: float,
    hops: list[float] | None = None,
) -> float:
    """Wait until the worker has committed everything the input caused; return time.monotonic() then.

    ``owners`` names the consumer group that reads each topic (the batched extract stage has its
    own group for ``raw.logs``). Round 1: every offset of the first topic (the input) is committed.
    Each further round snapshots the ends of the downstream topics and waits until their groups
    committed up to the snapshot: one round per hop (raw → node → job → incidents). A fixed target,
    because the detectors' timers keep adding a trickle of their own records (hang checks) that
    never stops. ``hops`` gets the time each round ended.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumers = {
        g: Consumer({"bootstrap.servers": bootstrap, "group.id": g, "enable.auto.commit": False})
        for g in set(owners.values())
    }
    deadline = time.monotonic() + timeout_s
    try:
        for hop in range(len(topics)):
            targets = _end_offsets(bootstrap, topics[: 1 if hop == 0 else len(topics)], partitions)
            while True:
                done = True
                for group, c in consumers.items():
                    mine = [TopicPartition(t, p) for t, p in targets if owners[t] == group]
                    if not mine:
                        continue
                    committed = c.committed(mine, timeout=10)
                    done = done and all(
                        tp.offset >= targets[(tp.topic, tp.partition)]
                        for tp in committed
                        if targets[(tp.topic, tp.partition)]
                    )
                if done:
                    if hops is not None:
                        hops.append(time.monotonic())
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the worker did not catch up within {timeout_s:.0f}s")
                time.sleep(0.2)
        return time.monotonic()
    finally:
        for c in consumers.values():
            c.close()


def raw_consume_rate(bootstrap: str, topic: str, expected: int) -> float:
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-raw-{time.time_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
            # librdkafka (>= 2.4) waits this long before fetching a partition again once its local
            # queue was full; at the default (1 s) a reader this fast sat idle for a second near the
            # end of most reads, and the stall was read as the broker's speed
            "fetch.queue.backoff.ms": 10,
        }
    )
    c.subscribe([topic])
    n, size = 0, 0
    t0: float | None = None
    t_last = 0.0
    deadline = time.monotonic() + 300
    while n < expected and time.monotonic() < deadline:
        # never ask for more than is left: consume() waits out its timeout for a batch it cannot
        # fill, and that wait (1 s a time) was read as a slow broker (reads of 93k, 134k, 238k/s)
        batch = c.consume(min(1000, expected - n), 1.0)
        if batch and t0 is None:
            t0 = time.monotonic()  # from the first batch: the group join is not reading
        for m in batch:
            if m.error() is None:
                n += 1
                size += len(m.value() or b"")
        t_last = time.monotonic()
    elapsed = t_last - (t0 or t_last)
    c.close()
    return n / elapsed if elapsed > 0 else 0.0


class IncidentReader(threading.Thread):
    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-inc-{time.time_ns()}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([topic])
        self.first: dict[tuple[str, str], float] = {}  # (job, category) -> wall time first seen
        self.count = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            # poll() returns with the first incident; consume(500, 0.1) waited out its timeout for a
            # batch it could not fill, and that wait (up to 0.1 s) was counted as the worker's latency
            first = self.consumer.poll(0.1)
            batch = [] if first is None else [first, *self.consumer.consume(499, 0)]
            for m in batch:
                value = m.value()
                if m.error() is not None or value is None:
                    continue
                now = time.time()
                inc = codec.loads(value)
                self.count += 1
                self.first.setdefault((str(inc.get("job_id")), str(inc.get("category"))), now)
        self.consumer.close()


def paced(bootstrap: str, topic: str, mix: Mix, rate: float) -> tuple[dict[str, float], float]:
    """Produce ``mix`` at ``rate`` records/s; return each fault's decisive send time and the rate achieved."""
    decisive: dict[tuple[bytes, bytes], str] = {}
    for f in mix.faults:
        for k, v, d in f.records:
            if d:
                decisive.setdefault((k, v), f.job_id)
    p = _producer(bootstrap)
    p2: dict[str, float] = {}
    step = 0.01
    per_step = max(1, int(rate * step))
    t0 = time.monotonic()
    recs = mix.records
    for i in range(0, len(recs), per_step):
        target = t0 + (i / per_step) * step
        while (now := time.monotonic()) < target:
            p.poll(min(0.002, target - now))
        for key, value in recs[i : i + per_step]:
            while True:
                try:
                    p.produce(topic, value, key)
                    break
                except BufferError:
                    p.poll(0.01)
            job = decisive.get((key, value))
            if job is not None:
                p2.setdefault(job, time.time())
        p.poll(0)
    elapsed = time.monotonic() - t0
    p.flush(60)
    return p2, len(recs) / elapsed if elapsed > 0 else 0.0


def broker_cpu_s() -> float | None:
    """CPU seconds of the local stack's broker (``deploy/local/kafka.sh``'s pid file), or None for a
    broker elsewhere: on two cores the broker's share is what the worker's processes do not get."""
    stack = Path(os.environ.get("SICKBAY_STACK_DIR", REPO_ROOT / ".cache" / "stack"))
    try:
        pid = int((stack / "kafka" / "run" / "kafka.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return process_cpu_s(pid)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> int:  # noqa: PLR0915 - one run, phases in order
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000, help="concurrent jobs of state")
    parser.add_argument("--nodes", type=int, default=10_000, help="nodes of state")
    parser.add_argument("--background-s", type=float, default=240, help="seconds of background per job (a)")
    parser.add_argument("--faults", type=int, default=70, help="fault scenarios in the pre-load (a)")
    parser.add_argument("--rate", type=float, default=10_000, help="paced events/s for (c)")
    parser.add_argument("--seconds", type=float, default=20, help="duration of (c)")
    parser.add_argument("--latency-faults", type=int, default=35, help="fault scenarios in (c)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--raw-reads", type=int, default=3, help="bare-consumer reads of (b); the best is the ratio's base"
    )
    parser.add_argument(
        "--extract-stage",
        choices=["batched", "agent"],
        default="batched",
        help="raw.logs → signals: the batched confluent-kafka stage (default) or the Faust agent (A/B)",
    )
    parser.add_argument(
        "--extract-thread",
        action="store_true",
        help="run the batched stage in a thread of the worker, not its own process (A/B)",
    )
    parser.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    parser.add_argument("--keep-topics", action="store_true", help="leave the run's topics on the broker")
    parser.add_argument(
        "--faust", action="append", default=[], metavar="KEY=JSON", help="Faust setting override (A/B runs)"
    )
    parser.add_argument("--note", default="", help="free text for the RESULTS.md row")
    args = parser.parse_args()
    if args.raw_reads < 1:
        parser.error("--raw-reads must be at least 1")
    # a SIGTERM (a CI timeout, kill) unwinds through the finally blocks: the worker is stopped and the
    # run's topics are dropped instead of a worker left running on its own
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    from connectors.kafka import delete_topics, ensure_topics, wait_for_broker

    base = Settings()
    bootstrap = base.kafka_bootstrap
    try:
        wait_for_broker(bootstrap, 20)
    except Exception as exc:
        print(f"no Kafka at {bootstrap} ({exc}); start it with `make kafka-up`", file=sys.stderr)
        return 2
    run = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    prefix = f"bench{run}"
    settings = Settings(topic_prefix=prefix, app_id=prefix, partitions=args.partitions)
    cat = settings.topics
    ensure_topics(bootstrap, cat.all())

    t_gen = time.monotonic()
    fleet = fleet_jobs(args.jobs, args.nodes)
    now = datetime.now(UTC)
    pre = build_mix(
        fleet, now - timedelta(seconds=args.background_s + 60), args.background_s, args.faults, 0, True
    )
    per_s_jobs = max(1, args.jobs)
    live_seconds = max(1.0, args.rate * args.seconds / per_s_jobs / 0.33)  # ~0.33 records/s per job
    live = build_mix(fleet, now, live_seconds, args.latency_faults, 10_000, False)
    target = int(args.rate * args.seconds)
    if len(live.records) > target:  # keep every fault record, thin the background to the budget
        fault_recs = {(k, v) for f in live.faults for k, v, _ in f.records}
        keep = target - len(fault_recs)
        out: list[tuple[bytes, bytes]] = []
        for r in live.records:
            if r in fault_recs:
                out.append(r)
            elif keep > 0:
                out.append(r)
                keep -= 1
        live.records = out
    print(
        f"generated {len(pre.records)} pre-load records ({len(pre.faults)} faults) and "
        f"{len(live.records)} paced records ({len(live.faults)} faults) in {time.monotonic() - t_gen:.1f}s",
        file=sys.stderr,
    )
    produce_all(bootstrap, cat.raw_logs.name, pre.records)

    workdir = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    env = {
        **os.environ,
        "SICKBAY_TOPIC_PREFIX": prefix,
        "SICKBAY_APP_ID": prefix,
        "SICKBAY_PARTITIONS": str(args.partitions),
        "SICKBAY_STATE_DIR": str(workdir),
        "SICKBAY_MODE": "observe",
        "SICKBAY_EXTRACT_STAGE": args.extract_stage,
        "SICKBAY_EXTRACT_PROCESS": "false" if args.extract_thread else "true",
    }
    # (b) first: the same bytes, a bare consumer, nothing else running. The best of a few reads: one
    # read swings 2x from minute to minute on these machines (92-233 k/s seen), and the ceiling is what
    # the worker is compared with, not a slow minute of the bare consumer.
    raw_reads = [
        raw_consume_rate(bootstrap, cat.raw_logs.name, len(pre.records)) for _ in range(args.raw_reads)
    ]
    raw_rate = max(raw_reads)
    print(
        f"(b) raw confluent-kafka consume: {raw_rate:,.0f} records/s "
        f"(best of {len(raw_reads)}: {', '.join(f'{r:,.0f}' for r in raw_reads)})",
        file=sys.stderr,
    )

    overrides = {k: json.loads(v) for k, _, v in (o.partition("=") for o in args.faust)}
    worker = Worker(env, workdir / "worker.log", overrides)
    reader = IncidentReader(bootstrap, cat.incidents.name)
    try:
        worker.wait_ready()
        t_ready, cpu_ready, by_process = time.monotonic(), worker.cpu_s(), worker.cpu_by_process()
        broker_ready = broker_cpu_s()
        reader.start()
        stages = [
            cat.raw_logs.name,
            cat.signals_node.name,
            cat.topology_node.name,
            cat.signals_job.name,
            cat.incidents.name,
        ]
        owners = dict.fromkeys(stages, prefix)
        if args.extract_stage == "batched":
            owners[cat.raw_logs.name] = extract_group(settings.app_id)
        hops: list[float] = []
        t_done = wait_caught_up(bootstrap, owners, stages, args.partitions, 1800, hops)
        cpu_a = worker.cpu_s() - cpu_ready
        broker_now = broker_cpu_s()
        broker_a = broker_now - broker_ready if broker_now is not None and broker_ready is not None else None
        e2e = len(pre.records) / (t_done - t_ready)
        seen_a = sum(1 for f in pre.faults if any(j == f.job_id for j, _ in reader.first))
        print(
            f"(a) end to end: {len(pre.records)} records in {t_done - t_ready:.1f}s = {e2e:,.0f} events/s; "
            f"{seen_a}/{len(pre.faults)} fault jobs got an incident; worker CPU {cpu_a:.1f}s = "
            f"{len(pre.records) / cpu_a:,.0f} events per CPU-second",
            file=sys.stderr,
        )
        spent = [(pid, t - by_process.get(pid, 0.0)) for pid, t in worker.cpu_by_process().items()]
        print(
            "(a) CPU by process: "
            + ", ".join(f"{'worker' if pid == worker.proc.pid else pid} {t:.1f}s" for pid, t in spent)
            + (f"; the local broker {broker_a:.1f}s" if broker_a is not None else ""),
            file=sys.stderr,
        )
        print(
            "(a) caught up: raw.logs read and committed at "
            + ", then ".join(f"{t - t_ready:.1f}s" for t in hops)
            + " (one round per hop downstream)",
            file=sys.stderr,
        )
        # (c) paced
        sent_at, achieved = paced(bootstrap, cat.raw_logs.name, live, args.rate)
        wait_caught_up(bootstrap, owners, stages, args.partitions, 600)
        time.sleep(2)
        latencies = []
        slowest: list[tuple[float, str]] = []
        for f in live.faults:
            seen = reader.first.get((f.job_id, f.category))
            if seen is not None and f.job_id in sent_at:
                latencies.append(max(0.0, seen - sent_at[f.job_id]))
                slowest.append((latencies[-1], f"{f.scenario} job {f.job_id}"))
        slowest.sort(reverse=True)
        print("(c) slowest: " + "; ".join(f"{s:.2f}s {what}" for s, what in slowest[:5]), file=sys.stderr)
        rss, hwm = worker.rss_mb()
        print(
            f"(c) paced at {args.rate:,.0f}/s (achieved {achieved:,.0f}/s): "
            f"{len(latencies)}/{len(live.faults)} faults with the right incident; "
            f"(d) RSS {rss:.0f} MB (peak {hwm:.0f} MB)",
            file=sys.stderr,
        )
    finally:
        reader.stopping.set()
        worker.stop()
        if not args.keep_topics:
            delete_topics(bootstrap, [t.name for t in cat.all()])
    p50, p99 = _pct(latencies, 0.5), _pct(latencies, 0.99)
    result = {
        "events_per_s": round(e2e),
        "raw_consume_per_s": round(raw_rate),
        "raw_consume_reads": [round(r) for r in raw_reads],
        "ratio": round(e2e / raw_rate, 4) if raw_rate else None,
        "latency_p50_s": round(p50, 3) if p50 is not None else None,
        "latency_p99_s": round(p99, 3) if p99 is not None else None,
        "rss_mb": round(rss),
        "rss_peak_mb": round(hwm),
        "events_per_cpu_s": round(len(pre.records) / cpu_a),
        "broker_cpu_s": round(broker_a, 1) if broker_a is not None else None,
        "records": len(pre.records),
        "paced_rate": args.rate,
        "paced_achieved": round(achieved),
        "latency_faults_seen": f"{len(latencies)}/{len(live.faults)}",
        "state": f"{args.nodes} nodes, {args.jobs} jobs",
        "extract_stage": args.extract_stage,
        "extract_in": "thread" if args.extract_thread or args.extract_stage == "agent" else "process",
    }
    if not args.no_record:
        append_row(
            SECTION,
            HEADER,
            f"| {today()} | {describe()} | {len(pre.records):,} | {e2e:,.0f} | "
            f"{result['events_per_cpu_s']:,} | {raw_rate:,.0f} | "
            f"{result['ratio']} | {args.rate:,.0f} | {achieved:,.0f} | {result['latency_p50_s']} | "
            f"{result['latency_p99_s']} | {result['latency_faults_seen']} | {rss:.0f} ({hwm:.0f}) | "
            f"{result['state']} | {args.note} |",
        )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
