"""``sickbay collect slurm`` against the real slurmctld + 4 slurmd of deploy/local/slurm.sh.

Jobs are short and named ``sickbay-collect-test-*``; the node drained here is
resumed in a finaliser. Records go through the real normaliser, extractor and
correlator topology, so the tests prove topology works from polling alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from connectors.kafka import consumer_config, ensure_topics
from connectors.sources.slurm_collector import SlurmCollector, slurm_runner
from schemas import codec
from schemas.base import utcnow
from schemas.signals import Signal
from schemas.topics import TopicCatalog
from streams.correlate.correlator import apply_topology
from streams.extract.extractor import Extractor
from streams.extract.normalize import normalize
from streams.settings import REPO_ROOT
from tests.factories import ListSink

pytestmark = pytest.mark.integration
DRAIN_NODE = "gpu-04"
EXTRACTOR = Extractor()


def _env(conf: Path) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(conf)}


def _sbatch(conf: Path, nodes: str, script: str) -> str:
    name = f"sickbay-collect-test-{uuid.uuid4().hex[:6]}"
    n = len(nodes.split(","))
    argv = [
        "sbatch",
        "--parsable",
        "-J",
        name,
        "-N",
        str(n),
        "-w",
        nodes,
        "-o",
        "/dev/null",
        "--wrap",
        script,
    ]
    run = subprocess.run(argv, capture_output=True, text=True, env=_env(conf), check=False)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip().split(";")[0]


def _poll_until(
    col: SlurmCollector, sink: ListSink, done: Callable[[list[dict[str, Any]]], bool], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        col.poll_once()
        col.tail_log()
        if done(sink.lines()):
            return
        time.sleep(0.5)
    pytest.fail("condition not met in time; records: " + "\n".join(r["line"] for r in sink.lines()))


def _signals(sink: ListSink) -> list[Signal]:
    now = utcnow() + timedelta(minutes=1)
    out: list[Signal] = []
    for _, value, key in sink.records:
        out.extend(EXTRACTOR.extract(normalize(value, key.decode() if key else None), now))
    return out


@pytest.fixture
def scontrol(slurm_conf: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["scontrol", *args], capture_output=True, text=True, env=_env(slurm_conf), check=False
        )

    return run


@pytest.fixture
def jobs(slurm_conf: Path) -> Iterator[list[str]]:
    submitted: list[str] = []
    yield submitted
    for job_id in submitted:
        subprocess.run(["scancel", job_id], env=_env(slurm_conf), check=False, capture_output=True)


def test_polling_alone_gives_the_correlator_the_job_topology_and_the_exit_status(slurm_conf, jobs):
    sink = ListSink()
    col = SlurmCollector(sink, "raw", slurm_runner(slurm_conf), controller_host="slurmctl", use_sacct=True)
    col.poll_once()  # baseline
    sink.records.clear()
    job_id = _sbatch(slurm_conf, "gpu-03,gpu-04", "sleep 2; exit 3")
    jobs.append(job_id)

    _poll_until(col, sink, lambda ls: any(f"_job_complete: JobId={job_id} " in r["line"] for r in ls), 60)

    topology = [s for s in _signals(sink) if s.job_id == job_id and s.role == "topology"]
    assert [s.rule for s in topology] == ["slurm.job_allocated", "slurm.job_complete"]
    topo, assigned = apply_topology(None, topology[0], "local")
    assert sorted(a.node for a in assigned) == ["gpu-03", "gpu-04"]
    assert {a.state for a in assigned} == {"assigned"}
    topo, released = apply_topology(topo, topology[1], "local")
    assert sorted((a.node, a.state) for a in released) == [("gpu-03", "released"), ("gpu-04", "released")]
    assert topo.end_state == "WEXITSTATUS 3"  # the job's real `exit 3`
    states = [
        r["line"].split("JobState=")[1].split()[0]
        for r in sink.lines()
        if "JobState=" in r["line"] and r["job_id"] == job_id
    ]
    assert states[0] in ("PENDING", "RUNNING") and states[-1] == "FAILED"
    assert all(k == b"slurmctl" for _, _, k in sink.records)
    assert col.coverage.sacct.startswith("unavailable: ")  # the local cluster has no accounting
    assert col.coverage.squeue_failed == 0 and col.coverage.sinfo_failed == 0


def _node_changes(sink: ListSink) -> list[str]:
    return [
        r["line"].split(" state ", 1)[1]
        for r in sink.lines()
        if f"sickbay-slurm: node {DRAIN_NODE} state " in r["line"]
    ]


def test_a_drained_node_becomes_a_node_state_change_and_a_reason_line_and_resuming_is_seen(
    slurm_conf, scontrol
):
    sink = ListSink()
    col = SlurmCollector(sink, "raw", slurm_runner(slurm_conf), controller_host="slurmctl", use_sacct=False)
    col.poll_once()
    sink.records.clear()
    reason = f"sickbay-collect-test drain {uuid.uuid4().hex[:6]}"
    try:
        res = scontrol("update", f"NodeName={DRAIN_NODE}", "State=DRAIN", f"Reason={reason}")
        assert res.returncode == 0, res.stderr
        _poll_until(col, sink, lambda ls: any(f"reason set to: {reason}" in r["line"] for r in ls), 30)
        drained = _node_changes(sink)
        assert (
            len(drained) == 1 and "DRAIN" in drained[0].split("-> ")[1] and f"Reason={reason}" in drained[0]
        )
        assert scontrol("update", f"NodeName={DRAIN_NODE}", "State=RESUME").returncode == 0
        _poll_until(col, sink, lambda ls: len(_node_changes(sink)) == 2, 30)
    finally:
        scontrol("update", f"NodeName={DRAIN_NODE}", "State=RESUME")
    resumed = _node_changes(sink)[1]
    assert "DRAIN" in resumed.split(" -> ")[0] and "DRAIN" not in resumed.split(" -> ")[1]
    assert col.coverage.changes == {"node_state": 2, "node_reason": 1}


def test_with_the_log_tailed_the_topology_lines_come_from_slurmctld_once_not_twice(slurm_conf, jobs):
    log_path = slurm_conf.parent / "log" / "slurmctld.log"
    assert log_path.is_file(), f"the local stack's slurmctld log is missing: {log_path}"
    sink = ListSink()
    col = SlurmCollector(
        sink, "raw", slurm_runner(slurm_conf), controller_host="slurmctl", log_path=log_path, use_sacct=False
    )
    col.poll_once()
    col.tail_log()  # from the end: nothing older than the test
    sink.records.clear()
    job_id = _sbatch(slurm_conf, "gpu-03", "sleep 1")
    jobs.append(job_id)

    _poll_until(
        col, sink, lambda ls: any(f"_job_complete: JobId={job_id} WEXITSTATUS 0" in r["line"] for r in ls), 60
    )

    allocations = [
        s
        for s in _signals(sink)
        if s.job_id == job_id and s.rule in ("slurm.job_allocated", "slurm.job_started_backfill")
    ]
    assert len(allocations) == 1
    assert allocations[0].attrs["nodes"] == ["gpu-03"]
    from_log = [r for r in sink.lines() if r["file"] == str(log_path)]
    assert any(f"JobId={job_id}" in r["line"] for r in from_log)
    assert all(r["line_no"] for r in from_log)
    assert col.coverage.log_readable is True and col.coverage.log_lines >= 2


def test_cli_puts_running_jobs_on_kafka_and_reports_what_it_reached(
    kafka_bootstrap, slurm_conf, jobs, tmp_path
):
    prefix = f"it{uuid.uuid4().hex[:8]}"
    cat = TopicCatalog(prefix=prefix, partitions=2, app_id=prefix)
    ensure_topics(kafka_bootstrap, cat.all())
    job_id = _sbatch(slurm_conf, "gpu-03", "sleep 20")
    jobs.append(job_id)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"],
            capture_output=True,
            text=True,
            env=_env(slurm_conf),
            check=False,
        )
        if out.stdout.strip() == "RUNNING":
            break
        time.sleep(0.3)
    env = {
        "SICKBAY_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "SICKBAY_TOPIC_PREFIX": prefix,
        "SICKBAY_PARTITIONS": "2",
        "SLURM_CONF": str(slurm_conf),
        "PATH": os.environ["PATH"],
        "SICKBAY_STATE_DIR": str(tmp_path),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "streams.cli.main", "collect", "slurm", "--once", "--host", "slurmctl"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report_line = next(line for line in proc.stderr.splitlines() if line.startswith("coverage "))
    report = codec.loads(report_line.removeprefix("coverage "))
    reached = {r["target"]: r for r in report["reached"]}
    assert (reached["squeue --json"]["ok"], reached["squeue --json"]["state"]) == (True, "1 ok, 0 failed")
    assert (reached["sacct"]["ok"], reached["sacct"]["state"]) == (False, "unavailable")
    assert reached[cat.raw_logs.name]["kind"] == "broker" and report["broker_reachable"]
    records = report["counts"]["records"]
    consumer = Consumer(consumer_config(kafka_bootstrap, f"it-{uuid.uuid4().hex}", "it"))
    consumer.subscribe([cat.raw_logs.name])
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(got) < records:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            assert msg.key() == b"slurmctl"
            got.append(codec.loads(msg.value() or b""))
    consumer.close()
    assert len(got) == records
    assert any(
        r["line"].endswith(f"sched: Allocate JobId={job_id} NodeList=gpu-03 #CPUs=1 Partition=gpu")
        for r in got
    )


def test_an_strigger_hook_writes_one_record_when_slurmctld_fires_it(
    kafka_bootstrap, slurm_conf, jobs, tmp_path
):
    prefix = f"it{uuid.uuid4().hex[:8]}"
    cat = TopicCatalog(prefix=prefix, partitions=2, app_id=prefix)
    ensure_topics(kafka_bootstrap, cat.all())
    hook = tmp_path / "sickbay-hook.sh"
    hook.write_text(
        "#!/bin/sh\n"
        f"cd {REPO_ROOT}\n"
        f"export SICKBAY_KAFKA_BOOTSTRAP={kafka_bootstrap} SICKBAY_TOPIC_PREFIX={prefix} SICKBAY_PARTITIONS=2\n"
        f'exec {sys.executable} -m streams.cli.main collect slurm-trigger --host slurmctl "$@" '
        f">>{tmp_path}/hook.log 2>&1\n"
    )
    hook.chmod(0o755)
    job_id = _sbatch(slurm_conf, "gpu-04", "sleep 1")
    jobs.append(job_id)
    run = subprocess.run(
        ["strigger", "--set", f"--jobid={job_id}", "--fini", f"--program={hook} job_fini"],
        capture_output=True,
        text=True,
        env=_env(slurm_conf),
        check=False,
    )
    assert run.returncode == 0, run.stderr
    consumer = Consumer(consumer_config(kafka_bootstrap, f"it-{uuid.uuid4().hex}", "it"))
    consumer.subscribe([cat.raw_logs.name])
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60  # slurmctld checks triggers about every 15 s
    while time.monotonic() < deadline and not got:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(codec.loads(msg.value() or b""))
    consumer.close()
    log = (tmp_path / "hook.log").read_text() if (tmp_path / "hook.log").exists() else "(no hook log)"
    assert got, f"the trigger did not fire within 60 s; hook log: {log}"
    assert got[0]["line"].endswith(f"sickbay-slurm: strigger event=job_fini JobId={job_id}")
    assert (got[0]["job_id"], got[0]["host"], got[0]["file"]) == (job_id, "slurmctl", "slurm:strigger")
