"""``sickbay demo --scheduler kubernetes``: the demo's GPU fault remediated on a real kube-apiserver.

The same story as the Slurm demo (:mod:`streams.cli.demo`), told to the Kubernetes API server:

1. start Kafka and the local kube-apiserver + etcd (``deploy/local/kube.sh``) unless they run;
2. create four GPU Nodes, a namespace, a Kubeflow PyTorchJob (master + 3 workers) and its pods bound to
   the nodes with the labels the training operator puts on them; there is no kubelet or operator, so the
   objects are written by hand, as envtest-style harnesses do;
3. run sickbay's roles as separate processes: the Kubernetes watch (``collect kubernetes``: pod → node
   topology and the PyTorchJob's JobInfo), the Faust worker, the Kubernetes adapter, the ClickHouse sink;
4. inject the fault: Xid 79 in one node's kernel log (Fluent Bit) and NCCL watchdog timeouts in the
   other ranks' pod logs (Fluent Bit's ``kubernetes`` filter shape), plus one broken record;
5. wait until the culprit Node is cordoned and tainted and the PyTorchJob is restarted away from it
   (a required ``hostname NotIn`` node affinity on every replica template, its pods deleted), print the
   incident, the actions, what the API server now holds and a SQL query over the stored incident;
6. delete what it created and stop only the components it started.

The object builders and observers here are also what ``tests/e2e/test_kubernetes_recovery.py`` uses to
set the scene; its assertions read the API server on their own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Event, Namespace, Node, Pod

from connectors.actuators.kubernetes_adapter import TAINT_KEY, excludes
from connectors.actuators.kubernetes_client import PyTorchJob, as_dict
from schemas import codec
from schemas.incidents import Incident
from streams.settings import REPO_ROOT, Settings

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
OPERATOR_LABEL = "training.kubeflow.org/operator-name"
DEMO_LABEL = "sickbay.io/demo"  # marks the Nodes a demo run made, so a crashed run's leftovers can go
KUBE_SH = REPO_ROOT / "deploy" / "local" / "kube.sh"


@dataclass(frozen=True)
class Replica:
    pod: str
    node: str
    rank: int  # torchrun's global rank: master 0, worker i → i + 1
    replica_type: str  # "master" | "worker", as the operator labels it
    index: int


@dataclass(frozen=True)
class KubeJob:
    namespace: str
    name: str
    replicas: tuple[Replica, ...]

    @property
    def ranks(self) -> dict[str, int]:
        return {r.node: r.rank for r in self.replicas}

    @property
    def pod_names(self) -> list[str]:
        return [r.pod for r in self.replicas]


# -- the scene ------------------------------------------------------------------------------------


def _template() -> dict[str, Any]:
    return {
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": "example.invalid/llm-pretrain:1",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ]
        }
    }


def pytorchjob_body(ns: str, name: str, workers: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": _template()},
                "Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": _template()},
            }
        },
    }


def _pod_body(job: dict[str, Any], r: Replica) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "metadata": {
            "name": r.pod,
            "namespace": meta["namespace"],
            "labels": {
                JOB_NAME_LABEL: meta["name"],
                REPLICA_TYPE_LABEL: r.replica_type,
                REPLICA_INDEX_LABEL: str(r.index),
                OPERATOR_LABEL: "pytorchjob-controller",
            },
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"nodeName": r.node, **_template()["spec"]},
    }


def make_nodes(client: Client, nodes: list[str], tag: str, made: list[str]) -> None:
    """GPU Nodes labelled as the demo's; a Node of the same name left by an earlier demo is replaced,
    anyone else's is an error (the demo never touches a Node it did not make)."""
    for name in nodes:
        try:
            old = as_dict(client.get(Node, name))
        except ApiError as exc:
            if exc.status.code != 404:
                raise
        else:
            if not ((old.get("metadata") or {}).get("labels") or {}).get(DEMO_LABEL):
                raise RuntimeError(f"Node {name} exists and is not a sickbay demo node; not touching it")
            client.delete(Node, name)
        labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true", DEMO_LABEL: tag}
        client.create(cast(Node, Node.from_dict({"metadata": {"name": name, "labels": labels}})))
        made.append(name)  # the caller deletes these, and only these


