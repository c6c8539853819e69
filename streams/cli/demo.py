"""``make demo``: one GPU fault, end to end, on real Kafka, a real Faust worker, real Slurm and chdb.

1. start the local stack (Kafka KRaft, slurmctld + 4 slurmd) unless it is running;
2. start sickbay's roles as separate processes, in act mode, on fresh topics:
   the Faust worker, the Slurm adapter, the ClickHouse sink, and a collector
   tailing the real slurmctld log;
3. submit a real 4-node ``sbatch`` job;
4. inject that job's fault lines through the collector as shipper JSON: Xid 79
   in one node's kernel log (Fluent Bit), NCCL watchdog timeouts from the other
   ranks (Vector);
5. wait for the drain (``sinfo -R``) and the requeue with ``ExcNodeList``
   (``scontrol show job``), print the incident, the actions, and a SQL query over
   the stored incident; exit 0 only if all of that happened;
6. stop what it started, undo the drain, cancel the job.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from schemas import codec
from schemas.actions import ActionResult
from schemas.incidents import Incident
from streams.settings import REPO_ROOT, Settings

FAULT_NODE = "gpu-03"
NODES = ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]


def say(msg: str = "") -> None:
    print(msg, flush=True)


def step(msg: str) -> None:
    say(f"\n\033[1m== {msg}\033[0m" if sys.stdout.isatty() else f"\n== {msg}")


@dataclass
class Demo:
    run_id: str
    base: Settings
    workdir: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started_stack: bool = False
    job_id: str | None = None
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def settings(self) -> Settings:
        return Settings(topic_prefix=self.env["SICKBAY_TOPIC_PREFIX"], app_id=self.env["SICKBAY_APP_ID"])

    def slurm(self, *argv: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), capture_output=True, text=True, env=self.env, check=check, timeout=60
        )

    def spawn(self, name: str, *argv: str) -> None:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - owned by the child process
        self.procs[name] = subprocess.Popen(  # noqa: S603 - our own CLI, argv list
            [sys.executable, "-m", "streams.cli.main", *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=REPO_ROOT,
            start_new_session=True,
        )

    def stop(self, name: str, timeout_s: float = 30.0) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.workdir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def check(self, name: str, ok: bool) -> bool:
        self.checks[name] = ok
        return ok


def wait_for(what: str, predicate: Callable[[], Any], timeout_s: float, interval_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def _stack(*args: str, env: dict[str, str]) -> int:
    return subprocess.call(["bash", str(REPO_ROOT / "deploy/local/stack.sh"), *args], env=env)


def _kv(line: str) -> dict[str, str]:
    from connectors.actuators.slurm_cli import parse_kv_line

    return parse_kv_line(line.strip())


def fault_records(job_id: str, ranks: dict[str, int], at: datetime) -> tuple[bytes, list[bytes]]:
    """The injected lines in shipper JSON: Xid 79 (Fluent Bit tail of kern.log) and the ranks'
    NCCL watchdog timeouts (Vector file source on the job's output), as real logs print them."""
    kern = (
        f"{at.strftime('%b %d %H:%M:%S')} {FAULT_NODE} kernel: [183412.551032] NVRM: Xid (PCI:0000:19:00): 79, "
        "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    )
    xid = codec.dumps(
        {"@timestamp": at.timestamp(), "log": kern, "hostname": FAULT_NODE, "filename": "/var/log/kern.log"}
    )
    later = at + timedelta(seconds=2)
    timeouts = []
    for node, rank in ranks.items():
        if node == FAULT_NODE:
            continue
        text = (
            f"[rank{rank}]:[E{later.strftime('%m%d %H:%M:%S')}.426415540 ProcessGroupNCCL.cpp:629] "
            f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8812, "
            f"OpType=ALLREDUCE, NumelIn=67108864, NumelOut=67108864, Timeout(ms)=600000) ran for 600045 "
            "milliseconds before timing out."
        )
        timeouts.append(
            codec.dumps(
                {
                    "message": text,
                    "timestamp": later.isoformat(),
                    "host": node,
                    "source_type": "file",
                    "file": f"/scratch/sickbay-demo/slurm-{job_id}.out",
                }
            )
        )
    return xid, timeouts


def _print_incident(inc: Incident) -> None:
    rc = inc.root_cause
    say(f"incident     {inc.incident_id}  revision {inc.revision}  ({inc.status.value})")
    say(f"job          {inc.job_id} attempt {inc.attempt} on {', '.join(inc.job_nodes)}")
    say(
        f"category     {inc.category.value}   confidence {inc.confidence:.2f}   restartable {inc.restartable}"
    )
    say(f"root cause   {rc.summary}  [rule {rc.rule}, node {rc.node}]")
    say(
        f"culprit      node {inc.culprit.node if inc.culprit else '-'}  gpu {inc.culprit.gpu if inc.culprit else '-'}"
    )
    say(f"isolate      {', '.join(inc.isolate) or '-'}")
    for s in inc.supporting:
        say(
            f"supporting   {s.count} x {s.rule} on {', '.join(s.nodes)} (ranks {', '.join(map(str, s.ranks))})"
        )
    say(f"coverage     {', '.join(inc.coverage)}")
    say("evidence")
    for e in inc.evidence:
        say(f"  [{e.source_kind:9}] {e.node or '-':7} {e.text[:150]}")


def _latest(bootstrap: str, topic: str, group: str, timeout_s: float = 5.0) -> list[bytes]:
    from confluent_kafka import Consumer

    from connectors.kafka import consumer_config

    consumer = Consumer(consumer_config(bootstrap, group, "sickbay-demo"))
    consumer.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(0.3)
        if msg is not None and msg.error() is None:
            out.append(msg.value())
            deadline = min(deadline, time.monotonic() + 1.0)
    consumer.close()
    return out


def run_demo(keep: bool = False) -> int:
    base = Settings()
    run_id = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    workdir = base.state_dir / "demo" / run_id
    workdir.mkdir(parents=True, exist_ok=True)
    slurm_conf = base.state_dir / "slurm" / "slurm.conf"
    env = {
        **os.environ,
        "SICKBAY_TOPIC_PREFIX": f"demo{run_id}",
        "SICKBAY_APP_ID": f"sickbay-demo{run_id}",
        "SICKBAY_MODE": "act",
        "SICKBAY_ROOT_GRACE_S": "5",
        "SICKBAY_INCIDENT_QUIET_S": "60",
        "SLURM_CONF": str(slurm_conf),
        "SICKBAY_PYTHON": sys.executable,
    }
    demo = Demo(run_id=run_id, base=base, workdir=workdir, env=env)
    try:
        return _run(demo)
    except (TimeoutError, subprocess.SubprocessError, RuntimeError, OSError) as exc:
        say(f"\ndemo FAILED: {exc}")
        for name in list(demo.procs):
            say(f"--- {name} log (last lines) ---\n{demo.log_tail(name)}")
        return 1
    finally:
        _cleanup(demo, keep)


def _run(demo: Demo) -> int:
    env = demo.env
    step("1. local stack: Apache Kafka (KRaft) + Slurm (slurmctld, slurmd x4)")
    demo.started_stack = _stack("status", env=env) != 0
    if _stack("up", env=env) != 0:
        raise RuntimeError("the local stack did not start (see the messages above)")
    from connectors.kafka import ensure_topics

    s = demo.settings
    ensure_topics(s.kafka_bootstrap, s.topics.all(), s.replication_factor)
    say(f"topics: prefix {s.topic_prefix} ({len(s.topics.all())} topics); state in {demo.workdir}")
    for node in NODES:  # undo a drain left by an earlier demo run
        info = demo.slurm("scontrol", "show", "node", "-o", node).stdout
        if "DRAIN" in _kv(info).get("State", "") and _kv(info).get("Reason", "").startswith("sickbay"):
            demo.slurm("scontrol", "update", f"NodeName={node}", "State=RESUME")

    step("2. sickbay roles: faust worker (act mode), slurm adapter, clickhouse sink, slurmctld log collector")
    demo.spawn("worker", "worker")
    demo.spawn("adapter", "adapter", "slurm")
    demo.spawn("sink", "sink", "clickhouse")
    ctld_log = s.state_dir / "slurm" / "log" / "slurmctld.log"
    demo.spawn(
        "collector",
        "collect",
        "file",
        "--follow",
        "--from-end",
        "--host",
        socket.gethostname(),
        str(ctld_log),
    )
    t0 = time.monotonic()
    wait_for(
        "the Faust worker to be ready",
        lambda: "Worker]: Ready" in (demo.workdir / "worker.log").read_text(errors="replace"),
        120,
        0.25,
    )
    say(f"worker ready in {time.monotonic() - t0:.1f}s")

    step("3. a real 4-node training job")
    script = demo.workdir / "train.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --job-name=llm-pretrain\n#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=1\n"
        "#SBATCH --requeue\n"
        "srun bash -c 'for i in $(seq 1 600); do echo \"[rank$SLURM_PROCID] iteration $i/600 | "
        "loss 2.$((RANDOM % 90 + 10)) | tokens/s 4$((RANDOM % 9000 + 1000))\"; sleep 1; done'\n"
    )
    sub = demo.slurm(
        "sbatch", "--parsable", "-o", str(demo.workdir / "slurm-%j.out"), str(script), check=True
    )
    demo.job_id = sub.stdout.strip().split(";")[0]
    job = demo.job_id

    def job_info() -> dict[str, str]:
        return _kv(demo.slurm("scontrol", "show", "job", "-o", job).stdout)

    info = wait_for(
        "the job to run", lambda: job_info() if job_info().get("JobState") == "RUNNING" else None, 60
    )
    say(f"job {job}: {info.get('JobState')} on {info.get('NodeList')}")
    nodes = _expand(info.get("NodeList", ""))
    ranks = {n: i for i, n in enumerate(nodes)}
    time.sleep(1.5)  # the collector ships the allocation line from slurmctld.log

    step(f"4. fault: Xid 79 on {FAULT_NODE}, NCCL watchdog timeouts on the other ranks (shipper JSON)")
    from connectors.kafka import ReliableProducer
    from connectors.sources.files import LineSink

    xid, timeouts = fault_records(job, ranks, datetime.now(UTC))
    (demo.workdir / "faults.jsonl").write_bytes(b"\n".join([xid, *timeouts]) + b"\n")
    producer = ReliableProducer(s.kafka_bootstrap, "sickbay-demo-injector", linger_ms=0)
    sink = LineSink(producer, s.topics.raw_logs.name, None, None)
    t_fault = time.monotonic()
    sink.line(xid, str(demo.workdir / "faults.jsonl"), 1)
    producer.flush(10)
    for n, rec in enumerate(timeouts, 2):
        sink.line(rec, str(demo.workdir / "faults.jsonl"), n)
    if producer.flush(10) or producer.failed:
        raise RuntimeError(f"fault lines were not delivered: {producer.last_error}")
    say(f"injected {1 + len(timeouts)} records into {s.topics.raw_logs.name}")

    def drained() -> str | None:
        for line in demo.slurm("sinfo", "-R", "-h", "-o", "%N|%T|%E").stdout.splitlines():
            node, state, reason = (line.split("|", 2) + ["", ""])[:3]
            if FAULT_NODE in _expand(node) and "drain" in state and reason.startswith("sickbay"):
                return line
        return None

    wait_for(f"{FAULT_NODE} to be drained by sickbay", drained, 90, 0.05)
    fault_to_drain = time.monotonic() - t_fault

    def requeued() -> dict[str, str] | None:
        i = job_info()
        return (
            i if FAULT_NODE in _expand(i.get("ExcNodeList", "")) and i.get("Restarts", "0") != "0" else None
        )

    info = wait_for("the job to be requeued excluding the node", requeued, 60, 0.1)
    time.sleep(2.5)  # let the sink flush its last batch

    step("5. the incident")
    incidents = [
        Incident.model_validate(codec.loads(v))
        for v in _latest(s.kafka_bootstrap, s.topics.incidents.name, f"demo{demo.run_id}-reader")
    ]
    latest = max(incidents, key=lambda i: i.revision) if incidents else None
    if latest is None:
        raise RuntimeError("no incident on the incidents topic")
    _print_incident(latest)
    demo.check("one incident", len({i.incident_id for i in incidents}) == 1)
    demo.check("category hardware_gpu", latest.category.value == "hardware_gpu")
    demo.check(f"culprit {FAULT_NODE}", latest.culprit is not None and latest.culprit.node == FAULT_NODE)
    demo.check(
        "timeouts kept as supporting symptoms",
        any(x.rule == "nccl.watchdog_timeout" and x.count == len(timeouts) for x in latest.supporting),
    )

    step("6. the actions")
    results = [
        ActionResult.model_validate(codec.loads(v))
        for v in _latest(s.kafka_bootstrap, s.topics.action_results.name, f"demo{demo.run_id}-results")
    ]
    for r in results:
        say(f"{r.kind.value:12} {r.status.value:10} {r.detail}")
        for c in r.commands:
            say(f"    $ {' '.join(c.argv)}  -> rc {c.returncode}")
    demo.check(
        "drain and requeue succeeded",
        {r.kind.value for r in results if r.status.value in ("succeeded", "converged")}
        >= {"drain_node", "requeue_job"},
    )
    say("\n$ sinfo -R")
    say(demo.slurm("sinfo", "-R").stdout.rstrip())
    say(f"\n$ scontrol show job {job}   (fields of interest)")
    say(
        "  "
        + "  ".join(
            f"{k}={info.get(k)}" for k in ("JobState", "Reason", "Restarts", "ExcNodeList", "NodeList")
        )
    )
    demo.check("sinfo -R shows the drain", drained() is not None)
    demo.check("scontrol shows requeue with ExcNodeList", requeued() is not None)

    step("7. ClickHouse (chdb, embedded) over the stored incident")
    demo.stop("sink")  # chdb allows one process per store: the sink flushes and lets go
    from connectors.sinks.clickhouse_schema import get_client

    sql = (
        f"SELECT incident_id, revision, category, culprit_node, root_rule, root_code, confidence, "
        f"length(JSONExtractArrayRaw(supporting)) AS supporting_groups "
        f"FROM {s.clickhouse_database}.incidents FINAL WHERE incident_id = %(id)s"
    )
    client = get_client(s.clickhouse_dsn)
    res = client.query(sql, parameters={"id": latest.incident_id})
    say(sql.replace("%(id)s", f"'{latest.incident_id}'"))
    say("  " + " | ".join(res.column_names))
    for row in res.result_rows:
        say("  " + " | ".join(str(v) for v in row))
    actions_sql = (
        f"SELECT kind, status FROM {s.clickhouse_database}.action_results FINAL "
        "WHERE incident_id = %(id)s ORDER BY kind"
    )
    stored_results = client.query(actions_sql, parameters={"id": latest.incident_id}).result_rows
    client.close()
    demo.check(
        "incident stored in ClickHouse", len(res.result_rows) == 1 and res.result_rows[0][3] == FAULT_NODE
    )
    demo.check("action results stored in ClickHouse", len(stored_results) >= 2)

    step("result")
    for name, ok in demo.checks.items():
        say(f"  [{'ok' if ok else 'FAILED'}] {name}")
    say(f"\nfault line injected → {FAULT_NODE} drained: {fault_to_drain:.2f} s")
    ok = all(demo.checks.values())
    say(
        codec.dumps(
            {
                "demo": "ok" if ok else "failed",
                "fault_to_drain_s": round(fault_to_drain, 3),
                "incident_id": latest.incident_id,
                "job_id": job,
            }
        ).decode()
    )
    return 0 if ok else 1


def _expand(nodelist: str) -> list[str]:
    import hostlist

    if not nodelist or nodelist in ("(null)", "None"):
        return []
    return list(hostlist.expand_hostlist(nodelist))


def _cleanup(demo: Demo, keep: bool) -> None:
    for name in list(demo.procs):
        demo.stop(name)
    if demo.job_id:
        demo.slurm("scancel", demo.job_id)
    if not keep:
        info = demo.slurm("scontrol", "show", "node", "-o", FAULT_NODE).stdout if demo.checks else ""
        if "sickbay" in _kv(info).get("Reason", ""):
            demo.slurm("scontrol", "update", f"NodeName={FAULT_NODE}", "State=RESUME")
        if demo.started_stack:
            _stack("down", env=demo.env)
