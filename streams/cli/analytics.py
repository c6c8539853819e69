"""``sickbay serve``, ``sickbay api`` and ``sickbay report``: the operator surface from the command line.

Mounted on the main CLI by :func:`mount`. Reports read the store directly, or a
running API with ``--api URL`` (in embedded mode ``sickbay serve`` holds the
store, and chdb lets no second process open it).
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

import typer
from pydantic import TypeAdapter

from streams.cli.errors import fail as _fail
from streams.settings import Settings

report_app = typer.Typer(
    no_args_is_help=True,
    help="Canned fleet questions answered from ClickHouse, as terminal tables (or --format json).",
)
T = TypeVar("T")

ApiOption = Annotated[
    str | None,
    typer.Option(
        "--api", help="read from a running sickbay API (e.g. http://127.0.0.1:8088) instead of the store"
    ),
]
FormatOption = Annotated[str, typer.Option("--format", help="table or json")]
LogFormat = Annotated[str, typer.Option("--log-format", help="text or json (one JSON object per line)")]


def mount(app: typer.Typer) -> None:
    """Add ``serve``, ``api`` and ``report`` to the main ``sickbay`` app."""
    app.add_typer(report_app, name="report")
    app.command("serve")(serve)
    app.command("api")(api)


# -- serving -----------------------------------------------------------------------------------------


def _api_config(s: Settings) -> Any:
    from connectors.api.app import ApiConfig
    from connectors.api.settings import ApiSettings

    a = ApiSettings()
    cfg = ApiConfig(
        cluster=s.cluster, default_mode=s.mode, topics=s.topics, token=a.token, read_token=a.read_token
    )
    return a, cfg


def serve(
    host: Annotated[
        str | None, typer.Option(help="listen address (default SICKBAY_API_HOST or 127.0.0.1)")
    ] = None,
    port: Annotated[int | None, typer.Option(help="port (default SICKBAY_API_PORT or 8088)")] = None,
    batch_size: Annotated[int, typer.Option(help="rows per insert")] = 20_000,
    log_format: LogFormat = "text",
) -> None:
    """The sink and the API (with the console and /metrics) in one process: the embedded store's owner."""
    from connectors.api import logs
    from connectors.api.publisher import KafkaPublisher
    from connectors.api.serve import SinkThread, StoreLocked, open_store, run_server
    from connectors.sinks.sink import run_sink

    s = Settings()
    logs.configure(s.log_level, log_format)
    a, cfg = _api_config(s)
    try:
        client, store = open_store(s.clickhouse_dsn, s.clickhouse_database)
    except StoreLocked as exc:
        _fail(str(exc))

    def sink(stop: Any) -> None:
        run_sink(
            s.kafka_bootstrap,
            s.clickhouse_dsn,
            s.clickhouse_database,
            s.topics,
            group_id=f"{s.topic_prefix}-sink",
            batch_size=batch_size,
            stop=stop,
            client=client,
        )

    _register_lag(s)
    try:
        code = run_server(
            store,
            KafkaPublisher(s.kafka_bootstrap),
            cfg,
            host=host or a.host,
            port=port or a.port,
            sink=SinkThread(sink),
            log_level=s.log_level,
        )
    finally:
        client.close()
    raise typer.Exit(code)


def _register_lag(s: Settings) -> None:
    """Serve every sickbay consumer group's lag on /metrics (asked of the broker at scrape time)."""
    from prometheus_client import REGISTRY

    from connectors.lag import GroupLagCollector, sickbay_groups

    cat = s.topics
    names = {
        k: getattr(cat, k).name
        for k in ("raw_logs", "signals_node", "signals_job", "incidents", "actions", "audit")
    }
    REGISTRY.register(GroupLagCollector(s.kafka_bootstrap, sickbay_groups(s.topic_prefix, s.app_id, names)))


def api(
    host: Annotated[
        str | None, typer.Option(help="listen address (default SICKBAY_API_HOST or 127.0.0.1)")
    ] = None,
    port: Annotated[int | None, typer.Option(help="port (default SICKBAY_API_PORT or 8088)")] = None,
    no_kafka: Annotated[bool, typer.Option("--no-kafka", help="read-only: mutations answer 503")] = False,
    log_format: LogFormat = "text",
) -> None:
    """The API (and console) alone: with a ClickHouse server, or over an embedded store no sink holds."""
    from connectors.api import logs
    from connectors.api.publisher import KafkaPublisher, MemoryPublisher, Publisher
    from connectors.api.serve import StoreLocked, open_store, run_server

    s = Settings()
    logs.configure(s.log_level, log_format)
    a, cfg = _api_config(s)
    try:
        client, store = open_store(s.clickhouse_dsn, s.clickhouse_database)
    except StoreLocked as exc:
        _fail(str(exc))
    publisher: Publisher = MemoryPublisher(fail=True) if no_kafka else KafkaPublisher(s.kafka_bootstrap)
    if not no_kafka:
        _register_lag(s)
    try:
        code = run_server(
            store, publisher, cfg, host=host or a.host, port=port or a.port, log_level=s.log_level
        )
    finally:
        client.close()
    raise typer.Exit(code)


