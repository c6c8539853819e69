"""The demo's fault remediated on Kubernetes, end to end, on the real broker and a real kube-apiserver.

Four GPU Nodes, a Kubeflow PyTorchJob (master + 3 workers) and its pods bound to them are written to the
API server (no kubelet or operator runs: the objects are made by hand, envtest-style). Then, as separate
processes on fresh topics: ``sickbay collect kubernetes`` (pod → node topology, the job's JobInfo),
``sickbay worker`` and ``sickbay adapter kubernetes``. The fault goes onto raw.logs as shippers write it:
Xid 79 in one node's kernel log (Fluent Bit tail, ``hostname``) and NCCL watchdog timeouts in the other
ranks' pod logs (Fluent Bit ``kubernetes`` filter). The assertions read the API server and the topics.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from lightkube import Client
from lightkube.resources.core_v1 import Node

from connectors.actuators.kubernetes_adapter import LABEL_KEY, TAINT_KEY
from connectors.actuators.kubernetes_client import PyTorchJob, as_dict
from connectors.kafka import ReliableProducer, consumer_config, ensure_topics
from schemas import codec
from schemas.actions import Action, ActionResult
from schemas.audit import AuditRecord
from schemas.incidents import Incident
from streams.cli.demo_kubernetes import (
    KubeJob,
    fault_records,
    make_nodes,
    pods_left,
    quarantined,
    recreate_pods,
    replica_affinities,
    restarted_away,
    seed_job,
    sickbay_events,
    teardown,
)
from streams.settings import REPO_ROOT, Settings
from tests.kubernetes import conftest as kube_fixtures

# The real API server (SICKBAY_KUBECONFIG, else deploy/local/kube.sh up), shared with tests/kubernetes/.
kubeconfig = kube_fixtures.kubeconfig
kube = kube_fixtures.kube

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(5400)]
DEADLINE_S = 60.0


@dataclass
class Story:
    """One run's topics, processes and the scene in the API server."""

    run: str
    env: dict[str, str]
    settings: Settings
    logs: Path
    job: KubeJob
    culprit: str
    nodes: list[str]  # the job's four and a spare the restarted job can move to
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def spawn(self, name: str, *argv: str) -> None:
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "streams.cli.main", *argv],
            env=self.env,
            cwd=REPO_ROOT,
            stdout=(self.logs / f"{name}.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def tail(self) -> str:
        return "\n".join(
            f"--- {p.name} ---\n{p.read_text(errors='replace')[-2500:]}"
            for p in sorted(self.logs.glob("*.log"))
        )

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def _consume(
    bootstrap: str, topic: str, stop: Callable[[list[bytes]], bool], timeout_s: float
) -> list[bytes]:
    """Read ``topic`` from the start until ``stop(values)`` holds or the time is up."""
    consumer = Consumer(consumer_config(bootstrap, f"e2e-read-{uuid.uuid4().hex}", "e2e"))
    consumer.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not stop(out):
            msg = consumer.poll(0.3)
            value = msg.value() if msg is not None and msg.error() is None else None
            if value is not None:
                out.append(value)
    finally:
        consumer.close()
    return out


def _until(what: str, check: Callable[[], bool], story: Story, timeout_s: float = DEADLINE_S) -> None:
    """Poll ``check`` every 50 ms; fail with the roles' logs when it does not hold in time."""
    _first(story, {what: check}, timeout_s)


def _first(
    story: Story, checks: dict[str, Callable[[], bool]], timeout_s: float = DEADLINE_S
) -> dict[str, float]:
    """Poll checks together (the adapter may satisfy them in any order): when each first held."""
    done: dict[str, float] = {}
    t0 = time.monotonic()
    while len(done) < len(checks) and time.monotonic() - t0 < timeout_s:
        for what, check in checks.items():
            if what not in done and check():
                done[what] = time.monotonic()
        for name, proc in story.procs.items():
            if proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode} while waiting\n{story.tail()}")
        if len(done) < len(checks):
            time.sleep(0.05)
    missing = sorted(set(checks) - set(done))
    if missing:
        pytest.fail(f"not within {timeout_s:.0f}s: {', '.join(missing)}\n{story.tail()}")
    return done


