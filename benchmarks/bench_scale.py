"""Scale-out: events/s of 1 → 2 → 4 Faust workers on a 3-broker KRaft cluster (replication factor 3).

For each worker count the benchmark makes fresh topics (its own prefix and app id, so no state
carries over), starts the workers, waits until they have split every partition between them,
then produces a simulator mix (GPU, network and host faults with their healthy surroundings, as
Fluent Bit / Vector / rsyslog ship them) onto ``raw.logs`` at full speed and measures the time
until the workers' consumer group has committed everything on every stream topic
(``raw.logs`` → ``signals.*`` / ``topology.node`` → ``incidents``): end-to-end events/s, not
just extraction.

``make bench-scale`` appends a row to RESULTS.md and prints as its last line
``{"workers_1_eps": ..., "workers_2_eps": ..., "speedup_2": ...}`` (plus ``workers_4_eps``).
The helpers here (cluster control, the mix, worker processes, assignment and lag checks) are
shared with tests/integration/test_scale_out.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from tempfile import TemporaryDirectory

from confluent_kafka import Consumer, KafkaException, TopicPartition

from benchmarks.machine import append_row, describe, today
from benchmarks.scoreboard import scenario_options
from connectors.kafka import ReliableProducer, admin, ensure_topics, wait_for_broker
from connectors.kafka import delete_topics as drop_topics
from connectors.sources.simulator import SimOptions, generate
from connectors.sources.simulator.output import Record, iter_records
from connectors.sources.simulator.shippers import Shipping
from connectors.sources.simulator.truth import GroundTruth
from schemas.topics import TopicCatalog, extract_group
from streams.settings import REPO_ROOT

CLUSTER_SCRIPT = REPO_ROOT / "deploy" / "local" / "kafka-cluster.sh"

# Faults whose root is a decisive line, on Slurm jobs of 2-4 nodes: every scenario ends in exactly
# one incident of its true category whatever the timing (100 % in the streaming scoreboard), so
# the fault test can count them.
MIX_TYPES = (
    "xid48_ecc_dbe",
    "xid64_remap_failure",
    "xid95_uncontained_ecc",
    "nvlink_xid74",
    "app_cuda_oom",
    "app_shape_mismatch",
)
MIX_OPTIONS = SimOptions(
    telemetry_every_s=0.0, max_nodes=4, pre_fault_min_s=60.0, pre_fault_max_s=120.0, k8s_share=0.0
)


# -- the 3-broker cluster ----------------------------------------------------------------------------


class KafkaCluster:
    """deploy/local/kafka-cluster.sh: up, down, and one broker stopped or started for fault tests."""

    def __init__(self) -> None:
        self.was_running = self._run("status").returncode == 0

    @staticmethod
    def _run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(CLUSTER_SCRIPT), *args], capture_output=True, text=True, timeout=600, check=False
        )

    def up(self) -> str:
        done = self._run("up")
        if done.returncode != 0:
            if not self.was_running:  # the brokers that did start must not outlive the failed start
                self._run("down")
            raise RuntimeError(
                f"deploy/local/kafka-cluster.sh up failed (needs Java 17 and the jars kafka.sh caches):\n"
                f"{done.stdout}\n{done.stderr}"
            )
        bootstrap = self._run("bootstrap").stdout.strip()
        wait_for_broker(bootstrap, 60)
        self.wait_brokers(bootstrap, 3)
        return bootstrap

    @staticmethod
    def wait_brokers(bootstrap: str, want: int, timeout_s: float = 90) -> None:
        """Until ``want`` brokers are registered and unfenced: a broker that has just started may not be
        yet, and a replication-factor-3 topic cannot be created without three."""
        client = admin(bootstrap)
        deadline = time.monotonic() + timeout_s
        seen = 0
        while time.monotonic() < deadline:
            with contextlib.suppress(KafkaException):
                seen = len(client.list_topics(timeout=5).brokers)
                if seen >= want:
                    return
            time.sleep(0.5)
        raise RuntimeError(f"only {seen} of {want} brokers registered after {timeout_s:.0f} s")

    def down(self) -> None:
        self._run("down")

    def stop_broker(self, n: int, *, kill: bool = False) -> None:
        done = self._run("stop-broker", str(n), *(["--kill"] if kill else []))
        if done.returncode != 0:
            raise RuntimeError(f"stop-broker {n} failed:\n{done.stdout}\n{done.stderr}")

    def start_broker(self, n: int) -> None:
        done = self._run("start-broker", str(n))
        if done.returncode != 0:
            raise RuntimeError(f"start-broker {n} failed:\n{done.stdout}\n{done.stderr}")
        self.wait_brokers(self._run("bootstrap").stdout.strip(), 3)


# -- the simulator mix -------------------------------------------------------------------------------


@dataclass
class MixScenario:
    truth: GroundTruth
    records: list[Record]
    head: list[Record] = field(default_factory=list)  # up to and including the decisive line
    tail: list[Record] = field(default_factory=list)


def mix(count: int, seed: int, t0: datetime) -> list[MixScenario]:
    """``count`` scenarios cycling through MIX_TYPES, each with its own nodes and job id."""
    out: list[MixScenario] = []
    for i in range(count):
        name = MIX_TYPES[i % len(MIX_TYPES)]
        s = seed + i
        sc = generate(name, s, t0=t0, **{**scenario_options(i, name, s), "options": MIX_OPTIONS})
        recs = list(iter_records(sc.events, Shipping(s)))
        decisive = next((k for k, r in enumerate(recs) if r.decisive), len(recs) - 1)
        out.append(MixScenario(sc.truth, recs, recs[: decisive + 1], recs[decisive + 1 :]))
    return out


def produce(producer: ReliableProducer, topic: str, recs: list[Record]) -> None:
    for rec in recs:
        producer.produce(topic, rec.value, key=rec.key)
    left = producer.flush(60)
    if left or producer.failed:
        raise RuntimeError(f"{left + producer.failed} records not delivered: {producer.last_error}")


# -- workers -----------------------------------------------------------------------------------------


def worker_env(bootstrap: str, prefix: str, partitions: int, replication: int) -> dict[str, str]:
    return {
        **os.environ,
        "SICKBAY_KAFKA_BOOTSTRAP": bootstrap,
        "SICKBAY_TOPIC_PREFIX": prefix,
        "SICKBAY_APP_ID": prefix,
        "SICKBAY_PARTITIONS": str(partitions),
        "SICKBAY_REPLICATION_FACTOR": str(replication),
        "SICKBAY_FAUST_STORE": "rocksdb://",
        "SICKBAY_ROOT_GRACE_S": "2",
        "SICKBAY_MODE": "observe",
    }


class WorkerProc:
    """``sickbay worker`` in its own process group, with its own state dir and log."""

    def __init__(self, name: str, env: dict[str, str], tmp: Path) -> None:
        state = tmp / name
        state.mkdir(parents=True)
        self.name = name
        self.log = tmp / f"{name}.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streams.cli.main", "worker"],
            env={
                **{k: v for k, v in env.items() if k != "CONSUMER_GROUP_INSTANCE_ID"},
                "SICKBAY_STATE_DIR": str(state),
            },
            cwd=REPO_ROOT,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if "Worker]: Ready" in self.text():
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited early:\n{self.text()[-4000:]}")
            time.sleep(0.25)
        raise RuntimeError(f"worker {self.name} not ready in {timeout_s}s:\n{self.text()[-4000:]}")

    def kill(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def assigned(log: str, topic: str) -> set[int] | None:
    """Partitions of ``topic`` in the worker's latest "Setting newly assigned partitions" table
    (Faust's assignor data is not readable through the admin API, so the worker's own account is read)."""
    _, found, block = log.rpartition("Setting newly assigned partitions")
    if not found:
        return None
    for line in block.splitlines()[:60]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 2 and cells[0] == topic:
            parts: set[int] = set()
            for item in cells[1].strip("{}").split(","):
                lo, _, hi = item.strip().partition("-")
                if lo.isdigit():
                    parts.update(range(int(lo), int(hi or lo) + 1))
            return parts
    return set()


def wait_split(workers: list[WorkerProc], topic: str, partitions: int, timeout_s: float) -> list[set[int]]:
    """Wait until ``workers`` hold disjoint, non-empty shares covering all of ``topic``'s partitions."""
    deadline = time.monotonic() + timeout_s
    shares: list[set[int] | None] = []
    while time.monotonic() < deadline:
        shares = [assigned(w.text(), topic) for w in workers]
        done = [s for s in shares if s]
        covered = set().union(*done) if done else set()
        if len(done) == len(workers) and sum(len(s) for s in done) == partitions == len(covered):
            return done
        time.sleep(0.5)
    raise RuntimeError(f"{topic} was never split across {len(workers)} workers: {shares}")


