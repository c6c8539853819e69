"""The Faust agents, in-process with ``test_context`` (no broker): what each one sends."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from unittest.mock import AsyncMock, patch

import pytest

from schemas import codec
from schemas.actions import Action, ActionKind, Mode
from schemas.base import utcnow
from schemas.deadletter import DeadLetter
from schemas.incidents import Category, Incident
from schemas.signals import AssignmentBatch, JobNodeAssignment, Signal, SignalBatch
from streams import faust_events
from streams.app import create_app
from streams.correlate import agent as agent_module
from streams.correlate.state import RANKS_PER_BLOCK
from streams.pipeline import Pipeline, build
from streams.settings import Settings
from tests.factories import (
    T0,
    acked,
    cuda_error,
    job_output,
    kernel_xid,
    nccl_init,
    nccl_timeout,
    one,
    sent_assignments,
    slurmctld_allocate,
    slurmctld_line,
)


@pytest.fixture
async def pipe(tmp_path):
    run = uuid.uuid4().hex[:8]
    settings = Settings(
        app_id=f"test-{run}",
        topic_prefix=f"t{run}",
        partitions=1,
        state_dir=tmp_path,
        lateness_s=3600,
        extract_stage="agent",  # the per-message agent: agent.test_context drives it in memory
        take_max=1,  # one event per take: put() returns once its event is handled
    )
    app = create_app(settings, store="memory://")
    pipeline = build(app, settings)
    app.loop = asyncio.get_running_loop()
    app.finalize()
    app.flow_control.resume()
    sent: dict[str, list[tuple[bytes, object]]] = defaultdict(list)
    for field in (
        "signals_node",
        "topology_node",
        "ticks_node",
        "signals_job",
        "ticks_job",
        "incidents",
        "actions",
        "audit",
        "dlq",
        "topology_jobs",
        "isolation_requests",
        "health_nodes",
    ):
        topic = getattr(pipeline.topics, field)

        async def record(key=None, value=None, _name=field, **_kw):
            sent[_name].append((key, value))
            return acked()

        topic.send = AsyncMock(side_effect=record)
    pipeline.sent = sent  # type: ignore[attr-defined]
    return pipeline


def _as_dict(value):
    return codec.loads(codec.dumps(value))


async def test_extract_sends_node_facts_to_signals_node_and_job_facts_to_signals_job(pipe: Pipeline):
    async with pipe.agents["extract"].test_context() as agent:
        await agent.put(kernel_xid("gpu-03", 79, T0), key=b"gpu-03")
        await agent.put(nccl_timeout("gpu-01", 0, "42", T0), key=b"gpu-01")
        await agent.put(b"iteration 10 | loss 1.0", key=b"gpu-01")
    [(node_key, xid)] = pipe.sent["signals_node"]
    [(job_key, timeout)] = pipe.sent["signals_job"]
    assert (node_key, xid.rule, xid.node) == (b"gpu-03", "gpu.xid", "gpu-03")
    assert (job_key, timeout.rule, timeout.rank) == (b"42", "nccl.watchdog_timeout", 0)
    assert pipe.sent["dlq"] == []


async def test_extract_reads_every_line_of_a_multi_line_record_with_distinct_signal_ids(pipe: Pipeline):
    def attr(k: str, v: str) -> dict[str, object]:
        return {"key": k, "value": {"stringValue": v}}

    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."
    otlp = {
        "resourceLogs": [
            {
                "resource": {"attributes": [attr("host.name", "gpu-03")]},
                "scopeLogs": [
                    {
                        "logRecords": [
                            {"timeUnixNano": "1764410400000000000", "body": {"stringValue": xid}},
                            {"timeUnixNano": "1764410401000000000", "body": {"stringValue": xid}},
                        ]
                    }
                ],
            }
        ]
    }
    async with pipe.agents["extract"].test_context() as agent:
        await agent.put(codec.dumps(otlp), key=b"gpu-03")
    sigs = [sig for _, sig in pipe.sent["signals_node"]]
    assert [s.rule for s in sigs] == ["gpu.xid", "gpu.xid"]
    assert len({s.signal_id for s in sigs}) == 2  # one record, two lines: two facts, not one deduplicated
    assert pipe.sent["dlq"] == []


async def test_extract_dead_letters_bad_records_with_reason_and_original_bytes_and_keeps_going(
    pipe: Pipeline,
):
    junk = b'{"log": "truncated'
    async with pipe.agents["extract"].test_context() as agent:
        await agent.put(junk, key=b"gpu-01")
        await agent.put(b'{"neither": "log nor message"}', key=b"gpu-01")
        await agent.put(kernel_xid("gpu-03", 79, T0), key=b"gpu-03")
    letters = [DeadLetter.model_validate(_as_dict(v)) for _, v in pipe.sent["dlq"]]
    assert [d.reason for d in letters] == ["invalid_json", "unknown_shape"]
    assert base64.b64decode(letters[0].original_b64) == junk
    assert letters[0].stage == "extract"
    assert len(pipe.sent["signals_node"]) == 1  # the good record after the bad ones still flowed


async def test_route_holds_a_node_fact_until_its_job_topology_arrives_then_forwards_it(pipe: Pipeline):
    xid = one(kernel_xid("gpu-03", 79, T0 + timedelta(minutes=1)), offset=5)
    assignment = JobNodeAssignment(node="gpu-03", job_id="42", attempt=1, state="assigned", event_time=T0)
    async with pipe.agents["route"].test_context() as agent:
        await agent.put(_as_dict(xid), key=b"gpu-03")
        assert pipe.sent["signals_job"] == []
        await agent.put(_as_dict(assignment), key=b"gpu-03")
    [(key, routed)] = pipe.sent["signals_job"]
    assert key == b"42"
    assert (routed.job_id, routed.routed, routed.signal_id) == ("42", True, xid.signal_id)


async def test_route_holds_only_the_latest_progress_bar_per_rank_until_the_job_topology_arrives(
    pipe: Pipeline,
):
    line = "[rank0]:Map (num_proc=8):  45%|████▌     | 450000/1000000 [12:01<14:41, 623.40 examples/s]"
    bars = [
        one(job_output("gpu-03", "42", T0 + timedelta(seconds=s), line), offset=s).model_copy(
            update={"job_id": None}  # a shipper that names no job: the node's jobs decide
        )
        for s in (60, 61, 62)
    ]
    assignment = JobNodeAssignment(node="gpu-03", job_id="42", attempt=1, state="assigned", event_time=T0)
    async with pipe.agents["route"].test_context() as agent:
        for bar in bars:
            await agent.put(_as_dict(bar), key=b"gpu-03")
        assert pipe.sent["signals_job"] == []
        await agent.put(_as_dict(assignment), key=b"gpu-03")
    [(key, routed)] = pipe.sent["signals_job"]
    assert (key, routed.signal_id) == (b"42", bars[-1].signal_id)


async def test_route_applies_a_packed_batch_of_assignments_to_each_node_as_if_each_came_alone(pipe: Pipeline):
    """The correlate stage packs a batch's assignments per partition of topology.node: each one reaches
    its own node's state (releasing the facts it held), a malformed one is dead-lettered alone, and one
    for a node of another partition is sent on keyed by its node instead of being filed here."""
    xid = one(kernel_xid("gpu-03", 79, T0 + timedelta(minutes=1)), offset=5)
    packed = AssignmentBatch(
        assignments=[
            JobNodeAssignment(node=f"gpu-0{n}", job_id="42", attempt=1, state="assigned", event_time=T0)
            for n in (1, 2, 3)
        ]
    )
    value = _as_dict(packed)
    value["assignments"].insert(1, {"node": "gpu-09", "job_id": "42", "state": "borrowed"})
    async with pipe.agents["route"].test_context() as agent:
        await agent.put(_as_dict(xid), key=b"gpu-03")
        await agent.put(value, key=b"gpu-01")
        await agent.put(_as_dict(packed), key=b"gpu-01", partition=1)  # not where these nodes hash
    [(key, routed)] = pipe.sent["signals_job"]
    assert (key, routed.job_id, routed.signal_id) == (b"42", "42", xid.signal_id)
    stage = pipe.agents["stage"]
    for node in ("gpu-01", "gpu-02", "gpu-03"):
        assert [j.job_id for j in stage.node_states.get(node).jobs] == ["42"]
    [(stage_key, letter)] = pipe.sent["dlq"]
    assert (stage_key, letter.stage, letter.reason, letter.key) == (
        b"route",
        "route",
        "invalid_record",
        "gpu-09",
    )
    assert [(k, a.node) for k, a in pipe.sent["topology_node"]] == [
        (b"gpu-01", "gpu-01"),
        (b"gpu-02", "gpu-02"),
        (b"gpu-03", "gpu-03"),
    ]


async def test_correlate_sends_a_batchs_assignments_packed_per_partition_of_topology_node(pipe: Pipeline):
    allocs = [
        one(slurmctld_allocate("42", "gpu-[01-04]", T0), offset=1),
        one(slurmctld_allocate("43", "gpu-[11-13]", T0), offset=2),
    ]
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put(_as_dict(SignalBatch(job_id=None, signals=allocs)), key=b"42")
    [(key, value)] = pipe.sent["topology_node"]  # one partition here: one message for both jobs
    assert isinstance(value, AssignmentBatch)
    assert key == b"gpu-01"
    assert [(a.job_id, a.node) for a in value.assignments] == [
        *(("42", f"gpu-0{n}") for n in range(1, 5)),
        *(("43", f"gpu-1{n}") for n in range(1, 4)),
    ]


async def test_route_makes_an_unclaimed_node_fault_the_nodes_own_incident_after_the_grace(pipe: Pipeline):
    xid = one(kernel_xid("gpu-09", 79, T0), offset=3)  # observed long ago: the grace is over
    xid13 = one(kernel_xid("gpu-09", 13, T0, text="Graphics SM Warp Exception"), offset=4)
    async with pipe.agents["route"].test_context() as agent:
        await agent.put(_as_dict(xid), key=b"gpu-09")
        await agent.put(_as_dict(xid13), key=b"gpu-09")
        await agent.put({"tick": True}, key=b"gpu-09")
    [(key, routed)] = pipe.sent["signals_job"]  # the application-level Xid 13 implicates no node
    assert (key, routed.job_id, routed.signal_id) == (b"node:gpu-09", "node:gpu-09", xid.signal_id)


async def test_route_gives_a_released_fault_to_a_job_whose_topology_comes_after_the_grace(pipe: Pipeline):
    """The job's allocation arrives after the fault went to the node's own incident (its collector was
    down past the grace): the job still gets the fault as its root, and a job the scheduler placed on
    the node after the fault does not."""
    xid = one(kernel_xid("gpu-09", 79, T0 + timedelta(minutes=5)), offset=3)  # observed long ago
    xid = xid.model_copy(update={"observed_time": utcnow() - timedelta(minutes=5)})
    late = JobNodeAssignment(node="gpu-09", job_id="42", attempt=1, state="assigned", event_time=T0)
    later_job = JobNodeAssignment(  # placed on the node a minute after the fault: within the skew allowance
        node="gpu-09", job_id="77", attempt=1, state="assigned", event_time=T0 + timedelta(minutes=6)
    )
    async with pipe.agents["route"].test_context() as agent:
        await agent.put(_as_dict(xid), key=b"gpu-09")
        await agent.put({"tick": True}, key=b"gpu-09")
        assert [(k, r.job_id) for k, r in pipe.sent["signals_job"]] == [(b"node:gpu-09", "node:gpu-09")]
        await agent.put(_as_dict(late), key=b"gpu-09")
        await agent.put(_as_dict(later_job), key=b"gpu-09")
    keys = [(k, r.job_id, r.signal_id) for k, r in pipe.sent["signals_job"]]
    assert keys == [(b"node:gpu-09", "node:gpu-09", xid.signal_id), (b"42", "42", xid.signal_id)]
    assert [s.signal_id for s in pipe.agents["stage"].node_states.get("gpu-09").released] == [xid.signal_id]


async def test_route_forgets_a_released_fault_after_the_lateness_bound(pipe: Pipeline):
    stage = pipe.agents["stage"]
    lateness = timedelta(seconds=pipe.settings.lateness_s)
    xid = one(kernel_xid("gpu-09", 79, T0), offset=3)
    xid = xid.model_copy(update={"observed_time": utcnow() - lateness - timedelta(seconds=1)})
    late = JobNodeAssignment(node="gpu-09", job_id="42", attempt=1, state="assigned", event_time=T0)
    async with pipe.agents["route"].test_context() as agent:
        await agent.put(_as_dict(xid), key=b"gpu-09")
        await agent.put({"tick": True}, key=b"gpu-09")
        await agent.put(_as_dict(late), key=b"gpu-09")
    assert [k for k, _ in pipe.sent["signals_job"]] == [b"node:gpu-09"]
    assert stage.node_states.get("gpu-09").released == []


async def test_route_gives_an_unclaimed_fault_its_whole_grace_after_a_rebalance(pipe: Pipeline):
    """A fault observed long ago is not released the moment a rebalance ends: its job's allocation may
    be in the backlog the recovered streams are about to read, so the grace starts again there."""
    stage = pipe.agents["stage"]
    xid = one(kernel_xid("gpu-09", 79, T0), offset=3)  # observed long before the rebalance
    await stage.resumed()  # a rebalance's recovery has just finished
    async with pipe.agents["route"].test_context() as agent:
        await agent.put(_as_dict(xid), key=b"gpu-09")
        await agent.put({"tick": True}, key=b"gpu-09")
        assert pipe.sent["signals_job"] == []  # still waiting for its job's topology
        stage._resumed_at = utcnow() - timedelta(seconds=pipe.settings.unclaimed_grace_s + 1)
        await agent.put({"tick": True}, key=b"gpu-09")
    [(key, routed)] = pipe.sent["signals_job"]
    assert (key, routed.signal_id) == (b"node:gpu-09", xid.signal_id)


async def test_route_holds_an_unclaimed_fault_while_the_topology_path_is_behind(pipe: Pipeline):
    """The backlog probe found a group behind its fence just now (``held_at``): the fault's job
    allocation may be among the records not yet handled, so its grace starts again from there."""
    stage = pipe.agents["stage"]
    grace = timedelta(seconds=pipe.settings.unclaimed_grace_s)
    xid = one(kernel_xid("gpu-09", 79, T0), offset=3)
    xid = xid.model_copy(
        update={"observed_time": utcnow() - grace - timedelta(seconds=1)}
    )  # its grace is over
    stage.held_at = utcnow()
    async with pipe.agents["route"].test_context() as agent:
        await agent.put(_as_dict(xid), key=b"gpu-09")
        await agent.put({"tick": True}, key=b"gpu-09")
        assert pipe.sent["signals_job"] == []
        stage.held_at = utcnow() - grace - timedelta(seconds=1)  # the path has been caught up a grace long
        await agent.put({"tick": True}, key=b"gpu-09")
    [(key, routed)] = pipe.sent["signals_job"]
    assert (key, routed.signal_id) == (b"node:gpu-09", xid.signal_id)


async def test_route_releases_a_held_fault_once_the_lateness_bound_has_passed(pipe: Pipeline):
    """A topology path that never catches up delays a node's own incident by the lateness bound at
    most: it never loses it."""
    stage = pipe.agents["stage"]
    lateness = timedelta(seconds=pipe.settings.lateness_s)
    xid = one(kernel_xid("gpu-09", 79, T0), offset=3)
    xid = xid.model_copy(update={"observed_time": utcnow() - lateness - timedelta(seconds=1)})
    stage.held_at = utcnow()  # behind at the last look
    async with pipe.agents["route"].test_context() as agent:
        await agent.put(_as_dict(xid), key=b"gpu-09")
        await agent.put({"tick": True}, key=b"gpu-09")
    [(key, routed)] = pipe.sent["signals_job"]
    assert (key, routed.signal_id) == (b"node:gpu-09", xid.signal_id)


class _Probe:
    """The backlog probe's seam (backlog.py has its own test against the broker)."""

    def __init__(self, answer: list[tuple[str, str, int]] | Exception) -> None:
        self.answer, self.looks, self.forgot = answer, 0, 0

    def look(self) -> list[tuple[str, str, int]]:
        self.looks += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def forget(self) -> None:
        self.forgot += 1


