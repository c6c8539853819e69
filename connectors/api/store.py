"""Read side of the ClickHouse store, shared by the REST API and ``sickbay report``.

Every value a caller supplies is a bound server-side parameter (``{name:Type}``);
the only thing formatted into SQL text is the database name, an identifier
validated against :data:`DATABASE_NAME` when the store is opened. Reads use
``FINAL`` (or the version-2 views, which do), so replayed rows never count twice.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from connectors.api import models as m
from connectors.sinks.clickhouse_schema import DATABASE_NAME, LATEST_VERSION
from schemas import codec
from schemas.incidents import Evidence, Symptom


class StoreError(RuntimeError):
    """The store could not answer (unreachable, or not migrated)."""


def _utc(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    raise TypeError(f"not a datetime: {value!r}")


def _json(text: str, default: Any) -> Any:
    if not text:
        return default
    try:
        return codec.loads(text)
    except ValueError:
        return default


def _none(value: str) -> str | None:
    return value or None


@dataclass(frozen=True)
class IncidentFilter:
    category: str | None = None
    node: str | None = None
    job_id: str | None = None
    status: str | None = None
    cluster: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 100
    offset: int = 0


INCIDENT_SUMMARY_COLUMNS = (
    "incident_id, revision, cluster, job_id, attempt, status, category, root_rule, root_summary, root_code, "
    "culprit_node, culprit_gpu, isolate, restartable, confidence, length(job_nodes) AS job_size, "
    "first_signal_time, opened_at, updated_at, provisional"
)

ACTION_VIEW_SQL = """
SELECT a.action_id, a.idempotency_key, a.kind, a.mode, a.dry_run, a.cluster, a.incident_id,
       a.incident_revision, a.job_id, a.node, a.exclude_nodes, a.reason, a.created_at,
       r.last_status AS status, r.last_detail AS detail, r.last_at AS finished_at, r.last_commands AS commands
FROM (SELECT * FROM {db}.actions FINAL WHERE %(where)s) AS a
LEFT JOIN (SELECT action_id, argMax(status, finished_at) AS last_status,
                  argMax(detail, finished_at) AS last_detail, max(finished_at) AS last_at,
                  argMax(commands, finished_at) AS last_commands
           FROM {db}.action_results FINAL GROUP BY action_id) AS r
    ON r.action_id = a.action_id
