"""``make score``: seeded simulator scenarios through ``sickbay diagnose`` and the streaming pipeline.

(a) diagnose: each scenario's log folder goes through the same in-process engine as
    ``sickbay diagnose DIR --format json`` (``Diagnoser().run`` + ``summary``); its proposed
    actions are what the decide policy makes of that verdict.
(b) stream: one Faust worker is started as ``sickbay demo`` starts it (its own process,
    fresh topic prefix, observe mode) on the real local broker; the scenarios' records are
    produced to ``<prefix>.raw.logs`` in shipper shapes, many scenarios at once with distinct
    job ids and nodes, paced by event time; incidents and actions are read back.

Per scenario type and overall it prints category, culprit, restartable and action accuracy,
false actions on healthy noise, incident latency after the decisive record (p50/p99) and time
to action, appends the table to benchmarks/RESULTS.md, and ends with one JSON line.

Definitions (docs/simulator.md): culprit accuracy counts only scenarios whose truth names a
culprit node; a scenario without any incident scores category ``unknown``, restartable true
and no actions; latency is the first incident revision with the right category (and culprit
node, when the truth names one) observed on the incidents topic, minus the wall time the
decisive record was produced (floored at 0); a false isolation is a drain of a node the
truth does not drain.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.machine import RESULTS, describe, today
from connectors.sources.simulator import SCENARIOS, SimOptions, batch_plan, generate, write_files
from connectors.sources.simulator.output import KafkaOut, Record, iter_records, pace, play
from connectors.sources.simulator.scenario import default_t0
from connectors.sources.simulator.shippers import Shipping
from connectors.sources.simulator.truth import GroundTruth
from schemas import codec
from schemas.actions import Action, ActionKind
from schemas.incidents import Category, Incident, IncidentStatus, RootCause
from streams.settings import REPO_ROOT, Settings

SECTION = "Scoreboard (`make score`)"
# The scoreboard profile: background dcgm samples off (the raw-logs path has no metrics reader yet, so
# every sample would only be dead-lettered; scenario-relevant samples are always emitted), jobs of 2-4
# nodes x 8 GPUs and 1-4 minutes of training before the fault, so 1,000 scenarios stream through one
# worker on 2 cores within the time budget without a backlog that would only measure queueing.
OPTIONS = SimOptions(telemetry_every_s=0.0, max_nodes=4, pre_fault_min_s=60.0, pre_fault_max_s=240.0)


@dataclass
class Verdict:
    category: str = Category.UNKNOWN.value
    culprit_node: str | None = None
    culprit_gpu: str | None = None
    restartable: bool = True
    actions: list[str] = field(default_factory=list)
    latency_s: float | None = None
    action_latency_s: float | None = None
    incident_seen: bool = False


@dataclass
class Row:
    truth: GroundTruth
    diag: Verdict | None = None
    stream: Verdict | None = None


def canonical(a: Action) -> str:
    if a.kind == ActionKind.DRAIN_NODE:
        return f"drain_node {a.node}"
    if a.exclude_nodes:
        return f"requeue_job {a.job_id} excluding {','.join(sorted(a.exclude_nodes))}"
    return f"requeue_job {a.job_id}"


def scenario_options(i: int, name: str, seed: int) -> dict[str, Any]:
    """Distinct nodes and job ids per scenario, so concurrent scenarios never share either."""
    st = SCENARIOS[name]
    return {"options": OPTIONS, "node_base": 1 + i * 8 * 3 * st.node_sets, "job_number": 300_000 + i}


# -- (a) diagnose ------------------------------------------------------------------------------------

_DIAG: Any = None


def _diagnose_one(job: tuple[int, str, int, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """In a pool worker: generate, write the folder, run the diagnose engine, derive actions."""
    global _DIAG  # noqa: PLW0603 - one engine (rule catalog) per worker process
    from streams.decide.policy import PolicyConfig, advise
    from streams.diagnose.driver import Diagnoser, summary

    i, name, seed, root = job
    if _DIAG is None:
        _DIAG = Diagnoser()
    sc = generate(name, seed, t0=default_t0(seed), **scenario_options(i, name, seed))
    folder = write_files(sc, Path(root))
    now = sc.truth.end_time + timedelta(hours=1)
    result = _DIAG.run([str(folder / "logs")], now)
    out = summary(result)
    v = result.verdict
    verdict: dict[str, Any] = {"category": out["category"], "restartable": bool(out["restartable"])}
    if v is not None and v.culprit is not None:
        verdict.update(culprit_node=v.culprit.node, culprit_gpu=v.culprit.gpu)
    if v is not None:
        root_cause = out["root_cause"]
        assert isinstance(root_cause, dict)
        inc = Incident(
            incident_id=f"diag-{sc.truth.scenario_id}",
            revision=1,
            cluster="diagnose",
            job_id=sc.truth.job_id,
            attempt=1,
            status=IncidentStatus.OPEN,
            category=Category(str(out["category"])),
            root_cause=RootCause(
                rule=root_cause["rule"],
                summary=root_cause["summary"],
                signal_id="diag",
                event_time=now,
                text=str(root_cause["text"])[:1024],
            ),
            isolate=list(out["isolate"]),  # type: ignore[call-overload]
            restartable=bool(out["restartable"]),
            confidence=float(out["confidence"]),  # type: ignore[arg-type]
            opened_at=now,
            updated_at=now,
            first_signal_time=now,
        )
        actions, _ = advise(inc, PolicyConfig(), now)
        verdict["actions"] = sorted(canonical(a) for a in actions)
    shutil.rmtree(folder, ignore_errors=True)
    return codec.loads(codec.dumps(sc.truth)), verdict


def run_diagnose(plan: list[tuple[int, str, int]], workdir: Path, procs: int) -> list[Row]:
    root = workdir / "diagnose"
    root.mkdir(parents=True, exist_ok=True)
    jobs = [(i, name, seed, str(root)) for i, name, seed in plan]
    rows: list[Row] = []
    with ProcessPoolExecutor(max_workers=procs) as pool:
        for truth, verdict in pool.map(_diagnose_one, jobs, chunksize=8):
            rows.append(Row(truth=GroundTruth.model_validate(truth), diag=Verdict(**verdict)))
    return rows


# -- (b) stream ---------------------------------------------------------------------------------------


class Reader(threading.Thread):
    """Reads incidents and actions as they appear, stamping each with the wall time it was seen."""

    def __init__(self, bootstrap: str, topics: list[str], group: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        from connectors.kafka import consumer_config

        self.consumer = Consumer(consumer_config(bootstrap, group, "sickbay-score"))
        self.consumer.subscribe(topics)
        self.seen: list[tuple[float, str, bytes]] = []
        self.stopping = threading.Event()
        self.last_seen = time.time()

    def run(self) -> None:
        while not self.stopping.is_set():
            msg = self.consumer.poll(0.1)
            value = msg.value() if msg is not None and msg.error() is None else None
            if msg is None or value is None:
                continue
            now = time.time()
            self.seen.append((now, msg.topic() or "", value))
            self.last_seen = now
        self.consumer.close()


def _kafka(action: str) -> int:
    return subprocess.call(
        ["bash", str(REPO_ROOT / "deploy/local/kafka.sh"), action],
        stdout=subprocess.DEVNULL if action == "status" else None,
    )


def _stream_table(
    plan: list[tuple[int, str, int]], t_play: datetime, args: argparse.Namespace
) -> tuple[list[tuple[float, int, Record]], list[str]]:
    """Every scenario's records on one wall-clock timetable: scenario k starts ``k * interval`` in."""
    table: list[tuple[float, int, Record]] = []
    ids: list[str] = []
    for k, (i, name, seed) in enumerate(plan):
        start_s = k * args.interval
        sc = generate(name, seed, t0=t_play + timedelta(seconds=start_s), **scenario_options(i, name, seed))
        ids.append(sc.truth.scenario_id)
        recs = list(iter_records(sc.events, Shipping(seed)))
        if sc.truth.decisive_line is None:  # a hang: the decisive moment is a time, not a record
            marker = Record(sc.truth.decisive_time, b"", b"", True, "marker")
            recs = sorted([*recs, marker], key=lambda r: r.time)
        table.extend(
            (offset, k, rec)
            for offset, rec in pace(recs, speed=args.speed, max_gap_s=args.max_gap, start_s=start_s)
        )
    table.sort(key=lambda x: x[0])
    return table, ids


