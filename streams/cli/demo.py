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
import uuid
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
JUNK = b'{"log": "NVRM: Xid (PCI:0000:19:00): 79, GPU has fallen off the bu'  # a record cut in half
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
    mode: str = "act"
    started: list[str] = field(default_factory=list)  # stack components this run started (and stops)
    job_id: str | None = None
    ranks: dict[str, int] = field(default_factory=dict)
    expected_timeouts: int = 0
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
        self.procs[name] = subprocess.Popen(
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

    def job_info(self) -> dict[str, str]:
        return _kv(self.slurm("scontrol", "show", "job", "-o", self.job_id or "0").stdout)

    def results(self) -> list[ActionResult]:
        s = self.settings
        raw = _read_topic(s.kafka_bootstrap, s.topics.action_results.name, f"demo{uuid.uuid4().hex}", 2.0)
        return [ActionResult.model_validate(codec.loads(v)) for v in raw]


def wait_for(what: str, predicate: Callable[[], Any], timeout_s: float, interval_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")


DEMO_COMPONENTS = ("kafka", "slurm")  # the demo needs no Kubernetes API server


def _stack(*args: str, env: dict[str, str]) -> int:
    return subprocess.call(
        ["bash", str(REPO_ROOT / "deploy/local/stack.sh"), *args], env={**env, "SICKBAY_STACK_KUBE": "0"}
    )


def _component(name: str, action: str, env: dict[str, str]) -> int:
    return subprocess.call(
        ["bash", str(REPO_ROOT / f"deploy/local/{name}.sh"), action],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _kv(line: str) -> dict[str, str]:
    from connectors.actuators.slurm_cli import parse_kv_line

    return parse_kv_line(line.strip())


def fault_records(job_id: str, ranks: dict[str, int], at: datetime) -> tuple[bytes, list[bytes]]:
    """The injected lines in shipper JSON: Xid 79 (Fluent Bit tail of kern.log) and the ranks'
    NCCL watchdog timeouts (Vector file source on the job's output), as real logs print them."""
    kern = (
        f"{at.strftime('%b %d %H:%M:%S')} {FAULT_NODE} kernel: [183412.551032] "
        "NVRM: Xid (PCI:0000:19:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
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
    shown = f"{inc.status.value}, provisional" if inc.provisional else inc.status.value
    say(f"incident     {inc.incident_id}  revision {inc.revision}  ({shown})")
    say(f"job          {inc.job_id} attempt {inc.attempt} on {', '.join(inc.job_nodes)}")
    say(
        f"category     {inc.category.value}   confidence {inc.confidence:.2f}   restartable {inc.restartable}"
    )
    say(f"root cause   {rc.summary}  [rule {rc.rule}, node {rc.node}]")
    culprit = inc.culprit
    say(f"culprit      node {culprit.node if culprit else '-'}  gpu {culprit.gpu if culprit else '-'}")
    say(f"isolate      {', '.join(inc.isolate) or '-'}")
    for s in inc.supporting:
        ranks = ", ".join(map(str, s.ranks))
        say(f"supporting   {s.count} x {s.rule} on {', '.join(s.nodes)} (ranks {ranks})")
    say(f"coverage     {', '.join(inc.coverage)}")
    say("evidence")
    for e in inc.evidence:
        say(f"  [{e.source_kind:9}] {e.node or '-':7} {e.text[:150]}")


def _read_topic(bootstrap: str, topic: str, group: str, timeout_s: float = 5.0) -> list[bytes]:
    """Everything on a (small) topic, read by a throwaway consumer group."""
    from confluent_kafka import Consumer

    from connectors.kafka import consumer_config

    consumer = Consumer(consumer_config(bootstrap, group, "sickbay-demo"))
    consumer.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(0.3)
        value = msg.value() if msg is not None and msg.error() is None else None
        if value is not None:
            out.append(value)
            deadline = min(deadline, time.monotonic() + 1.0)
    consumer.close()
    return out


def run_demo(keep: bool = False, mode: str = "act") -> int:
    base = Settings()
    run_id = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")[:-3]
    workdir = base.state_dir / "demo" / run_id
    workdir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SICKBAY_TOPIC_PREFIX": f"demo{run_id}",
        "SICKBAY_APP_ID": f"sickbay-demo{run_id}",
        "SICKBAY_MODE": mode,
        "SICKBAY_ROOT_GRACE_S": "5",
        "SICKBAY_INCIDENT_QUIET_S": "60",
        "SLURM_CONF": str(base.state_dir / "slurm" / "slurm.conf"),
        "SICKBAY_PYTHON": sys.executable,
    }
    demo = Demo(run_id=run_id, base=base, workdir=workdir, env=env, mode=mode)
    try:
        start_stack(demo)
        start_roles(demo)
        submit_job(demo)
        t_fault = inject(demo)
        fault_to_action = await_actions(demo, t_fault)
        incident = show_incident(demo)
        show_actions(demo)
        query_store(demo, incident)
        return report(demo, incident, fault_to_action)
    except (TimeoutError, subprocess.SubprocessError, RuntimeError, OSError) as exc:
        say(f"\ndemo FAILED: {exc}")
        for name in list(demo.procs):
            say(f"--- {name} log (last lines) ---\n{demo.log_tail(name)}")
        return 1
    finally:
        _cleanup(demo, keep)


def start_stack(demo: Demo) -> None:
    step("1. local stack: Apache Kafka (KRaft) + Slurm (slurmctld, slurmd x4)")
    # Only what was not running is ours to stop afterwards: other users of the stack keep theirs.
    demo.started = [c for c in DEMO_COMPONENTS if _component(c, "status", demo.env) != 0]
    if _stack("up", env=demo.env) != 0:
        raise RuntimeError("the local stack did not start (see the messages above)")
    from connectors.kafka import ensure_topics

    s = demo.settings
    ensure_topics(s.kafka_bootstrap, s.topics.all(), s.replication_factor)
    say(f"topics: prefix {s.topic_prefix} ({len(s.topics.all())} topics); state in {demo.workdir}")
    for node in NODES:  # undo a drain left by an earlier demo run
        info = _kv(demo.slurm("scontrol", "show", "node", "-o", node).stdout)
        if "DRAIN" in info.get("State", "") and info.get("Reason", "").startswith("sickbay"):
            demo.slurm("scontrol", "update", f"NodeName={node}", "State=RESUME")


def start_roles(demo: Demo) -> None:
    step(f"2. sickbay roles ({demo.mode} mode): faust worker, slurm adapter, clickhouse sink, collector")
    demo.spawn("worker", "worker")
    demo.spawn("adapter", "adapter", "slurm")
    demo.spawn("sink", "sink", "clickhouse")
    ctld_log = demo.settings.state_dir / "slurm" / "log" / "slurmctld.log"
    host = socket.gethostname()
    demo.spawn(
        "collector-slurmctld", "collect", "file", "--follow", "--from-end", "--host", host, str(ctld_log)
    )
    t0 = time.monotonic()
    worker_log = demo.workdir / "worker.log"
    wait_for(
        "the Faust worker to be ready",
        lambda: "Worker]: Ready" in worker_log.read_text(errors="replace"),
        120,
        0.25,
    )
    say(f"worker ready in {time.monotonic() - t0:.1f}s")


def submit_job(demo: Demo) -> None:
    step("3. a real 4-node training job (sbatch)")
    script = demo.workdir / "train.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --job-name=llm-pretrain\n#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=1\n"
        "srun bash -c 'for i in $(seq 1 600); do echo \"[rank$SLURM_PROCID] iteration $i/600 | "
        "loss 2.$((RANDOM % 90 + 10)) | tokens/s 4$((RANDOM % 9000 + 1000))\"; sleep 1; done'\n"
    )
    out = demo.workdir / "slurm-%j.out"
    sub = demo.slurm("sbatch", "--parsable", "-o", str(out), str(script), check=True)
    demo.job_id = job = sub.stdout.strip().split(";")[0]
    info = wait_for("the job to run", lambda: (i := demo.job_info()).get("JobState") == "RUNNING" and i, 60)
    say(f"job {job}: {info.get('JobState')} on {info.get('NodeList')}")
    demo.ranks = {n: i for i, n in enumerate(_expand(info.get("NodeList", "")))}
    # The job's own output (training progress from every rank) goes through the collector too.
    demo.spawn(
        "collector-job",
        "collect",
        "file",
        "--follow",
        "--host",
        info.get("BatchHost", "gpu-01"),
        str(out).replace("%j", job),
    )
    time.sleep(1.5)  # the collector ships the allocation line from slurmctld.log


def inject(demo: Demo) -> float:
    step(f"4. fault: Xid 79 on {FAULT_NODE}, NCCL watchdog timeouts on the other ranks (shipper JSON)")
    from connectors.kafka import ReliableProducer
    from connectors.sources.files import LineSink

    s = demo.settings
    from connectors.sources.simulator import background_records

    # The healthy hum of a running job first (the simulator's launcher banners, NCCL INFO, training
    # progress, checkpoints, kernel noise): none of it may raise an incident.
    started = datetime.now(UTC) - timedelta(seconds=90)
    background = background_records(int(demo.run_id[-6:]), list(demo.ranks), demo.job_id or "?", 90, started)
    bg_producer = ReliableProducer(s.kafka_bootstrap, "sickbay-demo-background", linger_ms=20)
    bg_sink = LineSink(bg_producer, s.topics.raw_logs.name, None, None)
    for n, rec in enumerate(background, 1):
        bg_sink.line(rec, "simulator/background", n)
    if bg_producer.flush(30) or bg_producer.failed:
        raise RuntimeError(f"background records were not delivered: {bg_producer.last_error}")
    say(f"background: {len(background)} healthy records from the simulator (training, NCCL INFO, kernel)")
    xid, timeouts = fault_records(demo.job_id or "?", demo.ranks, datetime.now(UTC))
    path = demo.workdir / "faults.jsonl"
    path.write_bytes(b"\n".join([JUNK, xid, *timeouts]) + b"\n")
    demo.expected_timeouts = len(timeouts)
    producer = ReliableProducer(s.kafka_bootstrap, "sickbay-demo-injector", linger_ms=0)
    sink = LineSink(producer, s.topics.raw_logs.name, None, None)
    sink.line(JUNK, str(path), 1)  # bad input first: it must be dead-lettered, not stop anything
    t_fault = time.monotonic()
    sink.line(xid, str(path), 2)
    producer.flush(10)
    for n, rec in enumerate(timeouts, 3):
        sink.line(rec, str(path), n)
    if producer.flush(10) or producer.failed:
        raise RuntimeError(f"fault lines were not delivered: {producer.last_error}")
    say(f"injected 1 malformed record + {1 + len(timeouts)} fault records into {s.topics.raw_logs.name}")
    return t_fault


def drained_line(demo: Demo) -> str | None:
    for line in demo.slurm("sinfo", "-R", "-h", "-N", "-o", "%N|%T|%E").stdout.splitlines():
        node, state, reason = [*line.split("|", 2), "", ""][:3]
        if node == FAULT_NODE and "drain" in state and reason.startswith("sickbay"):
            return line
    return None


def requeued(demo: Demo) -> dict[str, str] | None:
    info = demo.job_info()
    excluded = FAULT_NODE in _expand(info.get("ExcNodeList", ""))
    return info if excluded and info.get("Restarts", "0") != "0" else None


def await_actions(demo: Demo, t_fault: float) -> float:
    """Act mode: wait for the drain (timed) and the requeue. Observe mode: for the dry-run results."""
    if demo.mode == "act":
        wait_for(f"{FAULT_NODE} to be drained by sickbay", lambda: drained_line(demo), 90, 0.05)
        elapsed = time.monotonic() - t_fault
        wait_for("the job to be requeued excluding the node", lambda: requeued(demo), 60, 0.1)
    else:
        wait_for("dry-run results for drain and requeue", lambda: len(demo.results()) >= 2, 90, 0.2)
        elapsed = time.monotonic() - t_fault
    time.sleep(2.5)  # let the sink flush its last batch
    return elapsed


def show_incident(demo: Demo) -> Incident:
    step("5. the incident")
    s = demo.settings
    raw = _read_topic(s.kafka_bootstrap, s.topics.incidents.name, f"demo{demo.run_id}-reader")
    incidents = [Incident.model_validate(codec.loads(v)) for v in raw]
    if not incidents:
        raise RuntimeError("no incident on the incidents topic")
    latest = max(incidents, key=lambda i: i.revision)
    _print_incident(latest)
    demo.check("one incident for the failure", len({i.incident_id for i in incidents}) == 1)
    demo.check("category hardware_gpu", latest.category.value == "hardware_gpu")
    demo.check(f"culprit {FAULT_NODE}", latest.culprit is not None and latest.culprit.node == FAULT_NODE)
    demo.check(
        "NCCL timeouts kept as supporting symptoms",
        any(
            x.rule == "nccl.watchdog_timeout" and x.count == demo.expected_timeouts for x in latest.supporting
        ),
    )
    letters = _read_topic(s.kafka_bootstrap, s.topics.dlq.name, f"demo{demo.run_id}-dlq")
    reasons = [codec.loads(v).get("reason") for v in letters]
    say(f"dead letters: {reasons}")
    demo.check("malformed record dead-lettered with its reason", reasons == ["invalid_json"])
    return latest


def show_actions(demo: Demo) -> None:
    step("6. the actions")
    results = demo.results()
    for r in results:
        say(f"{r.kind.value:12} {r.status.value:10} {r.detail}")
        for c in r.commands:
            say(f"    $ {' '.join(c.argv)}  -> rc {c.returncode}")
    statuses = {r.kind.value: r.status.value for r in results}
    say("\n$ sinfo -R")
    say(demo.slurm("sinfo", "-R").stdout.rstrip() or "(no drained nodes)")
    info = demo.job_info()
    say(f"\n$ scontrol show job {demo.job_id}   (fields of interest)")
    fields = ("JobState", "Reason", "Restarts", "ExcNodeList", "NodeList")
    say("  " + "  ".join(f"{k}={info.get(k)}" for k in fields))
    if demo.mode == "act":
        done = ("succeeded", "converged")
        demo.check(
            "drain and requeue executed",
            statuses.get("drain_node") in done and statuses.get("requeue_job") in done,
        )
        demo.check("sinfo -R shows the drain with sickbay's reason", drained_line(demo) is not None)
        demo.check("scontrol shows the requeue with ExcNodeList", requeued(demo) is not None)
    else:
        demo.check(
            "observe mode: drain and requeue recorded as dry runs",
            statuses == {"drain_node": "dry_run", "requeue_job": "dry_run"},
        )
        demo.check("observe mode: the node was not drained", drained_line(demo) is None)
        demo.check("observe mode: the job was not requeued", info.get("Restarts") == "0")


def _sink_caught_up(demo: Demo, timeout_s: float = 90.0) -> None:
    """Wait until the sink has committed everything on the incident and result topics (a loaded
    machine may still be starting it): its committed offsets against the log ends, from the broker."""
    from confluent_kafka import Consumer, TopicPartition

    from connectors.kafka import consumer_config

    s = demo.settings
    topics = (s.topics.incidents.name, s.topics.action_results.name)
    probe = Consumer(consumer_config(s.kafka_bootstrap, f"{s.topic_prefix}-sink", "sickbay-demo-probe"))

    def caught_up() -> bool:
        meta = probe.list_topics(timeout=5).topics
        parts = [TopicPartition(t, p) for t in topics for p in meta[t].partitions]
        committed = {(tp.topic, tp.partition): tp.offset for tp in probe.committed(parts, timeout=5)}
        for tp in parts:
            _low, high = probe.get_watermark_offsets(tp, timeout=5)
            if high > max(0, committed.get((tp.topic, tp.partition), 0)):
                return False
        return True

    try:
        wait_for("the ClickHouse sink to catch up", caught_up, timeout_s=timeout_s, interval_s=0.5)
    except TimeoutError as exc:
        say(f"  {exc}")
    finally:
        probe.close()


def query_store(demo: Demo, incident: Incident) -> None:
    step("7. ClickHouse (chdb, embedded) over the stored incident")
    _sink_caught_up(demo)
    demo.stop("sink")  # chdb allows one process per store: the sink flushes and lets go
    from connectors.sinks.clickhouse_schema import get_client

    s = demo.settings
    db = s.clickhouse_database  # a validated identifier
    cols = (
        "incident_id, revision, category, culprit_node, root_rule, root_code, "
        "round(toFloat64(confidence), 2) AS conf, "
        "length(JSONExtractArrayRaw(supporting)) AS supporting_groups, "
        "arrayStringConcat(coverage, ',') AS coverage"
    )
    sql = f"SELECT {cols} FROM {db}.incidents FINAL WHERE incident_id = %(id)s"  # noqa: S608 - validated db
    client = get_client(s.clickhouse_dsn)
    try:
        res = client.query(sql, parameters={"id": incident.incident_id})
        stored = client.query(
            f"SELECT kind, status FROM {db}.action_results FINAL "  # noqa: S608 - a validated identifier
            "WHERE incident_id = %(id)s ORDER BY kind",
            parameters={"id": incident.incident_id},
        ).result_rows
    finally:
        client.close()
    say(sql.replace("%(id)s", f"'{incident.incident_id}'"))
    say("  " + " | ".join(res.column_names))
    for row in res.result_rows:
        say("  " + " | ".join(str(v) for v in row))
    demo.check(
        "incident stored in ClickHouse", len(res.result_rows) == 1 and res.result_rows[0][3] == FAULT_NODE
    )
    demo.check(
        "action results stored in ClickHouse", {kind for kind, _ in stored} == {"drain_node", "requeue_job"}
    )


def report(demo: Demo, incident: Incident, fault_to_action: float) -> int:
    step("result")
    for name, ok in demo.checks.items():
        say(f"  [{'ok' if ok else 'FAILED'}] {name}")
    what = f"{FAULT_NODE} drained" if demo.mode == "act" else "dry-run actions recorded"
    say(f"\nfault line injected → {what}: {fault_to_action:.2f} s")
    ok = all(demo.checks.values())
    key = "fault_to_drain_s" if demo.mode == "act" else "fault_to_advice_s"
    summary = {
        "demo": "ok" if ok else "failed",
        "mode": demo.mode,
        key: round(fault_to_action, 3),
        "incident_id": incident.incident_id,
        "job_id": demo.job_id,
    }
    say(codec.dumps(summary).decode())
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
        for component in reversed(demo.started):
            _component(component, "down", demo.env)
