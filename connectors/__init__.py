"""Connectors: sources (collectors → raw topics), actuators (actions → schedulers), sinks (→ ClickHouse)."""