def _settle(reader: Reader, settle_s: float) -> None:
    """Wait ``settle_s`` (longer than the root grace), a little longer while revisions still arrive;
    the closing revisions that come ``incident_quiet_s`` later are not waited for."""
    t = time.time()
    while time.time() - t < settle_s or time.time() - reader.last_seen < 5:
        if time.time() - t > settle_s + 20:
            break
        time.sleep(0.5)


def run_stream(
    plan: list[tuple[int, str, int]], rows: dict[str, Row], workdir: Path, args: argparse.Namespace
) -> dict[str, Any]:
    from connectors.kafka import delete_topics, ensure_topics, wait_for_broker
    from streams.cli.demo import Demo, wait_for

    started_kafka = False
    if _kafka("status") != 0:
        print("starting the local Kafka broker (deploy/local/kafka.sh up)", file=sys.stderr)
        if _kafka("up") != 0:
            raise RuntimeError("the local Kafka broker did not start")
        started_kafka = True
    base = Settings()
    wait_for_broker(base.kafka_bootstrap, 60)
    run_id = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    env = {
        **os.environ,
        "SICKBAY_TOPIC_PREFIX": f"score{run_id}",
        "SICKBAY_APP_ID": f"sickbay-score{run_id}",
        "SICKBAY_MODE": "observe",
        "SICKBAY_PYTHON": sys.executable,
        "SICKBAY_POLICY_FILE": str(REPO_ROOT / "benchmarks" / "scoreboard_policy.toml"),
    }
    demo = Demo(run_id=run_id, base=base, workdir=workdir, env=env, mode="observe")
    s = demo.settings
    ensure_topics(s.kafka_bootstrap, s.topics.all(), s.replication_factor)
    reader = Reader(
        s.kafka_bootstrap, [s.topics.incidents.name, s.topics.actions.name], f"score{run_id}-reader"
    )
    t_ready = time.monotonic()
    demo.spawn("worker", "worker")
    try:
        # generate while the worker starts: event times begin at the planned start
        table, ids = _stream_table(plan, datetime.now(UTC) + timedelta(seconds=30), args)
        print(f"stream: {len(table)} records for {len(plan)} scenarios", file=sys.stderr)
        worker_log = workdir / "worker.log"
        wait_for(
            "the Faust worker to be ready",
            lambda: "Worker]: Ready" in worker_log.read_text(errors="replace"),
            180,
            0.25,
        )
        print(f"worker ready in {time.monotonic() - t_ready:.1f}s", file=sys.stderr)
        reader.start()
        out = KafkaOut(s.kafka_bootstrap, s.topics.raw_logs.name, "sickbay-score")
        decisive_wall: dict[int, float] = {}
        index = {id(rec): k for _, k, rec in table}

        def send(_offset: float, rec: Record) -> None:
            if rec.kind != "marker":
                out.send(rec)
            if rec.decisive:
                decisive_wall.setdefault(index[id(rec)], time.time())

        t0 = time.monotonic()
        play(((off, rec) for off, _, rec in table), send, poll=lambda: out.producer.poll(0))
        left = out.close()
        produced_s = time.monotonic() - t0
        print(f"stream: produced in {produced_s:.0f}s ({left} undelivered); settling", file=sys.stderr)
        _settle(reader, args.settle)
        reader.stopping.set()
        reader.join(10)
    finally:
        demo.stop("worker")
        if not args.keep_kafka:  # the run's topics: left behind they slow every later broker start
            delete_topics(s.kafka_bootstrap, [t.name for t in s.topics.all()])
        if started_kafka and not args.keep_kafka:
            _kafka("down")
    score_stream([rows[i] for i in ids], reader.seen, decisive_wall)
    return {"records": len(table), "produced_s": round(produced_s, 1), "undelivered": left}