async def _probe_once(stage: Any, probe: _Probe) -> None:
    stage.backlog, stage._probed_at = probe, float("-inf")
    stage.probe_backlog()
    if stage._probe_task is not None:
        await stage._probe_task


async def test_the_backlog_probe_starts_the_grace_again_when_a_group_is_behind(pipe: Pipeline):
    stage = pipe.agents["stage"]
    stage._pending_nodes = {"gpu-09"}
    await _probe_once(stage, _Probe([]))
    assert stage.held_at is None  # caught up: the grace runs on
    before = utcnow()
    await _probe_once(stage, _Probe([("sickbay-extract", "raw.logs", 3)]))
    assert stage.held_at is not None and stage.held_at >= before


async def test_the_backlog_probe_looks_only_while_facts_wait_and_a_failed_look_holds_nothing(
    pipe: Pipeline, caplog: pytest.LogCaptureFixture
):
    stage = pipe.agents["stage"]
    idle = _Probe([("g", "t", 0)])
    stage._pending_nodes = set()
    await _probe_once(stage, idle)
    assert (idle.looks, idle.forgot, stage.held_at) == (0, 1, None)  # no fact waits: the fence is dropped

    stage._pending_nodes = {"gpu-09"}
    broken = _Probe(RuntimeError("broker away"))
    await _probe_once(stage, broken)
    await _probe_once(stage, broken)
    assert (broken.looks, stage.held_at) == (2, None)  # the wall-clock grace alone
    assert sum("could not be read" in r.getMessage() for r in caplog.records) == 1  # said once


