"""Incident → action on the real Slurm cluster: latency and reconciliation (``make bench-act``).

For each of N incidents (default 50) on this machine's local Slurm (deploy/local):

1. a real job (``sickbay-act-test-bench-*``) runs on one of the bench nodes;
2. the bench publishes an Xid 79 incident for that node and job on the real
   ``incidents`` topic (t0), runs the policy's one-incident view
   (:func:`streams.decide.policy.advise`, act mode: drain with an expiry, then
   requeue excluding the node) and publishes the actions on the real ``actions``
   topic — the decide step without the Faust worker around it;
3. a separate ``sickbay adapter slurm`` process (act mode; ``--mode ssh`` runs it
   through deploy/local/sshd.sh) executes them and publishes results;
4. act latency = t0 → the last of the incident's results on ``action-results``;
   reconciliation = t0 → the bench's own ``scontrol show`` first sees the wanted
   state (node drained with sickbay's reason, job requeued with the exclusion);
5. the node is resumed and the job cancelled before the next incident.

Then a storm: S incidents published at once over the bench nodes and their jobs.
The blast-radius cap is the policy's business (streams/decide); the adapter
executes what it is given, so the storm reports how the results split (first
drain succeeded, the rest converged) and how long the batch took.

Appends a row to benchmarks/RESULTS.md; the last line printed is one JSON object
with ``act_p50_s``, ``act_p99_s`` and ``reconcile_p99_s`` (goal: act p99 <= 5 s).
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer

from benchmarks.machine import append_row, describe, today
from connectors.actuators.slurm_cli import SlurmCli
from connectors.kafka import ReliableProducer, admin, consumer_config, ensure_topics, wait_for_broker
from schemas import codec
from schemas.actions import Action, ActionKind, ActionResult, ActionStatus, Mode
from schemas.base import utcnow
from schemas.incidents import Category, Culprit, Incident, IncidentStatus, RootCause
from schemas.topics import TopicCatalog
from streams.decide.policy import PolicyConfig, advise
from streams.settings import REPO_ROOT

CLUSTER = "bench-act"
GOAL_ACT_P99_S = 5.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (p99 of 50 samples is the largest: no interpolation flatters it)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _script_env(script: str) -> dict[str, str]:
    out = subprocess.run(
        ["bash", str(REPO_ROOT / "deploy" / "local" / script), "env"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    env: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = shlex.split(value)[0] if value else ""
    return env


def incident_for(i: int, node: str, job_id: str) -> Incident:
    now = utcnow()
    text = f"NVRM: Xid (PCI:0000:06:00): 79, pid=1234, GPU has fallen off the bus. (bench {i})"
    return Incident(
        incident_id=f"inc-bench-{uuid.uuid4().hex[:12]}",
        revision=1,
        cluster=CLUSTER,
        job_id=job_id,
        attempt=1,
        status=IncidentStatus.OPEN,
        category=Category.HARDWARE_GPU,
        root_cause=RootCause(
            rule="gpu.xid_79",
            summary=f"Xid 79 (GPU has fallen off the bus) on {node}",
            signal_id=f"sig-bench-{i}",
            event_time=now,
            node=node,
            gpu="0000:06:00",
            code=79,
            text=text,
        ),
        culprit=Culprit(node=node, gpu="0000:06:00"),
        isolate=[node],
        restartable=True,
        confidence=0.95,
        job_nodes=[node],
        opened_at=now,
        updated_at=now,
        first_signal_time=now,
    )


@dataclass
class Bench:
    bootstrap: str
    cat: TopicCatalog
    cli: SlurmCli
    producer: ReliableProducer
    consumer: Consumer
    results: dict[str, tuple[float, ActionResult]] = field(default_factory=dict)

    def drain_results(self, timeout_s: float) -> None:
        msg = self.consumer.poll(timeout_s)
        while msg is not None:
            if not msg.error():
                result = ActionResult.model_validate(codec.loads(msg.value() or b""))
                self.results.setdefault(result.action_id, (time.monotonic(), result))
            msg = self.consumer.poll(0)

    def wait_results(self, ids: list[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not all(i in self.results for i in ids):
            if time.monotonic() > deadline:
                missing = [i for i in ids if i not in self.results]
                raise RuntimeError(f"no result within {timeout_s}s for {missing}")
            self.drain_results(0.01)

    def submit(self, name: str, node: str) -> str:
        run = self.cli.run(
            ["sbatch", "--parsable", "-J", name, "-N1", "-w", node, "-o", "/dev/null", "--wrap", "sleep 600"]
        )
        if run.returncode != 0:
            raise RuntimeError(f"sbatch failed: {run.stderr.strip()}")
        job = run.stdout.strip().split(";")[0]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            _, state = self.cli.show("job", job)
            if state and state.get("JobState") == "RUNNING":
                return job
            time.sleep(0.1)
        raise RuntimeError(f"job {job} did not start on {node} within 60s")

    def publish(self, incident: Incident) -> list[Action]:
        self.producer.produce(self.cat.incidents.name, codec.dumps(incident), key=incident.job_id.encode())
        actions, notes = advise(incident, PolicyConfig(mode=Mode.ACT), utcnow())
        if not actions:
            raise RuntimeError(f"the policy proposed nothing for {incident.incident_id}: {notes}")
        for action in actions:
            self.producer.produce(self.cat.actions.name, codec.dumps(action), key=action.action_id.encode())
        if self.producer.flush(30) != 0:
            raise RuntimeError("could not publish the incident and its actions")
        return actions

    def reconciled(self, node: str, job: str) -> bool:
        _, n = self.cli.show("node", node)
        if not n or "DRAIN" not in n.get("State", "") or not n.get("Reason", "").startswith("sickbay"):
            return False
        _, j = self.cli.show("job", job)
        return (
            bool(j) and node in (j or {}).get("ExcNodeList", "") and int((j or {}).get("Restarts", "0")) >= 1
        )

    def restore(self, nodes: list[str], jobs: list[str]) -> None:
        for job in jobs:
            self.cli.run(["scancel", job])
        for node in nodes:
            _, state = self.cli.show("node", node)
            if state and "DRAIN" in state.get("State", "") and state.get("Reason", "").startswith("sickbay"):
                self.cli.run(self.cli.resume_argv(node))


def start_adapter(bench_env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "streams.cli.main", "adapter", "slurm"],
        env=bench_env,
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=open(bench_env["BENCH_LOG"], "ab"),
        start_new_session=True,
    )


def run(args: argparse.Namespace) -> dict[str, object]:
    slurm_env = _script_env("slurm.sh")
    conf = Path(os.environ.get("SLURM_CONF") or slurm_env["SLURM_CONF"])
    cli = SlurmCli(conf)
    if cli.run(["scontrol", "ping"]).returncode != 0:
        raise RuntimeError("Slurm does not answer: run `make dev-up` first")
    wait_for_broker(args.bootstrap, 30)
    prefix = f"bench-act-{uuid.uuid4().hex[:8]}"
    cat = TopicCatalog(prefix=prefix, partitions=1, app_id=prefix)
    ensure_topics(args.bootstrap, cat.all())
    env = {
        **os.environ,
        "SICKBAY_KAFKA_BOOTSTRAP": args.bootstrap,
        "SICKBAY_TOPIC_PREFIX": prefix,
        "SICKBAY_PARTITIONS": "1",
        "SICKBAY_CLUSTER": CLUSTER,
        "SICKBAY_MODE": "act",
        "SLURM_CONF": str(conf),
        "SICKBAY_LOG_LEVEL": "warning",
        "BENCH_LOG": str(REPO_ROOT / ".cache" / f"{prefix}-adapter.log"),
    }
    if args.mode == "ssh":
        up = subprocess.run(
            ["bash", str(REPO_ROOT / "deploy/local/sshd.sh"), "up"],
            capture_output=True,
            text=True,
            check=False,
        )
        if up.returncode != 0:
            raise RuntimeError(f"deploy/local/sshd.sh up failed: {up.stderr}")
        env.update(_script_env("sshd.sh"))
    consumer = Consumer(consumer_config(args.bootstrap, f"{prefix}-bench", "bench-act"))
    consumer.subscribe([cat.action_results.name])
    producer = ReliableProducer(args.bootstrap, "bench-act", linger_ms=0)
    bench = Bench(args.bootstrap, cat, cli, producer, consumer)
    adapter = start_adapter(env)
    nodes = args.nodes.split(",")
    jobs: list[str] = []
    try:
        # Warm-up: the adapter's consumer joins its group; not measured.
        warm = incident_for(0, nodes[0], "0")
        probe = Action(
            action_id=f"warmup-{prefix}",
            idempotency_key=f"warmup-{prefix}",
            kind=ActionKind.RESUME_NODE,
            mode=Mode.ACT,
            dry_run=False,
            cluster=CLUSTER,
            incident_id=warm.incident_id,
            incident_revision=1,
            node=nodes[0],
            reason="sickbay: bench warm-up",
            created_at=utcnow(),
        )
        producer.produce(cat.actions.name, codec.dumps(probe), key=probe.action_id.encode())
        producer.flush(30)
        bench.wait_results([probe.action_id], 120)
        log(f"adapter ready ({args.mode} mode); {args.incidents} incidents on {', '.join(nodes)}")

        act, reconcile, statuses = measure(bench, nodes, args.incidents, jobs)
        storm = storm_case(bench, nodes, args.storm, jobs)
        return {
            "act_p50_s": round(pct(act, 0.5), 3),
            "act_p99_s": round(pct(act, 0.99), 3),
            "reconcile_p50_s": round(pct(reconcile, 0.5), 3),
            "reconcile_p99_s": round(pct(reconcile, 0.99), 3),
            "incidents": len(act),
            "mode": args.mode,
            "results": dict(sorted(statuses.items())),
            "storm": storm,
            "goal_act_p99_s": GOAL_ACT_P99_S,
            "goal_met": pct(act, 0.99) <= GOAL_ACT_P99_S,
        }
    finally:
        bench.restore(nodes, jobs)
        adapter.send_signal(signal.SIGTERM)
        try:
            adapter.wait(15)
        except subprocess.TimeoutExpired:
            adapter.kill()
        consumer.close()
        producer.flush(5)
        admin(args.bootstrap).delete_topics([t.name for t in cat.all()])


def measure(
    bench: Bench, nodes: list[str], incidents: int, jobs: list[str]
) -> tuple[list[float], list[float], Counter[str]]:
    """One incident at a time: act latency and reconciliation time, then restore."""
    act: list[float] = []
    reconcile: list[float] = []
    statuses: Counter[str] = Counter()
    for i in range(incidents):
        node = nodes[i % len(nodes)]
        job = bench.submit(f"sickbay-act-test-bench-{i}", node)
        jobs.append(job)
        t0 = time.monotonic()
        actions = bench.publish(incident_for(i, node, job))
        ids = [a.action_id for a in actions]
        rec_at: float | None = None
        deadline = t0 + 60
        while (rec_at is None or not all(x in bench.results for x in ids)) and time.monotonic() < deadline:
            bench.drain_results(0.02)
            if rec_at is None and bench.reconciled(node, job):
                rec_at = time.monotonic()
        bench.wait_results(ids, 1)
        if rec_at is None:
            said = [f"{bench.results[x][1].status.value}: {bench.results[x][1].detail}" for x in ids]
            _, n_state = bench.cli.show("node", node)
            _, j_state = bench.cli.show("job", job)
            raise RuntimeError(
                f"incident {i}: {node}/{job} never reached the wanted state; results {said}; "
                f"node {n_state and {k: n_state.get(k) for k in ('State', 'Reason')}}; "
                f"job {j_state and {k: j_state.get(k) for k in ('JobState', 'ExcNodeList', 'Restarts')}}"
            )
        act.append(max(bench.results[x][0] for x in ids) - t0)
        reconcile.append(rec_at - t0)
        statuses.update(f"{bench.results[x][1].kind.value}:{bench.results[x][1].status.value}" for x in ids)
        bench.restore([node], [job])
        jobs.remove(job)
        if (i + 1) % 10 == 0:
            log(f"  {i + 1}/{incidents}: act p50 {statistics.median(act):.3f}s, max {max(act):.3f}s")
    return act, reconcile, statuses


def storm_case(bench: Bench, nodes: list[str], count: int, jobs: list[str]) -> dict[str, object]:
    """``count`` incidents at once over the bench nodes (one running job each)."""
    node_jobs = {node: bench.submit(f"sickbay-act-test-storm-{node}", node) for node in nodes}
    jobs.extend(node_jobs.values())
    t0 = time.monotonic()
    ids: list[str] = []
    for i in range(count):
        node = nodes[i % len(nodes)]
        ids += [a.action_id for a in bench.publish(incident_for(i, node, node_jobs[node]))]
    bench.wait_results(ids, 300)
    took = max(bench.results[x][0] for x in ids) - t0
    split = Counter(f"{bench.results[x][1].kind.value}:{bench.results[x][1].status.value}" for x in ids)
    failed = sum(1 for x in ids if bench.results[x][1].status == ActionStatus.FAILED)
    log(f"storm: {count} incidents, {len(ids)} actions in {took:.2f}s: {dict(split)}")
    bench.restore(nodes, list(node_jobs.values()))
    for job in node_jobs.values():
        jobs.remove(job)
    return {
        "incidents": count,
        "actions": len(ids),
        "total_s": round(took, 3),
        "failed": failed,
        "results": dict(sorted(split.items())),
    }


def record(summary: dict[str, object], storm: dict[str, object]) -> None:
    results = storm["results"]
    assert isinstance(results, dict)
    cells = [
        today(),
        describe(),
        str(summary["mode"]),
        str(summary["incidents"]),
        *(f"{summary[k]:.3f}" for k in ("act_p50_s", "act_p99_s", "reconcile_p50_s", "reconcile_p99_s")),
        f"{storm['incidents']} / {storm['actions']} / {storm['total_s']:.2f} / "
        + ", ".join(f"{k} {v}" for k, v in results.items()),
    ]
    append_row(
        "Incident to action on Slurm (`make bench-act`)",
        "| date | machine | executor | incidents | act p50 s | act p99 s | reconcile p50 s "
        "| reconcile p99 s | storm: incidents / actions / s / results |\n"
        "|---|---|---|---|---|---|---|---|---|",
        "| " + " | ".join(cells) + " |",
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--incidents", type=int, default=50)
    parser.add_argument(
        "--storm", type=int, default=100, help="incidents published at once in the storm case"
    )
    parser.add_argument("--nodes", default="gpu-03,gpu-04", help="bench nodes (drained and resumed in turn)")
    parser.add_argument("--mode", choices=["local", "ssh"], default="local", help="the adapter's executor")
    parser.add_argument("--bootstrap", default=os.environ.get("SICKBAY_KAFKA_BOOTSTRAP", "127.0.0.1:39092"))
    parser.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args()
    if args.incidents < 1:
        parser.error("--incidents must be at least 1")
    try:
        summary = run(args)
    except RuntimeError as exc:
        print(codec.dumps({"error": str(exc)}).decode())
        return 1
    storm = summary["storm"]
    assert isinstance(storm, dict)
    if not args.no_record:
        record(summary, storm)
    print(codec.dumps(summary).decode())
    return 0 if summary["goal_met"] and not storm["failed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
