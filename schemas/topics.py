"""The one topic catalog: names, keys, partitions and retention for every topic.

Every producer, agent, adapter and test takes topic names from here. Topics are
created up front with explicit partition counts; nothing relies on broker
auto-creation (which would give Faust a ``PartitionsMismatch``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DAY_MS = 24 * 3600 * 1000


class TopicSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    key: str  # what the record key holds, which decides the partition
    value: str  # the contract on the value
    partitions: int = Field(ge=1)
    retention_ms: int = 7 * DAY_MS
    compacted: bool = False
    faust_source: bool = False  # read by a Faust agent: partitions must equal faust's topic_partitions
    description: str = ""

    def config(self) -> dict[str, str]:
        if self.compacted:  # a changelog keeps the latest value per key, whatever its age
            return {"cleanup.policy": "compact"}
        return {"retention.ms": str(self.retention_ms)}


def extract_group(app_id: str) -> str:
    """The consumer group (and client id) of the worker's batched extract stage, which reads
    ``raw.logs`` outside the Faust app's own group ``app_id``."""
    return f"{app_id}-extract"


# The Faust tables, by name. Their changelog topics (``<app_id>-<table>-changelog``) are
# pre-created with the source topics' partition count: a changelog that Faust creates at
# start-up can be missing from a fresh broker's metadata for seconds, and Faust then
# refuses every table write with ``PartitionsMismatch``.
TABLE_NODE_JOBS = "node-jobs"
TABLE_JOB_TOPOLOGY = "job-topology"
TABLE_INCIDENT_WINDOWS = "incident-windows"
TABLE_RANK_PLACES = "rank-place-blocks"  # "job|b<n>" → node and GPU of ranks 64n..64n+63 (NCCL init lines)
TABLE_JOB_LOOKBACK = "job-lookback"  # job → the latest context hint per rank, from before any incident
TABLE_DECIDE_ISSUED = "decide-issued"
TABLE_DECIDE_JOBS = "decide-jobs"  # job → JobInfo + recovery history (restarts, confirmations)
TABLE_DECIDE_GATE = "decide-gate"  # cluster → recent isolations and per-node flap history
TABLE_JOB_PROGRESS = "job-progress"  # job → progress (hang) state and per-rank pace
TABLE_GPU_PACE = "gpu-pace"  # node → per-GPU SM clock pace (stragglers)
TABLE_NODE_HEALTH = "node-health"  # node → decaying degradation score
FAUST_TABLES = (
    TABLE_NODE_JOBS,
    TABLE_JOB_TOPOLOGY,
    TABLE_INCIDENT_WINDOWS,
    TABLE_RANK_PLACES,
    TABLE_JOB_LOOKBACK,
    TABLE_DECIDE_ISSUED,
    TABLE_DECIDE_JOBS,
    TABLE_DECIDE_GATE,
    TABLE_JOB_PROGRESS,
    TABLE_GPU_PACE,
    TABLE_NODE_HEALTH,
)