def score_stream(
    plan_rows: list[Row], seen: list[tuple[float, str, bytes]], decisive_wall: dict[int, float]
) -> None:
    """Each row's stream verdict from the incidents and actions seen for its job."""
    incidents: dict[str, list[tuple[float, Incident]]] = defaultdict(list)
    actions: dict[str, list[tuple[float, Action]]] = defaultdict(list)
    for wall, topic, value in seen:
        try:
            obj = codec.loads(value)
            if topic.endswith(".incidents"):
                inc = Incident.model_validate(obj)
                incidents[inc.job_id].append((wall, inc))
            else:
                act = Action.model_validate(obj)
                actions[act.job_id or "?"].append((wall, act))
        except (ValueError, TypeError):
            continue
    for k, row in enumerate(plan_rows):
        t = row.truth
        v = Verdict()
        seen_inc = sorted(incidents.get(t.job_id, []), key=lambda x: (x[1].attempt, x[1].revision, x[0]))
        if seen_inc:
            final = seen_inc[-1][1]
            v.incident_seen = True
            v.category = final.category.value
            v.culprit_node = final.culprit.node if final.culprit else None
            v.culprit_gpu = final.culprit.gpu if final.culprit else None
            v.restartable = final.restartable
        v.actions = sorted({canonical(a) for _, a in actions.get(t.job_id, [])})
        d_wall = decisive_wall.get(k)
        if d_wall is not None:
            right = [w for w, inc in seen_inc if _right(t, inc)]
            if right:
                v.latency_s = max(0.0, min(right) - d_wall)
            acts = [w for w, _ in actions.get(t.job_id, [])]
            if acts and t.actions:
                v.action_latency_s = max(0.0, min(acts) - d_wall)
        row.stream = v


