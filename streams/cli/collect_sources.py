"""Registers the source collectors (Slurm, Prometheus/dcgm-exporter, Loki, NVML) under ``sickbay collect``."""

from __future__ import annotations

import typer

from streams.cli import collect_loki, collect_slurm, collect_telemetry


def mount(collect_app: typer.Typer) -> None:
    collect_slurm.mount(collect_app)
    collect_telemetry.mount(collect_app)
    collect_loki.mount(collect_app)
