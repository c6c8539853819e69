"""Publish the wire contracts as JSON Schema: ``python -m schemas.export [DIR]`` (default docs/schemas).

Any subscriber — a site's own actuator, a ticketing bridge, a dashboard — can validate what it
reads from sickbay's topics against these files without importing sickbay. A test keeps the
published copies equal to what the models generate, so the files never drift from the code.
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
from pydantic import BaseModel

from schemas.actions import Action, ActionResult, IsolationRequest, ModeChange
from schemas.audit import AuditRecord
from schemas.collector import CollectorReport
from schemas.deadletter import DeadLetter
from schemas.health import NodeHealth
from schemas.incidents import Incident
from schemas.jobs import JobInfo
from schemas.signals import AssignmentBatch, JobNodeAssignment, PlacementBatch, Signal, SignalBatch
from schemas.telemetry import GpuTelemetry

DEFAULT = Path(__file__).resolve().parents[1] / "docs" / "schemas"

CONTRACTS: dict[str, type[BaseModel]] = {
    "action": Action,
    "action-result": ActionResult,
    "assignment-batch": AssignmentBatch,
    "audit-record": AuditRecord,
    "collector-report": CollectorReport,
    "dead-letter": DeadLetter,
    "gpu-telemetry": GpuTelemetry,
    "incident": Incident,
    "isolation-request": IsolationRequest,
    "job-info": JobInfo,
    "job-node-assignment": JobNodeAssignment,
    "mode-change": ModeChange,
    "node-health": NodeHealth,
    "placement-batch": PlacementBatch,
    "signal": Signal,
    "signal-batch": SignalBatch,
}


def render(model: type[BaseModel]) -> str:
    schema = model.model_json_schema(mode="serialization")
    schema["$id"] = f"https://sickbay.dev/schemas/{model.__name__}.v1.json"
    return orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n"


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else DEFAULT
    out.mkdir(parents=True, exist_ok=True)
    for name, model in CONTRACTS.items():
        (out / f"{name}.schema.json").write_text(render(model))
    print(f"wrote {len(CONTRACTS)} schemas to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
