"""The REST API and the console it serves.

Reads come from the ClickHouse store (:class:`~connectors.api.store.Store`).
Mutations never touch the cluster: they publish intents to Kafka (an
:class:`~schemas.actions.Action` on the actions topic for isolate / restore /
approve, a :class:`~schemas.actions.ModeChange` on the modes topic) with an
:class:`~schemas.audit.AuditRecord` each, and answer ``202 Accepted``; the
adapters and the decide step carry them out, and the sink records what happened.

Auth: ``SICKBAY_API_TOKEN`` (bearer) is required for every mutation (none are
accepted while it is unset). Reads are open unless ``SICKBAY_API_READ_TOKEN`` is
set; then a read needs either token. The read token can never mutate.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, SecretStr
from starlette.exceptions import HTTPException as StarletteHTTPException

from connectors.api import metrics
from connectors.api import models as m
from connectors.api.publisher import Publisher, PublishError
from connectors.api.store import IncidentFilter, Store, StoreError
from connectors.sinks import metrics as _sink_metrics  # noqa: F401 - /metrics shows the sink's series too
from schemas import codec
from schemas.actions import Action, ActionKind, Mode, ModeChange, ModeScope
from schemas.audit import AuditRecord
from schemas.base import utcnow
from schemas.incidents import Category, IncidentStatus
from schemas.topics import TopicCatalog

STATIC = Path(__file__).resolve().parent / "static"
API = "/api/v1"
ACTOR_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@\-]{0,63}$"
CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    422: "invalid_request",
    503: "unavailable",
}

NodeName = Annotated[str, PathParam(pattern=m.NAME_PATTERN, description="a node, as the scheduler names it")]
JobId = Annotated[str, PathParam(pattern=m.NAME_PATTERN)]
Id = Annotated[str, PathParam(pattern=m.NAME_PATTERN)]
QName = Annotated[str | None, Query(pattern=m.NAME_PATTERN)]
Limit = Annotated[int, Query(ge=1, le=1000)]


class ApiConfig(BaseModel):
    """What the API needs besides the store and the publisher (the CLI builds it from Settings)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    cluster: str
    default_mode: Mode
    topics: TopicCatalog
    token: SecretStr | None = None
    read_token: SecretStr | None = None


def _stable_id(prefix: str, *parts: str) -> str:
    return f"{prefix}-" + hashlib.blake2b("|".join(parts).encode(), digest_size=8).hexdigest()


BEARER = HTTPBearer(auto_error=False)


def _error(status: int, detail: Any, headers: dict[str, str] | None = None) -> JSONResponse:
    body = m.ErrorBody(error=CODES.get(status, "error"), detail=detail)
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


class Access:
    """Bearer-token checks and the caller's name, as FastAPI dependencies."""

    def __init__(self, config: ApiConfig) -> None:
        self.config = config

    @staticmethod
    def _matches(given: str, expected: SecretStr | None) -> bool:
        if expected is None:
            return False
        return secrets.compare_digest(given.encode(), expected.get_secret_value().encode())

    def can_read(self, cred: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]) -> None:
        cfg = self.config
        if cfg.read_token is None:
            return
        if cred is not None and (
            self._matches(cred.credentials, cfg.read_token) or self._matches(cred.credentials, cfg.token)
        ):
            return
        raise HTTPException(401, "a bearer token is required to read", {"WWW-Authenticate": "Bearer"})

    def can_write(self, cred: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]) -> None:
        cfg = self.config
        if cfg.token is None:
            raise HTTPException(403, "mutations are disabled: set SICKBAY_API_TOKEN to enable them")
        if cred is None:
            raise HTTPException(401, "a bearer token is required", {"WWW-Authenticate": "Bearer"})
        if self._matches(cred.credentials, cfg.token):
            return
        if self._matches(cred.credentials, cfg.read_token):
            raise HTTPException(403, "the read-only token cannot change anything")
        raise HTTPException(401, "invalid bearer token", {"WWW-Authenticate": "Bearer"})


def actor(
    x_sickbay_actor: Annotated[str | None, Header(pattern=ACTOR_PATTERN, description="who asks")] = None,
) -> str:
    return f"api:{x_sickbay_actor or 'operator'}"