def seed_job(client: Client, ns: str, name: str, nodes: list[str]) -> KubeJob:
    """A namespace, a PyTorchJob with one master and ``len(nodes) - 1`` workers, one pod per node."""
    client.create(cast(Namespace, Namespace.from_dict({"metadata": {"name": ns}})))
    job = as_dict(client.create(PyTorchJob.from_dict(pytorchjob_body(ns, name, len(nodes) - 1))))
    replicas = tuple(
        Replica(
            pod=f"{name}-master-0" if i == 0 else f"{name}-worker-{i - 1}",
            node=node,
            rank=i,
            replica_type="master" if i == 0 else "worker",
            index=0 if i == 0 else i - 1,
        )
        for i, node in enumerate(nodes)
    )
    for r in replicas:
        client.create(cast(Pod, Pod.from_dict(_pod_body(job, r))))
    return KubeJob(namespace=ns, name=name, replicas=replicas)


def teardown(client: Client, job: KubeJob | None, nodes: list[str]) -> None:
    """Delete what the scene made (no namespace controller runs: names are unique per run)."""
    if job is not None:
        for pod in job.pod_names:  # grace 0: no kubelet will ever confirm a graceful deletion
            with suppress(ApiError):
                client.delete(Pod, pod, namespace=job.namespace, grace_period=0)
        with suppress(ApiError):
            client.delete(PyTorchJob, job.name, namespace=job.namespace)
        with suppress(ApiError):
            client.delete(Namespace, job.namespace)
    for node in nodes:
        with suppress(ApiError):  # already gone
            client.delete(Node, node)