def _right(t: GroundTruth, inc: Incident) -> bool:
    if inc.category.value != t.category.value:
        return False
    return t.culprit_node is None or (inc.culprit is not None and inc.culprit.node == t.culprit_node)


# -- report -------------------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _acc(hits: list[bool]) -> float | None:
    return sum(hits) / len(hits) if hits else None


def _false_isolations(t: GroundTruth, v: Verdict) -> int:
    wanted = {a for a in t.actions if a.startswith("drain_node ")}
    return sum(1 for a in v.actions if a.startswith("drain_node ") and a not in wanted)


def measures(rows: list[Row], half: str) -> dict[str, Any]:
    vs = [(r.truth, getattr(r, half)) for r in rows if getattr(r, half) is not None]
    lat = [v.latency_s for _, v in vs if v.latency_s is not None]
    act_lat = [v.action_latency_s for _, v in vs if v.action_latency_s is not None]
    return {
        "n": len(vs),
        "category_acc": _acc([v.category == t.category.value for t, v in vs]),
        "culprit_acc": _acc([v.culprit_node == t.culprit_node for t, v in vs if t.culprit_node]),
        "restartable_acc": _acc([v.restartable == t.restartable for t, v in vs]),
        "action_acc": _acc([sorted(v.actions) == sorted(t.actions) for t, v in vs]),
        "false_actions_healthy": sum(1 for t, v in vs if t.healthy and v.actions),
        "false_isolations": sum(_false_isolations(t, v) for t, v in vs),
        "latency_p50_s": _pct(lat, 0.5),
        "latency_p99_s": _pct(lat, 0.99),
        "latency_n": len(lat),
        "action_latency_p50_s": _pct(act_lat, 0.5),
        "action_latency_p99_s": _pct(act_lat, 0.99),
    }


