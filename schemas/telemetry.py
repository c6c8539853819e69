"""GPU telemetry samples: one record per GPU per scrape, not one per metric.

dcgm-exporter, Prometheus queries and the NVML node agent all reduce to the same
shape so the straggler and node-health detectors read one contract. Metric names
keep the DCGM field names operators already know (``DCGM_FI_DEV_SM_CLOCK``,
``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS``, ``DCGM_FI_DEV_POWER_USAGE`` ...), so a
sample scraped from dcgm-exporter and one read through NVML compare directly.
"""

from __future__ import annotations

from pydantic import Field

from schemas.base import Contract, UtcDatetime


class GpuTelemetry(Contract):
    time: UtcDatetime
    node: str = Field(min_length=1, max_length=253)
    gpu: int | None = Field(default=None, ge=0)  # device index on the node
    uuid: str | None = None
    pci_bus_id: str | None = None
    model: str | None = None
    driver: str | None = None
    job_id: str | None = None  # from dcgm-exporter's hpc_job / pod labels, when the exporter knows it
    cluster: str | None = None
    source: str = Field(min_length=1, max_length=64)  # "dcgm-exporter", "prometheus", "nvml", ...
    metrics: dict[str, float] = Field(default_factory=dict)
