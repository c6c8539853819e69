"""A realistic fleet history, built with the real pipeline pieces and written through the real sink.

Four jobs on eight nodes over three days (ending before tests.factories.T0), each failure made from shipper-shaped
log lines by the extractor (tests/factories.py), folded into incidents by the
correlator, turned into actions by the decide policy, with adapter results and
audit records, and the job topology (attempts) the correlator publishes:

- job 42 (gpu-[01-04]): Xid 79 on gpu-03 and NCCL timeouts on the other ranks;
  act mode: gpu-03 drained, job requeued excluding it, attempt 2 starts 3 minutes later;
- job 43 (gpu-[05-08]): Xid 48 (double-bit ECC) on gpu-06; observe mode: dry-run advice only;
- job 44 (gpu-[01-02]): CUDA illegal memory access (an application fault): no action;
- job 45 (gpu-[05-08]), two days later: Xid 79 on gpu-06 again (its second failure);
- one dead letter (a record cut in half), and one mode switch (GPU faults: act).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from connectors.sinks.sink import ClickHouseSink
from schemas import codec
from schemas.actions import (
    Action,
    ActionResult,
    ActionStatus,
    CommandRun,
    Mode,
    ModeChange,
    ModeScope,
)
from schemas.audit import AuditRecord
from schemas.collector import CollectorReport, Reach
from schemas.deadletter import DeadLetter
from schemas.incidents import Category, Incident
from schemas.signals import JobNodeAssignment, Signal
from schemas.topics import TopicCatalog
from streams.correlate.correlator import Timing, add_signal, apply_topology, decide_now, tick
from streams.decide.policy import PolicyConfig, advise
from tests.factories import T0 as FACTORY_T0
from tests.factories import cuda_error, kernel_xid, nccl_timeout, one, signals, slurmctld_allocate

CLUSTER = "c1"
T0 = FACTORY_T0 - timedelta(days=3)  # the whole history lies in the past of the factories' clock
INVENTORY = [
    *[(f"gpu-0{i}", "gpu", "NVIDIA H100 80GB HBM3", "550.54.15", 8) for i in range(1, 5)],
    *[(f"gpu-0{i}", "gpu", "NVIDIA A100-SXM4-80GB", "535.129.03", 8) for i in range(5, 9)],
]


@dataclass
class Fleet:
    signals: list[Signal] = field(default_factory=list)
    assignments: list[JobNodeAssignment] = field(default_factory=list)
    incidents: list[Incident] = field(default_factory=list)  # every revision, in order
    actions: list[Action] = field(default_factory=list)
    results: list[ActionResult] = field(default_factory=list)
    audit: list[AuditRecord] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    modes: list[ModeChange] = field(default_factory=list)
    reports: list[CollectorReport] = field(default_factory=list)

    def latest(self, job_id: str) -> Incident:
        return [i for i in self.incidents if i.job_id == job_id][-1]


def _aid(*parts: object) -> str:
    return "aud-" + hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).hexdigest()


def _allocate(fleet: Fleet, job: str, nodes: str, at: datetime, topo: Any = None) -> Any:
    topo, out = apply_topology(topo, one(slurmctld_allocate(job, nodes, at)), CLUSTER)
    fleet.assignments.extend(out)
    return topo


def _failure(
    fleet: Fleet, topo: Any, job: str, root: Signal, cascades: list[Signal], mode: Mode, at: datetime
) -> Incident:
    """Root first (the fast incident), then the cascade (a refined revision), then the decide step."""
    window = add_signal(None, topo, root, CLUSTER, at + timedelta(seconds=0.4))
    window, incident = decide_now(window, topo, at + timedelta(seconds=0.4), Timing())
    assert incident is not None
    fleet.signals.append(root)
    fleet.incidents.append(incident)
    for sig in cascades:
        window = add_signal(window, topo, sig, CLUSTER, at + timedelta(seconds=6))
        fleet.signals.append(sig)
    if cascades:
        window, refined = tick(window, topo, at + timedelta(seconds=8), Timing())
        if refined is not None:
            fleet.incidents.append(refined)
    latest = fleet.incidents[-1]
    fleet.audit.append(
        AuditRecord(
            audit_id=_aid("incident", latest.incident_id),
            time=latest.opened_at,
            actor="correlate",
            event="incident.opened",
            cluster=CLUSTER,
            incident_id=latest.incident_id,
            details={
                "category": latest.category.value,
                "culprit": latest.culprit.node if latest.culprit else None,
            },
        )
    )
    actions, _notes = advise(incident, PolicyConfig(mode=mode), at + timedelta(seconds=0.5))
    for n, action in enumerate(actions):
        fleet.actions.append(action)
        fleet.audit.append(
            AuditRecord(
                audit_id=_aid("proposed", action.action_id),
                time=action.created_at,
                actor="decide",
                event="action.proposed",
                cluster=CLUSTER,
                incident_id=action.incident_id,
                action_id=action.action_id,
                mode=mode.value,
                details={"kind": action.kind.value, "reason": action.reason},
            )
        )
        status = ActionStatus.DRY_RUN if action.dry_run else ActionStatus.SUCCEEDED
        target = action.node or action.job_id or ""
        result = ActionResult(
            action_id=action.action_id,
            idempotency_key=action.idempotency_key,
            kind=action.kind,
            status=status,
            adapter="slurm",
            cluster=CLUSTER,
            incident_id=action.incident_id,
            started_at=action.created_at + timedelta(seconds=0.1 + n * 0.2),
            finished_at=action.created_at + timedelta(seconds=0.3 + n * 0.2),
            commands=[
                CommandRun(
                    argv=["scontrol", "show", "node" if action.node else "job", "-o", target], returncode=0
                )
            ],
            detail=("would run: " if action.dry_run else "done: ") + f"{action.kind.value} {target}",
        )
        fleet.results.append(result)
        fleet.audit.append(
            AuditRecord(
                audit_id=_aid("result", action.action_id, status.value),
                time=result.finished_at,
                actor="adapter.slurm",
                event=f"action.{status.value}",
                cluster=CLUSTER,
                incident_id=action.incident_id,
                action_id=action.action_id,
                mode=mode.value,
                details={"kind": action.kind.value, "detail": result.detail},
            )
        )
    return latest


def build() -> Fleet:
    fleet = Fleet()
    # job 42: Xid 79 on gpu-03, timeouts on the other ranks; act mode; requeued, attempt 2 starts later
    topo = _allocate(fleet, "42", "gpu-[01-04]", T0 - timedelta(hours=2))
    xid = one(kernel_xid("gpu-03", 79, T0), offset=1).model_copy(update={"job_id": "42"})
    timeouts = [
        s
        for rank, node in enumerate(["gpu-01", "gpu-02", "gpu-04"])
        for s in signals(nccl_timeout(node, rank, "42", T0 + timedelta(seconds=5)), offset=10 + rank)
    ]
    _failure(fleet, topo, "42", xid, timeouts, Mode.ACT, T0)
    _allocate(fleet, "42", "gpu-[01-02,04-05]", T0 + timedelta(minutes=3), topo)

    # job 43: double-bit ECC on gpu-06, observe mode (advice only)
    t1 = T0 + timedelta(hours=1)
    topo = _allocate(fleet, "43", "gpu-[05-08]", t1 - timedelta(hours=5))
    dbe = one(
        kernel_xid("gpu-06", 48, t1, text="An uncorrectable double bit error (DBE) has been detected"),
        offset=20,
    )
    _failure(fleet, topo, "43", dbe.model_copy(update={"job_id": "43"}), [], Mode.OBSERVE, t1)

    # job 44: an application fault on gpu-01 (no culprit to exclude, nothing that stops the job: no action)
    t2 = T0 + timedelta(days=1)
    topo = _allocate(fleet, "44", "gpu-[01-02]", t2 - timedelta(hours=1))
    cuda = signals(cuda_error("gpu-01", "44", t2), offset=30)[0].model_copy(update={"job_id": "44"})
    _failure(fleet, topo, "44", cuda, [], Mode.ACT, t2)

    # job 45: gpu-06 fails again two days later
    t3 = T0 + timedelta(days=2)
    topo = _allocate(fleet, "45", "gpu-[05-08]", t3 - timedelta(hours=3))
    again = one(kernel_xid("gpu-06", 79, t3), offset=40).model_copy(update={"job_id": "45"})
    _failure(fleet, topo, "45", again, [], Mode.ACT, t3)

    fleet.modes.append(
        ModeChange(
            change_id="mode-seed-1",
            scope=ModeScope(cluster=CLUSTER, category=Category.HARDWARE_GPU),
            mode=Mode.ACT,
            actor="api:alice",
            reason="GPU faults are well understood",
            time=T0 - timedelta(days=1),
        )
    )
    fleet.dead_letters.append(
        DeadLetter(
            stage="extract",
            reason="invalid_json",
            error="unexpected end of data",
            topic="raw.logs",
            partition=0,
            offset=99,
            key="gpu-03",
            original_b64="eyJsb2ciOiAiTlZSTTogWGlk",
            time=T0 + timedelta(seconds=1),
        )
    )
    # Coverage before job 42's failure: the collector on gpu-01 could not read the kernel log;
    # the Slurm collector was fine; an old report (a day earlier) is outside the incident's window.
    for host, collector, at, reached in (
        ("gpu-01", "files", T0 - timedelta(minutes=2), [("file", "/var/log/kern.log", False)]),
        ("gpu-03", "files", T0 - timedelta(minutes=1), [("file", "/var/log/kern.log", True)]),
        ("ctld", "slurm", T0 - timedelta(minutes=1), [("scheduler", "squeue --json", True)]),
        ("gpu-03", "files", T0 - timedelta(days=1), [("file", "/var/log/old.log", False)]),
    ):
        fleet.reports.append(
            CollectorReport(
                collector=collector,
                host=host,
                time=at,
                started=at - timedelta(hours=1),
                reached=[
                    Reach(kind=k, target=t, ok=ok, state="reading" if ok else "unreadable")
                    for k, t, ok in reached
                ],
                broker_reachable=True,
            )
        )
    return fleet


def feed(sink: ClickHouseSink, cat: TopicCatalog, fleet: Fleet) -> None:
    """Everything through the sink's add/flush, topic by topic, as the consumer would deliver it."""
    for topic, records in (
        (cat.signals_node.name, fleet.signals),
        (cat.topology_node.name, fleet.assignments),
        (cat.incidents.name, fleet.incidents),
        (cat.actions.name, fleet.actions),
        (cat.action_results.name, fleet.results),
        (cat.audit.name, fleet.audit),
        (cat.dlq.name, fleet.dead_letters),
        (cat.control_modes.name, fleet.modes),
        (cat.collector_reports.name, fleet.reports),
    ):
        for offset, record in enumerate(records):
            sink.add(topic, codec.dumps(record), 0, offset)
    sink.flush()


def insert_inventory(client: Any, database: str) -> None:
    client.insert(
        f"{database}.node_inventory",
        [[CLUSTER, node, part, model, driver, gpus, T0] for node, part, model, driver, gpus in INVENTORY],
        column_names=["cluster", "node", "partition", "gpu_model", "driver_version", "gpus", "updated_at"],
    )


def seed(client: Any, database: str, cat: TopicCatalog | None = None) -> Fleet:
    cat = cat or TopicCatalog(prefix="seed")
    fleet = build()
    feed(ClickHouseSink(client, database, cat), cat, fleet)
    insert_inventory(client, database)
    return fleet
