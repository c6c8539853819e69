"""The hang/straggler/node-health agents, in-process with ``test_context`` (no broker)."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest.mock import AsyncMock

import pytest

from schemas import codec
from schemas.incidents import Category, Incident, IncidentKind
from schemas.signals import Role, Signal, SignalBatch
from schemas.telemetry import GpuTelemetry
from streams.app import create_app
from streams.correlate import progress, straggler
from streams.pipeline import Pipeline, build
from streams.settings import Settings
from tests.factories import T0, acked, kernel_xid

SENT_TOPICS = (
    "topology_jobs",
    "signals_node",
    "signals_job",
    "ticks_progress",
    "raw_telemetry",
    "health_nodes",
    "incidents",
    "dlq",
    "topology_node",
    "ticks_node",
    "ticks_job",
    "actions",
    "audit",
)


@dataclass
class Harness:
    pipe: Pipeline
    sent: dict[str, list[tuple[bytes, Any]]]


@pytest.fixture
async def h(tmp_path: Path) -> Harness:
    run = uuid.uuid4().hex[:8]
    settings = Settings(
        app_id=f"test-{run}",
        topic_prefix=f"t{run}",
        partitions=1,
        state_dir=tmp_path,
        detector_clock="event",
        straggler_sustain_s=120.0,
        extract_stage="agent",  # the per-message agent: agent.test_context drives it in memory
        take_max=1,  # one event per take: put() returns once its event is handled
    )
    app = create_app(settings, store="memory://")
    pipeline = build(app, settings)
    app.loop = asyncio.get_running_loop()
    app.finalize()
    app.flow_control.resume()
    sent: dict[str, list[tuple[bytes, Any]]] = defaultdict(list)
    for name in SENT_TOPICS:
        topic = getattr(pipeline.topics, name)

        async def record(
            key: bytes = b"", value: Any = None, _name: str = name, **_kw: Any
        ) -> asyncio.Future[None]:
            sent[_name].append((key, value))
            return acked()

        topic.send = AsyncMock(side_effect=record)
    return Harness(pipeline, sent)


def _d(value: Any) -> Any:
    return codec.loads(codec.dumps(value))


def _progress(job: str, step: int, at_s: float, rank: int | None = None) -> Signal:
    return Signal(
        signal_id=f"{job}-{step}-{rank}",
        rule="progress.megatron_iteration",
        role=Role.PROGRESS,
        summary="iteration",
        event_time=T0 + timedelta(seconds=at_s),
        observed_time=T0 + timedelta(seconds=at_s),
        node="gpu-01",
        job_id=job,
        rank=rank,
        attrs={"step": step, "total": 100_000},
        text=f"iteration {step}/100000 |",
    )


def _sample(gpu: int, at_s: float, **metrics: float) -> GpuTelemetry:
    return GpuTelemetry(
        time=T0 + timedelta(seconds=at_s),
        node="gpu-02",
        gpu=gpu,
        pci_bus_id=f"00000000:{gpu + 10:02X}:00.0",
        source="dcgm-exporter",
        metrics=metrics,
    )


async def test_extract_routes_vector_metric_events_to_raw_telemetry_and_refuses_bad_ones(h: Harness) -> None:
    good = codec.dumps(
        {
            "name": "DCGM_FI_DEV_SM_CLOCK",
            "tags": {"gpu": "1", "Hostname": "gpu-02", "UUID": "GPU-1", "hpc_job": "42"},
            "timestamp": "2026-11-29T03:00:00Z",
            "kind": "absolute",
            "gauge": {"value": 1410.0},
        }
    )
    histogram = codec.dumps(
        {
            "name": "x",
            "tags": {"gpu": "1"},
            "timestamp": "2026-11-29T03:00:00Z",
            "kind": "absolute",
            "histogram": {},
        }
    )
    async with h.pipe.agents["extract"].test_context() as agent:
        await agent.put(good, key=b"gpu-02")
        await agent.put(histogram, key=b"gpu-02")
        await agent.put(kernel_xid("gpu-03", 79, T0), key=b"gpu-03")  # logs still flow
    [(key, sample)] = h.sent["raw_telemetry"]
    assert key == b"gpu-02" and isinstance(sample, GpuTelemetry)
    assert sample.metrics == {"DCGM_FI_DEV_SM_CLOCK": 1410.0} and sample.job_id == "42"
    [(_, letter)] = h.sent["dlq"]
    assert letter.reason == "unsupported_metric"
    assert [s.rule for _, s in h.sent["signals_node"]] == ["gpu.xid"]


async def test_progress_step_reports_a_silent_job_once_as_a_hang_signal_on_its_job(h: Harness) -> None:
    stage = h.pipe.agents["progress_stage"]
    async with h.pipe.agents["correlate"].test_context() as agent:
        for i in range(6):
            await agent.put(_d(_progress("42", (i + 1) * 10, i * 60.0)), key=b"42")
        # the job's clock moves 30 minutes on (NCCL watchdog timeouts), with no progress since
        timeout = _progress("42", 0, 1800.0, rank=3).model_copy(
            update={"signal_id": "wd", "rule": "nccl.watchdog_timeout", "role": Role.CASCADE, "attrs": {}}
        )
        await agent.put(_d(timeout), key=b"42")
        await agent.put(_d(_progress("43", 10, 1800.0)), key=b"43")  # another job: its own clock
        await stage.send_ticks()
        ticks = [k for k, _ in h.sent["ticks_progress"]]
        assert ticks == [b"42"]  # job 43 has just started
        await agent.put({"tick": "progress"}, key=b"42")
        await agent.put({"tick": "progress"}, key=b"42")  # a second tick reports nothing new
        await agent.put({"tick": True}, key=b"42")  # the correlate step's tick is not the progress step's
    [(key, hang)] = h.sent["signals_job"]
    assert key == b"42" and isinstance(hang, Signal)
    assert hang.rule == progress.HANG_RULE and hang.role == Role.ROOT_CANDIDATE and hang.job_id == "42"
    assert hang.category == Category.UNKNOWN and hang.attrs["step"] == 60
    assert hang.attrs["nccl_timeouts"] == 1 and "NCCL watchdog" in hang.summary


async def test_progress_step_reads_a_packed_batch_as_the_same_signals_sent_alone(h: Harness) -> None:
    stage = h.pipe.agents["progress_stage"]
    steps = [_progress("42", (i + 1) * 10, i * 60.0) for i in range(6)]
    bad = {**_d(_progress("42", 999, 400.0)), "role": "no_such_role"}
    async with h.pipe.agents["correlate"].test_context() as agent:
        batch = _d(SignalBatch(job_id="42", signals=steps[:3]))
        batch["signals"].append(bad)  # one unreadable signal inside the batch
        await agent.put(batch, key=b"42")
        await agent.put(_d(SignalBatch(job_id="42", signals=steps[3:])), key=b"42")
        await agent.put({"kind": "signal_batch", "job_id": "42", "signals": "none"}, key=b"42")
    watch = stage.load("42")
    assert watch is not None and [src.last_step for src in watch.progress.sources.values()] == [60]
    letters = [letter for _, letter in h.sent["dlq"]]
    assert [letter.reason for letter in letters] == ["invalid_record", "agent_error"]
    assert codec.loads(base64.b64decode(letters[0].original_b64))["attrs"]["step"] == 999  # the bad one alone


class _CountingWrites:
    """Wraps a Faust table and counts writes per key (inside a stream, where writes are allowed)."""

    def __init__(self, real: Any) -> None:
        self.real, self.writes = real, defaultdict(int)

    def get(self, key: str) -> Any:
        return self.real.get(key)

    def items(self) -> Any:
        return self.real.items()

    def __setitem__(self, key: str, value: Any) -> None:
        self.writes[key] += 1
        self.real[key] = value


async def test_progress_step_writes_a_jobs_state_once_per_batch_with_its_last_value(h: Harness) -> None:
    stage = h.pipe.agents["progress_stage"]
    counting = _CountingWrites(stage.table)
    stage.table = counting
    steps = [_progress("42", (i + 1) * 10, i * 60.0) for i in range(6)]
    async with h.pipe.agents["correlate"].test_context() as agent:
        await agent.put(_d(SignalBatch(job_id="42", signals=steps)), key=b"42")
        await agent.put(_d(_progress("42", 70, 360.0)), key=b"42")  # alone: written at once
    assert counting.writes == {"42": 2}
    stage.cache.clear()  # read back what the table holds, not the parsed copy
    watch = stage.load("42")
    assert watch is not None and [src.last_step for src in watch.progress.sources.values()] == [70]


async def test_progress_step_does_not_tick_a_job_that_keeps_progressing(h: Harness) -> None:
    stage = h.pipe.agents["progress_stage"]
    async with h.pipe.agents["correlate"].test_context() as agent:
        for i in range(6):
            await agent.put(_d(_progress("42", (i + 1) * 10, i * 60.0)), key=b"42")
        await stage.send_ticks()
    assert h.sent["ticks_progress"] == []
    assert h.sent["signals_job"] == []


async def test_a_saved_checkpoint_is_published_as_the_jobs_last_checkpoint_for_the_decide_step(
    h: Harness,
) -> None:
    saved = _progress("42", 2000, 600.0).model_copy(
        update={"signal_id": "ck", "rule": "progress.megatron_checkpoint_saved"}
    )
    async with h.pipe.agents["correlate"].test_context() as agent:
        await agent.put(_d(_progress("42", 1990, 590.0)), key=b"42")
        await agent.put(_d(saved), key=b"42")
    [(key, info)] = h.sent["topology_jobs"]
    assert key == b"42" and info.last_checkpoint_at == saved.event_time
    assert (info.partition, info.scheduler, info.comment) == (None, None, None)  # says only the checkpoint


async def test_a_malformed_job_signal_is_dead_lettered_once_and_the_job_steps_keep_going(h: Harness) -> None:
    async with h.pipe.agents["correlate"].test_context() as agent:
        await agent.put({"signal_id": "x", "rule": "progress.megatron_iteration"}, key=b"42")
        await agent.put(_d(_progress("42", 10, 0.0)), key=b"42")
    [(_, letter)] = h.sent["dlq"]
    assert letter.stage == "correlate" and letter.reason == "invalid_record"  # once, not once per step
    assert h.pipe.tables["job_progress"].get("42") is not None


def _remap_failure() -> Signal:
    """An Xid 64 (row remap failure) on gpu-05: a node fact the health step counts as degradation."""
    return Signal(
        signal_id="xid64",
        rule="gpu.xid",
        role=Role.ROOT_CANDIDATE,
        category=Category.HARDWARE_GPU,
        summary="Xid 64",
        event_time=T0,
        observed_time=T0,
        node="gpu-05",
        gpu="0000:3b:00",
        attrs={"code": 64},
        text="NVRM: Xid (PCI:0000:3b:00): 64, ...",
    )


async def test_a_node_fact_reaches_the_route_and_gpu_health_steps_and_a_malformed_one_is_dead_lettered_once(
    h: Harness,
) -> None:
    """One agent reads signals.node: the route step holds the fact for the node's jobs and the
    gpu_health step counts it as degradation evidence, from one validation."""
    xid = _remap_failure()
    async with h.pipe.agents["route"].test_context() as agent:
        await agent.put({"signal_id": "bad", "rule": "gpu.xid", "event_time": "never"}, key=b"gpu-05")
        await agent.put(_d(xid), key=b"gpu-05")
    [(_, letter)] = h.sent["dlq"]
    assert letter.stage == "route" and letter.reason == "invalid_record"  # once, not once per step
    pending = h.pipe.agents["stage"].node_states.get("gpu-05").pending
    assert [s.signal_id for s in pending] == ["xid64"]  # route: held until a job claims it
    assert h.pipe.tables["node_health"].get("gpu-05") is not None  # gpu_health: evidence counted


async def test_gpu_health_step_warns_of_a_thermally_throttled_gpu_then_reports_it_once_as_a_node_fact(
    h: Harness,
) -> None:
    async with h.pipe.agents["route"].test_context() as agent:
        for minute in range(12):
            for gpu in range(4):
                hot = gpu == 1 and minute >= 3
                await agent.put(
                    _d(_sample(gpu, minute * 60.0, DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=64.0 if hot else 0.0)),
                    key=b"gpu-02",
                )
                await agent.put(
                    _d(_sample(gpu, minute * 60.0, DCGM_FI_DEV_SM_CLOCK=1150.0 if hot else 1980.0)),
                    key=b"gpu-02",
                )
    [(key, warning), (key2, signal)] = h.sent["signals_node"]
    assert key == key2 == b"gpu-02"
    assert warning.rule == straggler.STRAGGLER_EARLY_RULE and warning.attrs["provisional"] is True
    assert warning.event_time == T0 + timedelta(minutes=3)  # the first hot sample
    assert signal.rule == straggler.STRAGGLER_GPU_RULE
    assert (signal.node, signal.gpu, signal.category) == ("gpu-02", "00000000:0B:00.0", Category.HARDWARE_GPU)
    assert signal.decisive and signal.isolation == "gpu" and signal.job_id is None
    assert h.sent["dlq"] == []


async def test_gpu_health_step_opens_a_degrading_incident_and_publishes_snapshots(h: Harness) -> None:
    remap_failure = _remap_failure()
    async with h.pipe.agents["route"].test_context() as agent:
        await agent.put(_d(remap_failure), key=b"gpu-05")
        await agent.put(_d(remap_failure.model_copy(update={"signal_id": "xid64b"})), key=b"gpu-05")
    incidents = [v for _, v in h.sent["incidents"]]
    assert len(incidents) == 1
    inc = incidents[0]
    assert isinstance(inc, Incident) and inc.kind == IncidentKind.DEGRADING
    assert inc.job_id == "node:gpu-05" and inc.culprit is not None and inc.culprit.gpu == "0000:3b:00"
    snapshots = [v for _, v in h.sent["health_nodes"]]
    assert snapshots and snapshots[0].node == "gpu-05" and snapshots[0].degrading
    assert snapshots[-1].score < snapshots[0].score


async def test_gpu_health_step_dead_letters_unreadable_telemetry(h: Harness) -> None:
    async with h.pipe.agents["route"].test_context() as agent:
        await agent.put({"time": "yesterday", "node": "gpu-02"}, key=b"gpu-02")
        await agent.put(_d(_sample(0, 0.0, DCGM_FI_DEV_SM_CLOCK=1980.0)), key=b"gpu-02")
    [(_, letter)] = h.sent["dlq"]
    assert letter.stage == "gpu_health"
    assert h.pipe.tables["gpu_pace"].get("gpu-02") is not None