def _f(x: float | None, pct: bool = True) -> str:
    if x is None:
        return "-"
    return f"{100 * x:.0f}%" if pct else f"{x:.2f}"


def table(rows: list[Row], stream: bool) -> list[str]:
    head = "| scenario type | n | diag cat | diag culprit | diag restart | diag actions | diag false |"
    sep = "|---|---|---|---|---|---|---|"
    if stream:
        head += (
            " stream cat | stream culprit | stream restart | stream actions | stream false | p50 s | p99 s |"
            " action p50 s |"
        )
        sep += "---|---|---|---|---|---|---|---|"
    lines = [head, sep]
    groups: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        groups[r.truth.scenario_type].append(r)
    order = [n for n in SCENARIOS if n in groups]
    flavours = sorted({r.truth.flavour for r in rows})
    for name in [*order, "ALL", *(f"ALL {f}" for f in flavours)]:
        if name == "ALL":
            rs = rows
        elif name.startswith("ALL "):
            rs = [r for r in rows if r.truth.flavour == name[4:]]
        else:
            rs = groups[name]
        d = measures(rs, "diag")
        cells = [
            f"**{name}**" if name.startswith("ALL") else name,
            str(len(rs)),
            _f(d["category_acc"]),
            _f(d["culprit_acc"]),
            _f(d["restartable_acc"]),
            _f(d["action_acc"]),
            str(d["false_isolations"] + d["false_actions_healthy"]),
        ]
        if stream:
            m = measures(rs, "stream")
            cells += [
                _f(m["category_acc"]),
                _f(m["culprit_acc"]),
                _f(m["restartable_acc"]),
                _f(m["action_acc"]),
                str(m["false_isolations"] + m["false_actions_healthy"]),
                _f(m["latency_p50_s"], False),
                _f(m["latency_p99_s"], False),
                _f(m["action_latency_p50_s"], False),
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def write_results(lines: list[str], summary: dict[str, Any]) -> None:
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    marker = f"## {SECTION}\n"
    head, _, tail = text.partition(marker)
    _, sep, rest = tail.partition("\n## ")
    history_head = (
        "| date | machine | scenarios | diag cat | stream cat | culprit | false isol. | p99 s | runtime s |"
    )
    old_history = [ln for ln in tail.split("\n## ")[0].splitlines() if ln.startswith("| 20")]
    row = (
        f"| {today()} | {describe()} | {summary['scenarios']} | {_f(summary['diagnose_category_acc'])} | "
        f"{_f(summary['stream_category_acc'])} | {_f(summary['culprit_acc'])} | "
        f"{summary['false_isolations']} | "
        f"{_f(summary['incident_latency_p99_s'], False)} | {summary['runtime_s']:.0f} |"
    )
    body = [
        marker.rstrip("\n"),
        "",
        "Seeded simulator scenarios (docs/simulator.md) through `sickbay diagnose` (diag) and the streaming "
        "pipeline on the local broker (stream). Accuracy per scenario type; *false* = false isolations plus "
        "actions on healthy noise; p50/p99 = incident latency after the decisive record; culprit counts only "
        "scenarios whose truth names a culprit node. Goals: root cause ≥ 99 %, culprit ≥ 98 %, false "
        "isolation 0, "
        "p99 ≤ 2 s.",
        "",
        history_head,
        "|---|---|---|---|---|---|---|---|---|",
        *old_history,
        row,
        "",
        f"### Latest run ({today()}, seed {summary['seed']})",
        "",
        *lines,
        "",
    ]
    new = head.rstrip("\n") + "\n\n" + "\n".join(body) + (sep + rest if sep else "")
    RESULTS.write_text(new if new.endswith("\n") else new + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="scenarios (cycling through every type)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--stream-count", type=int, default=None, help="scenarios for the stream half (default all)"
    )
    parser.add_argument("--no-stream", action="store_true", help="score diagnose only")
    parser.add_argument("--speed", type=float, default=60.0, help="replay speed (event time / wall time)")
    parser.add_argument("--max-gap", type=float, default=2.0, help="cap on one wait between records, seconds")
    parser.add_argument("--interval", type=float, default=0.55, help="seconds between scenario starts")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds to wait for late incidents")
    parser.add_argument("--procs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    parser.add_argument(
        "--keep-kafka", action="store_true", help="leave a broker this run started, and the run's topics"
    )
    parser.add_argument("--no-results", action="store_true", help="do not write benchmarks/RESULTS.md")
    args = parser.parse_args()
    # a SIGTERM (a CI timeout, kill) unwinds through the finally blocks: the worker is stopped and the
    # run's topics are dropped instead of a worker left running on its own
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    workdir = Settings().state_dir / "score" / datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    workdir.mkdir(parents=True, exist_ok=True)
    plan = batch_plan(args.count, args.seed)

    print(f"(a) diagnose: {len(plan)} scenarios, {len({n for _, n, _ in plan})} types", file=sys.stderr)
    t = time.monotonic()
    diag_rows = run_diagnose(plan, workdir, args.procs)
    rows = {r.truth.scenario_id: r for r in diag_rows}
    print(f"(a) diagnose done in {time.monotonic() - t:.0f}s", file=sys.stderr)

    stream_info: dict[str, Any] = {}
    do_stream = not args.no_stream
    if do_stream:
        n = args.stream_count if args.stream_count is not None else args.count
        sub = plan[:n]
        print(f"(b) stream: {len(sub)} scenarios", file=sys.stderr)
        t = time.monotonic()
        stream_info = run_stream(sub, rows, workdir, args)
        print(f"(b) stream done in {time.monotonic() - t:.0f}s", file=sys.stderr)

    all_rows = list(rows.values())
    with (workdir / "scenarios.jsonl").open("wb") as fh:  # per scenario: truth and both verdicts
        for r in all_rows:
            fh.write(
                codec.dumps(
                    {
                        "truth": r.truth,
                        "diagnose": r.diag.__dict__ if r.diag else None,
                        "stream": r.stream.__dict__ if r.stream else None,
                    }
                )
                + b"\n"
            )
    print(f"per-scenario details: {workdir / 'scenarios.jsonl'}", file=sys.stderr)
    lines = table(all_rows, do_stream)
    print("\n".join(lines))
    d = measures(all_rows, "diag")
    st = measures(all_rows, "stream") if do_stream else {}
    summary = {
        "scenarios": len(all_rows),
        "types": len({r.truth.scenario_type for r in all_rows}),
        "seed": args.seed,
        "diagnose_category_acc": d["category_acc"],
        "diagnose_culprit_acc": d["culprit_acc"],
        "diagnose_restartable_acc": d["restartable_acc"],
        "diagnose_action_acc": d["action_acc"],
        "diagnose_false_isolations": d["false_isolations"],
        "diagnose_false_actions_healthy": d["false_actions_healthy"],
        "stream_scenarios": st.get("n"),
        "stream_category_acc": st.get("category_acc"),
        "culprit_acc": st.get("culprit_acc") if do_stream else d["culprit_acc"],
        "stream_restartable_acc": st.get("restartable_acc"),
        "stream_action_acc": st.get("action_acc"),
        "false_isolations": st.get("false_isolations") if do_stream else d["false_isolations"],
        "false_actions_healthy": st.get("false_actions_healthy"),
        "incident_latency_p50_s": st.get("latency_p50_s"),
        "incident_latency_p99_s": st.get("latency_p99_s"),
        "incident_latency_n": st.get("latency_n"),
        "action_latency_p50_s": st.get("action_latency_p50_s"),
        "action_latency_p99_s": st.get("action_latency_p99_s"),
        **{f"stream_{k}": v for k, v in stream_info.items()},
        "runtime_s": round(time.monotonic() - started, 1),
    }
    summary = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in summary.items()}
    if not args.no_results:
        write_results(lines, summary)
    shutil.rmtree(workdir / "diagnose", ignore_errors=True)
    print(codec.dumps(summary).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
