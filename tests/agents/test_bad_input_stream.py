"""Bad input through the Faust agents (``test_context``, no broker): late and out-of-order events,
clock skew between nodes, duplicate deliveries and malformed records.

Already covered elsewhere and not repeated here: extract dead-letters invalid JSON and unknown
shipper shapes, correlate dead-letters an invalid signal, route holds a node fact until its job's
topology arrives and releases an unclaimed node fault as the node's own incident
(tests/agents/test_agents.py); a replayed signal changes nothing in the pure correlator and late
cascade evidence becomes a refined revision on the next tick (tests/unit/test_correlator.py).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import uuid
from collections import defaultdict
from datetime import timedelta
from typing import Any
from unittest.mock import AsyncMock

import pytest

from schemas import codec
from schemas.deadletter import DeadLetter
from schemas.incidents import Category, Incident
from schemas.signals import JobNodeAssignment, Signal, SignalBatch
from streams.app import create_app
from streams.pipeline import Pipeline, build
from streams.settings import Settings
from tests.factories import (
    T0,
    acked,
    kernel_xid,
    nccl_timeout,
    one,
    sent_assignments,
    slurmctld_allocate,
    slurmctld_line,
)

LATENESS_S = 300.0  # the default bound on lateness and clock skew across sources


@pytest.fixture
async def pipe(tmp_path: Any) -> Pipeline:
    run = uuid.uuid4().hex[:8]
    settings = Settings(
        app_id=f"bad-{run}",
        topic_prefix=f"b{run}",
        partitions=1,
        state_dir=tmp_path,
        lateness_s=LATENESS_S,
        unclaimed_grace_s=30,
        root_grace_s=0,  # a job's end closes its incident on the next tick
        extract_stage="agent",  # the per-message agent: agent.test_context drives it in memory
        take_max=1,  # one event per take: put() returns once its event is handled
    )
    app = create_app(settings, store="memory://")
    pipeline = build(app, settings)
    app.loop = asyncio.get_running_loop()
    app.finalize()
    app.flow_control.resume()
    sent: dict[str, list[tuple[bytes, Any]]] = defaultdict(list)
    for field in dataclasses.fields(pipeline.topics):  # every topic a stage may send to: no broker here
        if getattr(pipeline.topics, field.name) is not None:
            _record(pipeline, field.name, sent)
    pipeline.sent = sent  # type: ignore[attr-defined]
    return pipeline


def _record(pipeline: Pipeline, field: str, sent: dict[str, list[tuple[bytes, Any]]]) -> None:
    async def record(key: bytes | None = None, value: Any = None, **_kw: Any) -> asyncio.Future[None]:
        sent[field].append((key or b"", value))
        return acked()

    getattr(pipeline.topics, field).send = AsyncMock(side_effect=record)


def _d(value: Any) -> Any:
    return codec.loads(codec.dumps(value))


def _incidents(pipe: Pipeline) -> list[Incident]:
    return [v for _, v in pipe.sent["incidents"]]  # type: ignore[attr-defined]


def _routed(sig: Signal, job: str = "42") -> Signal:
    return sig.model_copy(update={"job_id": job, "routed": True})


ALLOC = one(slurmctld_allocate("42", "gpu-[01-04]", T0), offset=1)
XID = one(kernel_xid("gpu-03", 79, T0 + timedelta(minutes=10)), offset=2)


# -- late and out-of-order ----------------------------------------------------------------------


async def test_evidence_older_than_the_root_arriving_after_it_refines_the_same_incident(pipe: Pipeline):
    """Out of order: the root arrives first, then cascade lines stamped before it."""
    early = [
        one(nccl_timeout(n, r, "42", T0 + timedelta(minutes=9)), offset=10 + r)
        for n, r in [("gpu-01", 0), ("gpu-02", 1)]
    ]
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put(_d(ALLOC), key=b"42")
        await agent.put(_d(_routed(XID)), key=b"42")
        for sig in early:
            await agent.put(_d(sig), key=b"42")
        await agent.put({"tick": True}, key=b"42")
    first, refined = _incidents(pipe)
    assert (first.revision, refined.revision) == (1, 2)
    assert refined.incident_id == first.incident_id
    assert refined.culprit is not None and refined.culprit.node == "gpu-03"
    assert refined.first_signal_time == T0 + timedelta(minutes=9)  # the window's start moved back
    assert refined.supporting[0].count == 2


async def test_topology_arriving_after_the_fault_still_names_the_jobs_nodes(pipe: Pipeline):
    """Out of order across sources: the scheduler line lags the kernel and training logs."""
    timeout = one(nccl_timeout("gpu-01", 0, "42", T0 + timedelta(minutes=11)), offset=11)
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put(_d(_routed(XID)), key=b"42")
        await agent.put(_d(timeout), key=b"42")
        await agent.put(_d(ALLOC), key=b"42")
        await agent.put({"tick": True}, key=b"42")
    incidents = _incidents(pipe)
    assert {i.incident_id for i in incidents} == {incidents[0].incident_id}
    assert incidents[-1].job_nodes == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    assert [a.node for a in sent_assignments(pipe.sent["topology_node"])] == [
        "gpu-01",
        "gpu-02",
        "gpu-03",
        "gpu-04",
    ]  # type: ignore[attr-defined]


async def test_evidence_that_loses_the_race_with_the_job_end_refines_the_closed_incident(pipe: Pipeline):
    """Found by the rebalance test: the scheduler's end line overtook a training-log root from
    another partition; the window closed, and the late root opened a second incident."""
    end = one(slurmctld_line("_job_complete: JobId=42 WEXITSTATUS 1", T0 + timedelta(minutes=12)), offset=12)
    late_root = one(
        codec.dumps(
            {
                "@timestamp": (T0 + timedelta(minutes=10, seconds=1)).timestamp(),
                "log": "RuntimeError: CUDA error: uncorrectable ECC error encountered",
                "hostname": "gpu-03",
                "filename": "/scratch/run/slurm-42.out",
            }
        ),
        offset=13,
    )
    after_the_end = one(nccl_timeout("gpu-01", 0, "42", T0 + timedelta(minutes=30)), offset=14)
    async with pipe.agents["correlate"].test_context() as agent:
        for sig in [ALLOC, _routed(XID), end]:
            await agent.put(_d(sig), key=b"42")
        await agent.put({"tick": True}, key=b"42")  # job over: closed
        await agent.put(_d(late_root), key=b"42")
        await agent.put({"tick": True}, key=b"42")
        await agent.put(_d(after_the_end), key=b"42")  # after the end: a new incident may open
    incidents = _incidents(pipe)
    first_id = incidents[0].incident_id
    same = [i for i in incidents if i.incident_id == first_id]
    assert [i.revision for i in same] == list(range(1, len(same) + 1))
    assert same[1].status == "closed" and same[-1].status == "closed" and len(same) >= 3
    assert any(e.signal_id == late_root.signal_id for e in same[-1].evidence)
    assert len({i.incident_id for i in incidents}) <= 2


# -- clock skew between nodes --------------------------------------------------------------------


def _assign(at_offset_s: float, state: str = "assigned") -> Any:
    return _d(
        JobNodeAssignment(
            node="gpu-03", job_id="42", attempt=1, state=state, event_time=T0 + timedelta(seconds=at_offset_s)
        )
    )  # type: ignore[arg-type]


async def test_a_node_clock_behind_the_controller_within_the_bound_still_routes_to_the_job(pipe: Pipeline):
    behind = one(kernel_xid("gpu-03", 79, T0 - timedelta(seconds=LATENESS_S - 60)), offset=3)
    async with pipe.agents["route"].test_context() as agent:
        await agent.put(_assign(0), key=b"gpu-03")
        await agent.put(_d(behind), key=b"gpu-03")
    [(key, routed)] = pipe.sent["signals_job"]  # type: ignore[attr-defined]
    assert (key, routed.job_id, routed.signal_id) == (b"42", "42", behind.signal_id)


async def test_a_node_fact_just_after_the_job_was_released_still_belongs_to_that_job(pipe: Pipeline):
    """The node's clock runs ahead: its Xid is stamped after slurmctld released the job."""
    ahead = one(kernel_xid("gpu-03", 79, T0 + timedelta(seconds=600 + 120)), offset=3)
    async with pipe.agents["route"].test_context() as agent:
        await agent.put(_assign(0), key=b"gpu-03")
        await agent.put(_assign(600, "released"), key=b"gpu-03")
        await agent.put(_d(ahead), key=b"gpu-03")
    [(key, _)] = pipe.sent["signals_job"]  # type: ignore[attr-defined]
    assert key == b"42"