class TopicCatalog:
    """All of sickbay's topics under one prefix (a prefix per test keeps tests apart).

    ``app_id`` names the Faust app whose internal topics (table changelogs, the
    leader-election topic) are created with the rest.
    """

    def __init__(self, prefix: str = "sickbay", partitions: int = 4, app_id: str = "sickbay") -> None:
        self.prefix = prefix
        self.partitions = partitions
        self.app_id = app_id
        p = partitions
        self.raw_logs = TopicSpec(
            name=f"{prefix}.raw.logs",
            key="host",
            value="shipper record (bytes, unchanged)",
            partitions=p,
            faust_source=True,
            description="Records exactly as Fluent Bit, Vector, rsyslog or sickbay's collector wrote them",
        )
        self.raw_telemetry = TopicSpec(
            name=f"{prefix}.raw.telemetry",
            key="node",
            value="GpuTelemetry",
            partitions=p,
            faust_source=True,
            retention_ms=7 * DAY_MS,
            description="GPU telemetry samples (dcgm-exporter, Prometheus, NVML), one per GPU per scrape",
        )
        self.collector_reports = TopicSpec(
            name=f"{prefix}.collector.reports",
            key="host",
            value="CollectorReport",
            partitions=1,
            retention_ms=7 * DAY_MS,
            description="What each collector could reach (files, scheduler, exporter, broker, spool)",
        )
        self.signals_node = TopicSpec(
            name=f"{prefix}.signals.node",
            key="node",
            value="Signal | SignalBatch | PlacementBatch",
            partitions=p,
            faust_source=True,
            description="Node facts with no job yet (kernel Xid, ECC, ...)",
        )
        self.topology_node = TopicSpec(
            name=f"{prefix}.topology.node",
            key="node",
            value="JobNodeAssignment | AssignmentBatch",
            partitions=p,
            faust_source=True,
            description="Which job attempts each node serves",
        )
        self.topology_jobs = TopicSpec(
            name=f"{prefix}.topology.jobs",
            key="job_id",
            value="JobInfo",
            partitions=p,
            faust_source=True,
            compacted=True,
            description="Job facts for policy: partition/namespace, APS comment/annotation, last checkpoint",
        )
        self.isolation_requests = TopicSpec(
            name=f"{prefix}.decide.isolations",
            key="cluster",
            value="IsolationRequest",
            partitions=p,
            faust_source=True,
            retention_ms=7 * DAY_MS,
            description="Drains the decide step wants; the per-cluster gate applies fleet-wide valves",
        )
        self.signals_job = TopicSpec(
            name=f"{prefix}.signals.job",
            key="job_id",
            value="Signal | SignalBatch | PlacementBatch",
            partitions=p,
            faust_source=True,
            description="Job facts: training logs, scheduler events and node facts routed to their jobs",
        )
        self.ticks_node = TopicSpec(
            name=f"{prefix}.control.node-ticks",
            key="node",
            value="{tick, at}",
            partitions=p,
            faust_source=True,
            retention_ms=3600 * 1000,
            description="Timer ticks re-entering the node stream (release node facts no job claimed)",
        )
        self.ticks_job = TopicSpec(
            name=f"{prefix}.control.ticks",
            key="job_id",
            value="{job_id, at}",
            partitions=p,
            faust_source=True,
            retention_ms=3600 * 1000,
            description="Timer ticks re-entering the job stream (Faust tables change only inside a stream)",
        )
        self.ticks_progress = TopicSpec(
            name=f"{prefix}.control.progress-ticks",
            key="job_id",
            value="{tick, at}",
            partitions=p,
            faust_source=True,
            retention_ms=3600 * 1000,
            description="Timer ticks re-entering the progress (hang) stream",
        )
        self.health_nodes = TopicSpec(
            name=f"{prefix}.health.nodes",
            key="node",
            value="NodeHealth",
            partitions=p,
            retention_ms=30 * DAY_MS,
            description="Node health snapshots (score, decayed penalty per degradation kind)",
        )
        self.incidents = TopicSpec(
            name=f"{prefix}.incidents",
            key="job_id",
            value="Incident",
            partitions=p,
            faust_source=True,
            retention_ms=30 * DAY_MS,
            description="Versioned incidents (highest revision wins)",
        )
        self.actions = TopicSpec(
            name=f"{prefix}.actions",
            key="job_id",
            value="Action",
            partitions=p,
            retention_ms=30 * DAY_MS,
            description="Intents for the scheduler adapters",
        )
        self.action_results = TopicSpec(
            name=f"{prefix}.action-results",
            key="action_id",
            value="ActionResult",
            partitions=p,
            retention_ms=30 * DAY_MS,
            description="What the adapters did",
        )
        self.audit = TopicSpec(
            name=f"{prefix}.audit",
            key="incident_id",
            value="AuditRecord",
            partitions=p,
            retention_ms=90 * DAY_MS,
            description="Full audit trail",
        )
        self.control_modes = TopicSpec(
            name=f"{prefix}.control.modes",
            key="scope",
            value="ModeChange",
            partitions=1,
            compacted=True,
            description="Observe/act mode per scope (cluster/partition/category), latest per key",
        )
        self.dlq = TopicSpec(
            name=f"{prefix}.dlq",
            key="stage",
            value="DeadLetter",
            partitions=1,
            retention_ms=30 * DAY_MS,
            description="Records a stage refused, with the reason and original bytes",
        )

    def faust_internal(self) -> list[TopicSpec]:
        changelogs = [
            TopicSpec(
                name=f"{self.app_id}-{table}-changelog",
                key="table key",
                value="table value",
                partitions=self.partitions,
                compacted=True,
                description=f"Faust changelog of table {table}",
            )
            for table in FAUST_TABLES
        ]
        leader = TopicSpec(
            name=f"{self.app_id}-__assignor-__leader",
            key="-",
            value="-",
            partitions=1,
            description="Faust leader election",
        )
        return [*changelogs, leader]

    def all(self) -> list[TopicSpec]:
        return [*self.sickbay(), *self.faust_internal()]

    def sickbay(self) -> list[TopicSpec]:
        return [
            self.raw_logs,
            self.raw_telemetry,
            self.collector_reports,
            self.signals_node,
            self.topology_node,
            self.topology_jobs,
            self.isolation_requests,
            self.signals_job,
            self.ticks_node,
            self.ticks_job,
            self.ticks_progress,
            self.health_nodes,
            self.incidents,
            self.actions,
            self.action_results,
            self.audit,
            self.control_modes,
            self.dlq,
        ]