@pytest.fixture
def story_for(
    kafka_bootstrap: str, kube: Client, kubeconfig: Path, tmp_path: Path
) -> Iterator[Callable[[str], Story]]:
    stories: list[Story] = []
    made: list[str] = []

    def start(mode: str) -> Story:
        run = uuid.uuid4().hex[:8]
        nodes = [f"gpu-{run}-0{i}" for i in range(1, 6)]
        make_nodes(kube, nodes, run, made)
        job = seed_job(kube, f"e2e-{run}", f"llm-{run}", nodes[:4])
        env = {
            **os.environ,
            "SICKBAY_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "SICKBAY_TOPIC_PREFIX": f"e2ek{run}",
            "SICKBAY_APP_ID": f"e2ek{run}",
            "SICKBAY_STATE_DIR": str(tmp_path / run),
            "SICKBAY_KUBECONFIG": str(kubeconfig),
            "SICKBAY_MODE": mode,
            "SICKBAY_ROOT_GRACE_S": "2",
            "SICKBAY_INCIDENT_QUIET_S": "60",
        }
        settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=f"e2ek{run}", app_id=f"e2ek{run}")
        ensure_topics(kafka_bootstrap, settings.topics.all())
        logs = tmp_path / run / "logs"
        logs.mkdir(parents=True)
        story = Story(run=run, env=env, settings=settings, logs=logs, job=job, culprit=nodes[2], nodes=nodes)
        stories.append(story)
        offsets = str(tmp_path / run / "kube-watch.json")
        story.spawn("collect", "collect", "kubernetes", "--namespace", job.namespace, "--offsets", offsets)
        story.spawn("worker", "worker")
        story.spawn("adapter", "adapter", "kubernetes")
        worker_log = logs / "worker.log"
        _until("the Faust worker is ready", lambda: "Worker]: Ready" in worker_log.read_text(), story, 120)
        cat = settings.topics
        jobs = _consume(kafka_bootstrap, cat.topology_jobs.name, bool, DEADLINE_S)
        assigned = _consume(kafka_bootstrap, cat.topology_node.name, lambda v: len(v) >= 4, DEADLINE_S)
        assert jobs and len(assigned) >= 4, f"the watch published no topology\n{story.tail()}"
        time.sleep(2.0)  # the worker's job-info and route agents read them before the fault
        return story

    yield start
    for story in stories:
        story.stop()
        teardown(kube, story.job, [])  # the job as it stands last (recreated pods included)
    teardown(kube, None, made)


def _inject(story: Story, culprit: str | None = None) -> float:
    """The fault lines on raw.logs; returns when the Xid line was handed to the producer."""
    culprit = culprit or story.culprit
    xid, timeouts = fault_records(story.job, culprit, datetime.now(UTC))
    producer = ReliableProducer(story.settings.kafka_bootstrap, "e2e-k8s-injector", linger_ms=0)
    topic = story.settings.topics.raw_logs.name
    t_fault = time.monotonic()
    producer.produce(topic, xid, key=culprit.encode())
    others = [r.node for r in story.job.replicas if r.node != culprit]
    for rec, node in zip(timeouts, others, strict=True):
        producer.produce(topic, rec, key=node.encode())
    assert producer.flush(10) == 0 and not producer.failed
    return t_fault


def _models(story: Story, topic: str, model: Any, want: Callable[[list[Any]], bool]) -> list[Any]:
    def parsed(values: list[bytes]) -> list[Any]:
        return [model.model_validate(codec.loads(v)) for v in values]

    return parsed(_consume(story.settings.kafka_bootstrap, topic, lambda v: want(parsed(v)), 30))


