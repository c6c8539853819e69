"""Wires the stages into one Faust app: topics from the catalog, tables, agents and timers.

    raw.logs ─[extract]─┬─> signals.node ─┐
                        │   topology.node ─┴─[route]─> signals.job
                        └─> signals.job ──┬──────────[correlate]─> incidents ─[decide]─> actions, audit
                  [refine timer] ─> control.ticks ─┘         └─> topology.node
    [hang_watch timer] ─> control.progress-ticks ─┘ the correlate agent's progress step ─>
                                                   signals.job (hang / slow-rank signals)
    raw.logs metric events ─[extract]─> raw.telemetry ─> the route agent's gpu_health step, which
                                 also sees every node fact ─> signals.node (slow GPU),
                                                              health.nodes, incidents (degrading)
    anything unreadable ─> dlq

On a broker the extract step is the batched confluent-kafka stage (``extract/batched.py``, its own
consumer group); the Faust agent of the same name serves in-memory tests (``extract_stage``).

``register`` is a function, not import-time decorators, so tests build as many
apps as they like (memory store, their own topic prefix).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import faust

from schemas.topics import TopicSpec
from streams.settings import Settings


@dataclass
class Topics:
    raw_logs: Any
    signals_node: Any
    topology_node: Any
    ticks_node: Any
    node_inbox: Any  # signals.node + topology.node + control.node-ticks (+ raw.telemetry), by node
    signals_job: Any
    ticks_job: Any
    job_inbox: Any  # signals.job + control.ticks + control.progress-ticks, co-partitioned by job
    incidents: Any
    actions: Any
    audit: Any
    dlq: Any
    topology_jobs: Any = None  # JobInfo for the decide step (partition, APS override, checkpoint)
    isolation_requests: Any = None  # decide → per-cluster isolation gate
    raw_telemetry: Any = None  # GpuTelemetry, keyed by node
    ticks_progress: Any = None  # hang_watch timer → the progress step (in the correlate agent), by job
    health_nodes: Any = None  # NodeHealth snapshots, keyed by node


@dataclass
class Pipeline:
    app: faust.App
    settings: Settings
    topics: Topics
    agents: dict[str, Any]
    tables: dict[str, Any]
    services: dict[str, Any] = field(default_factory=dict)  # in-process helpers (e.g. the mode registry)


def _topic(app: faust.App, spec: TopicSpec, *, raw_value: bool = False) -> Any:
    return app.topic(
        spec.name,
        key_type=bytes,
        value_type=bytes if raw_value else None,
        key_serializer="raw",
        value_serializer="raw" if raw_value else None,
        partitions=spec.partitions,
        retention=spec.retention_ms / 1000.0,
        internal=False,
    )


def _inbox(app: faust.App, *specs: TopicSpec) -> Any:
    """One agent's input: several co-partitioned catalog topics read as one stream."""
    return app.topic(*(spec.name for spec in specs), key_type=bytes, key_serializer="raw")


def build(app: faust.App, settings: Settings) -> Pipeline:
    from streams.correlate.agent import register as register_correlate
    from streams.correlate.node_agent import register as register_gpu_health
    from streams.correlate.progress_agent import register as register_progress
    from streams.decide.agent import register as register_decide
    from streams.extract.agent import register as register_extract
    from streams.extract.batched import register as register_batched_extract

    cat = settings.topics
    topics = Topics(
        raw_logs=_topic(app, cat.raw_logs, raw_value=True),
        signals_node=_topic(app, cat.signals_node),
        topology_node=_topic(app, cat.topology_node),
        ticks_node=_topic(app, cat.ticks_node),
        # with the detectors, GPU telemetry too: the route agent drives the gpu_health step
        node_inbox=_inbox(
            app,
            cat.signals_node,
            cat.topology_node,
            cat.ticks_node,
            *([cat.raw_telemetry] if settings.detectors else []),
        ),
        signals_job=_topic(app, cat.signals_job),
        ticks_job=_topic(app, cat.ticks_job),
        job_inbox=_inbox(app, cat.signals_job, cat.ticks_job, cat.ticks_progress),
        incidents=_topic(app, cat.incidents),
        actions=_topic(app, cat.actions),
        audit=_topic(app, cat.audit),
        dlq=_topic(app, cat.dlq),
        topology_jobs=_topic(app, cat.topology_jobs),
        isolation_requests=_topic(app, cat.isolation_requests),
        raw_telemetry=_topic(app, cat.raw_telemetry),
        ticks_progress=_topic(app, cat.ticks_progress),
        health_nodes=_topic(app, cat.health_nodes),
    )
    pipe = Pipeline(app=app, settings=settings, topics=topics, agents={}, tables={})
    if settings.extract_stage == "agent":
        register_extract(pipe)
    else:
        register_batched_extract(pipe)
    if settings.detectors:
        register_progress(pipe)  # first: the correlate agent drives its step
        register_gpu_health(pipe)  # and the route agent this one
    register_correlate(pipe)
    register_decide(pipe)
    return pipe


def key_str(key: Any) -> str | None:
    if key is None:
        return None
    if isinstance(key, bytes | bytearray):
        return key.decode("utf-8", errors="replace")
    return str(key)
