"""One simulated event: a line written to a file on a node, or one telemetry sample.

Events are internal (a dataclass, not a wire contract); they become files with
``output.write_files`` and shipper records with ``shippers.record``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

SourceKind = Literal["kernel", "training", "scheduler", "telemetry"]


@dataclass(frozen=True, slots=True)
class Metric:
    """One dcgm-exporter sample (a Prometheus series of one GPU)."""

    name: str
    value: float
    kind: Literal["gauge", "counter"]
    gpu: int
    uuid: str
    pci_bus_id: str
    model: str
    driver: str
    hpc_job: str | None = None
    pod: str | None = None
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class K8sMeta:
    pod: str
    namespace: str
    container: str
    node: str
    uid: str
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class SimEvent:
    time: datetime
    seq: int  # creation order: ties at the same instant keep it
    kind: SourceKind
    origin: str  # the node (or controller) that wrote the line
    ship_host: str  # the host whose shipper reads the file
    path: str  # absolute path of the file on ``ship_host``
    rel: str  # path in the files output (``logs/<rel>``)
    line: str  # the line as it is in the file
    body: str  # what follows ``tag:`` in syslog forwarding (kernel: ``[ 1234.567890] msg``)
    msg: str  # the bare message, as journald keeps it (no stamps)
    decisive: bool = False
    metric: Metric | None = None
    k8s: K8sMeta | None = None
    job_id: str | None = None
    tag: str = ""  # e.g. "kernel", "slurmctld[483]" for syslog-shaped forwarding

    def sort_key(self) -> tuple[datetime, int]:
        return (self.time, self.seq)