# -- lag ---------------------------------------------------------------------------------------------


def stream_topics(cat: TopicCatalog) -> list[str]:
    """The topics whose every record passes through a worker agent (timer ticks excluded: they never stop)."""
    return [
        t.name
        for t in cat.all()
        if t.faust_source and ".control." not in t.name and "telemetry" not in t.name
    ]


def group_lag(consumer: Consumer, topics: list[str], partitions: int) -> int | None:
    """Records on ``topics`` that the consumer's group has not committed yet; None when the
    cluster did not answer in time (a busy broker: ask again)."""
    tps = [TopicPartition(t, p) for t in topics for p in range(partitions)]
    try:
        committed = consumer.committed(tps, timeout=10)
        lag = 0
        for tp in committed:
            _, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)
            lag += max(0, high - max(tp.offset, 0))
    except KafkaException:
        return None
    return lag


def delete_topics(bootstrap: str, cat: TopicCatalog) -> None:
    """Drop a run's topics: hundreds of replicated partitions left behind cost every broker heap."""
    drop_topics(bootstrap, [t.name for t in cat.all()])


# -- CPU -------------------------------------------------------------------------------------------


CLK_TCK = os.sysconf("SC_CLK_TCK")


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def process_cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` so far (0 for a process that is gone)."""
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLK_TCK


def broker_pids() -> list[int]:
    """The local cluster's broker processes (empty for an external cluster)."""
    root = Path(os.environ.get("SICKBAY_STACK_DIR", REPO_ROOT / ".cache" / "stack")) / "kafka-cluster"
    pids = []
    for f in root.glob("node-*/run/kafka.pid"):
        text = f.read_text().strip()
        if text.isdigit():
            pids.append(int(text))
    return pids


@dataclass(frozen=True)
class CpuShare:
    """Where the cores went during a measurement: cores in use on average, by component."""

    busy: float  # share of all cores busy, 0..1
    workers: float
    brokers: float

    def describe(self) -> str:
        rest = max(0.0, self.busy * (os.cpu_count() or 1) - self.workers - self.brokers)
        return (
            f"CPU {self.busy:.0%} busy of {os.cpu_count()} cores: workers {self.workers:.2f} cores, "
            f"brokers {self.brokers:.2f} cores, rest {rest:.2f}"
        )


# -- one level ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    workers: int
    records: int
    seconds: float
    ready_s: float
    cpu: CpuShare

    @property
    def eps(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


def run_level(
    bootstrap: str, workers: int, scenarios: int, partitions: int, replication: int, tmp: Path, seed: int
) -> Level:
    prefix = f"scale{workers}w{uuid.uuid4().hex[:6]}"
    cat = TopicCatalog(prefix=prefix, partitions=partitions, app_id=prefix)
    ensure_topics(bootstrap, cat.all(), replication)
    recs = [r for s in mix(scenarios, seed, datetime.now(UTC) - timedelta(minutes=20)) for r in s.records]
    env = worker_env(bootstrap, prefix, partitions, replication)
    t_start = time.monotonic()
    procs = [WorkerProc(f"{prefix}-{i}", env, tmp) for i in range(workers)]
    lag_reader = Consumer({"bootstrap.servers": bootstrap, "group.id": prefix, "enable.auto.commit": False})
    # raw.logs is read by the batched extract stage, in its own group (streams/extract/batched.py)
    extract_reader = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": extract_group(prefix), "enable.auto.commit": False}
    )
    try:
        for w in procs:
            w.wait_ready()
        wait_split(procs, cat.signals_job.name, partitions, 180)
        ready_s = time.monotonic() - t_start
        topics = [t for t in stream_topics(cat) if t != cat.raw_logs.name]
        producer = ReliableProducer(bootstrap, f"bench-scale-{prefix}", linger_ms=20)
        brokers = broker_pids()
        worker_pids = [w.proc.pid for w in procs]
        busy0, total0 = machine_busy()
        w0, b0 = process_cpu_s(worker_pids), process_cpu_s(brokers)
        t0 = time.monotonic()
        produce(producer, cat.raw_logs.name, recs)
        produced_s = time.monotonic() - t0
        deadline = t0 + 900
        while time.monotonic() < deadline:
            if (
                group_lag(extract_reader, [cat.raw_logs.name], partitions) == 0
                and group_lag(lag_reader, topics, partitions) == 0
            ):
                break
            if any(w.proc.poll() is not None for w in procs):
                raise RuntimeError("a worker died during the run")
            time.sleep(0.25)
        else:
            raise RuntimeError(f"{workers} workers did not catch up in 900 s")
        seconds = time.monotonic() - t0
        busy1, total1 = machine_busy()
        cpu = CpuShare(
            busy=(busy1 - busy0) / max(1, total1 - total0),
            workers=(process_cpu_s(worker_pids) - w0) / seconds,
            brokers=(process_cpu_s(brokers) - b0) / seconds,
        )
        print(
            f"{workers} worker(s): {len(recs):,} records in {seconds:.1f} s ({len(recs) / seconds:,.0f}/s; "
            f"produced in {produced_s:.1f} s; ready + split in {ready_s:.0f} s); {cpu.describe()}",
            file=sys.stderr,
        )
        return Level(workers, len(recs), seconds, ready_s, cpu)
    finally:
        lag_reader.close()
        extract_reader.close()
        for w in procs:
            w.kill(signal.SIGTERM)
        delete_topics(bootstrap, cat)


def record(levels: list[Level], scenarios: int, partitions: int, replication: int, repeat: int) -> None:
    by = {lv.workers: lv for lv in levels}
    base = by[1].eps if 1 in by else 0.0
    cells = ", ".join(f"{lv.eps:,.0f} ({lv.eps / base:.2f}x)" if base else f"{lv.eps:,.0f}" for lv in levels)
    cpu = "; ".join(
        f"{lv.workers}w: {lv.cpu.busy:.0%} busy, workers {lv.cpu.workers:.2f} / "
        f"brokers {lv.cpu.brokers:.2f} cores"
        for lv in levels
    )
    append_row(
        "Scale-out (bench_scale)",
        "| date | machine | brokers / RF | partitions | records | events/s by workers (speedup) | CPU |\n"
        "|---|---|---|---|---|---|---|",
        f"| {today()} | {describe()} | 3 / {replication} | {partitions} | {levels[0].records:,} "
        f"({scenarios} scenarios, best of {repeat}) | {', '.join(str(lv.workers) for lv in levels)} workers: "
        f"{cells} | {cpu} |",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--workers", default="1,2,4", help="worker counts to measure (comma-separated)")
    ap.add_argument(
        "--scenarios", type=int, default=60, help="simulated faults per level (~200 records each)"
    )
    ap.add_argument("--partitions", type=int, default=8, help="partitions per stream topic")
    ap.add_argument("--replication", type=int, default=3)
    ap.add_argument("--seed", type=int, default=9000)
    ap.add_argument("--repeat", type=int, default=1, help="runs per worker count; the best one counts")
    ap.add_argument("--bootstrap", help="an existing cluster instead of deploy/local/kafka-cluster.sh")
    ap.add_argument("--keep-cluster", action="store_true", help="leave the 3-broker cluster running")
    ap.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.workers.split(",") if x.strip()]

    cluster = None if args.bootstrap else KafkaCluster()
    bootstrap = args.bootstrap or (cluster.up() if cluster else "")
    levels: list[Level] = []
    try:
        with TemporaryDirectory(prefix="bench-scale-") as tmp:
            for k in counts:
                runs = [
                    run_level(
                        bootstrap, k, args.scenarios, args.partitions, args.replication, Path(tmp), args.seed
                    )
                    for _ in range(args.repeat)
                ]
                if len(runs) > 1:
                    print(
                        f"{k} worker(s): {', '.join(f'{r.eps:,.0f}' for r in runs)} events/s", file=sys.stderr
                    )
                levels.append(max(runs, key=lambda r: r.eps))  # best of N: the machine is shared
    finally:
        if cluster is not None and not cluster.was_running and not args.keep_cluster:
            cluster.down()
    if not args.no_record:
        record(levels, args.scenarios, args.partitions, args.replication, args.repeat)
    by = {lv.workers: lv.eps for lv in levels}
    result: dict[str, float] = {f"workers_{k}_eps": round(v, 1) for k, v in by.items()}
    if 1 in by and 2 in by:
        result["speedup_2"] = round(by[2] / by[1], 3)
    if 1 in by and 4 in by:
        result["speedup_4"] = round(by[4] / by[1], 3)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
