"""A storm: hundreds of nodes fail at once. The decide step must restart jobs but never drain past the cap.

Incidents come from simulator scenarios (distinct nodes and jobs per scenario) attributed by the
same engine ``sickbay diagnose`` uses, then pass through the real ``decide`` and ``isolation-gate``
Faust agents in-process.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest.mock import AsyncMock

import pytest

from benchmarks.scoreboard import scenario_options
from connectors.sources.simulator import generate, write_files
from connectors.sources.simulator.scenario import default_t0
from schemas import codec
from schemas.actions import Action, ActionKind, Mode, ModeChange, ModeScope
from schemas.incidents import Category, Incident, IncidentStatus, RootCause
from streams.app import create_app
from streams.diagnose.driver import Diagnoser, summary
from streams.pipeline import Pipeline, build
from streams.settings import Settings
from tests.factories import acked

STORM_SCENARIOS = (
    "xid79_fallen_off_bus",
    "xid48_ecc_dbe",
    "ib_port_down",
    "node_down",
    "xid95_uncontained_ecc",
)
STORM_SIZE = 150
CAP = 8


@pytest.fixture
async def pipe(tmp_path: Path) -> Pipeline:
    run = uuid.uuid4().hex[:8]
    settings = Settings(
        app_id=f"storm-{run}", topic_prefix=f"s{run}", partitions=1, state_dir=tmp_path, follow_modes=False
    )
    app = create_app(settings, store="memory://")
    pipeline = build(app, settings)
    app.loop = asyncio.get_running_loop()
    app.finalize()
    app.flow_control.resume()
    sent: dict[str, list[tuple[bytes, object]]] = defaultdict(list)
    for field in ("actions", "audit", "dlq", "isolation_requests"):

        async def record(key=None, value=None, _name=field, **_kw):
            sent[_name].append((key, value))
            return acked()

        getattr(pipeline.topics, field).send = AsyncMock(side_effect=record)
    pipeline.sent = sent  # type: ignore[attr-defined]
    return pipeline


def storm_incidents(root: Path, count: int) -> list[Incident]:
    """One attributed incident per simulated hardware failure, all 'now' (a storm, not a replay)."""
    diag = Diagnoser()
    now = datetime.now(UTC)
    out: list[Incident] = []
    for i in range(count):
        name = STORM_SCENARIOS[i % len(STORM_SCENARIOS)]
        seed = 1000 + i
        sc = generate(name, seed, t0=default_t0(seed), **scenario_options(i, name, seed))
        folder = write_files(sc, root)
        result = diag.run([str(folder / "logs")], sc.truth.end_time + timedelta(minutes=5))
        shutil.rmtree(folder, ignore_errors=True)
        s = summary(result)
        root_cause = s["root_cause"]
        if result.verdict is None or not isinstance(root_cause, dict):
            continue
        out.append(
            Incident(
                incident_id=f"storm-{i}",
                revision=1,
                cluster="storm",
                job_id=sc.truth.job_id,
                attempt=1,
                status=IncidentStatus.OPEN,
                category=Category(s["category"]),
                root_cause=RootCause(
                    rule=root_cause["rule"],
                    summary=root_cause["summary"],
                    signal_id=f"sig-{i}",
                    event_time=now,
                    text=str(root_cause["text"])[:1024],
                ),
                isolate=list(s["isolate"]),  # type: ignore[call-overload]
                restartable=bool(s["restartable"]),
                confidence=float(s["confidence"]),  # type: ignore[arg-type]
                opened_at=now,
                updated_at=now,
                first_signal_time=now,
            )
        )
    return out


async def run_storm(pipe: Pipeline, incidents: list[Incident]) -> list[Action]:
    async with pipe.agents["decide"].test_context() as agent:
        for inc in incidents:
            await agent.put(codec.loads(codec.dumps(inc)), key=inc.job_id.encode())
    requests = list(pipe.sent["isolation_requests"])  # type: ignore[attr-defined]
    async with pipe.agents["isolation-gate"].test_context() as agent:
        for key, req in requests:
            await agent.put(codec.loads(codec.dumps(req)), key=key)
    return [a for _, a in pipe.sent["actions"]]  # type: ignore[attr-defined]


async def test_a_storm_of_hundreds_of_failing_nodes_never_drains_more_than_the_cap(pipe: Pipeline, tmp_path):
    incidents = storm_incidents(tmp_path, STORM_SIZE)
    implicated = {n for inc in incidents for n in inc.isolate}
    assert len(implicated) >= 100, "the storm must implicate hundreds of nodes to mean anything"
    step = pipe.services["decide"]
    step.policy_file = step.policy_file.model_copy(
        update={"valves": step.policy_file.valves.model_copy(update={"max_isolations_per_window": CAP})}
    )
    step.registry.apply(
        ModeChange(
            change_id="storm-act",
            scope=ModeScope(cluster="storm"),
            mode=Mode.ACT,
            actor="test",
            reason="storm test in act mode",
            time=datetime.now(UTC),
        )
    )

    actions = await run_storm(pipe, incidents)

    drains = [a for a in actions if a.kind == ActionKind.DRAIN_NODE]
    restarts = [a for a in actions if a.kind == ActionKind.REQUEUE_JOB]
    assert len(drains) == CAP
    assert all(not a.dry_run for a in drains)  # the runtime mode change took effect
    # Jobs with a culprit still come back at once: restarts never wait on the gate's verdict.
    with_culprit = {r.job_id for _, r in pipe.sent["isolation_requests"]}  # type: ignore[attr-defined]
    assert {a.job_id for a in restarts} == with_culprit and len(restarts) >= 100
    audit = [r for _, r in pipe.sent["audit"]]  # type: ignore[attr-defined]
    alerts = [r for r in audit if r.event == "valve.alert"]
    held = [r for r in audit if r.event == "action.held" and r.details.get("valve") == "blast_radius"]
    assert len(alerts) == 1 and alerts[0].details["valve"] == "blast_radius"
    requests = pipe.sent["isolation_requests"]  # type: ignore[attr-defined]
    assert len(requests) >= 100
    assert len(held) + len(alerts) + len(drains) == len(requests)  # every request accounted for, none lost
    decisions = [r for r in audit if r.event == "decision"]
    assert len(decisions) == len(incidents)
    assert {d.details["mode_source"] for d in decisions} == {"storm/*/* by test"}


async def test_job_facts_merge_and_a_checkpoint_from_the_correlator_resets_the_restart_budget(pipe: Pipeline):
    from schemas.jobs import JobInfo

    step = pipe.services["decide"]
    now = datetime.now(UTC)
    aps = '{"APS": {"max_requeue_times": 1}}'

    def failure(n: int, at: datetime) -> Incident:
        return Incident(
            incident_id=f"inc-j7-{n}",
            revision=1,
            cluster="storm",
            job_id="7",
            attempt=n,
            status=IncidentStatus.OPEN,
            category=Category.INFRASTRUCTURE,
            root_cause=RootCause(
                rule="nccl.watchdog_timeout",
                summary="NCCL watchdog",
                signal_id=f"s{n}",
                event_time=at,
                text="x",
            ),
            restartable=True,
            confidence=0.9,
            opened_at=at,
            updated_at=at,
            first_signal_time=at,
        )

    async with pipe.agents["job-info"].test_context() as agent:
        collector = JobInfo(
            job_id="7", cluster="storm", scheduler="slurm", partition="gpu", comment=aps, time=now
        )
        await agent.put(codec.loads(codec.dumps(collector)), key=b"7")
    async with pipe.agents["decide"].test_context() as agent:
        for n in (1, 2):
            await agent.put(codec.loads(codec.dumps(failure(n, now))), key=b"7")
    async with pipe.agents["job-info"].test_context() as agent:  # the correlator saw a checkpoint
        ckpt = JobInfo(job_id="7", last_checkpoint_at=datetime.now(UTC), time=datetime.now(UTC))
        await agent.put(codec.loads(codec.dumps(ckpt)), key=b"7")
    async with pipe.agents["decide"].test_context() as agent:
        await agent.put(codec.loads(codec.dumps(failure(3, datetime.now(UTC)))), key=b"7")

    rules = [r.details["policy_rule"] for _, r in pipe.sent["audit"] if r.event == "decision"]  # type: ignore[attr-defined]
    assert rules == ["restart", "stop-budget", "restart"]  # APS budget 1, then reset by the checkpoint
    info = step.record_of("7").info
    assert (info.partition, info.comment, info.scheduler) == ("gpu", aps, "slurm")  # kept through the merge
    assert info.last_checkpoint_at is not None
