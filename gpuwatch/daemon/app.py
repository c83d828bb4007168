"""The daemon's HTTP application: ingest, health, node listing and its own metrics."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuwatch import __version__
from gpuwatch.config import Settings
from gpuwatch.daemon.admission import Admission
from gpuwatch.daemon.ingest import build_router, openapi_components
from gpuwatch.daemon.ingest_log import IngestLog
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.daemon.writer import IngestWriter
from gpuwatch.views.nodes import node_summaries


class DatabaseCheck:
    """Whether the database answers a ``SELECT 1``, asked at most once per ``ttl_s``.

    ``/healthz`` is what agents probe while they back off from an outage, a thousand of them
    every few seconds: one check serves them all, and while one is running (a database that
    does not answer can take its connect timeout) the others get the last verdict at once
    instead of each holding a thread.
    """

    def __init__(
        self, engine: sa.Engine, ttl_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._engine = engine
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self._error: str | None = None

    def __call__(self) -> str | None:
        """None when the database answers, else the name of the error it gave (the first call
        waits for an answer; later ones never wait for another's)."""
        never = self._checked_at == float("-inf")
        if not self._stale() or not self._lock.acquire(blocking=never):
            return self._error
        try:
            if self._stale():  # not refreshed by the check this call waited for
                self._error = self._ask()
                self._checked_at = self._clock()
            return self._error
        finally:
            self._lock.release()

    def _stale(self) -> bool:
        return self._clock() - self._checked_at >= self._ttl_s

    def _ask(self) -> str | None:
        try:
            with self._engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        except sa.exc.SQLAlchemyError as exc:
            return type(exc).__name__
        return None


def _lifespan(writer: IngestWriter, ingest_log: IngestLog):  # type: ignore[no-untyped-def]
    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):  # type: ignore[no-untyped-def]
        writer.start()
        summaries = asyncio.create_task(ingest_log.summarize_forever())
        try:
            yield
        finally:
            summaries.cancel()
            writer.stop()
            ingest_log.flush()  # the last partial minute

    return lifespan


def create_app(settings: Settings, engine: sa.Engine) -> FastAPI:
    app = FastAPI(
        title="gpuwatch daemon",
        version=__version__,
        description="Ingest of agent batches (wire format v1) and read-only views.",
    )
    store = BatchStore(engine)
    # SQLite has one writer at a time anyway; PostgreSQL takes several
    threads = settings.daemon.ingest_writers if engine.dialect.name == "postgresql" else 1
    writer = IngestWriter(store, threads=threads)
    app.state.engine = engine
    app.state.store = store
    app.state.writer = writer
    ingest_log = IngestLog(each_request=settings.daemon.log_each_request)
    app.state.ingest_log = ingest_log
    admission = Admission(settings.daemon.max_inflight_bytes, body_timeout_s=settings.daemon.body_timeout_s)
    app.state.admission = admission
    app.router.lifespan_context = _lifespan(writer, ingest_log)
    app.include_router(
        build_router(
            engine,
            writer,
            settings.daemon.max_batch_bytes,
            settings.daemon.max_future_skew_s,
            settings.daemon.max_bundle_batches,
            ingest_log,
            admission,
        )
    )

    from gpuwatch.web.routes import build_web_router

    app.include_router(build_web_router(settings, engine))

    database_check = DatabaseCheck(engine)

    @app.get("/healthz", tags=["ops"])
    def healthz() -> JSONResponse:
        """200 when the daemon can take batches (its database answers), 503 otherwise: for load
        balancers, systemd, and agents probing while they back off. No token; at most one
        database round trip a second however many ask."""
        error = database_check()
        if error is not None:
            return JSONResponse({"status": "unavailable", "db": error}, status_code=503)
        return JSONResponse({"status": "ok", "db": "ok", "version": __version__})

    @app.get("/api/v1/nodes", tags=["read"])
    def list_nodes() -> list[dict[str, Any]]:
        """Every registered node with its last contact and sample counts."""
        return [row.as_json() for row in node_summaries(engine)]

    @app.get("/metrics", tags=["ops"], response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest().decode(), media_type=CONTENT_TYPE_LATEST)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            schema.setdefault("components", {}).setdefault("schemas", {}).update(openapi_components())
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