async def test_correlate_builds_one_hardware_incident_from_topology_cascade_and_root(pipe: Pipeline):
    alloc = one(slurmctld_allocate("42", "gpu-[01-04]", T0), offset=1)
    timeouts = [
        one(nccl_timeout(n, r, "42", T0 + timedelta(minutes=10)), offset=10 + r)
        for n, r in [("gpu-01", 0), ("gpu-02", 1), ("gpu-04", 3)]
    ]
    xid = one(kernel_xid("gpu-03", 79, T0 + timedelta(minutes=1)), offset=2).model_copy(
        update={"job_id": "42", "routed": True}
    )
    async with pipe.agents["correlate"].test_context() as agent:
        for sig in [alloc, *timeouts, xid]:
            await agent.put(_as_dict(sig), key=b"42")
    assert [a.node for a in sent_assignments(pipe.sent["topology_node"])] == [
        "gpu-01",
        "gpu-02",
        "gpu-03",
        "gpu-04",
    ]
    [(key, incident)] = pipe.sent["incidents"]
    assert key == b"42"
    assert isinstance(incident, Incident)
    assert (incident.category, incident.culprit.node, incident.revision) == (
        Category.HARDWARE_GPU,
        "gpu-03",
        1,
    )
    assert incident.supporting[0].count == 3


async def test_correlate_blames_the_node_a_failing_rank_runs_on_not_the_host_that_collected_its_line(
    pipe: Pipeline,
):
    alloc = one(slurmctld_allocate("42", "gpu-[01-04]", T0), offset=1)
    inits = [
        one(
            job_output("gpu-01", "42", T0, nccl_init(f"gpu-0{r // 8 + 1}", r, 32, r % 8, "9a000")),
            offset=2 + r,
        )
        for r in (0, 12, 20)
    ]
    line = "[rank20]:RuntimeError: CUDA error: uncorrectable ECC error encountered"
    ecc = one(job_output("gpu-01", "42", T0 + timedelta(minutes=3), line), offset=40)
    async with pipe.agents["correlate"].test_context() as agent:
        for sig in [alloc, *inits, ecc]:
            await agent.put(_as_dict(sig), key=b"42")
    [(_, incident)] = pipe.sent["incidents"]
    assert (incident.category, incident.culprit.node, incident.culprit.gpu) == (
        Category.HARDWARE_GPU,
        "gpu-03",
        "0000:9a:00",
    )