async def test_a_node_fact_skewed_beyond_the_bound_is_not_pinned_on_the_job(pipe: Pipeline):
    """Two hours before the allocation is not this job's fault, whatever the clocks say."""
    stale = one(kernel_xid("gpu-03", 79, T0 - timedelta(hours=2)), offset=3)
    async with pipe.agents["route"].test_context() as agent:
        await agent.put(_assign(0), key=b"gpu-03")
        await agent.put(_d(stale), key=b"gpu-03")
    assert pipe.sent["signals_job"] == []  # type: ignore[attr-defined]


# -- duplicate deliveries ------------------------------------------------------------------------


async def test_a_raw_record_delivered_twice_yields_one_signal_id_and_no_second_revision(pipe: Pipeline):
    """At-least-once: after a crash the same raw.logs offset is read again."""
    raw = kernel_xid("gpu-03", 79, T0 + timedelta(minutes=10))
    async with pipe.agents["extract"].test_context() as agent:
        for _ in range(2):
            agent.sent_offset = 7  # test_context numbers offsets itself: read offset 7 again
            await agent.put(raw, key=b"gpu-03", partition=0)
    (_, a), (_, b) = pipe.sent["signals_node"]  # type: ignore[attr-defined]
    assert a.signal_id == b.signal_id
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put(_d(ALLOC), key=b"42")
        await agent.put(_d(_routed(a)), key=b"42")
        await agent.put(_d(_routed(b)), key=b"42")
        await agent.put({"tick": True}, key=b"42")
    [incident] = _incidents(pipe)
    assert incident.revision == 1