def _excluded_by_templates(client: Client, job: KubeJob) -> set[str]:
    out: set[str] = set()
    for aff in replica_affinities(client, job).values():
        required = ((aff or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        for term in (required or {}).get("nodeSelectorTerms") or []:
            for e in term.get("matchExpressions") or []:
                if e.get("key") == "kubernetes.io/hostname" and e.get("operator") == "NotIn":
                    out |= set(e.get("values") or [])
    return out


def _schedulable(client: Client, node: str) -> bool:
    spec = as_dict(client.get(Node, node)).get("spec") or {}
    return not spec.get("unschedulable") and not any(
        t.get("key") == TAINT_KEY for t in spec.get("taints") or []
    )


def recreate_pods(client: Client, job: KubeJob, candidates: list[str]) -> KubeJob:
    """What the kubelet, the training operator and the scheduler do after sickbay's restart, which this
    API server has none of: confirm the deleted pods gone, recreate every replica from the *current*
    template, and bind each to a node the template's affinity and the nodes' cordons/taints allow."""
    for name in job.pod_names:
        with suppress(ApiError):
            client.delete(Pod, name, namespace=job.namespace, grace_period=0)
    banned = _excluded_by_templates(client, job)
    nodes = [n for n in candidates if n not in banned and _schedulable(client, n)]
    if len(nodes) < len(job.replicas):
        raise RuntimeError(f"{len(job.replicas)} replicas but only {nodes} can take them")
    owner = as_dict(client.get(PyTorchJob, job.name, namespace=job.namespace))
    replicas = tuple(
        Replica(r.pod, n, r.rank, r.replica_type, r.index)
        for r, n in zip(job.replicas, nodes[: len(job.replicas)], strict=True)
    )
    for r in replicas:
        client.create(cast(Pod, Pod.from_dict(_pod_body(owner, r))))
    return KubeJob(namespace=job.namespace, name=job.name, replicas=replicas)


def fault_records(job: KubeJob, culprit: str, at: datetime) -> tuple[bytes, list[bytes]]:
    """Xid 79 in the culprit node's kernel log as Fluent Bit's tail ships it (``hostname`` set by a
    record_modifier, as in the Slurm demo), and the other ranks' NCCL watchdog timeouts as Fluent Bit's
    ``kubernetes`` filter ships container logs (node in ``kubernetes.host``, the operator's labels)."""
    kern = (
        f"{at.strftime('%b %d %H:%M:%S')} {culprit} kernel: [183412.551032] "
        "NVRM: Xid (PCI:0000:19:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    )
    xid = codec.dumps(
        {"@timestamp": at.timestamp(), "log": kern, "hostname": culprit, "filename": "/var/log/kern.log"}
    )
    later = at + timedelta(seconds=2)
    timeouts = []
    for r in job.replicas:
        if r.node == culprit:
            continue
        text = (
            f"[rank{r.rank}]:[E{later.strftime('%m%d %H:%M:%S')}.426415540 ProcessGroupNCCL.cpp:629] "
            f"[Rank {r.rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8812, "
            f"OpType=ALLREDUCE, NumelIn=67108864, NumelOut=67108864, Timeout(ms)=600000) ran for 600045 "
            "milliseconds before timing out."
        )
        rec = {
            "@timestamp": later.timestamp(),
            "time": later.isoformat(),
            "stream": "stderr",
            "log": text,
            "kubernetes": {
                "pod_name": r.pod,
                "namespace_name": job.namespace,
                "host": r.node,
                "container_name": "pytorch",
                "labels": {
                    JOB_NAME_LABEL: job.name,
                    REPLICA_TYPE_LABEL: r.replica_type,
                    REPLICA_INDEX_LABEL: str(r.index),
                },
            },
        }
        timeouts.append(codec.dumps(rec))
    return xid, timeouts


# -- what the API server holds --------------------------------------------------------------------


def quarantined(client: Client, node: str) -> bool:
    """Cordoned and carrying sickbay's NoSchedule quarantine taint."""
    spec = as_dict(client.get(Node, node)).get("spec") or {}
    return bool(spec.get("unschedulable")) and any(
        t.get("key") == TAINT_KEY and t.get("effect") == "NoSchedule" for t in spec.get("taints") or []
    )


def replica_affinities(client: Client, job: KubeJob) -> dict[str, Any]:
    specs = as_dict(client.get(PyTorchJob, job.name, namespace=job.namespace))["spec"]["pytorchReplicaSpecs"]
    return {name: ((r.get("template") or {}).get("spec") or {}).get("affinity") for name, r in specs.items()}


def restarted_away(client: Client, job: KubeJob, node: str) -> bool:
    """Every replica template requires ``kubernetes.io/hostname NotIn [node]``."""
    return all(excludes(aff, [node]) and aff for aff in replica_affinities(client, job).values())


def pods_left(client: Client, job: KubeJob) -> list[str]:
    """The job's pods not being deleted. With no kubelet a deleted pod that was bound to a node stays
    ``Terminating`` (deletionTimestamp set) until its grace period is forced; that is the deletion."""
    return sorted(
        p.metadata.name
        for p in client.list(Pod, namespace=job.namespace, labels={JOB_NAME_LABEL: job.name})
        if p.metadata is not None and p.metadata.name and p.metadata.deletionTimestamp is None
    )


def sickbay_events(client: Client, job: KubeJob) -> list[dict[str, Any]]:
    """Events sickbay wrote about the job's objects (its namespace) and the job's Nodes (``default``).

    Node events are matched by uid: a Node of the same name made by an earlier run has its own."""
    uids = set()
    for r in job.replicas:
        meta = as_dict(client.get(Node, r.node)).get("metadata") or {}
        uids.add(meta.get("uid"))
    out = []
    for ns in (job.namespace, "default"):
        for e in client.list(Event, namespace=ns):
            ev = as_dict(e)
            inv = ev.get("involvedObject") or {}
            if ev.get("reportingComponent") != "sickbay":
                continue
            if inv.get("namespace") == job.namespace or (
                inv.get("kind") == "Node" and inv.get("uid") in uids
            ):
                out.append(ev)
    return out


# -- the demo -------------------------------------------------------------------------------------

NODES = ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]


def _kubeconfig(env: dict[str, str]) -> Path:
    out = subprocess.run(["bash", str(KUBE_SH), "env"], capture_output=True, text=True, env=env, check=False)
    line = next((x for x in out.stdout.splitlines() if "SICKBAY_KUBECONFIG=" in x), "")
    path = Path(line.split("=", 1)[1].strip("'\"")) if line else REPO_ROOT / ".cache" / "kube" / "kubeconfig"
    if not path.is_file():
        raise RuntimeError(f"kube.sh wrote no kubeconfig at {path}")
    return path


@dataclass
class Scene:
    """What one demo run made in the API server, so the cleanup deletes exactly that."""

    client: Client | None = None
    job: KubeJob | None = None
    nodes: list[str] = field(default_factory=list)


def run_kube_demo(keep: bool = False, mode: str = "act") -> int:
    from streams.cli.demo import FAULT_NODE, Demo, query_store, show_incident

    base = Settings()
    run_id = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")[:-3]
    workdir = base.state_dir / "demo" / f"k8s-{run_id}"
    workdir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SICKBAY_TOPIC_PREFIX": f"demok{run_id}",
        "SICKBAY_APP_ID": f"sickbay-demok{run_id}",
        "SICKBAY_MODE": mode,
        "SICKBAY_ROOT_GRACE_S": "5",
        "SICKBAY_INCIDENT_QUIET_S": "60",
        "SICKBAY_PYTHON": sys.executable,
    }
    demo = Demo(run_id=run_id, base=base, workdir=workdir, env=env, mode=mode)
    scene = Scene()
    try:
        client = scene.client = _start_stack(demo)
        job = _make_scene(demo, client, scene)
        _start_roles(demo, job)
        t_fault = _inject(demo, job, FAULT_NODE)
        timings = _await_remediation(demo, client, job, FAULT_NODE, t_fault)
        time.sleep(2.5)  # let the sink flush its last batch
        incident = show_incident(demo)
        _show_actions(demo, client, job, FAULT_NODE)
        query_store(demo, incident)
        return _report(demo, incident, timings)
    except (TimeoutError, subprocess.SubprocessError, RuntimeError, OSError, ApiError) as exc:
        say(f"\ndemo FAILED: {exc}")
        for name in list(demo.procs):
            say(f"--- {name} log (last lines) ---\n{demo.log_tail(name)}")
        return 1
    finally:
        for name in list(demo.procs):
            demo.stop(name)
        if scene.client is not None:
            if not keep:
                teardown(scene.client, scene.job, scene.nodes)
            scene.client.close()
        if not keep:
            for component in reversed(demo.started):
                subprocess.call(["bash", str(REPO_ROOT / f"deploy/local/{component}.sh"), "down"], env=env)


def _start_stack(demo: Any) -> Client:
    from connectors.actuators.kubernetes_client import make_client
    from connectors.kafka import ensure_topics
    from streams.cli.demo import step

    step("1. local stack: Apache Kafka (KRaft) + kube-apiserver with etcd (no kubelet)")
    demo.started = _start_components(demo)
    kubeconfig = _kubeconfig(demo.env)
    demo.env["SICKBAY_KUBECONFIG"] = str(kubeconfig)
    s = demo.settings
    ensure_topics(s.kafka_bootstrap, s.topics.all(), s.replication_factor)
    say(f"topics: prefix {s.topic_prefix}; kubeconfig {kubeconfig}; state in {demo.workdir}")
    return make_client(str(kubeconfig))


def _make_scene(demo: Any, client: Client, scene: Scene) -> KubeJob:
    from streams.cli.demo import step

    step("2. a 4-node PyTorchJob (kubeflow.org/v1): master + 3 workers, pods bound to GPU nodes")
    make_nodes(client, NODES, demo.run_id, scene.nodes)
    job = scene.job = seed_job(client, f"demo-{demo.run_id[-9:]}", "llm-pretrain", NODES)
    demo.job_id = job.name
    demo.ranks = job.ranks
    for r in job.replicas:
        say(f"  pod {job.namespace}/{r.pod:26} on {r.node}  rank {r.rank}")
    return job


def _start_roles(demo: Any, job: KubeJob) -> None:
    from streams.cli.demo import step

    step(f"3. sickbay roles ({demo.mode} mode): kubernetes watch, faust worker, kubernetes adapter, sink")
    offsets = str(demo.workdir / "kube-watch.json")
    demo.spawn(
        "collector-kubernetes", "collect", "kubernetes", "--namespace", job.namespace, "--offsets", offsets
    )
    demo.spawn("worker", "worker")
    demo.spawn("adapter", "adapter", "kubernetes")
    demo.spawn("sink", "sink", "clickhouse")
    _wait_ready(demo)


def say(msg: str = "") -> None:
    print(msg, flush=True)


def _start_components(demo: Any) -> list[str]:
    """Start Kafka and kube-apiserver if they are not running; return those this run started."""
    started = []
    for component in ("kafka", "kube"):
        script = str(REPO_ROOT / f"deploy/local/{component}.sh")
        if subprocess.call(["bash", script, "status"], env=demo.env, stdout=subprocess.DEVNULL) == 0:
            continue
        if component == "kube":
            say("starting kube-apiserver (the first start builds it from source: several minutes)")
        if subprocess.call(["bash", script, "up"], env=demo.env) != 0:
            raise RuntimeError(f"deploy/local/{component}.sh up failed (see the messages above)")
        started.append(component)
    return started


def _wait_ready(demo: Any) -> None:
    from streams.cli.demo import _read_topic, wait_for
    from streams.signal_batches import unpack_assignments

    t0 = time.monotonic()
    worker_log = demo.workdir / "worker.log"
    wait_for(
        "the Faust worker", lambda: "Worker]: Ready" in worker_log.read_text(errors="replace"), 120, 0.25
    )
    say(f"worker ready in {time.monotonic() - t0:.1f}s")
    s = demo.settings

    def learned() -> bool:
        jobs = _read_topic(s.kafka_bootstrap, s.topics.topology_jobs.name, f"demok{time.time_ns()}", 1.5)
        raw = _read_topic(s.kafka_bootstrap, s.topics.topology_node.name, f"demok{time.time_ns()}", 1.5)
        assignments = [a for value in raw for a in unpack_assignments(codec.loads(value))]  # packed or not
        return bool(jobs) and len(assignments) >= len(demo.ranks)

    wait_for("the watch to publish the PyTorchJob and its pod → node topology", learned, 60, 0.5)
    say("watch: JobInfo (scheduler kubernetes, pytorchjob) and 4 pod → node assignments published")
    time.sleep(2.0)  # the worker's job-info and route agents read them


def _inject(demo: Any, job: KubeJob, culprit: str) -> float:
    from connectors.kafka import ReliableProducer
    from streams.cli.demo import JUNK, step

    step(f"4. fault: Xid 79 on {culprit}, NCCL watchdog timeouts in the other ranks' pod logs")
    s = demo.settings
    xid, timeouts = fault_records(job, culprit, datetime.now(UTC))
    demo.expected_timeouts = len(timeouts)
    producer = ReliableProducer(s.kafka_bootstrap, "sickbay-demo-injector", linger_ms=0)
    topic = s.topics.raw_logs.name
    producer.produce(topic, JUNK, key=culprit.encode())  # bad input first: dead-lettered, stops nothing
    t_fault = time.monotonic()
    producer.produce(topic, xid, key=culprit.encode())
    producer.flush(10)
    for rec, r in zip(timeouts, [r for r in job.replicas if r.node != culprit], strict=True):
        producer.produce(topic, rec, key=r.node.encode())
    if producer.flush(10) or producer.failed:
        raise RuntimeError(f"fault lines were not delivered: {producer.last_error}")
    say(f"injected 1 malformed record + {1 + len(timeouts)} fault records into {topic}")
    return t_fault


def _await_remediation(
    demo: Any, client: Client, job: KubeJob, culprit: str, t_fault: float
) -> dict[str, float]:
    from streams.cli.demo import wait_for

    if demo.mode != "act":
        wait_for("dry-run results for drain and requeue", lambda: len(demo.results()) >= 2, 90, 0.2)
        return {"fault_to_advice_s": time.monotonic() - t_fault}
    out: dict[str, float] = {}
    pending: dict[str, Callable[[], bool]] = {
        "fault_to_cordon_s": lambda: quarantined(client, culprit),
        "fault_to_restart_s": lambda: restarted_away(client, job, culprit) and not pods_left(client, job),
    }
    deadline = time.monotonic() + 90
    while pending and time.monotonic() < deadline:
        for key, done in list(pending.items()):
            if done():
                out[key] = time.monotonic() - t_fault
                del pending[key]
        time.sleep(0.05)
    if pending:
        raise TimeoutError(f"timed out after 90s waiting for {', '.join(pending)}")
    say(f"{culprit} cordoned after {out['fault_to_cordon_s']:.2f} s; PyTorchJob restarted away from it "
        f"after {out['fault_to_restart_s']:.2f} s")  # fmt: skip
    return out


def _show_cluster(demo: Any, client: Client, job: KubeJob, culprit: str) -> None:
    node = as_dict(client.get(Node, culprit))
    spec = node.get("spec") or {}
    say(f"$ kubectl get node {culprit}")
    say(f"  unschedulable={spec.get('unschedulable', False)}  taints={spec.get('taints') or []}")
    affinities = replica_affinities(client, job)
    say(f"$ kubectl get pytorchjob -n {job.namespace} {job.name}   (replica templates' affinity)")
    for name, aff in affinities.items():
        say(f"  {name}: {codec.dumps(aff).decode() if aff else '-'}")
    left = pods_left(client, job)
    say(f"$ kubectl get pods -n {job.namespace} -l {JOB_NAME_LABEL}={job.name}")
    say("  " + (", ".join(left) or "(none: deleted for the operator to recreate away from the node)"))
    events = sickbay_events(client, job)
    say("$ kubectl get events (reportingComponent=sickbay)")
    for e in events:
        inv = e.get("involvedObject") or {}
        say(f"  {e.get('reason'):18} {inv.get('kind')}/{inv.get('name')}")
    if demo.mode == "act":
        demo.check(f"{culprit} cordoned and tainted {TAINT_KEY}", quarantined(client, culprit))
        demo.check(
            f"PyTorchJob requires hostname NotIn [{culprit}] on every replica",
            restarted_away(client, job, culprit),
        )
        demo.check("the job's pods deleted (restart)", not left)
        demo.check(
            "Events written on the Node, the pods and the PyTorchJob",
            {e["involvedObject"]["kind"] for e in events} == {"Node", "Pod", "PyTorchJob"},
        )
    else:
        demo.check(
            "observe mode: no node cordoned", not any(quarantined(client, r.node) for r in job.replicas)
        )
        demo.check("observe mode: the PyTorchJob is unchanged", not any(affinities.values()))
        demo.check("observe mode: the pods are untouched", left == sorted(job.pod_names))
        demo.check("observe mode: no Event written", not events)


def _show_actions(demo: Any, client: Client, job: KubeJob, culprit: str) -> None:
    from streams.cli.demo import step

    step("6. the actions (action-results topic) and what the API server now holds")
    results = demo.results()
    for r in results:
        say(f"{r.kind.value:12} {r.status.value:10} {r.detail}")
        for c in r.commands:
            say(f"    {' '.join(c.argv)}  -> {c.returncode}")
    statuses = {r.kind.value: r.status.value for r in results}
    if demo.mode == "act":
        done = ("succeeded", "converged")
        demo.check(
            "drain and requeue executed",
            statuses.get("drain_node") in done and statuses.get("requeue_job") in done,
        )
    else:
        demo.check(
            "observe mode: drain and requeue recorded as dry runs",
            statuses == {"drain_node": "dry_run", "requeue_job": "dry_run"},
        )
    _show_cluster(demo, client, job, culprit)


def _report(demo: Any, incident: Incident, timings: dict[str, float]) -> int:
    from streams.cli.demo import step

    step("result")
    for name, ok in demo.checks.items():
        say(f"  [{'ok' if ok else 'FAILED'}] {name}")
    for key, value in timings.items():
        say(f"{key.removesuffix('_s').replace('_', ' ')}: {value:.2f} s")
    ok = all(demo.checks.values())
    summary = {
        "demo": "ok" if ok else "failed",
        "scheduler": "kubernetes",
        "mode": demo.mode,
        **{k: round(v, 3) for k, v in timings.items()},
        "incident_id": incident.incident_id,
        "job_id": demo.job_id,
    }
    say(codec.dumps(summary).decode())
    return 0 if ok else 1