async def test_a_packed_burst_of_placements_over_several_blocks_names_the_failing_ranks_node(pipe: Pipeline):
    """A 160-rank job's init lines arrive packed (one message per read of the raw logs); they fill
    its rank blocks, each written once per read, and the failing rank's node is found in its block."""
    alloc = one(slurmctld_allocate("44", "gpu-[01-20]", T0), offset=1)
    inits = [
        one(
            job_output("gpu-01", "44", T0, nccl_init(f"gpu-{r // 8 + 1:02d}", r, 160, r % 8, "9a000")),
            offset=2 + r,
        )
        for r in range(160)
    ]
    line = "[rank150]:RuntimeError: CUDA error: uncorrectable ECC error encountered"
    ecc = one(job_output("gpu-01", "44", T0 + timedelta(minutes=3), line), offset=400)
    done = one(slurmctld_line("_job_complete: JobId=44 WEXITSTATUS 1", T0 + timedelta(hours=1)), offset=401)
    table = pipe.tables["rank_places"]
    writes: list[str] = []
    original = type(table).__setitem__
    stage = pipe.agents["stage"]
    caches = (stage.parsed_windows, stage.topologies, stage.places)
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put(_as_dict(alloc), key=b"44")
        assert not any(c.deferring for c in caches)  # a lone signal writes at once
        with patch.object(
            type(table), "__setitem__", lambda t, k, v: (writes.append(k), original(t, k, v))[1]
        ):
            for start in range(0, 160, 100):  # two reads' worth
                batch = SignalBatch(job_id="44", signals=inits[start : start + 100])
                await agent.put(_as_dict(batch), key=b"44")
        assert not any(c.deferring for c in caches)  # every batch wrote on its way out
        blocks = [k for k in writes if "|b" in k]
        per_read = [{r // RANKS_PER_BLOCK for r in range(a, b)} for a, b in ((0, 100), (100, 160))]
        assert sorted(blocks) == sorted(f"44|b{b}" for read in per_read for b in read)  # once per read
        await agent.put(_as_dict(ecc), key=b"44")
        [(_, incident)] = pipe.sent["incidents"]
        assert (incident.culprit.node, incident.culprit.gpu) == ("gpu-19", "0000:9a:00")
        await agent.put(_as_dict(done), key=b"44")
        later = datetime.now(UTC) + timedelta(days=1)  # the window closed and past the lateness bound
        with patch("streams.correlate.agent.utcnow", return_value=later):
            await agent.put({"tick": True}, key=b"44")
        assert [table.get(f"44|b{b}") for b in range(160 // RANKS_PER_BLOCK)] == [None] * (
            160 // RANKS_PER_BLOCK
        )


def _failing_job(job: str, first: int, offset: int) -> list[Signal]:
    """A job on gpu-<first>..+3 whose third node's GPU falls off the bus while the others time out."""
    nodes = [f"gpu-{n:02d}" for n in range(first, first + 4)]
    alloc = one(slurmctld_allocate(job, f"gpu-[{first:02d}-{first + 3:02d}]", T0), offset=offset)
    timeouts = [
        one(nccl_timeout(n, r, job, T0 + timedelta(minutes=10)), offset=offset + 1 + r)
        for r, n in enumerate(nodes)
        if r != 2
    ]
    xid = one(kernel_xid(nodes[2], 79, T0 + timedelta(minutes=1)), offset=offset + 9)
    return [alloc, *timeouts, xid.model_copy(update={"job_id": job, "routed": True})]


class _Event:
    """A Faust event's shape (weakly referenceable, as ``faust_events.as_current`` needs)."""

    def __init__(self, key: bytes, value: Any, partition: int, offset: int) -> None:
        self.key, self.value = key, value
        self.message = SimpleNamespace(topic="signals.job", partition=partition, offset=offset)


async def test_a_take_of_events_from_several_partitions_writes_each_job_once_under_its_own_partition(
    pipe: Pipeline,
):
    """The correlate agent handles a take of many messages at once: each job's window, topology and
    placements reach the tables once, at the take's end (a window with a revision once more, after
    it is sent), filed under the partition of the event the job's signals came with (not the take's
    last event), and each job is decided once."""
    a, b = _failing_job("42", 1, 100), _failing_job("43", 11, 200)
    events = [
        _Event(s.job_id.encode(), _as_dict(s), partition, n)
        for n, (s, partition) in enumerate(
            (s, p) for pair in zip(a, b, strict=True) for s, p in zip(pair, (0, 1), strict=True)
        )
    ]
    stage = pipe.agents["stage"]
    written: list[tuple[str, str, int]] = []

    def recording(name: str, table: Any) -> Any:
        original = type(table).__setitem__

        def setitem(t: Any, key: str, value: Any) -> None:
            if t is table:
                written.append((name, key, faust_events.current().message.partition))
            original(t, key, value)

        return setitem

    decided: list[str] = []
    real_decide = agent_module.decide_now

    def counting_decide(window: Any, *args: Any) -> Any:
        decided.append(window.job_id)
        return real_decide(window, *args)

    tables = {"windows": stage.windows, "topology": stage.job_topology}
    with patch.object(agent_module, "decide_now", counting_decide):
        for name, table in tables.items():
            stack = patch.object(type(table), "__setitem__", recording(name, table))
            stack.start()
        try:
            await stage.on_job_events(events)
        finally:
            patch.stopall()
    # each window twice: holding the take's revision, then letting go of it once it is sent
    assert sorted(written) == [
        ("topology", "42", 0),
        ("topology", "43", 1),
        ("windows", "42", 0),
        ("windows", "42", 0),
        ("windows", "43", 1),
        ("windows", "43", 1),
    ]
    assert sorted(decided) == ["42", "43"]  # one verdict per job per take
    incidents = dict(pipe.sent["incidents"])
    assert (incidents[b"42"].culprit.node, incidents[b"43"].culprit.node) == ("gpu-03", "gpu-13")
    nodes = sorted(a.node for a in sent_assignments(pipe.sent["topology_node"]))
    assert nodes == [f"gpu-{n:02d}" for n in (*range(1, 5), *range(11, 15))]
    assert len(pipe.sent["topology_node"]) == 1  # one partition of topology.node here: one message


async def test_a_take_writes_its_windows_between_its_other_sends_and_its_incident_revisions(pipe: Pipeline):
    """A topology records the nodes it announced: written before the assignments were delivered, a
    crash would leave a replay that never announces them, so the take waits for its sends first. A
    window records the revision it emitted: sent before the window was durable, a crash could leave
    that revision on the broker and the next owner deciding the same revision number again on other
    signals. So the take's revisions go out once the broker has acknowledged its window writes,
    holding the revision whole, and once the revision is delivered too the window lets go of it."""
    stage = pipe.agents["stage"]
    order: list[str] = []

    async def flush() -> None:
        order.append("delivered")

    async def windows_acked() -> list[BaseException]:
        order.append("windows acked")
        return []

    for name in ("incidents", "topology_node"):
        topic = getattr(pipe.topics, name)
        record = topic.send.side_effect

        async def send(*a: Any, _name: str = name, _record: Any = record, **kw: Any) -> Any:
            order.append(f"send {_name}")
            return await _record(*a, **kw)

        topic.send.side_effect = send
    table = stage.windows
    original = type(table).__setitem__
    written: list[dict[str, Any]] = []
    others: list[int] = []

    def setitem(t: Any, key: str, value: Any) -> None:
        if t is table:
            order.append("write window")
            written.append(codec.loads(value))
        else:
            others.append(len(order))  # where, among the writes above, another table's write came
        original(t, key, value)

    events = [_Event(b"42", _as_dict(s), 0, n) for n, s in enumerate(_failing_job("42", 1, 100))]
    producer = stage.app.producer
    with (
        patch.object(type(producer), "started", property(lambda _self: True)),
        patch.object(producer, "flush", flush),
        patch.object(stage.parsed_windows, "acked", windows_acked),
        patch.object(type(table), "__setitem__", setitem),
    ):
        await stage.on_job_events(events)
    assert order.index("send topology_node") < order.index("delivered")
    assert order[order.index("delivered") :] == [
        "delivered",
        "write window",
        "windows acked",
        "send incidents",
        "write window",
    ]
    # the window first: the revision waits for its write alone, not the topology's written behind it
    assert others and min(others) > order.index("write window")
    (sent,) = [v for k, v in pipe.sent["incidents"] if k == b"42"]
    holding, let_go = written
    assert holding["unsent"] == [_as_dict(sent)] and holding["revision"] == sent.revision == 1
    assert let_go["unsent"] == [] and let_go["revision"] == 1


def _assignment(stage: Any, *partitions: int) -> set[Any]:
    from faust.types import TP

    return {TP(stage._signals_job_topic, p) for p in partitions} | {TP("sickbay.raw.logs", 0)}


async def _rebalance(pipe: Pipeline, *partitions: int) -> list[Incident]:
    """What a rebalance calls on the stage, in Faust's order; the incidents it sends."""
    stage = pipe.agents["stage"]
    before = len(pipe.sent["incidents"])
    await stage.forget_caches()
    await stage.took_partitions(stage.app, _assignment(stage, *partitions))
    await stage.resumed()
    return [v for _, v in pipe.sent["incidents"][before:]]


def _crashed_before_sending(pipe: Pipeline, job: str, incident: Incident) -> None:
    """The job's window as a worker killed between its write and the revision's send leaves it in the
    changelog (as a recovery writes it into the store)."""
    window = codec.loads(pipe.tables["windows"][job])
    pipe.tables["windows"].data[job] = codec.dumps({**window, "unsent": [_as_dict(incident)]})


async def test_a_worker_taking_a_partition_over_sends_the_revisions_its_windows_hold_unsent(pipe: Pipeline):
    """The worker that owned a job may die after its window was written and before the revision it
    holds reached the broker: the new owner sends that revision again once its tables are recovered.
    A window whose revision was delivered sends nothing; partitions kept through a rebalance are not
    sent again; the window lets go of the revision at its next tick, so taking it over again later
    sends nothing."""
    stage = pipe.agents["stage"]
    async with pipe.agents["correlate"].test_context() as agent:
        for s in _failing_job("42", 1, 100):
            await agent.put(_as_dict(s), key=b"42")
        for s in _failing_job("43", 11, 200):
            await agent.put(_as_dict(s), key=b"43")
    published = dict(pipe.sent["incidents"])
    assert codec.loads(pipe.tables["windows"]["43"])["unsent"] == []  # delivered: let go of
    _crashed_before_sending(pipe, "42", published[b"42"])

    again = await _rebalance(pipe, 0)  # a restart: every partition is taken over
    assert [_as_dict(v) for v in again] == [_as_dict(published[b"42"])]
    assert await _rebalance(pipe, 0) == []  # kept through the rebalance
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put({"tick": True, "at": utcnow().isoformat()}, key=b"42")
    assert codec.loads(pipe.tables["windows"]["42"])["unsent"] == []
    assert await _rebalance(pipe) == []  # lost to another worker ...
    assert await _rebalance(pipe, 0) == []  # ... and taken back: nothing unsent any more
    assert stage._resent == {}


async def test_a_taken_over_window_whose_unsent_revision_does_not_validate_is_skipped_and_the_rest_sent(
    pipe: Pipeline, caplog: pytest.LogCaptureFixture
):
    async with pipe.agents["correlate"].test_context() as agent:
        for s in _failing_job("42", 1, 100):
            await agent.put(_as_dict(s), key=b"42")
    (published,) = [v for k, v in pipe.sent["incidents"] if k == b"42"]
    _crashed_before_sending(pipe, "42", published)
    window = codec.loads(pipe.tables["windows"]["42"])
    pipe.tables["windows"].data["43"] = codec.dumps({**window, "job_id": "43", "unsent": [{"revision": 1}]})
    assert [v.job_id for v in await _rebalance(pipe, 0)] == ["42"]
    assert "job 43's window holds a revision that does not validate" in caplog.text


async def test_a_route_take_writes_each_node_once_under_its_partition_and_packs_the_forwarded_facts(
    pipe: Pipeline,
):
    """The route agent handles a take of node-inbox messages at once: each node's state reaches
    node-jobs once, under the partition of the event it came with, and the facts it forwards to jobs
    go out packed (one message per partition of signals.job), each keeping its signal id."""

    def assign(node: str, job: str) -> dict[str, Any]:
        return _as_dict(JobNodeAssignment(node=node, job_id=job, attempt=1, state="assigned", event_time=T0))

    x1 = one(kernel_xid("gpu-01", 79, T0 + timedelta(minutes=1)), offset=3)
    x2 = one(kernel_xid("gpu-02", 48, T0 + timedelta(minutes=1), text="DBE"), offset=4)
    x3 = one(kernel_xid("gpu-01", 94, T0 + timedelta(minutes=2)), offset=5)
    events = [
        _Event(b"gpu-01", assign("gpu-01", "42"), 0, 1),
        _Event(b"gpu-02", assign("gpu-02", "43"), 1, 1),
        _Event(b"gpu-01", _as_dict(x1), 0, 2),
        _Event(b"gpu-02", _as_dict(x2), 1, 2),
        _Event(b"gpu-01", _as_dict(x3), 0, 3),
    ]
    stage = pipe.agents["stage"]
    table = stage.node_jobs
    written: list[tuple[str, int]] = []
    original = type(table).__setitem__

    def setitem(t: Any, key: str, value: Any) -> None:
        if t is table:
            written.append((key, faust_events.current().message.partition))
        original(t, key, value)

    with patch.object(type(table), "__setitem__", setitem):
        await stage.on_node_events(events)
    assert sorted(written) == [("gpu-01", 0), ("gpu-02", 1)]
    [(key, packed)] = pipe.sent["signals_job"]  # one partition of signals.job here: one message
    assert isinstance(packed, SignalBatch) and packed.job_id is None
    assert [(s.job_id, s.signal_id, s.routed) for s in packed.signals] == [
        ("42", x1.signal_id, True),
        ("42", x3.signal_id, True),
        ("43", x2.signal_id, True),
    ]
    assert key == b"42"


async def test_an_event_that_fails_inside_a_take_is_dead_lettered_and_the_take_goes_on(pipe: Pipeline):
    """A bug on one event of a take costs that event only: it is dead-lettered (stage, key, or the
    agent's stand-in for a keyless event) and the take's other events are handled and decided."""
    stage = pipe.agents["stage"]
    real_value, real_node = stage.on_job_value, stage.on_node_event

    async def job_value(event: Any, key: str, value: Any) -> None:
        if value.get("boom"):
            raise RuntimeError("a rule bug")
        await real_value(event, key, value)

    async def node_event(event: Any) -> None:
        if event.value.get("boom"):
            raise RuntimeError("a rule bug")
        await real_node(event)

    job_events = [_Event(b"42", _as_dict(s), 0, n) for n, s in enumerate(_failing_job("42", 1, 100))]
    job_events.insert(1, _Event(b"42", {"boom": True}, 0, 50))
    job_events.insert(3, _Event(None, {"boom": True}, 0, 51))  # type: ignore[arg-type]
    node_events = [_Event(None, {"boom": True}, 0, 52)]  # type: ignore[arg-type]
    with patch.object(stage, "on_job_value", job_value), patch.object(stage, "on_node_event", node_event):
        await stage.on_job_events(job_events)
        await stage.on_node_events(node_events)
    letters = [DeadLetter.model_validate(_as_dict(v)) for _, v in pipe.sent["dlq"]]
    assert [(d.stage, d.reason, d.key, d.offset) for d in letters] == [
        ("correlate", "agent_error", "42", 50),
        ("correlate", "agent_error", "?", 51),
        ("route", "agent_error", "", 52),
    ]
    [(_, incident)] = pipe.sent["incidents"]  # the rest of the take made its incident
    assert (incident.job_id, incident.culprit.node) == ("42", "gpu-03")


async def test_route_reads_a_packed_batch_of_node_facts_under_each_facts_own_node(pipe: Pipeline):
    """The extract stage packs node facts per partition of signals.node: each reaches its own node's
    state (held until a job claims it), and a malformed one is dead-lettered alone with its JSON."""
    x1 = one(kernel_xid("gpu-01", 79, T0 + timedelta(minutes=1)), offset=3)
    x2 = one(kernel_xid("gpu-03", 79, T0 + timedelta(minutes=1)), offset=4)
    value = _as_dict(SignalBatch(keyed_by="node", signals=[x1, x2]))
    bad = {**value["signals"][0], "signal_id": "bad", "role": "no_such_role"}
    value["signals"].insert(1, bad)
    async with pipe.agents["route"].test_context() as agent:
        await agent.put(value, key=b"gpu-01")
    stage = pipe.agents["stage"]
    assert [s.signal_id for s in stage.node_states.get("gpu-01").pending] == [x1.signal_id]
    assert [s.signal_id for s in stage.node_states.get("gpu-03").pending] == [x2.signal_id]
    [(_, letter)] = pipe.sent["dlq"]
    assert (letter.stage, letter.reason, letter.key) == ("route", "invalid_record", "gpu-01")
    assert codec.loads(base64.b64decode(letter.original_b64)) == bad


async def test_a_batch_of_several_jobs_is_read_as_each_jobs_signals_sent_alone(pipe: Pipeline):
    """The extract stage packs the jobs that share a partition into one message: each signal is
    handled under its own job, and each job gets the incident it gets from single messages."""
    a, b = _failing_job("42", 1, 100), _failing_job("43", 11, 200)
    mixed = [s for pair in zip(a, b, strict=True) for s in pair]  # interleaved, each job in order
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put(_as_dict(SignalBatch(job_id=None, signals=mixed)), key=b"42")
    incidents = dict(pipe.sent["incidents"])
    assert sorted(incidents) == [b"42", b"43"]
    assert (incidents[b"42"].job_id, incidents[b"42"].culprit.node) == ("42", "gpu-03")
    assert (incidents[b"43"].job_id, incidents[b"43"].culprit.node) == ("43", "gpu-13")
    nodes = sorted(a.node for a in sent_assignments(pipe.sent["topology_node"]))
    assert nodes == [f"gpu-{n:02d}" for n in (*range(1, 5), *range(11, 15))]
    assert pipe.tables["job_topology"].get("43") is not None  # not filed under the message's key


async def test_a_packed_cascade_is_decided_once_at_the_batchs_end_on_all_of_its_signals(pipe: Pipeline):
    """A failure's burst (every rank's timeout, then the kernel's Xid) arrives in one read: attribution
    runs once per job at the end of the batch, and the verdict is the one the signals give one by one."""
    alloc = one(slurmctld_allocate("42", "gpu-[01-04]", T0), offset=1)
    timeouts = [
        one(nccl_timeout(f"gpu-0{r // 8 + 1}", r, "42", T0 + timedelta(minutes=10)), offset=10 + r)
        for r in range(32)
        if r // 8 != 2
    ]
    xid = one(kernel_xid("gpu-03", 79, T0 + timedelta(minutes=1)), offset=2).model_copy(
        update={"job_id": "42", "routed": True}
    )
    calls: list[str] = []
    real = agent_module.decide_now

    def counted(window, *args, **kwargs):
        calls.append(window.job_id)
        return real(window, *args, **kwargs)

    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put(_as_dict(alloc), key=b"42")
        with patch.object(agent_module, "decide_now", counted):
            await agent.put(_as_dict(SignalBatch(job_id="42", signals=[*timeouts, xid])), key=b"42")
    assert calls == ["42"]
    [(_, incident)] = pipe.sent["incidents"]
    assert (incident.category, incident.culprit.node, incident.revision) == (
        Category.HARDWARE_GPU,
        "gpu-03",
        1,
    )
    assert incident.supporting[0].count == len(timeouts)


async def test_a_bad_signal_in_a_batch_of_several_jobs_is_dead_lettered_under_its_own_job(pipe: Pipeline):
    a = _failing_job("42", 1, 100)
    batch = _as_dict(SignalBatch(job_id=None, signals=[*a, *_failing_job("43", 11, 200)]))
    batch["signals"][len(a) + 1]["role"] = "no_such_role"  # job 43's first timeout
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put(batch, key=b"42")
    [(_, letter)] = pipe.sent["dlq"]
    assert (letter.key, letter.stage, letter.reason) == ("43", "correlate", "invalid_record")
    assert sorted(key for key, _ in pipe.sent["incidents"]) == [b"42", b"43"]


async def test_a_finished_job_without_an_incident_leaves_no_rank_placements_behind(pipe: Pipeline):
    alloc = one(slurmctld_allocate("43", "gpu-[01-02]", T0), offset=1)
    inits = [
        one(
            job_output("gpu-01", "43", T0, nccl_init(f"gpu-0{r // 8 + 1}", r, 16, r % 8, "9a000")),
            offset=2 + r,
        )
        for r in (0, 9)
    ]
    done = one(slurmctld_line("_job_complete: JobId=43 WEXITSTATUS 0", T0 + timedelta(hours=1)), offset=30)
    async with pipe.agents["correlate"].test_context() as agent:
        for sig in [alloc, *inits]:
            await agent.put(_as_dict(sig), key=b"43")
        table = pipe.tables["rank_places"]
        assert table.get("43|b0") is not None  # ranks 0-63: one entry
        await agent.put(_as_dict(done), key=b"43")
        assert table.get("43|b0") is not None  # late evidence may still need it: kept for the bound
        soon = datetime.now(UTC) + timedelta(seconds=10)
        with patch("streams.correlate.agent.utcnow", return_value=soon):
            await agent.put({"tick": True}, key=b"43")
        assert table.get("43|b0") is not None
        later = datetime.now(UTC) + pipe.agents["stage"].lateness + timedelta(seconds=1)
        with patch("streams.correlate.agent.utcnow", return_value=later):
            await agent.put({"tick": True}, key=b"43")
        assert table.get("43|b0") is None
        assert pipe.agents["stage"].topologies.get("43").forget_after is None


async def test_timeouts_routed_in_after_the_jobs_end_line_still_read_the_busy_ranks_bar(pipe: Pipeline):
    """The scheduler's end line comes straight to the job, the ranks' output through their node's
    route step, so the end can overtake the timeouts that came before it. The bar held for the
    window must still be there when they open it (scoreboard: a busy rank 0 read as unknown)."""
    stage = pipe.agents["stage"]
    stage.timing = replace(stage.timing, root_grace_s=0.0)
    alloc = one(slurmctld_allocate("45", "gpu-[01-02]", T0), offset=1)
    bar = "Running tokenizer on dataset:  39%|████      | 934449/2336123 [09:41<4:51:49, 323.40 examples/s]"
    held = one(job_output("gpu-01", "45", T0 + timedelta(minutes=9), bar), offset=2)
    end = one(slurmctld_line("_job_complete: JobId=45 WEXITSTATUS 1", T0 + timedelta(minutes=11)), offset=3)
    timeouts = [
        one(nccl_timeout("gpu-01", r, "45", T0 + timedelta(minutes=10)), offset=10 + r) for r in (1, 2, 3)
    ]
    async with pipe.agents["correlate"].test_context() as agent:
        for sig in [alloc, held, end, *timeouts]:
            await agent.put(_as_dict(sig), key=b"45")
        await agent.put({"tick": True}, key=b"45")
    incidents = [inc for key, inc in pipe.sent["incidents"] if key == b"45"]
    assert incidents, "the late timeouts opened no incident"
    last = incidents[-1]
    assert (last.category, last.isolate) == (Category.APPLICATION, [])
    assert last.culprit is not None and (last.culprit.node, last.culprit.rank) == ("gpu-01", 0)
    assert last.root_cause.rule == "progress.rank_local_work_bar"


async def test_a_new_attempt_before_the_bound_starts_without_the_ended_attempts_bars(pipe: Pipeline):
    alloc = one(slurmctld_allocate("46", "gpu-[01-02]", T0), offset=1)
    bar = "Running tokenizer on dataset:  39%|████      | 934449/2336123 [09:41<4:51:49, 323.40 examples/s]"
    held = one(job_output("gpu-01", "46", T0 + timedelta(minutes=9), bar), offset=2)
    end = one(slurmctld_line("_job_complete: JobId=46 WEXITSTATUS 1", T0 + timedelta(minutes=11)), offset=3)
    again = one(slurmctld_allocate("46", "gpu-[03-04]", T0 + timedelta(minutes=12)), offset=4)
    async with pipe.agents["correlate"].test_context() as agent:
        for sig in [alloc, held, end]:
            await agent.put(_as_dict(sig), key=b"46")
        assert pipe.tables["lookback"].get("46") is not None
        await agent.put(_as_dict(again), key=b"46")
    assert pipe.tables["lookback"].get("46") is None
    topo = pipe.agents["stage"].topologies.get("46")
    assert (topo.attempt, topo.forget_after) == (2, None)


async def test_a_bar_printed_before_the_others_timed_out_joins_the_incident_they_open(pipe: Pipeline):
    """The bar comes minutes before any initiating signal: the look-back table holds it until the
    timeouts open the window, and the verdict reads the rank as busy, not hung."""
    stage = pipe.agents["stage"]
    stage.timing = replace(stage.timing, root_grace_s=0.0)
    bar = "[rank0]:Map (num_proc=8):  45%|████▌     | 450000/1000000 [12:01<14:41, 623.40 examples/s]"
    bars = [
        one(job_output("gpu-01", "42", T0 + timedelta(seconds=s), bar), offset=s) for s in (200, 230, 400)
    ]
    timeouts = [
        one(nccl_timeout("gpu-01", r, "42", T0 + timedelta(minutes=10)), offset=1000 + r) for r in (1, 2, 3)
    ]
    async with pipe.agents["correlate"].test_context() as agent:
        for sig in bars:
            await agent.put(_as_dict(sig), key=b"42")
        held = pipe.tables["lookback"].get("42")
        assert held is not None and list(held) == ["0"]
        assert held["0"]["event_time"].startswith((T0 + timedelta(seconds=400)).strftime("%Y-%m-%dT%H:%M:%S"))
        assert pipe.sent["incidents"] == []  # a hint alone opens nothing
        for sig in timeouts:
            await agent.put(_as_dict(sig), key=b"42")
        await agent.put({"tick": True}, key=b"42")
    [(_, incident)] = pipe.sent["incidents"]
    assert (incident.category, incident.restartable, incident.isolate) == (Category.APPLICATION, False, [])
    assert incident.culprit is not None and (incident.culprit.node, incident.culprit.rank) == ("gpu-01", 0)
    assert incident.root_cause.rule == "progress.rank_local_work_bar"


async def test_a_cascade_only_incident_is_shown_provisional_at_once_and_acted_on_when_final(pipe: Pipeline):
    stage = pipe.agents["stage"]
    stage.timing = replace(stage.timing, provisional_after_s=0.0)
    alloc = one(slurmctld_allocate("42", "gpu-[01-04]", T0), offset=1)
    timeouts = [
        one(nccl_timeout(n, r, "42", T0 + timedelta(minutes=10)), offset=10 + r)
        for n, r in [("gpu-01", 0), ("gpu-02", 1), ("gpu-04", 3)]
    ]
    async with pipe.agents["correlate"].test_context() as agent:
        for sig in [alloc, *timeouts]:
            await agent.put(_as_dict(sig), key=b"42")
        shown = [inc for _, inc in pipe.sent["incidents"]]
        assert shown and all(inc.provisional for inc in shown)  # again each time the verdict changes
        assert [inc.revision for inc in shown] == list(range(1, len(shown) + 1))
        provisional = shown[-1]
        stage.timing = replace(stage.timing, root_grace_s=0.0)  # the grace ends: the next tick is final
        await agent.put({"tick": True}, key=b"42")
    final = pipe.sent["incidents"][-1][1]
    assert (final.incident_id, final.provisional) == (provisional.incident_id, False)
    assert final.revision == provisional.revision + 1
    assert final.culprit is not None and final.culprit.node == "gpu-03"  # rank 2 never timed out
    assert provisional.culprit == final.culprit  # named already while provisional
    now = datetime.now(UTC)
    fresh = {"first_signal_time": now, "opened_at": now}  # not stale to the decide step
    async with pipe.agents["decide"].test_context() as agent:
        await agent.put(_as_dict(provisional.model_copy(update=fresh)), key=b"42")
        assert pipe.sent["actions"] == []
        held = [a for _, a in pipe.sent["audit"] if a.event == "action.held"]
        assert any("a provisional verdict" in a.details["note"] for a in held)
        await agent.put(_as_dict(final.model_copy(update=fresh)), key=b"42")
    assert [a.kind for _, a in pipe.sent["actions"]] == [ActionKind.REQUEUE_JOB]


async def test_correlate_dead_letters_an_invalid_signal(pipe: Pipeline):
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put({"signal_id": "x"}, key=b"42")
    [(_, letter)] = pipe.sent["dlq"]
    assert (letter.stage, letter.reason) == ("correlate", "invalid_record")


async def test_decide_proposes_each_action_once_across_revisions(pipe: Pipeline):
    alloc = one(slurmctld_allocate("42", "gpu-[01-04]", T0), offset=1)
    xid = one(kernel_xid("gpu-03", 79, T0), offset=2).model_copy(update={"job_id": "42"})
    async with pipe.agents["correlate"].test_context() as agent:
        for sig in [alloc, xid]:
            await agent.put(_as_dict(sig), key=b"42")
    [(_, incident)] = pipe.sent["incidents"]
    now = datetime.now(UTC)
    incident = incident.model_copy(update={"first_signal_time": now, "opened_at": now})  # fresh, not stale
    async with pipe.agents["decide"].test_context() as agent:
        await agent.put(_as_dict(incident), key=b"42")
        await agent.put(_as_dict(incident.model_copy(update={"revision": 2})), key=b"42")
    # The restart goes out at once; the drain is a request to the per-cluster isolation gate.
    [(key, request)] = pipe.sent["isolation_requests"]
    assert (key, request.node, request.mode) == (incident.cluster.encode(), "gpu-03", Mode.OBSERVE)
    async with pipe.agents["isolation-gate"].test_context() as agent:
        await agent.put(_as_dict(request), key=key)
    actions = [a for _, a in pipe.sent["actions"]]
    assert all(isinstance(a, Action) for a in actions)
    assert [(a.kind, a.dry_run) for a in actions] == [
        (ActionKind.REQUEUE_JOB, True),
        (ActionKind.DRAIN_NODE, True),
    ]
    assert actions[0].exclude_nodes == ["gpu-03"]
    events = [r.event for _, r in pipe.sent["audit"]]
    assert events == ["action.proposed", "decision", "decision", "action.proposed"]


def test_signal_models_round_trip_through_the_faust_codec():
    from faust.serializers import codecs

    sig = one(kernel_xid("gpu-03", 79, T0))
    data = codecs.dumps("sickbay-json", sig)
    assert Signal.model_validate(codecs.loads("sickbay-json", data)) == sig


def test_the_catalog_pre_creates_exactly_the_internal_topics_faust_uses(pipe: Pipeline):
    app = pipe.app
    faust_names = {table.changelog_topic.get_topic_name() for table in app.tables.values()}
    faust_names.add(app._leader_assignor._leader_topic_name)
    assert faust_names == {spec.name for spec in pipe.settings.topics.faust_internal()}


async def test_the_refine_timer_ticks_open_windows_from_its_index_and_rebuilds_it_after_a_rebalance(
    pipe: Pipeline,
):
    stage = pipe.agents["stage"]
    timeout = one(nccl_timeout("gpu-01", 1, "42", T0 + timedelta(minutes=10)), offset=5)
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put(_as_dict(timeout), key=b"42")
    await stage.send_ticks()
    assert [k for k, _ in pipe.sent["ticks_job"]] == [b"42"]
    # a window that arrived behind the index's back (a changelog recovery) is found once it is rebuilt
    window = codec.loads(pipe.tables["windows"]["42"])  # tables hold JSON bytes
    pipe.tables["windows"].data["43"] = codec.dumps({**window, "job_id": "43"})  # as a recovery writes it
    await stage.send_ticks()
    assert [k for k, _ in pipe.sent["ticks_job"]] == [b"42", b"42"]
    await stage.forget_caches()  # what a rebalance calls
    await stage.send_ticks()
    assert sorted(k for k, _ in pipe.sent["ticks_job"][2:]) == [b"42", b"43"]


class _CountingTable:
    """Stands in for a Faust table outside a stream (which refuses writes there) and records them."""

    def __init__(self, real: Any) -> None:
        self.real, self.writes = real, []

    def get(self, key: str) -> Any:
        return self.real.get(key)

    def __setitem__(self, key: str, value: bytes) -> None:
        self.writes.append(key)

    def pop(self, key: str, default: Any = None) -> Any:
        self.writes.append(key)
        return default


async def test_a_tick_that_changes_nothing_rewrites_no_window_and_one_that_closes_it_writes_once(
    pipe: Pipeline,
):
    stage = pipe.agents["stage"]
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put(_as_dict(one(kernel_xid("gpu-03", 79, T0), offset=1)), key=b"42")
    window = stage.parsed_windows.get("42")
    assert window is not None and window.revision == 1  # the fast incident went out
    counting = _CountingTable(stage.parsed_windows.table)
    stage.parsed_windows.table = counting
    topo = stage.topologies.get("42")
    for second in range(1, 6):  # the refine timer's ticks while nothing new arrives
        await stage.on_tick(
            "42", stage.parsed_windows.get("42"), topo, window.last_signal_at + timedelta(seconds=second)
        )
    assert counting.writes == []
    quiet = window.last_signal_at + timedelta(seconds=stage.timing.quiet_s + 1)
    await stage.on_tick("42", stage.parsed_windows.get("42"), topo, quiet)
    assert counting.writes == ["42"]
    closed = stage.parsed_windows.get("42")
    assert closed is not None and closed.closed and closed.revision == 2


async def test_a_node_tick_that_releases_nothing_rewrites_no_node_state(pipe: Pipeline):
    stage = pipe.agents["stage"]
    fresh = one(kernel_xid("gpu-09", 79, T0), offset=3).model_copy(update={"observed_time": utcnow()})
    async with pipe.agents["route"].test_context() as agent:
        await agent.put(_as_dict(fresh), key=b"gpu-09")  # no job on gpu-09 yet: it waits the grace
    state = stage.node_states.get("gpu-09")
    assert state is not None and [s.signal_id for s in state.pending] == [fresh.signal_id]
    counting = _CountingTable(stage.node_states.table)
    stage.node_states.table = counting
    tick_topic = pipe.settings.topics.ticks_node.name
    message = SimpleNamespace(topic=tick_topic, partition=0)
    await stage.on_node_event(SimpleNamespace(key=b"gpu-09", value={"tick": True}, message=message))
    assert counting.writes == [] and pipe.sent["signals_job"] == []


async def _two_attempts_failing_alike(pipe: Pipeline, *, saved_between: bool) -> list[Incident]:
    """Job 42 crashes with the same illegal memory access on two attempts, on other nodes each time."""
    t1 = T0 + timedelta(minutes=30)
    records = [
        one(slurmctld_allocate("42", "gpu-[01-02]", T0), offset=1),
        one(cuda_error("gpu-01", "42", T0 + timedelta(minutes=5)), offset=2),
        one(slurmctld_allocate("42", "gpu-[03-04]", t1), offset=3),
    ]
    if saved_between:
        line = "successfully saved checkpoint from iteration    1200 to /ckpt"
        records.append(one(job_output("gpu-03", "42", t1 + timedelta(minutes=2), line), offset=4))
    records.append(one(cuda_error("gpu-03", "42", t1 + timedelta(minutes=5)), offset=5))
    async with pipe.agents["correlate"].test_context() as agent:
        for sig in records:
            await agent.put(_as_dict(sig), key=b"42")
    return [inc for _, inc in pipe.sent["incidents"]]


async def test_the_same_application_failure_ending_the_next_attempt_makes_it_not_restartable(pipe: Pipeline):
    incidents = await _two_attempts_failing_alike(pipe, saved_between=False)
    first = [i for i in incidents if i.attempt == 1]
    second = [i for i in incidents if i.attempt == 2]
    assert first and all(i.restartable for i in first)  # one crash may be a one-off
    assert second and second[-1].restartable is False
    earlier = [e for e in second[-1].evidence if e.rule == "cuda.error" and e.node == "gpu-01"]
    assert earlier, second[-1].evidence  # the first attempt's crash is shown as the reason


async def test_a_checkpoint_saved_between_two_alike_failures_keeps_the_job_restartable(pipe: Pipeline):
    incidents = await _two_attempts_failing_alike(pipe, saved_between=True)
    second = [i for i in incidents if i.attempt == 2]
    assert second and second[-1].restartable is True


def _placements(
    node_of: Any, ranks: range, nranks: int, host: str = "gpu-01", job: str | None = None
) -> list:
    """Compact placements as the batched extract stage makes them, from the init lines of ``ranks``
    collected on ``host`` (``job``: the record names it, as a ``slurm-<id>.out`` path does)."""
    from streams.extract.extractor import Extractor, Position
    from streams.extract.normalize import normalize

    extractor = Extractor()
    out: list = []
    for r in ranks:
        raw = job_output(host, job or "0", T0, nccl_init(node_of(r), r, nranks, r % 8, "9a000"))
        line = normalize(raw)
        if job is None:
            line = line.model_copy(update={"job_id": None, "file": "/scratch/run/train.out"})
        assert extractor.extract(line, T0, Position("raw", 0, 100 + r), placements=out) == []
    return out


async def test_route_files_packed_placements_under_each_nodes_job_and_sends_them_ahead_of_its_facts(
    pipe: Pipeline,
):
    """Placements the extract stage packed per partition of signals.node (no job named) are filed
    under the job each node serves and go out packed on signals.job ahead of the take's forwarded
    facts, so the job's ranks are placed before the errors naming them are decided; a placement
    on a node that serves no job places nothing."""
    from schemas.signals import PlacementBatch

    def assign(node: str, job: str) -> dict[str, Any]:
        return _as_dict(JobNodeAssignment(node=node, job_id=job, attempt=1, state="assigned", event_time=T0))

    placed = _placements(lambda r: f"gpu-0{r // 8 + 1}", range(24), 24)  # gpu-01..03; gpu-03 has no job
    assert {p.job_id for p in placed} == {None}
    batch = PlacementBatch(keyed_by="node", observed_time=T0, placements=placed)
    xid = one(kernel_xid("gpu-02", 79, T0 + timedelta(minutes=1)), offset=3)
    events = [
        _Event(b"gpu-01", assign("gpu-01", "42"), 0, 1),
        _Event(b"gpu-02", assign("gpu-02", "42"), 0, 2),
        _Event(b"gpu-01", _as_dict(batch), 0, 3),
        _Event(b"gpu-02", _as_dict(xid), 0, 4),
    ]
    await pipe.agents["stage"].on_node_events(events)
    (_, first), (_, second) = pipe.sent["signals_job"]
    assert isinstance(first, PlacementBatch) and first.keyed_by == "job"
    assert [(p.job_id, p.rank, p.routed) for p in first.placements] == [("42", r, True) for r in range(16)]
    assert isinstance(second, Signal) and second.signal_id == xid.signal_id


async def test_correlate_places_ranks_from_packed_placements_and_names_the_failing_ranks_node(pipe: Pipeline):
    """Placements filed under their job reach the job's placement blocks as their signals would: an
    error naming rank 150 of a 160-rank job blames that rank's node and GPU."""
    from schemas.signals import PlacementBatch

    alloc = one(slurmctld_allocate("44", "gpu-[01-20]", T0), offset=1)
    placed = _placements(lambda r: f"gpu-{r // 8 + 1:02d}", range(160), 160, job="44")
    assert {p.job_id for p in placed} == {"44"}
    line = "[rank150]:RuntimeError: CUDA error: uncorrectable ECC error encountered"
    ecc = one(job_output("gpu-01", "44", T0 + timedelta(minutes=3), line), offset=400)
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put(_as_dict(alloc), key=b"44")
        await agent.put(
            _as_dict(PlacementBatch(keyed_by="job", observed_time=T0, placements=placed)), key=b"44"
        )
        await agent.put(_as_dict(ecc), key=b"44")
    [(_, incident)] = pipe.sent["incidents"]
    assert (incident.culprit.node, incident.culprit.gpu) == ("gpu-19", "0000:9a:00")
    assert pipe.sent["dlq"] == []


async def test_a_placement_batch_that_does_not_validate_is_dead_lettered_whole(pipe: Pipeline):
    bad = {"kind": "placement_batch", "keyed_by": "job", "observed_time": T0.isoformat(), "placements": []}
    async with pipe.agents["correlate"].test_context() as agent:
        await agent.put(bad, key=b"44")
    await pipe.agents["stage"].on_node_events([_Event(b"gpu-01", bad, 0, 1)])
    assert [(d.stage, d.reason) for _, d in pipe.sent["dlq"]] == [
        ("correlate", "invalid_record"),
        ("route", "invalid_record"),
    ]
