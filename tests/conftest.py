"""Shared fixtures. Component fixtures (Kafka, Slurm, ClickHouse) live in tests/components.py."""

from __future__ import annotations

pytest_plugins = ["tests.components"]
