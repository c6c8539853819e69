"""ClickHouse tables for sickbay's history, and how to reach the store.

The same DDL runs on the embedded engine (chdb, through clickhouse-connect's
``chdb://`` DSN) and on a server URL. Tables that can receive a replayed record
are ReplacingMergeTree on a deterministic id, so duplicates collapse; read with
``FINAL`` for exact answers.

Migrations are append-only: a released version's statements are never edited;
a change is a new version. Version 2 adds the fleet-analytics layer:

- ``job_assignments`` (raw topology facts) and ``job_attempts`` (one row per
  attempt, rolled up by a materialized view with min/max/union, which replays
  cannot change);
- ``node_inventory`` (GPU model, driver, GPU count per node; written by operators
  or an inventory job) and ``node_health`` (an event log per node: implicated by
  an incident, drain/resume requested or advised), fed by materialized views;
- ``incident_facts``: a narrow, analytics-shaped copy of each incident's latest
  revision (day, job size, detection latency), fed by a materialized view.
  Incidents are revised (the culprit or category can change between the fast
  and the refined verdict), so counting at insert time would count an incident
  once per revision; the per-node, per-model, per-category, MTBF, culprit and
  GPU-hours rollups are therefore views over ``incident_facts FINAL``: exact,
  and cheap because the table is one narrow row per incident;
- ``signals_daily`` and ``action_outcomes_daily``: additive daily rollups of the
  high-volume tables (``uniqExact`` states of deterministic ids, so a replayed
  batch adds nothing), kept after the raw signals' TTL has dropped them;
- ``mode_changes``: observe/act mode per scope, as published by the API;
- a TTL on dead letters (raw signals have had one since version 1).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DATABASE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Bodies of the materialized views, shared with the backfill that version 2 runs once.
JOB_ATTEMPTS_SELECT = """SELECT cluster, job_id, attempt,
        if(state = 'assigned', [toString(node)], []) AS nodes,
        if(state = 'assigned', event_time, NULL) AS started_at,
        if(state = 'released', event_time, NULL) AS ended_at
    FROM {db}.job_assignments"""

NODE_HEALTH_FROM_INCIDENTS = """SELECT cluster, culprit_node AS node, first_signal_time AS time,
        'implicated' AS event, incident_id, '' AS action_id, category, root_summary AS detail
    FROM {db}.incidents WHERE culprit_node != ''"""

NODE_HEALTH_FROM_ACTIONS = """SELECT cluster, node, created_at AS time,
        concat(replaceOne(toString(kind), '_node', ''), if(dry_run = 1, '_advised', '_requested')) AS event,
        incident_id, action_id, '' AS category, reason AS detail
    FROM {db}.actions WHERE kind IN ('drain_node', 'resume_node') AND node != ''"""

# Version 4 on: a provisional revision (a cascade-only verdict inside the root grace, which the decide
# step does not act on) implicates nobody in a node's health history; its final revision does.
NODE_HEALTH_FROM_FINAL_INCIDENTS = NODE_HEALTH_FROM_INCIDENTS + " AND provisional = 0"

INCIDENT_FACTS_SELECT = """SELECT cluster, incident_id, revision, job_id, attempt, status, category,
        root_rule, root_code, root_summary, culprit_node, culprit_gpu, isolate, restartable, confidence,
        job_nodes, toUInt32(length(job_nodes)) AS job_size, first_signal_time, opened_at, updated_at,
        toDate(first_signal_time) AS day,
        greatest(0, dateDiff('millisecond', first_signal_time, opened_at) / 1000.0) AS detect_s
    FROM {db}.incidents"""
# Version 4 on: the facts say whether a revision is provisional (the API lists them from here).
INCIDENT_FACTS_SELECT_V4 = INCIDENT_FACTS_SELECT.replace(
    " AS detect_s\n    FROM {db}.incidents", " AS detect_s, provisional\n    FROM {db}.incidents"
)

SIGNALS_DAILY_SELECT = """SELECT toDate(event_time) AS day, node, category, rule, role,
        uniqExactState(signal_id) AS signals, max(event_time) AS last_seen
    FROM {db}.signals GROUP BY day, node, category, rule, role"""

ACTION_OUTCOMES_SELECT = """SELECT cluster, toDate(finished_at) AS day, kind, status,
        uniqExactState(action_id) AS actions
    FROM {db}.action_results GROUP BY cluster, day, kind, status"""

# The canned questions, as views over the rollup tables (redefined, never altered, by later versions).
ROLLUP_VIEWS = [
    """CREATE OR REPLACE VIEW {db}.failures_node_daily AS
    SELECT day, cluster, culprit_node AS node, category, count() AS incidents
    FROM {db}.incident_facts FINAL WHERE culprit_node != ''
    GROUP BY day, cluster, node, category""",
    """CREATE OR REPLACE VIEW {db}.failures_category_daily AS
    SELECT day, cluster, category, count() AS incidents, uniqExact(job_id) AS jobs
    FROM {db}.incident_facts FINAL GROUP BY day, cluster, category""",
    """CREATE OR REPLACE VIEW {db}.failures_gpu_driver AS
    SELECT f.cluster AS cluster, if(i.gpu_model = '', 'unknown', i.gpu_model) AS gpu_model,
        if(i.driver_version = '', 'unknown', i.driver_version) AS driver_version,
        count() AS incidents, uniqExact(f.culprit_node) AS nodes
    FROM (SELECT cluster, culprit_node FROM {db}.incident_facts FINAL WHERE culprit_node != '') AS f
    LEFT JOIN (SELECT cluster, node, gpu_model, driver_version FROM {db}.node_inventory FINAL) AS i
        ON f.cluster = i.cluster AND f.culprit_node = i.node
    GROUP BY cluster, gpu_model, driver_version""",
    """CREATE OR REPLACE VIEW {db}.top_culprits AS
    SELECT cluster, culprit_node AS node, count() AS incidents,
        groupUniqArray(category) AS categories, max(first_signal_time) AS last_incident,
        argMax(root_summary, first_signal_time) AS last_root_cause
    FROM {db}.incident_facts FINAL WHERE culprit_node != ''
    GROUP BY cluster, node""",
    """CREATE OR REPLACE VIEW {db}.mtbf_node AS
    SELECT cluster, culprit_node AS node, count() AS failures,
        min(first_signal_time) AS first_failure, max(first_signal_time) AS last_failure,
        if(failures > 1, dateDiff('second', first_failure, last_failure) / 3600.0 / (failures - 1), NULL)
            AS mtbf_h
    FROM {db}.incident_facts FINAL WHERE culprit_node != ''
    GROUP BY cluster, node""",
    """CREATE OR REPLACE VIEW {db}.job_attempt_runs AS
    SELECT cluster, job_id, attempt, n AS nodes, toUInt32(length(n)) AS job_size,
        s AS started_at, e AS ended_at,
        greatest(0, dateDiff('millisecond', s, ifNull(e, now64(3)))) / 3600000.0 AS run_h
    FROM (SELECT cluster, job_id, attempt, arraySort(groupUniqArrayArray(nodes)) AS n,
                 min(started_at) AS s, max(ended_at) AS e
          FROM {db}.job_attempts GROUP BY cluster, job_id, attempt)""",
    """CREATE OR REPLACE VIEW {db}.mtbf_job_size AS
    SELECT r.cluster AS cluster,
        multiIf(r.job_size <= 1, '1', r.job_size <= 7, '2-7', r.job_size <= 31, '8-31',
                r.job_size <= 127, '32-127', '128+') AS size_bucket,
        count() AS attempts, round(sum(r.run_h), 3) AS run_h, sum(f.failures) AS failures,
        if(failures > 0, run_h / failures, NULL) AS mtbf_h
    FROM (SELECT * FROM {db}.job_attempt_runs WHERE started_at IS NOT NULL) AS r
    LEFT JOIN (SELECT cluster, job_id, attempt, count() AS failures FROM {db}.incident_facts FINAL
               GROUP BY cluster, job_id, attempt) AS f
        ON r.cluster = f.cluster AND r.job_id = f.job_id AND r.attempt = f.attempt
    GROUP BY cluster, size_bucket""",
    # GPU-hours lost per incident = GPUs of the job (inventory, else 8 per node) x hours from the
    # first signal to recovery; recovery = the next attempt's start, else the first successful
    # requeue, else the incident's last revision (a lower bound while the job has not come back).
    """CREATE OR REPLACE VIEW {db}.gpu_hours_lost AS
    SELECT f.cluster AS cluster, f.incident_id AS incident_id, f.job_id AS job_id, f.attempt AS attempt,
        f.day AS day, f.category AS category, f.culprit_node AS culprit_node, f.job_size AS job_size,
        f.first_signal_time AS first_signal_time,
        multiIf(nxt.started_at IS NOT NULL, 'next_attempt', rq.at IS NOT NULL, 'requeued', 'last_revision')
            AS recovered_by,
        multiIf(nxt.started_at IS NOT NULL, nxt.started_at, rq.at IS NOT NULL, rq.at, f.updated_at)
            AS recovered_at,
        if(g.gpus > 0, g.gpus, greatest(f.job_size, 1) * 8) AS gpus,
        round(gpus * greatest(0, dateDiff('millisecond', f.first_signal_time, recovered_at)) / 3600000.0, 3)
            AS gpu_hours_lost
    FROM (SELECT * FROM {db}.incident_facts FINAL) AS f
    LEFT JOIN (SELECT cluster, job_id, attempt, started_at FROM {db}.job_attempt_runs) AS nxt
        ON nxt.cluster = f.cluster AND nxt.job_id = f.job_id AND nxt.attempt = f.attempt + 1
    LEFT JOIN (SELECT incident_id, min(finished_at) AS at FROM {db}.action_results FINAL
               WHERE kind = 'requeue_job' AND status IN ('succeeded', 'converged') GROUP BY incident_id) AS rq
        ON rq.incident_id = f.incident_id
    LEFT JOIN (SELECT f2.incident_id AS incident_id, sum(if(inv.gpus = 0, 8, inv.gpus)) AS gpus
               FROM (SELECT cluster, incident_id, arrayJoin(job_nodes) AS node
                     FROM {db}.incident_facts FINAL) AS f2
               LEFT JOIN (SELECT cluster, node, gpus FROM {db}.node_inventory FINAL) AS inv
                   ON inv.cluster = f2.cluster AND inv.node = f2.node
               GROUP BY incident_id) AS g
        ON g.incident_id = f.incident_id
    SETTINGS join_use_nulls = 1""",
    """CREATE OR REPLACE VIEW {db}.incident_latency AS
    SELECT f.cluster AS cluster, f.incident_id AS incident_id, f.day AS day, f.category AS category,
        f.detect_s AS detect_s,
        if(a.first_at IS NULL, NULL,
           greatest(0, dateDiff('millisecond', f.first_signal_time, a.first_at)) / 1000.0) AS act_s,
        a.statuses AS action_statuses
    FROM (SELECT * FROM {db}.incident_facts FINAL) AS f
    LEFT JOIN (SELECT incident_id, min(finished_at) AS first_at, groupUniqArray(status) AS statuses
               FROM {db}.action_results FINAL WHERE status NOT IN ('failed', 'rejected')
               GROUP BY incident_id) AS a
        ON a.incident_id = f.incident_id
    SETTINGS join_use_nulls = 1""",
]

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
    (
        2,
        [
            """CREATE TABLE IF NOT EXISTS {db}.job_assignments (
            cluster LowCardinality(String), job_id String, attempt UInt32, node LowCardinality(String),
            state LowCardinality(String), event_time DateTime64(3, 'UTC')
        ) ENGINE = ReplacingMergeTree
        ORDER BY (cluster, job_id, attempt, node, state, event_time)""",
            """CREATE TABLE IF NOT EXISTS {db}.job_attempts (
            cluster LowCardinality(String), job_id String, attempt UInt32,
            nodes SimpleAggregateFunction(groupUniqArrayArray, Array(String)),
            started_at SimpleAggregateFunction(min, Nullable(DateTime64(3, 'UTC'))),
            ended_at SimpleAggregateFunction(max, Nullable(DateTime64(3, 'UTC')))
        ) ENGINE = AggregatingMergeTree
        ORDER BY (cluster, job_id, attempt)""",
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.job_attempts_mv TO {db}.job_attempts AS "
            + JOB_ATTEMPTS_SELECT,
            """CREATE TABLE IF NOT EXISTS {db}.node_inventory (
            cluster LowCardinality(String), node String, partition LowCardinality(String),
            gpu_model LowCardinality(String), driver_version LowCardinality(String), gpus UInt16,
            updated_at DateTime64(3, 'UTC')
        ) ENGINE = ReplacingMergeTree(updated_at)
        ORDER BY (cluster, node)""",
            """CREATE TABLE IF NOT EXISTS {db}.node_health (
            cluster LowCardinality(String), node String, time DateTime64(3, 'UTC'),
            event LowCardinality(String), incident_id String, action_id String,
            category LowCardinality(String), detail String
        ) ENGINE = ReplacingMergeTree
        ORDER BY (cluster, node, time, event, incident_id, action_id)""",
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.node_health_incidents_mv TO {db}.node_health AS "
            + NODE_HEALTH_FROM_INCIDENTS,
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.node_health_actions_mv TO {db}.node_health AS "
            + NODE_HEALTH_FROM_ACTIONS,
            """CREATE TABLE IF NOT EXISTS {db}.incident_facts (
            cluster LowCardinality(String), incident_id String, revision UInt32, job_id String,
            attempt UInt32, status LowCardinality(String), category LowCardinality(String),
            root_rule LowCardinality(String), root_code Nullable(Int32), root_summary String,
            culprit_node String, culprit_gpu String, isolate Array(String), restartable UInt8,
            confidence Float32, job_nodes Array(String), job_size UInt32,
            first_signal_time DateTime64(3, 'UTC'), opened_at DateTime64(3, 'UTC'),
            updated_at DateTime64(3, 'UTC'), day Date, detect_s Float64
        ) ENGINE = ReplacingMergeTree(revision)
        ORDER BY (cluster, incident_id)""",
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.incident_facts_mv TO {db}.incident_facts AS "
            + INCIDENT_FACTS_SELECT,
            """CREATE TABLE IF NOT EXISTS {db}.signals_daily (
            day Date, node LowCardinality(String), category LowCardinality(String),
            rule LowCardinality(String), role LowCardinality(String),
            signals AggregateFunction(uniqExact, String),
            last_seen SimpleAggregateFunction(max, DateTime64(3, 'UTC'))
        ) ENGINE = AggregatingMergeTree
        ORDER BY (day, node, category, rule, role)""",
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.signals_daily_mv TO {db}.signals_daily AS "
            + SIGNALS_DAILY_SELECT,
            """CREATE TABLE IF NOT EXISTS {db}.action_outcomes_daily (
            cluster LowCardinality(String), day Date, kind LowCardinality(String),
            status LowCardinality(String), actions AggregateFunction(uniqExact, String)
        ) ENGINE = AggregatingMergeTree
        ORDER BY (cluster, day, kind, status)""",
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.action_outcomes_daily_mv "
            "TO {db}.action_outcomes_daily AS " + ACTION_OUTCOMES_SELECT,
            """CREATE TABLE IF NOT EXISTS {db}.mode_changes (
            change_id String, time DateTime64(3, 'UTC'), scope String, cluster LowCardinality(String),
            partition LowCardinality(String), category LowCardinality(String), mode LowCardinality(String),
            actor LowCardinality(String), reason String
        ) ENGINE = ReplacingMergeTree
        ORDER BY (scope, time, change_id)""",
            "ALTER TABLE {db}.dead_letters MODIFY TTL toDateTime(time) + INTERVAL 30 DAY",
            # Backfill the rollups from what version 1 stored (the views only see new inserts).
            "INSERT INTO {db}.incident_facts " + INCIDENT_FACTS_SELECT,
            "INSERT INTO {db}.node_health " + NODE_HEALTH_FROM_INCIDENTS,
            "INSERT INTO {db}.node_health " + NODE_HEALTH_FROM_ACTIONS,
            "INSERT INTO {db}.signals_daily " + SIGNALS_DAILY_SELECT,
            "INSERT INTO {db}.action_outcomes_daily " + ACTION_OUTCOMES_SELECT,
            *ROLLUP_VIEWS,
        ],
    ),
    (
        3,
        [
            # What each collector could reach, so a verdict can be read next to its evidence's coverage.
            """CREATE TABLE IF NOT EXISTS {db}.collector_reports (
            collector LowCardinality(String), host LowCardinality(String), time DateTime64(3, 'UTC'),
            started DateTime64(3, 'UTC'), final UInt8, broker_reachable UInt8,
            producer_mode LowCardinality(String), spool_depth UInt64, spool_bytes UInt64,
            unreachable Array(String), unmatched Array(String), reached String, counts String
        ) ENGINE = ReplacingMergeTree
        ORDER BY (host, collector, time)
        TTL toDateTime(time) + INTERVAL 30 DAY""",
            # The node-health detector's score over time (1 healthy … 0 degrading), per node.
            """CREATE TABLE IF NOT EXISTS {db}.node_health_scores (
            cluster LowCardinality(String), node LowCardinality(String), time DateTime64(3, 'UTC'),
            score Float32, degrading UInt8, worst_gpu String, events UInt32, components String
        ) ENGINE = ReplacingMergeTree
        ORDER BY (cluster, node, time)
        TTL toDateTime(time) + INTERVAL 180 DAY""",
        ],
    ),
    (
        4,
        [
            # Provisional revisions (streams/correlate/correlator.py): stored, marked, and kept out of
            # node health. Rows written before this version were all final.
            "ALTER TABLE {db}.incidents ADD COLUMN IF NOT EXISTS provisional UInt8 DEFAULT 0",
            "ALTER TABLE {db}.incident_facts ADD COLUMN IF NOT EXISTS provisional UInt8 DEFAULT 0",
            "DROP VIEW IF EXISTS {db}.incident_facts_mv",
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.incident_facts_mv TO {db}.incident_facts AS "
            + INCIDENT_FACTS_SELECT_V4,
            "DROP VIEW IF EXISTS {db}.node_health_incidents_mv",
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.node_health_incidents_mv TO {db}.node_health AS "
            + NODE_HEALTH_FROM_FINAL_INCIDENTS,
        ],
    ),
]

LATEST_VERSION = max(v for v, _ in MIGRATIONS)


def get_client(dsn: str) -> Any:
    """A clickhouse-connect client for ``chdb:///abs/path`` (embedded) or ``http(s)://`` (server).

    chdb allows one process per data path: the process that sinks owns the store (``sickbay serve``
    runs the sink and the API in that one process). Threads may share the returned client.
    """
    import clickhouse_connect

    if dsn.startswith("chdb://"):
        Path(dsn.removeprefix("chdb://")).mkdir(parents=True, exist_ok=True)
        return clickhouse_connect.get_client(dsn=dsn)
    # No HTTP session: a session serialises queries, and the API and the sink query from several threads.
    return clickhouse_connect.get_client(dsn=dsn, autogenerate_session_id=False)


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
    return LATEST_VERSION