async def test_a_node_fact_redelivered_to_route_reaches_the_incident_once(pipe: Pipeline):
    async with pipe.agents["route"].test_context() as agent:
        await agent.put(_assign(0), key=b"gpu-03")
        await agent.put(_d(XID), key=b"gpu-03")
        await agent.put(_d(XID), key=b"gpu-03")
    forwarded = [v for _, v in pipe.sent["signals_job"]]  # type: ignore[attr-defined]
    assert len(forwarded) == 2  # route is stateless per fact: dedup is the job side's job
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put(_d(ALLOC), key=b"42")
        for sig in forwarded:
            await agent.put(_d(sig), key=b"42")
        await agent.put({"tick": True}, key=b"42")
    [incident] = _incidents(pipe)
    assert incident.revision == 1
    assert [r.signal_id for r in [incident.root_cause]] == [XID.signal_id]


async def test_an_incident_revision_delivered_twice_proposes_its_actions_once(pipe: Pipeline):
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put(_d(ALLOC), key=b"42")
        await agent.put(_d(_routed(XID)), key=b"42")
    [incident] = _incidents(pipe)
    fresh = incident.model_copy(update={"first_signal_time": T0.replace(year=2999)})  # not stale
    sent = pipe.sent  # type: ignore[attr-defined]
    async with pipe.agents["decide"].test_context() as agent:
        await agent.put(_d(fresh), key=b"42")
        first = {k: len(sent[k]) for k in ("actions", "isolation_requests")}
        await agent.put(_d(fresh), key=b"42")
    assert first["actions"] + first["isolation_requests"] >= 2  # requeue, and drain (direct or gated)
    assert {k: len(sent[k]) for k in first} == first  # the second delivery proposed nothing


async def test_a_signal_redelivered_after_its_incident_closed_does_not_open_a_second_incident(
    pipe: Pipeline,
):
    """Found by the rebalance test: a worker that took over replayed a closed job's signals, and
    each one opened a new ``unknown`` incident under a new id."""
    timeout = one(nccl_timeout("gpu-01", 0, "42", T0 + timedelta(minutes=11)), offset=11)
    end = one(slurmctld_line("_job_complete: JobId=42 WEXITSTATUS 1", T0 + timedelta(minutes=12)), offset=12)
    async with pipe.agents["correlate"].test_context() as agent:
        for sig in [ALLOC, _routed(XID), timeout, end]:
            await agent.put(_d(sig), key=b"42")
        await agent.put({"tick": True}, key=b"42")
        for sig in [timeout, _routed(XID)]:  # redelivered
            await agent.put(_d(sig), key=b"42")
        await agent.put({"tick": True}, key=b"42")
    incidents = _incidents(pipe)
    assert incidents[-1].status == "closed"
    assert {i.incident_id for i in incidents} == {incidents[0].incident_id}
    assert [i.revision for i in incidents] == list(range(1, len(incidents) + 1))


# -- malformed signals ---------------------------------------------------------------------------


