"""``gpuwatch daemon``: migrate, start the scheduler, serve HTTP until told to stop."""

from __future__ import annotations

import logging

import sqlalchemy as sa
import uvicorn

from gpuwatch import gc_tuning
from gpuwatch.clock import utcnow
from gpuwatch.config import ConfigError, Settings
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


def serve(settings: Settings, log_level: str = "INFO") -> None:
    if settings.daemon.workers > 1:
        _serve_workers(settings, log_level)
        return
    engine = prepare_database(settings)
    app, scheduler = _started_app(settings, engine)
    log.info(
        "daemon listening", extra={"listen": settings.daemon.listen, "db": engine.url.render_as_string()}
    )
    try:
        _run_uvicorn(settings, app)
    finally:
        scheduler.shutdown(wait=False)
        engine.dispose()


def _started_app(settings: Settings, engine):  # type: ignore[no-untyped-def]
    """One daemon process's app with its scheduler running and the collector settled."""
    app = create_app(settings, engine)
    scheduler = build_scheduler(settings, app.state.store)
    scheduler.start()
    gc_tuning.settle(gc_tuning.DAEMON_THRESHOLDS)
    return app, scheduler


def _run_uvicorn(settings: Settings, app, **options) -> None:  # type: ignore[no-untyped-def]
    """Serve ``app`` (an app, or an import string with ``factory=True``) on ``daemon.listen``."""
    uvicorn.run(
        app,
        host=settings.daemon.host,
        port=settings.daemon.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=10,
        **_protocol_options(settings),
        **options,
    )


def _protocol_options(settings: Settings) -> dict[str, str]:
    """uvicorn's HTTP parser and event loop (``daemon.http_parser``, ``daemon.event_loop``).

    httptools and uvloop are C: per request they cost a fraction of h11 and asyncio's loop
    (``bench/ingest.py --compare-http``), which matters at thousands of agents.
    """
    return {"http": settings.daemon.http_parser, "loop": settings.daemon.event_loop}


#: names the file the parent wrote its settings to, for ``worker_app`` in each worker
_WORKER_SETTINGS_ENV = "GPUWATCH_DAEMON_WORKER_SETTINGS"


def _serve_workers(settings: Settings, log_level: str) -> None:
    """``daemon.workers`` processes behind one listening socket (uvicorn's supervisor).

    The parent migrates once, then hands each worker the resolved settings through a file
    only its user can read (they may hold SMTP or Slack secrets, so not the environment).
    Each worker is a whole daemon — ingest, writer threads, scheduler — exactly like the
    replicas of ``docs/scaling.md``: ingest is stateless and one scheduler leads by the
    PostgreSQL advisory lock. SQLite has one writer, so it refuses more than one worker.
    """
    import json
    import os
    import tempfile

    if sa.engine.make_url(settings.database.url).get_backend_name() != "postgresql":
        raise ConfigError("daemon.workers > 1 needs PostgreSQL (SQLite has one writer); set it to 1")
    prepare_database(settings).dispose()
    fd, path = tempfile.mkstemp(prefix="gpuwatch-daemon-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as out:  # mkstemp: mode 0600
            json.dump({"settings": settings.model_dump(mode="json"), "log_level": log_level}, out)
        os.environ[_WORKER_SETTINGS_ENV] = path
        log.info(
            "daemon listening", extra={"listen": settings.daemon.listen, "workers": settings.daemon.workers}
        )
        _run_uvicorn(
            settings, "gpuwatch.daemon.server:worker_app", factory=True, workers=settings.daemon.workers
        )
    finally:
        os.unlink(path)


def worker_app():  # type: ignore[no-untyped-def]
    """One worker's app (uvicorn calls this in each worker process)."""
    import json
    import os

    from gpuwatch.logs import setup_logging

    with open(os.environ[_WORKER_SETTINGS_ENV]) as f:
        handed = json.load(f)
    setup_logging(handed["log_level"], json_lines=True)
    settings = Settings.model_validate(handed["settings"])
    engine = create_engine(settings.database.url, echo=settings.database.echo)  # the parent migrated
    app, _ = _started_app(settings, engine)
    log.info("daemon worker ready")  # JSON log lines carry the pid
    return app


class BackgroundServer:
    """The daemon's app served from a thread, for ``gpuwatch demo`` and ``validate``.

    Production runs :func:`serve` in its own process; this is the same app and scheduler.
    """

    def __init__(self, settings: Settings, engine=None, clock=None, schedule: bool = True) -> None:  # type: ignore[no-untyped-def]
        """``clock`` (default: the real one) is the scheduled jobs' now; ``schedule=False``
        builds the scheduler without starting it: the caller runs its jobs (a virtual clock)."""
        import threading

        self.engine = engine or prepare_database(settings)
        self.app = create_app(settings, self.engine)
        self.scheduler = build_scheduler(settings, self.app.state.store, clock or utcnow)
        self.schedule = schedule
        config = uvicorn.Config(
            self.app,
            host=settings.daemon.host,
            port=settings.daemon.port,
            log_config=None,
            access_log=False,
            **_protocol_options(settings),
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, name="gpuwatch-daemon", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> BackgroundServer:
        import time

        if self.schedule:
            self.scheduler.start()
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("daemon did not start (port in use?)")
            time.sleep(0.02)
        return self

    def start_scheduler(self) -> None:
        """Start the scheduled jobs of a server built with ``schedule=False`` (on its clock)."""
        if not self.schedule:
            self.schedule = True
            self.scheduler.start()

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        if self.schedule:
            self.scheduler.shutdown(wait=False)
