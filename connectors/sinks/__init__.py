"""Sinks: topics → ClickHouse (embedded chdb by default, or a server)."""