# -- reports -----------------------------------------------------------------------------------------


class _Source:
    """The store, or a running API's JSON (same models either way)."""

    def __init__(self, api_url: str | None) -> None:
        self.api_url = api_url.rstrip("/") if api_url else None
        self._store: Any = None
        self._client: Any = None

    def __enter__(self) -> _Source:
        if self.api_url is None:
            from connectors.api.serve import StoreLocked, open_store

            s = Settings()
            try:
                self._client, self._store = open_store(s.clickhouse_dsn, s.clickhouse_database)
            except StoreLocked as exc:
                _fail(f"{exc}\nOr ask the running API: sickbay report ... --api http://127.0.0.1:8088")
        return self

    def __exit__(self, *_: object) -> None:
        if self._client is not None:
            self._client.close()

    def get(self, path: str, params: dict[str, Any], model: Any, from_store: Callable[[Any], T]) -> T:
        if self._store is not None:
            return from_store(self._store)
        from connectors.api.settings import ApiSettings

        url = f"{self.api_url}/api/v1{path}?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310 - http(s) URL
        token = ApiSettings().read_token or ApiSettings().token
        if token is not None:
            request.add_header("Authorization", f"Bearer {token.get_secret_value()}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - operator-given URL
                body = response.read()
        except urllib.error.HTTPError as exc:
            _fail(f"{url}: {exc.code} {exc.read().decode(errors='replace')[:500]}")
        except urllib.error.URLError as exc:
            _fail(f"{url}: {exc.reason}")
        result: T = TypeAdapter(model).validate_json(body)
        return result


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An aligned plain-text table (numbers right-aligned)."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    numeric = [
        all(isinstance(r[i], int | float) or r[i] is None for r in rows) and rows for i in range(len(headers))
    ]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    for r in cells:
        out.append(
            "  ".join(
                (v.rjust(w) if numeric[i] else v.ljust(w))
                for i, (v, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
    return "\n".join(out)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if value % 1 else f"{value:,.0f}"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if hasattr(value, "isoformat"):
        return str(value.isoformat()).replace("+00:00", "Z")
    return str(value)


def _json(items: Any) -> None:
    from schemas import codec

    data = (
        [i.model_dump(mode="json") for i in items]
        if isinstance(items, list)
        else items.model_dump(mode="json")
    )
    typer.echo(codec.dumps(data).decode())


def _check_format(fmt: str) -> None:
    if fmt not in ("table", "json"):
        _fail(f"--format must be table or json, not {fmt!r}")


@report_app.command("top-nodes")
def top_nodes(
    limit: Annotated[int, typer.Option(min=1, max=1000, help="how many nodes")] = 10,
    fmt: FormatOption = "table",
    api_url: ApiOption = None,
) -> None:
    """The nodes most often named as culprit, with MTBF and GPU-hours lost."""
    from connectors.api import models as m

    _check_format(fmt)
    with _Source(api_url) as src:
        if src.api_url:
            rows = src.get("/fleet", {"days": 3650}, m.FleetSummary, lambda s: s.fleet()).top_nodes[:limit]
        else:
            rows = src.get("", {}, list[m.TopNode], lambda s: s.top_nodes(limit))
    if fmt == "json":
        return _json(rows)
    typer.echo(
        table(
            [
                "node",
                "cluster",
                "incidents",
                "categories",
                "last incident",
                "MTBF h",
                "GPU-h lost",
                "last root cause",
            ],
            [
                [
                    r.node,
                    r.cluster,
                    r.incidents,
                    r.categories,
                    r.last_incident,
                    r.mtbf_h,
                    r.gpu_hours_lost,
                    r.last_root_cause,
                ]
                for r in rows
            ],
        )
    )
    return None


@report_app.command("failure-mix")
def failure_mix(fmt: FormatOption = "table", api_url: ApiOption = None) -> None:
    """Incidents per verdict category, and per GPU model and driver."""
    from connectors.api import models as m

    _check_format(fmt)
    with _Source(api_url) as src:
        fleet = src.get("/fleet", {"days": 3650}, m.FleetSummary, lambda s: s.fleet(3650))
    if fmt == "json":
        return _json(fleet)
    total = sum(r.count for r in fleet.failure_mix) or 1
    typer.echo(
        table(
            ["category", "incidents", "share %", ""],
            [
                [r.key, r.count, round(100.0 * r.count / total, 1), "#" * round(40 * r.count / total)]
                for r in fleet.failure_mix
            ],
        )
    )
    typer.echo("")
    typer.echo(
        table(
            ["GPU model", "driver", "incidents", "nodes"],
            [[r.gpu_model, r.driver_version, r.incidents, r.nodes] for r in fleet.by_gpu],
        )
    )
    return None


@report_app.command("mttd")
def mttd(fmt: FormatOption = "table", api_url: ApiOption = None) -> None:
    """Time to detect (first signal → incident) and to act (→ first action result): p50/p90/p99/max."""
    from connectors.api import models as m

    _check_format(fmt)
    with _Source(api_url) as src:
        fleet = src.get("/fleet", {"days": 3650}, m.FleetSummary, lambda s: s.fleet(3650))
    lat = fleet.latency
    if fmt == "json":
        return _json(lat)
    typer.echo(
        table(
            ["measure", "incidents", "p50 s", "p90 s", "p99 s", "max s"],
            [
                [
                    "MTTD (detect)",
                    lat.detect_s.count,
                    lat.detect_s.p50,
                    lat.detect_s.p90,
                    lat.detect_s.p99,
                    lat.detect_s.max,
                ],
                ["MTTA (act)", lat.act_s.count, lat.act_s.p50, lat.act_s.p90, lat.act_s.p99, lat.act_s.max],
            ],
        )
    )
    typer.echo(f"\nGPU-hours lost (all incidents): {fleet.gpu_hours_lost:,.3f}")
    return None


@report_app.command("shadow")
def shadow(
    horizon_h: Annotated[float, typer.Option(help="how long after a proposal to look")] = 24.0,
    fmt: FormatOption = "table",
    api_url: ApiOption = None,
) -> None:
    """Observe mode's record: what sickbay would have done, and what happened instead."""
    from connectors.api import models as m

    _check_format(fmt)
    if not 0 < horizon_h <= 24 * 90:
        _fail("--horizon-h must be in (0, 2160]")
    with _Source(api_url) as src:
        report = src.get("/shadow", {"horizon_h": horizon_h}, m.ShadowReport, lambda s: s.shadow(horizon_h))
    if fmt == "json":
        return _json(report)
    typer.echo(
        table(
            [
                "would have",
                "category",
                "proposed",
                "node failed again",
                "scheduler restarted",
                "stayed down",
                "median delay s",
            ],
            [
                [
                    r.kind,
                    r.category,
                    r.proposed,
                    r.failed_again,
                    r.restarted_by_scheduler,
                    r.stayed_down,
                    r.median_restart_delay_s,
                ]
                for r in report.rows
            ],
        )
    )
    return None


@report_app.command("job")
def job(
    job_id: Annotated[str, typer.Argument(help="the scheduler's job id")],
    fmt: FormatOption = "table",
    api_url: ApiOption = None,
) -> None:
    """One job's recovery history: attempts, incidents, actions, GPU-hours lost."""
    import re

    from connectors.api import models as m

    _check_format(fmt)
    if not re.match(m.NAME_PATTERN, job_id):
        _fail(f"not a job id: {job_id!r}")
    with _Source(api_url) as src:
        detail = src.get(
            f"/jobs/{urllib.parse.quote(job_id)}", {}, m.JobDetail | None, lambda s: s.job(job_id)
        )
    if detail is None:
        _fail(f"no job {job_id} in the store", 1)
        return None
    if fmt == "json":
        return _json(detail)
    typer.echo(
        f"job {detail.job_id} on {detail.cluster}: {len(detail.attempts)} attempt(s), "
        f"{detail.gpu_hours_lost:,.3f} GPU-hours lost\n"
    )
    typer.echo(
        table(
            ["attempt", "started", "ended", "hours", "nodes", "incidents"],
            [
                [
                    a.attempt,
                    a.started_at,
                    a.ended_at,
                    a.run_h,
                    a.nodes,
                    "; ".join(
                        f"{i.category.value}: {i.root_summary} ({i.culprit_node or '-'})" for i in a.incidents
                    ),
                ]
                for a in detail.attempts
            ],
        )
    )
    if detail.actions:
        typer.echo("")
        typer.echo(
            table(
                ["action", "target", "mode", "result", "at", "detail"],
                [
                    [
                        a.kind.value,
                        a.node or a.job_id,
                        "dry run" if a.dry_run else a.mode.value,
                        a.status.value if a.status else "pending",
                        a.finished_at or a.created_at,
                        a.detail,
                    ]
                    for a in detail.actions
                ],
            )
        )
    return None