async def test_route_dead_letters_a_malformed_node_record_with_its_bytes_and_keeps_routing(pipe: Pipeline):
    bad = {"signal_id": "s1", "rule": "gpu.xid", "event_time": "not a time"}
    async with pipe.agents["route"].test_context() as agent:
        await agent.put(bad, key=b"gpu-03")
        await agent.put({"node": "gpu-03", "state": "assigned"}, key=b"gpu-03")  # assignment missing fields
        await agent.put(_assign(0), key=b"gpu-03")
        await agent.put(_d(XID), key=b"gpu-03")
    letters = [DeadLetter.model_validate(_d(v)) for _, v in pipe.sent["dlq"]]  # type: ignore[attr-defined]
    assert [(d.stage, d.reason, d.key) for d in letters] == [
        ("route", "invalid_record", "gpu-03"),
        ("route", "invalid_record", "gpu-03"),
    ]
    assert codec.loads(base64.b64decode(letters[0].original_b64)) == bad
    assert len(pipe.sent["signals_job"]) == 1  # type: ignore[attr-defined]


async def test_correlate_dead_letters_a_signal_of_the_wrong_type_and_keeps_the_window(pipe: Pipeline):
    wrong = {**_d(_routed(XID)), "signal_id": "other", "role": "no_such_role"}
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put(_d(ALLOC), key=b"42")
        await agent.put(wrong, key=b"42")
        await agent.put([1, 2, 3], key=b"42")
        await agent.put(_d(_routed(XID)), key=b"42")
    reasons = [v.reason for _, v in pipe.sent["dlq"]]  # type: ignore[attr-defined]
    assert reasons == ["invalid_record", "invalid_record"]
    [incident] = _incidents(pipe)
    assert incident.category == Category.HARDWARE_GPU


async def test_a_packed_batch_correlates_like_its_signals_sent_alone_and_a_bad_one_is_dead_lettered_alone(
    pipe: Pipeline,
):
    wrong = {**_d(_routed(XID)), "signal_id": "other", "role": "no_such_role"}
    batch = _d(SignalBatch(job_id="42", signals=[ALLOC, _routed(XID)]))
    batch["signals"].insert(1, wrong)
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put(batch, key=b"42")
        await agent.put({"kind": "signal_batch", "job_id": "42", "signals": []}, key=b"42")
    letters = [v for _, v in pipe.sent["dlq"]]  # type: ignore[attr-defined]
    assert [letter.reason for letter in letters] == ["invalid_record", "agent_error"]
    assert codec.loads(base64.b64decode(letters[0].original_b64))["signal_id"] == "other"
    [incident] = _incidents(pipe)
    assert incident.category == Category.HARDWARE_GPU and incident.culprit is not None
    assert incident.culprit.node == "gpu-03"


async def test_the_extract_agent_packs_a_records_facts_of_one_job_into_one_batch(pipe: Pipeline):
    lines = [
        f"[rank{r}]:[E1129 03:10:00.426415540 ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) "
        "ran for 600081 milliseconds before timing out."
        for r in (2, 0)
    ]
    record = {"schema_version": 1, "lines": lines, "host": "gpu-01", "job_id": "42", "time": T0.isoformat()}
    async with pipe.agents["extract"].test_context() as agent:
        await agent.put(codec.dumps(record), key=b"gpu-01")
    [(key, batch)] = pipe.sent["signals_job"]  # type: ignore[attr-defined]
    assert key == b"42" and isinstance(batch, SignalBatch)
    assert [(s.rule, s.rank) for s in batch.signals] == [
        ("nccl.watchdog_timeout", 2),
        ("nccl.watchdog_timeout", 0),
    ]


async def test_decide_dead_letters_a_malformed_incident_and_proposes_nothing_for_it(pipe: Pipeline):
    async with pipe.agents["decide"].test_context() as agent:
        await agent.put({"incident_id": "inc-x", "revision": "one"}, key=b"42")
    [(_, letter)] = pipe.sent["dlq"]  # type: ignore[attr-defined]
    assert (letter.stage, letter.reason, letter.key) == ("decide", "invalid_record", "42")
    assert pipe.sent["actions"] == []  # type: ignore[attr-defined]


async def test_extract_dead_letters_oversized_and_binary_records_with_their_reason(pipe: Pipeline):
    async with pipe.agents["extract"].test_context() as agent:
        await agent.put(b"\x00\x01\x02\xff" * 16, key=b"gpu-01")
        await agent.put(b"x" * (2 * 1024 * 1024), key=b"gpu-01")
        await agent.put(slurmctld_line("sched: Allocate JobId=7 NodeList=gpu-01 #CPUs=8", T0), key=b"ctl")
    letters = [v for _, v in pipe.sent["dlq"]]  # type: ignore[attr-defined]
    assert [(d.stage, d.reason) for d in letters] == [("extract", "binary"), ("extract", "too_large")]
    assert len(pipe.sent["signals_job"]) == 1  # type: ignore[attr-defined]
