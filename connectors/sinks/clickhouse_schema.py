"""ClickHouse tables for sickbay's history, and how to reach the store.

The same DDL runs on the embedded engine (chdb, through clickhouse-connect's
``chdb://`` DSN) and on a server URL. Tables that can receive a replayed record
are ReplacingMergeTree on a deterministic id, so duplicates collapse; read with
``FINAL`` for exact answers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DATABASE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

MIGRATIONS: list[tuple[int, list[str]]] = [
    (
        1,
        [
            """CREATE TABLE IF NOT EXISTS {db}.signals (
            signal_id String, rule LowCardinality(String), role LowCardinality(String),
            category LowCardinality(String), summary String,
            event_time DateTime64(3, 'UTC'), observed_time DateTime64(3, 'UTC'),
            node LowCardinality(String), job_id String, rank Nullable(Int32), gpu String,
            attrs String, isolation LowCardinality(String), decisive UInt8, text String,
            source_kind LowCardinality(String), adapter LowCardinality(String),
            topic LowCardinality(String), partition Nullable(Int32), offset Nullable(Int64)
        ) ENGINE = ReplacingMergeTree
        ORDER BY (node, event_time, signal_id)
        TTL toDateTime(event_time) + INTERVAL 90 DAY""",
            """CREATE TABLE IF NOT EXISTS {db}.incidents (
            incident_id String, revision UInt32, cluster LowCardinality(String), job_id String,
            attempt UInt32, status LowCardinality(String), category LowCardinality(String),
            root_rule LowCardinality(String), root_summary String, root_node String, root_gpu String,
            root_code Nullable(Int32), root_text String,
            culprit_node String, culprit_gpu String, isolate Array(String), restartable UInt8,
            confidence Float32, supporting String, evidence String, coverage Array(String),
            job_nodes Array(String),
            opened_at DateTime64(3, 'UTC'), updated_at DateTime64(3, 'UTC'),
            first_signal_time DateTime64(3, 'UTC')
        ) ENGINE = ReplacingMergeTree(revision)
        ORDER BY (cluster, incident_id)""",
            """CREATE TABLE IF NOT EXISTS {db}.actions (
            action_id String, idempotency_key String, kind LowCardinality(String),
            mode LowCardinality(String), dry_run UInt8, scheduler LowCardinality(String),
            cluster LowCardinality(String), incident_id String, incident_revision UInt32,
            job_id String, node String, exclude_nodes Array(String), reason String,
            created_at DateTime64(3, 'UTC')
        ) ENGINE = ReplacingMergeTree
        ORDER BY (cluster, action_id)""",
            """CREATE TABLE IF NOT EXISTS {db}.action_results (
            action_id String, idempotency_key String, kind LowCardinality(String),
            status LowCardinality(String), adapter LowCardinality(String), cluster LowCardinality(String),
            incident_id String, started_at DateTime64(3, 'UTC'), finished_at DateTime64(3, 'UTC'),
            commands String, detail String
        ) ENGINE = ReplacingMergeTree(finished_at)
        ORDER BY (cluster, action_id, status)""",
            """CREATE TABLE IF NOT EXISTS {db}.audit (
            audit_id String, time DateTime64(3, 'UTC'), actor LowCardinality(String),
            event LowCardinality(String), cluster LowCardinality(String), incident_id String,
            action_id String, mode LowCardinality(String), details String
        ) ENGINE = ReplacingMergeTree
        ORDER BY (cluster, time, audit_id)""",
            """CREATE TABLE IF NOT EXISTS {db}.dead_letters (
            stage LowCardinality(String), reason LowCardinality(String), error String,
            topic String, partition Nullable(Int32), offset Nullable(Int64), key String,
            original_b64 String, time DateTime64(3, 'UTC')
        ) ENGINE = ReplacingMergeTree
        ORDER BY (stage, time, topic, ifNull(partition, -1), ifNull(offset, -1))
        SETTINGS allow_nullable_key = 1""",
        ],
    ),
]


def get_client(dsn: str) -> Any:
    """A clickhouse-connect client for ``chdb:///abs/path`` (embedded) or ``http(s)://`` (server).

    chdb allows one process per data path: the process that sinks owns the store.
    """
    import clickhouse_connect

    if dsn.startswith("chdb://"):
        Path(dsn.removeprefix("chdb://")).mkdir(parents=True, exist_ok=True)
    return clickhouse_connect.get_client(dsn=dsn)


def migrate(client: Any, database: str) -> int:
    """Apply pending migrations; returns the schema version now in force.

    ``database`` is an identifier validated by the settings (it cannot be a bound parameter).
    """
    if not DATABASE_NAME.match(database):
        raise ValueError(f"invalid ClickHouse database name {database!r}")
    client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    client.command(
        f"CREATE TABLE IF NOT EXISTS {database}.schema_migrations "
        "(version UInt32, applied_at DateTime64(3, 'UTC') DEFAULT now64(3)) "
        "ENGINE = MergeTree ORDER BY version"
    )
    sql = f"SELECT version FROM {database}.schema_migrations"  # noqa: S608 - identifier checked above
    done = {int(r[0]) for r in client.query(sql).result_rows}
    for version, statements in MIGRATIONS:
        if version in done:
            continue
        for stmt in statements:
            client.command(stmt.format(db=database))
        client.insert(f"{database}.schema_migrations", [[version]], column_names=["version"])
    return max(v for v, _ in MIGRATIONS)