def test_xid79_cordons_and_taints_the_node_and_restarts_the_pytorchjob_away_from_it(
    story_for: Callable[[str], Story], kube: Client
) -> None:
    story = story_for("act")
    job, culprit = story.job, story.culprit
    t_fault = _inject(story)
    cordoned, patched = f"{culprit} cordoned and tainted", "PyTorchJob templates exclude the node"
    at = _first(
        story,
        {cordoned: lambda: quarantined(kube, culprit), patched: lambda: restarted_away(kube, job, culprit)},
    )
    print(
        f"\nfault injected → node cordoned: {at[cordoned] - t_fault:.2f} s; "
        f"→ PyTorchJob patched: {at[patched] - t_fault:.2f} s"
    )
    _until("the job's pods deleted", lambda: not pods_left(kube, job), story, 30)

    node = as_dict(kube.get(Node, culprit))
    assert node["metadata"]["labels"][LABEL_KEY] == "true"
    assert [t["effect"] for t in node["spec"]["taints"] if t["key"] == TAINT_KEY] == ["NoSchedule"]
    for other in (r.node for r in job.replicas if r.node != culprit):
        assert not quarantined(kube, other), f"{other} was not implicated"
    for replica, affinity in replica_affinities(kube, job).items():
        terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        assert terms == [
            {
                "matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [culprit]}
                ]
            }
        ], replica
    _until(
        "Events on the Node, every pod and the PyTorchJob",
        lambda: len(sickbay_events(kube, job)) >= len(job.replicas) + 2,
        story,
        10,
    )
    events = sickbay_events(kube, job)
    by_kind = {(e["involvedObject"]["kind"], e["reason"]) for e in events}
    assert by_kind == {
        ("Node", "SickbayQuarantine"),
        ("Pod", "SickbayRestart"),
        ("PyTorchJob", "SickbayRestart"),
    }

    cat = story.settings.topics
    incidents = _models(story, cat.incidents.name, Incident, bool)
    assert incidents and {i.incident_id for i in incidents} == {incidents[0].incident_id}
    latest = max(incidents, key=lambda i: i.revision)
    assert latest.job_id == job.name
    assert (latest.attempt, latest.job_nodes) == (1, sorted(r.node for r in job.replicas))
    assert "scheduler" in latest.coverage  # the job's placement came from the Kubernetes watch
    assert latest.culprit is not None and latest.culprit.node == culprit
    assert latest.category.value == "hardware_gpu"
    audits = _models(story, cat.audit.name, AuditRecord, lambda a: any(x.event == "decision" for x in a))
    decision = next(a for a in audits if a.event == "decision")
    assert decision.incident_id == latest.incident_id and decision.mode == "act"
    assert decision.details["culprit"]["node"] == culprit
    actions = _models(story, cat.actions.name, Action, lambda a: len(a) >= 2)
    assert {a.kind.value for a in actions} == {"drain_node", "requeue_job"}
    requeue = next(a for a in actions if a.kind.value == "requeue_job")
    assert (requeue.scheduler, requeue.namespace, requeue.workload_kind) == (
        "kubernetes",
        job.namespace,
        "pytorchjob",
    )
    assert requeue.exclude_nodes == [culprit] and not requeue.dry_run