ORDER BY a.created_at, a.action_id
SETTINGS join_use_nulls = 1
"""


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Store:
    """Queries over one sickbay database. Thread-safe: a lock serialises use of the shared client."""

    def __init__(self, client: Any, database: str) -> None:
        if not DATABASE_NAME.match(database):
            raise ValueError(f"invalid ClickHouse database name {database!r}")
        self.client = client
        self.db = database
        self._lock = threading.Lock()

    # -- plumbing ---------------------------------------------------------------------------------

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run one query (``{db}`` is the database; values only as ``{name:Type}`` parameters)."""
        text = sql.replace("{db}", self.db)
        with self._lock:
            try:
                result = self.client.query(text, parameters=params or {})
            except Exception as exc:  # the driver raises its own hierarchy; the API answers 503
                raise StoreError(str(exc).splitlines()[0][:500]) from exc
        names = list(result.column_names)
        return [dict(zip(names, row, strict=True)) for row in result.result_rows]

    def schema_version(self) -> int:
        rows = self.rows("SELECT max(version) AS v FROM {db}.schema_migrations")
        return int(rows[0]["v"]) if rows else 0

    def ready(self) -> tuple[bool, str]:
        try:
            version = self.schema_version()
        except StoreError as exc:
            return False, f"store unreachable: {exc}"
        if version < LATEST_VERSION:
            return False, f"schema version {version}, expected {LATEST_VERSION} (run the sink to migrate)"
        return True, f"schema version {version}"

    # -- incidents --------------------------------------------------------------------------------

    def incidents(self, f: IncidentFilter) -> list[m.IncidentSummary]:
        where: list[str] = ["1"]
        params: dict[str, Any] = {"limit": f.limit, "offset": f.offset}
        if f.category:
            where.append("category = {category:String}")
            params["category"] = f.category
        if f.status:
            where.append("status = {status:String}")
            params["status"] = f.status
        if f.cluster:
            where.append("cluster = {cluster:String}")
            params["cluster"] = f.cluster
        if f.job_id:
            where.append("job_id = {job:String}")
            params["job"] = f.job_id
        if f.node:
            where.append("(culprit_node = {node:String} OR has(job_nodes, {node:String}))")
            params["node"] = f.node
        if f.since:
            where.append("first_signal_time >= {since:DateTime64(3, 'UTC')}")
            params["since"] = f.since.astimezone(UTC).replace(tzinfo=None)
        if f.until:
            where.append("first_signal_time < {until:DateTime64(3, 'UTC')}")
            params["until"] = f.until.astimezone(UTC).replace(tzinfo=None)
        # fixed fragments only; every value is a bound parameter
        sql = (
            f"SELECT {INCIDENT_SUMMARY_COLUMNS} FROM {{db}}.incident_facts FINAL "  # noqa: S608
            f"WHERE {' AND '.join(where)} "
            "ORDER BY first_signal_time DESC, incident_id LIMIT {limit:UInt32} OFFSET {offset:UInt32}"
        )
        return [self._summary(r) for r in self.rows(sql, params)]

    @staticmethod
    def _summary(r: dict[str, Any]) -> m.IncidentSummary:
        return m.IncidentSummary(
            incident_id=r["incident_id"],
            revision=r["revision"],
            cluster=r["cluster"],
            job_id=r["job_id"],
            attempt=r["attempt"],
            status=r["status"],
            category=r["category"],
            root_rule=r["root_rule"],
            root_summary=r["root_summary"],
            root_code=r["root_code"],
            culprit_node=_none(r["culprit_node"]),
            culprit_gpu=_none(r["culprit_gpu"]),
            isolate=list(r["isolate"]),
            restartable=bool(r["restartable"]),
            confidence=round(float(r["confidence"]), 4),
            job_size=int(r["job_size"]),
            first_signal_time=r["first_signal_time"],
            opened_at=r["opened_at"],
            updated_at=r["updated_at"],
            provisional=bool(r["provisional"]),
        )

    def incident(self, incident_id: str) -> m.IncidentDetail | None:
        found = self.rows(
            f"SELECT {INCIDENT_SUMMARY_COLUMNS}, root_node, root_gpu, root_text, supporting, evidence, "  # noqa: S608
            "coverage, job_nodes FROM {db}.incidents FINAL WHERE incident_id = {id:String} LIMIT 1",
            {"id": incident_id},
        )
        if not found:
            return None
        r = found[0]
        lat = self.rows(
            "SELECT l.detect_s AS detect_s, l.act_s AS act_s, g.gpu_hours_lost AS gpu_hours_lost, "
            "g.recovered_by AS recovered_by FROM {db}.incident_latency AS l "
            "LEFT JOIN {db}.gpu_hours_lost AS g ON g.incident_id = l.incident_id "
            "WHERE l.incident_id = {id:String} SETTINGS join_use_nulls = 1",
            {"id": incident_id},
        )
        none = {"detect_s": None, "act_s": None, "gpu_hours_lost": None, "recovered_by": None}
        latency = lat[0] if lat else none
        summary = self._summary(r)
        return m.IncidentDetail(
            **summary.model_dump(),
            root_cause=m.RootView(
                rule=r["root_rule"],
                summary=r["root_summary"],
                node=_none(r["root_node"]),
                gpu=_none(r["root_gpu"]),
                code=r["root_code"],
                text=r["root_text"],
            ),
            supporting=[Symptom.model_validate(s) for s in _json(r["supporting"], [])],
            evidence=[Evidence.model_validate(e) for e in _json(r["evidence"], [])],
            coverage=list(r["coverage"]),
            job_nodes=list(r["job_nodes"]),
            latency=m.Latency(**latency),
            actions=self.actions(incident_id=incident_id),
            audit=self.audit(incident_id=incident_id),
            collectors=self.collectors_at(list(r["job_nodes"]), _utc(r["first_signal_time"]) or _EPOCH),
        )

    def collectors_at(self, hosts: list[str], at: datetime, window_h: float = 6.0) -> list[m.CollectorView]:
        """Each collector's last report before ``at`` (within the window), on these hosts or any
        collector that is not per-node (scheduler, exporter, API watchers): the verdict's coverage."""
        rows = self.rows(
            "SELECT collector, host, argMax(time, time) AS t, argMax(broker_reachable, time) AS broker, "
            "argMax(producer_mode, time) AS mode, argMax(spool_depth, time) AS spool, "
            "argMax(unreachable, time) AS unreachable, argMax(unmatched, time) AS unmatched "
            "FROM {db}.collector_reports "
            "WHERE time <= {at:DateTime64(3, 'UTC')} + INTERVAL 1 MINUTE "
            "AND time >= {at:DateTime64(3, 'UTC')} - toIntervalSecond({window_s:UInt32}) "
            "AND (host IN {hosts:Array(String)} OR collector NOT IN ('files', 'nvml')) "
            "GROUP BY collector, host ORDER BY collector, host",
            {
                "at": at.astimezone(UTC).replace(tzinfo=None),
                "window_s": int(window_h * 3600),
                "hosts": hosts,
            },
        )
        return [
            m.CollectorView(
                collector=r["collector"],
                host=r["host"],
                time=_utc(r["t"]) or _EPOCH,
                broker_reachable=bool(r["broker"]),
                producer_mode=r["mode"],
                spool_depth=r["spool"],
                unreachable=list(r["unreachable"]),
                unmatched=list(r["unmatched"]),
            )
            for r in rows
        ]

    # -- actions and audit ------------------------------------------------------------------------

    def actions(
        self,
        *,
        incident_id: str | None = None,
        node: str | None = None,
        job_id: str | None = None,
        kind: str | None = None,
        action_id: str | None = None,
        limit: int = 500,
    ) -> list[m.ActionView]:
        where: list[str] = ["1"]
        params: dict[str, Any] = {}
        for column, value in (
            ("incident_id", incident_id),
            ("node", node),
            ("job_id", job_id),
            ("kind", kind),
            ("action_id", action_id),
        ):
            if value is not None:
                where.append(f"{column} = {{{column}:String}}")
                params[column] = value
        sql = ACTION_VIEW_SQL % {"where": " AND ".join(where)}
        out = [self._action(r) for r in self.rows(sql, params)]
        return out[-limit:]

    @staticmethod
    def _action(r: dict[str, Any]) -> m.ActionView:
        return m.ActionView(
            action_id=r["action_id"],
            idempotency_key=r["idempotency_key"],
            kind=r["kind"],
            mode=r["mode"],
            dry_run=bool(r["dry_run"]),
            cluster=r["cluster"],
            incident_id=r["incident_id"],
            incident_revision=r["incident_revision"],
            job_id=_none(r["job_id"]),
            node=_none(r["node"]),
            exclude_nodes=list(r["exclude_nodes"]),
            reason=r["reason"],
            created_at=r["created_at"],
            status=r["status"],
            detail=r["detail"],
            finished_at=r["finished_at"],
            commands=_json(r["commands"] or "", []),
        )

    def audit(
        self,
        *,
        incident_id: str | None = None,
        action_id: str | None = None,
        event: str | None = None,
        since: datetime | None = None,
        limit: int = 500,
    ) -> list[m.AuditView]:
        where: list[str] = ["1"]
        params: dict[str, Any] = {"limit": limit}
        for column, value in (("incident_id", incident_id), ("action_id", action_id), ("event", event)):
            if value is not None:
                where.append(f"{column} = {{{column}:String}}")
                params[column] = value
        if since is not None:
            where.append("time >= {since:DateTime64(3, 'UTC')}")
            params["since"] = since.astimezone(UTC).replace(tzinfo=None)
        rows = self.rows(
            f"SELECT * FROM (SELECT * FROM {{db}}.audit FINAL WHERE {' AND '.join(where)} "  # noqa: S608
            "ORDER BY time DESC, audit_id LIMIT {limit:UInt32}) ORDER BY time, audit_id",
            params,
        )
        return [
            m.AuditView(
                audit_id=r["audit_id"],
                time=r["time"],
                actor=r["actor"],
                event=r["event"],
                cluster=r["cluster"],
                incident_id=_none(r["incident_id"]),
                action_id=_none(r["action_id"]),
                mode=_none(r["mode"]),
                details=_json(r["details"], {}),
            )
            for r in rows
        ]

    # -- jobs -------------------------------------------------------------------------------------

    def jobs(self, limit: int = 100, offset: int = 0) -> list[m.JobSummary]:
        rows = self.rows(
            """SELECT r.cluster AS cluster, r.job_id AS job_id, count() AS attempts,
                   max(r.job_size) AS job_size, min(r.started_at) AS first_start,
                   max(r.started_at) AS last_start,
                   any(i.incidents) AS incidents, any(i.gpu_hours) AS gpu_hours_lost
            FROM {db}.job_attempt_runs AS r
            LEFT JOIN (SELECT cluster, job_id, count() AS incidents, sum(gpu_hours_lost) AS gpu_hours
                       FROM {db}.gpu_hours_lost GROUP BY cluster, job_id) AS i
                ON i.cluster = r.cluster AND i.job_id = r.job_id
            GROUP BY cluster, job_id
            ORDER BY last_start DESC, job_id LIMIT {limit:UInt32} OFFSET {offset:UInt32}""",
            {"limit": limit, "offset": offset},
        )
        return [
            m.JobSummary(
                cluster=r["cluster"],
                job_id=r["job_id"],
                attempts=r["attempts"],
                job_size=r["job_size"],
                first_start=r["first_start"],
                last_start=r["last_start"],
                incidents=int(r["incidents"] or 0),
                gpu_hours_lost=round(float(r["gpu_hours_lost"] or 0.0), 3),
            )
            for r in rows
        ]

    def job(self, job_id: str) -> m.JobDetail | None:
        attempts = self.rows(
            "SELECT * FROM {db}.job_attempt_runs WHERE job_id = {job:String} ORDER BY cluster, attempt",
            {"job": job_id},
        )
        incidents = self.incidents(IncidentFilter(job_id=job_id, limit=1000))
        if not attempts and not incidents:
            return None
        lost = self.rows(
            "SELECT sum(gpu_hours_lost) AS h FROM {db}.gpu_hours_lost WHERE job_id = {job:String}",
            {"job": job_id},
        )
        numbers = sorted({int(a["attempt"]) for a in attempts} | {i.attempt for i in incidents})
        by_attempt = {int(a["attempt"]): a for a in attempts}
        views = []
        for n in numbers:
            a = by_attempt.get(n, {})
            views.append(
                m.AttemptView(
                    attempt=n,
                    nodes=list(a.get("nodes", [])),
                    started_at=a.get("started_at"),
                    ended_at=a.get("ended_at"),
                    run_h=round(float(a.get("run_h", 0.0)), 3),
                    incidents=sorted(
                        (i for i in incidents if i.attempt == n), key=lambda i: i.first_signal_time
                    ),
                )
            )
        cluster = attempts[0]["cluster"] if attempts else incidents[0].cluster
        return m.JobDetail(
            cluster=cluster,
            job_id=job_id,
            attempts=views,
            actions=self.actions(job_id=job_id),
            gpu_hours_lost=round(float(lost[0]["h"] or 0.0), 3) if lost else 0.0,
        )

    # -- nodes ------------------------------------------------------------------------------------

    def _node_states(self) -> dict[tuple[str, str], tuple[m.NodeState, datetime | None, str | None]]:
        """Isolation state per node, from the latest drain/resume intents and their results."""
        rows = self.rows(
            """SELECT a.cluster AS cluster, a.node AS node, a.kind AS kind, a.dry_run AS dry_run,
                   a.action_id AS action_id, a.created_at AS created_at, r.last_status AS status,
                   r.last_at AS finished_at
            FROM (SELECT * FROM {db}.actions FINAL
                  WHERE kind IN ('drain_node', 'resume_node') AND node != '') AS a
            LEFT JOIN (SELECT action_id, argMax(status, finished_at) AS last_status,
                              max(finished_at) AS last_at
                       FROM {db}.action_results FINAL GROUP BY action_id) AS r ON r.action_id = a.action_id
            ORDER BY a.created_at, a.action_id
            SETTINGS join_use_nulls = 1"""
        )
        states: dict[tuple[str, str], tuple[m.NodeState, datetime | None, str | None]] = {}
        for r in rows:
            key = (r["cluster"], r["node"])
            current = states.get(key, ("ok", None, None))
            status, at = r["status"], _utc(r["finished_at"]) or _utc(r["created_at"])
            if r["dry_run"]:
                if r["kind"] == "drain_node" and current[0] in ("ok", "advised", "restore_failed"):
                    states[key] = ("advised", at, r["action_id"])
                continue
            ok = status in ("succeeded", "converged")
            failed = status in ("failed", "rejected")
            if r["kind"] == "drain_node":
                state: m.NodeState = "isolated" if ok else "isolation_failed" if failed else "isolating"
            else:
                state = "ok" if ok else "restore_failed" if failed else "restoring"
            states[key] = (state, at, r["action_id"])
        return states

    def nodes(self, cluster: str | None = None) -> list[m.NodeSummary]:
        rows = self.rows(
            """SELECT k.cluster AS cluster, k.node AS node, inv.partition AS partition,
                   inv.gpu_model AS gpu_model,
                   inv.driver_version AS driver_version, inv.gpus AS gpus, t.incidents AS incidents,
                   t.last_incident AS last_incident, t.last_root_cause AS last_root_cause
            FROM (SELECT DISTINCT cluster, node FROM (
                    SELECT cluster, node FROM {db}.node_inventory FINAL
                    UNION ALL SELECT cluster, toString(node) FROM {db}.job_assignments
                    UNION ALL SELECT cluster, node FROM {db}.node_health)) AS k
            LEFT JOIN (SELECT cluster, node, partition, gpu_model, driver_version, gpus
                       FROM {db}.node_inventory FINAL) AS inv ON inv.cluster = k.cluster AND inv.node = k.node
            LEFT JOIN {db}.top_culprits AS t ON t.cluster = k.cluster AND t.node = k.node
            WHERE {cluster:String} = '' OR k.cluster = {cluster:String}
            ORDER BY cluster, node
            SETTINGS join_use_nulls = 1""",
            {"cluster": cluster or ""},
        )
        states = self._node_states()
        out = []
        for r in rows:
            state, since, action = states.get((r["cluster"], r["node"]), ("ok", None, None))
            out.append(
                m.NodeSummary(
                    cluster=r["cluster"],
                    node=r["node"],
                    partition=r["partition"] or None,
                    gpu_model=r["gpu_model"] or None,
                    driver_version=r["driver_version"] or None,
                    gpus=r["gpus"],
                    state=state,
                    state_since=since,
                    incidents=int(r["incidents"] or 0),
                    last_incident_at=r["last_incident"],
                    last_root_cause=r["last_root_cause"],
                    last_action_id=action,
                )
            )
        return out

    def node(self, node: str) -> m.NodeDetail | None:
        found = [n for n in self.nodes() if n.node == node]
        if not found:
            return None
        health = self.rows(
            "SELECT time, event, incident_id, action_id, category, detail FROM {db}.node_health FINAL "
            "WHERE node = {node:String} ORDER BY time DESC LIMIT 200",
            {"node": node},
        )
        return m.NodeDetail(
            **found[0].model_dump(),
            health=[
                m.HealthEvent(
                    time=h["time"],
                    event=h["event"],
                    incident_id=_none(h["incident_id"]),
                    action_id=_none(h["action_id"]),
                    category=_none(h["category"]),
                    detail=h["detail"],
                )
                for h in health
            ],
            recent_incidents=self.incidents(IncidentFilter(node=node, limit=50)),
            actions=self.actions(node=node),
        )

    # -- modes ------------------------------------------------------------------------------------

    def modes(self) -> list[m.ModeView]:
        rows = self.rows(
            "SELECT scope, cluster, partition, category, mode, actor, reason, time "
            "FROM {db}.mode_changes FINAL ORDER BY scope, time DESC, change_id DESC LIMIT 1 BY scope"
        )
        return [
            m.ModeView(
                scope=r["scope"],
                cluster=r["cluster"],
                partition=r["partition"] or None,
                category=r["category"] or None,
                mode=r["mode"],
                actor=r["actor"],
                reason=r["reason"],
                time=r["time"],
                source="operator",
            )
            for r in rows
        ]

    # -- fleet analytics (the console's charts and `sickbay report`) ------------------------------

    # -- shadow statistics (observe mode) -----------------------------------------------------------

    RESTART_RULES = ("slurm.job_requeued", "scheduler.slurm_requeue_node_failure", "slurm.job_allocated")

    def shadow(self, horizon_h: float = 24.0) -> m.ShadowReport:
        """What observe mode proposed vs what happened afterwards, per action kind and category.

        A proposed drain is vindicated when its node is the culprit of a later incident within the
        horizon; a proposed restart is compared with the scheduler's own requeue/allocation of the
        same job (delay = the time sickbay would have saved) or with the job staying down.
        """
        proposals = self.rows(
            "SELECT a.action_id AS action_id, a.kind AS kind, a.job_id AS job_id, a.node AS node, "
            "a.incident_id AS incident_id, a.created_at AS created_at, i.category AS category "
            "FROM (SELECT * FROM {db}.actions FINAL "
            "WHERE dry_run = 1 AND kind IN ('drain_node', 'requeue_job')) AS a "
            "LEFT JOIN (SELECT incident_id, category FROM {db}.incidents FINAL) AS i "
            "ON a.incident_id = i.incident_id"
        )
        nodes = sorted({p["node"] for p in proposals if p["kind"] == "drain_node" and p["node"]})
        jobs = sorted({p["job_id"] for p in proposals if p["kind"] == "requeue_job" and p["job_id"]})
        later_faults: dict[str, list[tuple[datetime, str]]] = {}
        if nodes:
            for r in self.rows(
                "SELECT culprit_node AS node, first_signal_time AS t, incident_id FROM {db}.incidents FINAL "
                "WHERE culprit_node IN {nodes:Array(String)}",
                {"nodes": nodes},
            ):
                later_faults.setdefault(r["node"], []).append((_utc(r["t"]) or _EPOCH, r["incident_id"]))
        restarts: dict[str, list[datetime]] = {}
        if jobs:
            for r in self.rows(
                "SELECT job_id, event_time AS t FROM {db}.signals "
                "WHERE job_id IN {jobs:Array(String)} AND rule IN {rules:Array(String)}",
                {"jobs": jobs, "rules": list(self.RESTART_RULES)},
            ):
                restarts.setdefault(r["job_id"], []).append(_utc(r["t"]) or _EPOCH)
        horizon = timedelta(hours=horizon_h)
        groups: dict[tuple[str, str], dict[str, Any]] = {}
        for p in proposals:
            at = _utc(p["created_at"]) or _EPOCH
            g = groups.setdefault(
                (p["kind"], p["category"] or "unknown"),
                {"proposed": 0, "failed_again": 0, "restarted": 0, "down": 0, "delays": []},
            )
            g["proposed"] += 1
            if p["kind"] == "drain_node":
                if any(
                    at < t <= at + horizon and inc != p["incident_id"]
                    for t, inc in later_faults.get(p["node"], [])
                ):
                    g["failed_again"] += 1
                continue
            after = sorted(
                t for t in restarts.get(p["job_id"], []) if at - timedelta(minutes=10) <= t <= at + horizon
            )
            if after:
                g["restarted"] += 1
                g["delays"].append(max(0.0, (after[0] - at).total_seconds()))
            else:
                g["down"] += 1
        out = []
        for (kind, category), g in sorted(groups.items()):
            delays = sorted(g["delays"])
            out.append(
                m.ShadowRow(
                    kind=kind,
                    category=category,
                    proposed=g["proposed"],
                    failed_again=g["failed_again"],
                    restarted_by_scheduler=g["restarted"],
                    stayed_down=g["down"],
                    median_restart_delay_s=round(delays[len(delays) // 2], 3) if delays else None,
                )
            )
        return m.ShadowReport(horizon_h=horizon_h, rows=out)

    def failures_daily(self, days: int = 30) -> list[m.DailyRow]:
        rows = self.rows(
            "SELECT toString(d) AS day, category, sum(incidents) AS incidents "
            "FROM (SELECT day AS d, category, incidents FROM {db}.failures_category_daily) "
            "WHERE d >= (SELECT max(day) FROM {db}.failures_category_daily) - {days:UInt32} "
            "GROUP BY d, category ORDER BY d, category",
            {"days": days},
        )
        return [m.DailyRow(day=r["day"], category=r["category"], incidents=r["incidents"]) for r in rows]

    def failure_mix(self, since: datetime | None = None) -> list[m.CountRow]:
        rows = self.rows(
            "SELECT category AS key, count() AS count FROM {db}.incident_facts FINAL "
            "WHERE first_signal_time >= {since:DateTime64(3, 'UTC')} GROUP BY key ORDER BY count DESC, key",
            {"since": (since or datetime(1970, 1, 1, tzinfo=UTC)).astimezone(UTC).replace(tzinfo=None)},
        )
        return [m.CountRow(key=r["key"], count=r["count"]) for r in rows]

    def top_nodes(self, limit: int = 10) -> list[m.TopNode]:
        rows = self.rows(
            """SELECT t.cluster AS cluster, t.node AS node, t.incidents AS incidents,
                   t.categories AS categories,
                   t.last_incident AS last_incident, t.last_root_cause AS last_root_cause,
                   ifNull(g.h, 0) AS gpu_hours_lost, b.mtbf_h AS mtbf_h
            FROM {db}.top_culprits AS t
            LEFT JOIN (SELECT cluster, culprit_node AS node, sum(gpu_hours_lost) AS h FROM {db}.gpu_hours_lost
                       GROUP BY cluster, node) AS g ON g.cluster = t.cluster AND g.node = t.node
            LEFT JOIN {db}.mtbf_node AS b ON b.cluster = t.cluster AND b.node = t.node
            ORDER BY incidents DESC, last_incident DESC, node LIMIT {limit:UInt32}
            SETTINGS join_use_nulls = 1""",
            {"limit": limit},
        )
        return [
            m.TopNode(
                cluster=r["cluster"],
                node=r["node"],
                incidents=r["incidents"],
                categories=sorted(r["categories"]),
                last_incident=r["last_incident"],
                last_root_cause=r["last_root_cause"],
                gpu_hours_lost=round(float(r["gpu_hours_lost"]), 3),
                mtbf_h=None if r["mtbf_h"] is None else round(float(r["mtbf_h"]), 2),
            )
            for r in rows
        ]

    def by_gpu(self) -> list[m.GpuModelRow]:
        rows = self.rows(
            "SELECT gpu_model, driver_version, sum(incidents) AS incidents, sum(nodes) AS nodes "
            "FROM {db}.failures_gpu_driver GROUP BY gpu_model, driver_version "
            "ORDER BY incidents DESC, gpu_model"
        )
        return [m.GpuModelRow(**r) for r in rows]

    def latency(self) -> m.LatencyStats:
        r = self.rows(
            """SELECT count() AS n, quantiles(0.5, 0.9, 0.99)(detect_s) AS d, max(detect_s) AS dmax,
                   countIf(act_s IS NOT NULL) AS na,
                   quantilesIf(0.5, 0.9, 0.99)(act_s, act_s IS NOT NULL) AS a,
                   maxIf(act_s, act_s IS NOT NULL) AS amax
            FROM {db}.incident_latency"""
        )[0]

        def q(n: int, qs: Sequence[float], top: float | None) -> m.Quantiles:
            if not n:
                return m.Quantiles(count=0, p50=None, p90=None, p99=None, max=None)
            p50, p90, p99 = (round(float(x), 3) for x in qs)
            high = None if top is None else round(float(top), 3)
            return m.Quantiles(count=n, p50=p50, p90=p90, p99=p99, max=high)

        return m.LatencyStats(detect_s=q(r["n"], r["d"], r["dmax"]), act_s=q(r["na"], r["a"], r["amax"]))

    def gpu_hours_total(self) -> float:
        r = self.rows("SELECT sum(gpu_hours_lost) AS h FROM {db}.gpu_hours_lost")
        return round(float(r[0]["h"] or 0.0), 3)

    def action_outcomes(self) -> list[m.CountRow]:
        rows = self.rows(
            "SELECT concat(kind, ':', status) AS key, toUInt64(sum(n)) AS count FROM "
            "(SELECT kind, status, uniqExactMerge(actions) AS n FROM {db}.action_outcomes_daily "
            "GROUP BY kind, status) "
            "GROUP BY key ORDER BY key"
        )
        return [m.CountRow(key=r["key"], count=r["count"]) for r in rows]

    def fleet(self, days: int = 30) -> m.FleetSummary:
        return m.FleetSummary(
            failures_daily=self.failures_daily(days),
            failure_mix=self.failure_mix(),
            top_nodes=self.top_nodes(10),
            by_gpu=self.by_gpu(),
            latency=self.latency(),
            gpu_hours_lost=self.gpu_hours_total(),
            action_outcomes=self.action_outcomes(),
        )
