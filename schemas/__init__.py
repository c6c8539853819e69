"""sickbay's wire contracts: every record that crosses a process or topic boundary.

This package imports nothing else of sickbay's, so producers written in any
component (or another language, through the exported JSON Schema) share one
definition of each record.
"""

from schemas.actions import (
    Action,
    ActionKind,
    ActionResult,
    ActionStatus,
    CommandRun,
    Mode,
    ModeChange,
    ModeScope,
    WorkloadKind,
)
from schemas.audit import AuditRecord
from schemas.base import Contract
from schemas.deadletter import DeadLetter
from schemas.health import NodeHealth
from schemas.incidents import (
    Category,
    Culprit,
    Evidence,
    Incident,
    IncidentKind,
    IncidentStatus,
    RootCause,
    Symptom,
)
from schemas.raw import FluentBitRecord, LogLine, SickbayLineRecord, VectorRecord
from schemas.signals import (
    AssignmentBatch,
    JobNodeAssignment,
    PlacementBatch,
    RankPlacement,
    Role,
    Signal,
    SignalBatch,
    SourceRef,
)
from schemas.telemetry import GpuTelemetry
from schemas.topics import TopicCatalog, TopicSpec

__all__ = [
    "Action",
    "ActionKind",
    "ActionResult",
    "ActionStatus",
    "AssignmentBatch",
    "AuditRecord",
    "Category",
    "CommandRun",
    "Contract",
    "Culprit",
    "DeadLetter",
    "Evidence",
    "FluentBitRecord",
    "GpuTelemetry",
    "Incident",
    "IncidentKind",
    "IncidentStatus",
    "JobNodeAssignment",
    "LogLine",
    "Mode",
    "ModeChange",
    "ModeScope",
    "NodeHealth",
    "PlacementBatch",
    "RankPlacement",
    "Role",
    "RootCause",
    "SickbayLineRecord",
    "Signal",
    "SignalBatch",
    "SourceRef",
    "Symptom",
    "TopicCatalog",
    "TopicSpec",
    "VectorRecord",
    "WorkloadKind",
]
