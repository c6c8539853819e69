"""Run the API, alone or with the ClickHouse sink in the same process (``sickbay serve``).

Who owns the store
    Embedded chdb allows one process per data path (a second process cannot
    even open it read-only). So in embedded mode ``sickbay serve`` is *the*
    process of the store: it runs the sink's consume → validate → insert loop in
    a thread and the API (uvicorn) in the main thread, sharing one client
    (chdb serialises the calls of threads on one connection). With a ClickHouse
    server (``CLICKHOUSE_URL``) the roles can be separate processes:
    ``sickbay sink clickhouse`` (any number, one consumer group) and
    ``sickbay api`` (any number, behind a load balancer).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI

from connectors.api.app import ApiConfig, create_app
from connectors.api.publisher import Publisher
from connectors.api.store import Store
from connectors.sinks.clickhouse_schema import get_client, migrate

log = logging.getLogger("sickbay.serve")


class StoreLocked(RuntimeError):
    """The embedded store is held by another process."""


def open_store(dsn: str, database: str) -> tuple[Any, Store]:
    """Open (and migrate) the store; a clear error when another process holds an embedded one."""
    try:
        client = get_client(dsn)
    except Exception as exc:
        text = str(exc)
        if dsn.startswith("chdb://") and ("lock" in text.lower() or "EmbeddedServer" in text):
            raise StoreLocked(
                f"the embedded store {dsn.removeprefix('chdb://')} is in use by another process (a running "
                "`sickbay sink clickhouse` or `sickbay serve`?). chdb allows one process per store: run "
                "`sickbay serve` (sink + API in one process) instead, or use a ClickHouse server "
                "(CLICKHOUSE_URL)."
            ) from exc
        raise
    migrate(client, database)
    return client, Store(client, database)


@dataclass
class SinkThread:
    """The sink loop in a thread, stopped by an event; its death makes the API unready."""

    target: Callable[[threading.Event], Any]
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    thread: threading.Thread | None = None
    on_exit: Callable[[], None] | None = None

    def start(self) -> None:
        def run() -> None:
            try:
                self.target(self.stop)
            except BaseException as exc:
                self.error = exc
                log.exception("the sink stopped")
            finally:
                if self.on_exit is not None and not self.stop.is_set():
                    self.on_exit()

        self.thread = threading.Thread(target=run, name="sickbay-sink", daemon=True)
        self.thread.start()

    def ready(self) -> tuple[bool, str]:
        if self.thread is not None and self.thread.is_alive():
            return True, "sink consuming"
        return False, f"sink stopped: {self.error!r}" if self.error else "sink not running"

    def close(self, timeout_s: float = 60.0) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout_s)


def run_server(
    store: Store,
    publisher: Publisher,
    config: ApiConfig,
    *,
    host: str,
    port: int,
    sink: SinkThread | None = None,
    log_level: str = "info",
) -> int:
    """Serve until SIGINT/SIGTERM (uvicorn's handlers); the sink is stopped (flush, commit) at shutdown.

    uvicorn re-raises the signal once it has shut down, so the process then ends with the signal's
    status (143 for SIGTERM in a shell), as a supervisor expects.
    """
    import uvicorn

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        if sink is not None:  # before uvicorn re-raises the signal: the sink flushes and commits first
            await asyncio.to_thread(sink.close)

    ready = sink.ready if sink else None
    app = create_app(store, publisher, config, extra_ready=ready, lifespan=lifespan)
    # log_config=None: uvicorn logs through our handlers (text or JSON)
    cfg = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False, log_config=None)
    server = uvicorn.Server(cfg)
    if sink is not None:
        sink.on_exit = lambda: setattr(server, "should_exit", True)  # no silent half-process
        sink.start()
    try:
        server.run()
    finally:
        if sink is not None:
            sink.close()
    return 1 if sink is not None and sink.error is not None else 0