def test_observe_mode_publishes_dry_runs_and_changes_nothing_in_the_api_server(
    story_for: Callable[[str], Story], kube: Client
) -> None:
    story = story_for("observe")
    job, culprit = story.job, story.culprit
    before = as_dict(kube.get(PyTorchJob, job.name, namespace=job.namespace))
    _inject(story)
    cat = story.settings.topics
    results = _models(story, cat.action_results.name, ActionResult, lambda r: len(r) >= 2)
    assert {(r.kind.value, r.status.value) for r in results} == {
        ("drain_node", "dry_run"),
        ("requeue_job", "dry_run"),
    }, story.tail()
    actions = _models(story, cat.actions.name, Action, lambda a: len(a) >= 2)
    assert actions and all(a.dry_run and a.scheduler == "kubernetes" for a in actions)
    audits = _models(story, cat.audit.name, AuditRecord, lambda a: any(x.event == "decision" for x in a))
    assert any(a.event == "decision" and a.mode == "observe" for a in audits)

    after = as_dict(kube.get(PyTorchJob, job.name, namespace=job.namespace))
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"] == before["spec"]
    for r in job.replicas:
        node = as_dict(kube.get(Node, r.node))
        assert not node["spec"].get("unschedulable"), r.node
        assert not any(t["key"] == TAINT_KEY for t in node["spec"].get("taints") or []), r.node
    assert not quarantined(kube, culprit)
    assert pods_left(kube, job) == sorted(job.pod_names)
    assert sickbay_events(kube, job) == []


def test_a_fault_after_the_restart_is_a_new_attempt_and_moves_the_job_again(
    story_for: Callable[[str], Story], kube: Client
) -> None:
    story = story_for("act")
    first_culprit = story.culprit
    _inject(story)
    _until("the first restart", lambda: restarted_away(kube, story.job, first_culprit), story)
    _until("the job's pods deleted", lambda: not pods_left(kube, story.job), story, 30)
    time.sleep(3.0)  # the watch reports every pod gone; the attempt ends and its incident closes
    story.job = recreate_pods(kube, story.job, story.nodes)  # the operator's part, away from the culprit
    placed = sorted(r.node for r in story.job.replicas)
    assert first_culprit not in placed and story.nodes[4] in placed
    time.sleep(3.0)  # the watch reports the new pods: attempt 2
    second_culprit = story.job.replicas[1].node
    _inject(story, second_culprit)
    _until(f"{second_culprit} cordoned", lambda: quarantined(kube, second_culprit), story)
    _until(
        "both culprits excluded",
        lambda: (
            restarted_away(kube, story.job, first_culprit) and restarted_away(kube, story.job, second_culprit)
        ),
        story,
    )

    cat = story.settings.topics
    incidents = _models(story, cat.incidents.name, Incident, lambda i: len({x.incident_id for x in i}) >= 2)
    latest: dict[str, Incident] = {}
    for inc in sorted(incidents, key=lambda i: i.revision):
        latest[inc.incident_id] = inc
    by_attempt = {inc.attempt: inc for inc in latest.values()}
    assert sorted(by_attempt) == [1, 2], [(i.incident_id, i.attempt) for i in latest.values()]
    assert by_attempt[1].culprit is not None and by_attempt[1].culprit.node == first_culprit
    assert by_attempt[2].culprit is not None and by_attempt[2].culprit.node == second_culprit
    assert by_attempt[2].job_nodes == placed
    actions = _models(story, cat.actions.name, Action, lambda a: len(a) >= 4)
    requeues = [a for a in actions if a.kind.value == "requeue_job"]
    assert [a.exclude_nodes for a in requeues] == [[first_culprit], [second_culprit]]


def test_demo_on_kubernetes_exits_0_and_reports_its_timings_as_json(
    kafka_bootstrap: str, kubeconfig: Path
) -> None:
    env = {**os.environ, "SICKBAY_KAFKA_BOOTSTRAP": kafka_bootstrap}
    proc = subprocess.run(
        [sys.executable, "-m", "streams.cli.main", "demo", "--scheduler", "kubernetes"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=400,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    summary = codec.loads(proc.stdout.strip().splitlines()[-1])
    assert (summary["demo"], summary["scheduler"], summary["mode"]) == ("ok", "kubernetes", "act")
    assert 0 < summary["fault_to_cordon_s"] < DEADLINE_S and 0 < summary["fault_to_restart_s"] < DEADLINE_S
    for line in (
        "[ok] gpu-03 cordoned and tainted sickbay.io/quarantine",
        "[ok] PyTorchJob requires hostname NotIn [gpu-03] on every replica",
        "[ok] incident stored in ClickHouse",
    ):
        assert line in output