Actor = Annotated[str, Depends(actor)]
IdempotencyKey = Annotated[
    str | None,
    Header(pattern=r"^[A-Za-z0-9_.:\-]{1,64}$", description="repeat-safe: one key, one action id"),
]
ERRORS_WRITE: dict[int | str, dict[str, Any]] = {
    403: {"model": m.ErrorBody},
    404: {"model": m.ErrorBody},
    409: {"model": m.ErrorBody},
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": m.ErrorBody}}


def _install_errors_and_metrics(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, exc.detail, getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        return _error(422, fields)

    @app.exception_handler(StoreError)
    async def store_down(_request: Request, exc: StoreError) -> JSONResponse:
        return _error(503, f"store unavailable: {exc}")

    @app.exception_handler(PublishError)
    async def kafka_down(_request: Request, exc: PublishError) -> JSONResponse:
        return _error(503, f"could not publish the intent (nothing was changed): {exc}")

    @app.middleware("http")
    async def measure(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        path = getattr(request.scope.get("route"), "path", "unmatched")
        metrics.REQUESTS.labels(request.method, path, str(response.status_code)).inc()
        metrics.LATENCY.labels(path).observe(time.perf_counter() - started)
        return response


def _health_routes(
    store: Store, publisher: Publisher, extra_ready: Callable[[], tuple[bool, str]] | None
) -> APIRouter:
    r = APIRouter(tags=["health"])

    @r.get("/healthz", summary="Liveness: the process answers")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @r.get("/readyz", summary="Readiness: store migrated, Kafka reachable, sink alive (serve)")
    def readyz() -> JSONResponse:
        checks = {"store": store.ready(), "kafka": publisher.ready()}
        if extra_ready is not None:
            checks["sink"] = extra_ready()
        ok = all(c[0] for c in checks.values())
        body = {"ready": ok, "checks": {k: {"ok": v[0], "detail": v[1]} for k, v in checks.items()}}
        return JSONResponse(body, status_code=200 if ok else 503)

    @r.get("/metrics", summary="Prometheus metrics of this process (sink and API)")
    def prometheus() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return r


def _read_routes(store: Store, config: ApiConfig, access: Access) -> APIRouter:
    r = APIRouter(prefix=API, dependencies=[Depends(access.can_read)])

    @r.get("/incidents", tags=["incidents"], summary="Incidents, newest first, filtered")
    def list_incidents(
        category: Category | None = None,
        node: QName = None,
        job: QName = None,
        status: IncidentStatus | None = None,
        cluster: QName = None,
        since: Annotated[datetime | None, Query(description="first signal at or after (ISO 8601)")] = None,
        until: Annotated[datetime | None, Query(description="first signal before (ISO 8601)")] = None,
        limit: Limit = 100,
        offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    ) -> m.IncidentPage:
        for name, value in (("since", since), ("until", until)):
            if value is not None and value.tzinfo is None:
                raise HTTPException(422, f"{name} needs a timezone (e.g. 2026-11-29T03:00:00Z)")
        if since and until and since >= until:
            raise HTTPException(422, "since must be before until")
        f = IncidentFilter(
            category=category.value if category else None,
            node=node,
            job_id=job,
            status=status.value if status else None,
            cluster=cluster,
            since=since,
            until=until,
            limit=limit,
            offset=offset,
        )
        return m.IncidentPage(items=store.incidents(f), limit=limit, offset=offset)

    @r.get(
        "/incidents/{incident_id}",
        tags=["incidents"],
        summary="One incident: root cause, cascade, evidence, actions, audit",
        responses=NOT_FOUND,
    )
    def get_incident(incident_id: Id) -> m.IncidentDetail:
        found = store.incident(incident_id)
        if found is None:
            raise HTTPException(404, f"no incident {incident_id}")
        return found

    @r.get("/jobs", tags=["jobs"], summary="Jobs seen, latest attempt first")
    def list_jobs(limit: Limit = 100, offset: Annotated[int, Query(ge=0)] = 0) -> list[m.JobSummary]:
        return store.jobs(limit, offset)

    @r.get(
        "/jobs/{job_id}",
        tags=["jobs"],
        summary="A job's attempts, incidents and recovery actions",
        responses=NOT_FOUND,
    )
    def get_job(job_id: JobId) -> m.JobDetail:
        found = store.job(job_id)
        if found is None:
            raise HTTPException(404, f"no job {job_id}")
        return found

    @r.get("/nodes", tags=["nodes"], summary="Nodes with isolation state")
    def list_nodes(cluster: QName = None) -> list[m.NodeSummary]:
        return store.nodes(cluster)

    @r.get(
        "/nodes/{node}",
        tags=["nodes"],
        summary="A node: inventory, state, health events, incidents, actions",
        responses=NOT_FOUND,
    )
    def get_node(node: NodeName) -> m.NodeDetail:
        found = store.node(node)
        if found is None:
            raise HTTPException(404, f"no node {node} in the store")
        return found

    @r.get("/actions", tags=["actions"], summary="Actions with their latest result")
    def list_actions(
        incident: QName = None,
        node: QName = None,
        job: QName = None,
        kind: ActionKind | None = None,
        limit: Limit = 200,
    ) -> list[m.ActionView]:
        return store.actions(
            incident_id=incident, node=node, job_id=job, kind=kind.value if kind else None, limit=limit
        )

    @r.get("/audit", tags=["actions"], summary="The audit trail, oldest first")
    def list_audit(
        incident: QName = None,
        action: QName = None,
        event: Annotated[str | None, Query(pattern=r"^[a-z_.]{1,64}$")] = None,
        since: datetime | None = None,
        limit: Limit = 500,
    ) -> list[m.AuditView]:
        return store.audit(incident_id=incident, action_id=action, event=event, since=since, limit=limit)

    @r.get("/modes", tags=["modes"], summary="Observe/act mode per scope (the settings default first)")
    def list_modes() -> list[m.ModeView]:
        modes = store.modes()
        default_scope = ModeScope(cluster=config.cluster).key()
        if all(v.scope != default_scope for v in modes):
            default = m.ModeView(
                scope=default_scope,
                cluster=config.cluster,
                partition=None,
                category=None,
                mode=config.default_mode,
                actor="settings",
                reason="SICKBAY_MODE",
                time=None,
                source="settings",
            )
            modes.insert(0, default)
        return modes

    @r.get("/shadow", tags=["modes"], summary="Observe mode: proposed actions vs what happened afterwards")
    def shadow(horizon_h: Annotated[float, Query(gt=0, le=24 * 90)] = 24.0) -> m.ShadowReport:
        return store.shadow(horizon_h)

    @r.get("/fleet", tags=["fleet"], summary="Fleet rollups for the charts")
    def fleet(days: Annotated[int, Query(ge=1, le=3650)] = 30) -> m.FleetSummary:
        return store.fleet(days)

    return r


class _Intents:
    """Builds and publishes the intents behind the mutating endpoints."""

    def __init__(self, store: Store, publisher: Publisher, config: ApiConfig) -> None:
        self.store = store
        self.publisher = publisher
        self.config = config

    def action(self, action: Action, who: str, event: str, details: dict[str, Any]) -> m.Published:
        audit = AuditRecord(
            audit_id=_stable_id("aud", action.action_id, event),
            time=action.created_at,
            actor=who,
            event=event,
            cluster=action.cluster,
            incident_id=action.incident_id or None,
            action_id=action.action_id,
            mode=action.mode.value,
            details={"kind": action.kind.value, "reason": action.reason, **details},
        )
        topics = self.config.topics
        key = action.job_id or action.node or action.action_id
        self.publisher.publish(topics.actions.name, key, codec.dumps(action))
        self.publisher.publish(topics.audit.name, action.incident_id, codec.dumps(audit))
        metrics.PUBLISHED.labels(action.kind.value).inc()
        record = codec.loads(codec.dumps(action))
        return m.Published(topic=topics.actions.name, key=key, record=record, audit_id=audit.audit_id)

    def node(
        self,
        kind: ActionKind,
        node: str,
        req: m.IsolateRequest | m.RestoreRequest,
        who: str,
        idem: str | None,
    ) -> m.Published:
        cluster = req.cluster or self.config.cluster
        known = {n.node: n for n in self.store.nodes(cluster)}
        if node not in known:
            raise HTTPException(404, f"no node {node} in cluster {cluster} (sickbay has never seen it)")
        state = known[node].state
        if kind == ActionKind.DRAIN_NODE and state in ("isolated", "isolating") and not req.dry_run:
            raise HTTPException(409, f"{node} is already {state}")
        incident = req.incident_id if isinstance(req, m.IsolateRequest) and req.incident_id else ""
        key = f"{cluster}:{kind.value}:operator:{node}:{idem or uuid.uuid4().hex}"
        verb = "isolate" if kind == ActionKind.DRAIN_NODE else "restore"
        action = Action(
            action_id=_stable_id("act", key),
            idempotency_key=key,
            kind=kind,
            mode=Mode.OBSERVE if req.dry_run else Mode.ACT,
            dry_run=req.dry_run,
            cluster=cluster,
            incident_id=incident,
            incident_revision=1,
            node=node,
            reason=f"sickbay: {verb} requested by {who}: {req.reason}"[:256],
            created_at=utcnow(),
        )
        return self.action(action, who, f"operator.{verb}_requested", {"previous_state": state})

    def approve(self, action_id: str, note: str, who: str) -> m.Published:
        found = self.store.actions(action_id=action_id)
        if not found:
            raise HTTPException(404, f"no action {action_id}")
        advice = found[0]
        if not advice.dry_run:
            raise HTTPException(409, f"{action_id} is not advisory (it was published in act mode)")
        approved_id = _stable_id("apv", action_id)
        if self.store.actions(action_id=approved_id):
            raise HTTPException(409, f"{action_id} was already approved (as {approved_id})")
        action = Action(
            action_id=approved_id,
            idempotency_key=f"{advice.idempotency_key}|approved",
            kind=advice.kind,
            mode=Mode.ACT,
            dry_run=False,
            cluster=advice.cluster,
            incident_id=advice.incident_id,
            incident_revision=advice.incident_revision,
            job_id=advice.job_id,
            node=advice.node,
            exclude_nodes=advice.exclude_nodes,
            reason=advice.reason,
            created_at=utcnow(),
        )
        return self.action(action, who, "action.approved", {"approves": action_id, "note": note})

    def mode(self, req: m.ModeRequest, who: str) -> m.Published:
        cfg = self.config
        scope = ModeScope(cluster=req.cluster or cfg.cluster, partition=req.partition, category=req.category)
        now = utcnow()
        change = ModeChange(
            change_id=_stable_id("mode", scope.key(), req.mode.value, now.isoformat(), uuid.uuid4().hex),
            scope=scope,
            mode=req.mode,
            actor=who,
            reason=req.reason,
            time=now,
        )
        audit = AuditRecord(
            audit_id=_stable_id("aud", change.change_id),
            time=now,
            actor=who,
            event="mode.changed",
            cluster=scope.cluster,
            mode=req.mode.value,
            details={"scope": scope.key(), "reason": req.reason, "change_id": change.change_id},
        )
        topic = cfg.topics.control_modes.name
        self.publisher.publish(topic, scope.key(), codec.dumps(change))
        self.publisher.publish(cfg.topics.audit.name, "", codec.dumps(audit))
        metrics.PUBLISHED.labels("mode_change").inc()
        record = codec.loads(codec.dumps(change))
        return m.Published(topic=topic, key=scope.key(), record=record, audit_id=audit.audit_id)


def _write_routes(intents: _Intents, access: Access) -> APIRouter:
    r = APIRouter(prefix=API, dependencies=[Depends(access.can_write)])

    @r.post(
        "/nodes/{node}/isolate",
        tags=["nodes"],
        status_code=202,
        summary="Ask the scheduler adapter to drain a node (publishes a drain_node action)",
        responses=ERRORS_WRITE,
    )
    def isolate(
        node: NodeName, req: m.IsolateRequest, who: Actor, idempotency_key: IdempotencyKey = None
    ) -> m.Published:
        return intents.node(ActionKind.DRAIN_NODE, node, req, who, idempotency_key)

    @r.post(
        "/nodes/{node}/restore",
        tags=["nodes"],
        status_code=202,
        summary="Ask the scheduler adapter to resume a drained node (publishes a resume_node action)",
        responses=ERRORS_WRITE,
    )
    def restore(
        node: NodeName, req: m.RestoreRequest, who: Actor, idempotency_key: IdempotencyKey = None
    ) -> m.Published:
        return intents.node(ActionKind.RESUME_NODE, node, req, who, idempotency_key)

    @r.post(
        "/actions/{action_id}/approve",
        tags=["actions"],
        status_code=202,
        summary="Approve an advisory (dry-run) action: publishes the same intent in act mode",
        responses=ERRORS_WRITE,
    )
    def approve(action_id: Id, req: m.ApproveRequest, who: Actor) -> m.Published:
        return intents.approve(action_id, req.reason, who)

    @r.put(
        "/modes",
        tags=["modes"],
        status_code=202,
        summary="Switch a scope (cluster, partition, category) between observe and act",
        responses={403: {"model": m.ErrorBody}},
    )
    def set_mode(req: m.ModeRequest, who: Actor) -> m.Published:
        return intents.mode(req, who)

    return r


def _console_routes(app: FastAPI) -> None:
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/console/")

    @app.get("/console/", include_in_schema=False)
    def console() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")


def create_app(
    store: Store,
    publisher: Publisher,
    config: ApiConfig,
    *,
    extra_ready: Callable[[], tuple[bool, str]] | None = None,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None = None,
) -> FastAPI:
    """The API app. ``extra_ready``: another readiness check (``sickbay serve``: the sink thread);
    ``lifespan``: what to start and stop with the server (``sickbay serve``: stop the sink)."""
    app = FastAPI(
        lifespan=lifespan,
        title="sickbay",
        version="1.0.0",
        summary="Incidents, jobs, nodes, actions and modes of a GPU fleet, from sickbay's store",
        description=__doc__,
        docs_url="/api/docs",
        redoc_url=None,
        openapi_url="/api/openapi.json",
        responses={
            401: {"model": m.ErrorBody, "description": "missing or wrong bearer token"},
            422: {"model": m.ErrorBody, "description": "a parameter or the body did not validate"},
            503: {"model": m.ErrorBody, "description": "the store or Kafka is unavailable"},
        },
    )
    access = Access(config)
    _install_errors_and_metrics(app)
    app.include_router(_health_routes(store, publisher, extra_ready))
    app.include_router(_read_routes(store, config, access))
    app.include_router(_write_routes(_Intents(store, publisher, config), access))
    _console_routes(app)
    return app
