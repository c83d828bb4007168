"""``gpuwatch daemon``: migrate, start the scheduler, serve HTTP until told to stop."""

from __future__ import annotations

import logging

import uvicorn

from gpuwatch import gc_tuning
from gpuwatch.config import Settings
from gpuwatch.daemon.app import create_app
from gpuwatch.daemon.scheduler import build_scheduler
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine

log = logging.getLogger(__name__)


class SchemaOutOfDate(RuntimeError):
    """The database schema is older than this code and auto_migrate is off."""


def prepare_database(settings: Settings):  # type: ignore[no-untyped-def]
    engine = create_engine(settings.database.url, echo=settings.database.echo)
    if settings.daemon.auto_migrate:
        migrate.upgrade(engine)
    elif not migrate.is_up_to_date(engine):
        raise SchemaOutOfDate("database schema is not at head; run: gpuwatch db upgrade")
    return engine


def serve(settings: Settings) -> None:
    engine = prepare_database(settings)
    app = create_app(settings, engine)
    scheduler = build_scheduler(settings, app.state.store)
    scheduler.start()
    gc_tuning.settle()
    log.info(
        "daemon listening", extra={"listen": settings.daemon.listen, "db": engine.url.render_as_string()}
    )
    try:
        uvicorn.run(
            app,
            host=settings.daemon.host,
            port=settings.daemon.port,
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=10,
        )
    finally:
        scheduler.shutdown(wait=False)
        engine.dispose()


class BackgroundServer:
    """The daemon's app served from a thread, for ``gpuwatch demo`` and ``validate``.

    Production runs :func:`serve` in its own process; this is the same app and scheduler.
    """

    def __init__(self, settings: Settings, engine=None) -> None:  # type: ignore[no-untyped-def]
        import threading

        self.engine = engine or prepare_database(settings)
        self.app = create_app(settings, self.engine)
        self.scheduler = build_scheduler(settings, self.app.state.store)
        config = uvicorn.Config(
            self.app, host=settings.daemon.host, port=settings.daemon.port, log_config=None, access_log=False
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, name="gpuwatch-daemon", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> BackgroundServer:
        import time

        self.scheduler.start()
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("daemon did not start (port in use?)")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self.scheduler.shutdown(wait=False)
