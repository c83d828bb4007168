"""``gpuwatch``: the one entry point for agent, daemon and admin commands."""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

import click

from gpuwatch import __version__
from gpuwatch.cli.params import MINUTES
from gpuwatch.cli.render import FORMAT_OPTION, OutputFormat, render
from gpuwatch.config import ConfigError, Settings, load_settings

log = logging.getLogger("gpuwatch.cli")


class Context:
    """Lazily loaded settings, so ``--help`` and ``wire-schema`` need no config."""

    def __init__(self, config: Path | None, db: str | None, log_level: str) -> None:
        self.config_path = config
        self.db = db
        self.log_level = log_level
        self._settings: Settings | None = None
        self._engine = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            overrides: dict[str, Any] = {}
            if self.db:
                overrides["database"] = {"url": self.db}
            try:
                self._settings = load_settings(self.config_path, **overrides)
            except ConfigError as exc:
                raise click.ClickException(str(exc)) from None
        return self._settings

    def engine(self, *, create: bool = False):  # type: ignore[no-untyped-def]
        """One engine per command, disposed when the command ends (no pooled sockets left open).

        Only a command that makes the schema (``create``) may bring a new SQLite file into being:
        a read command on a mistyped path says so instead of creating an empty database there.
        """
        from gpuwatch.sql.engine import create_engine, missing_sqlite_file

        if self._engine is None:
            url = self.settings.database.url
            missing = None if create else missing_sqlite_file(url)
            if missing is not None:
                raise click.ClickException(
                    f"no database at {missing} (check --db / GPUWATCH_DB; `gpuwatch db upgrade` creates one)"
                )
            self._engine = create_engine(url, echo=self.settings.database.echo)
            click.get_current_context().call_on_close(self._engine.dispose)
        return self._engine


pass_ctx = click.make_pass_decorator(Context)


#: how ``gpuwatch --help`` groups the commands: who runs them, and where
COMMAND_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Admin: what wastes GPUs, and why", ("jobs", "job", "report", "nodes", "processes", "alerts")),
    ("Compute node", ("agent", "spool")),
    ("Daemon host", ("daemon", "db", "token")),
    ("Tools", ("demo", "import", "validate", "workload", "wire-schema")),
)


class LazyGroup(click.Group):
    """Imports a feature module's commands only when one of them is asked for.

    ``gpuwatch agent`` runs on every compute node: it should not carry the daemon-side
    modules (SQLAlchemy, the classifier, torch for the workload) in its memory; and
    ``gpuwatch jobs`` imports the module behind ``jobs`` only, not the demo's or the
    workload's (a tenth of a second of every command's start).
    """

    _registered: set[str] = set()

    def _register(self, module: str) -> None:
        if module not in self._registered:
            import importlib

            self._registered.add(module)
            importlib.import_module(module).register(self)

    def _load(self) -> None:
        for module in dict.fromkeys(SUBCOMMAND_MODULES.values()):
            self._register(module)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None:
            module = SUBCOMMAND_MODULES.get(cmd_name)
            if module is not None:
                self._register(module)
            else:  # not a name we know: every module, so click can say what there is
                self._load()
            command = super().get_command(ctx, cmd_name)
        return command

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load()
        return super().list_commands(ctx)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """``gpuwatch --help`` lists the commands by who runs them where (:data:`COMMAND_SECTIONS`);
        a command no section names is listed under "Other", so none is ever hidden."""
        commands = {}
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                commands[name] = command
        width = formatter.width - 6 - max((len(name) for name in commands), default=0)
        listed: set[str] = set()
        for title, names in (*COMMAND_SECTIONS, ("Other", tuple(sorted(commands)))):
            rows = [
                (n, commands[n].get_short_help_str(width)) for n in names if n in commands and n not in listed
            ]
            if rows:
                listed.update(n for n, _ in rows)
                with formatter.section(title):
                    formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuwatch")
@click.option(
    "--config",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar="GPUWATCH_CONFIG",
    help="TOML config file [default: /etc/gpuwatch/gpuwatch.toml if present].",
)
@click.option("--db", envvar="GPUWATCH_DB", help="Database URL (overrides database.url).")
@click.option("--log-level", default="INFO", show_default=True, envvar="GPUWATCH_LOG_LEVEL")
@click.pass_context
def cli(ctx: click.Context, config: Path | None, db: str | None, log_level: str) -> None:
    """gpuwatch: find the GPU jobs that waste their GPUs, and say why."""
    ctx.obj = Context(config, db, log_level)


def _setup_logging(ctx: Context, *, service: bool) -> None:
    from gpuwatch.logs import setup_logging

    setup_logging(ctx.log_level, json_lines=service)


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()

    def handler(signum: int, _frame: Any) -> None:
        log.info("signal %s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


# --------------------------------------------------------------------------- daemon
@cli.command()
@pass_ctx
def daemon(ctx: Context) -> None:
    """Run the daemon: HTTP ingest, scheduled work, read API."""
    _setup_logging(ctx, service=True)
    from gpuwatch.daemon.server import serve

    try:
        serve(ctx.settings, ctx.log_level)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


# --------------------------------------------------------------------------- agent
@cli.command()
@click.option("--once", is_flag=True, help="Collect one batch, print it as JSON, send nothing.")
@click.option("--cycles", type=int, default=None, help="Stop after N sample cycles (tests, demos).")
@click.option(
    "--record",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Append raw GPU readings to FILE as JSONL (play back with gpu.backend = 'replay').",
)
@pass_ctx
def agent(ctx: Context, once: bool, cycles: int | None, record: Path | None) -> None:
    """Run the node agent: sample, spool, push to the daemon."""
    _setup_logging(ctx, service=not once)
    from gpuwatch.agent import Agent, Pusher, Spool
    from gpuwatch.collectors import build_collectors

    settings = ctx.settings
    try:
        collectors = build_collectors(settings)
        token = settings.agent.resolve_token()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if record is not None:
        from gpuwatch.collectors.gpu import GpuCollector
        from gpuwatch.collectors.recording import make_recording

        for collector in collectors:
            if isinstance(collector, GpuCollector):
                collector.backend = make_recording(collector.backend, record)
    if once:
        runner = Agent(settings, collectors, spool=None, pusher=None)
        try:
            click.echo(runner.collect_once_json())
        finally:
            runner.close()
        return
    if token is None:
        raise click.ClickException(
            "no ingest token: set agent.token_file (or GPUWATCH_AGENT__TOKEN); "
            f"create one on the daemon host with: gpuwatch token create {settings.agent.node}"
        )
    spool = Spool(settings.agent.spool_dir, settings.agent.spool_max_bytes)
    # the token source, not its value: a token file fixed after a 401 is picked up without a restart
    pusher = Pusher(
        settings.agent.daemon_url,
        settings.agent.node,
        settings.agent.resolve_token,
        settings.agent.push_timeout_s,
    )
    runner = Agent(settings, collectors, spool=spool, pusher=pusher)
    # everything alive now lives as long as the agent: keep it out of every future GC pass
    from gpuwatch import gc_tuning

    gc_tuning.settle(gc_tuning.AGENT_THRESHOLDS)
    server = None
    if settings.agent.metrics_listen:
        from gpuwatch.agent.metrics import AgentMetrics, start_metrics_server

        runner.metrics = AgentMetrics.for_collectors(collectors, agent=runner)
        server = start_metrics_server(settings.agent.metrics_listen, runner.metrics)
    stop = _stop_on_signals()
    try:
        runner.run(stop, max_cycles=cycles)
        # a clean stop sends what it can in a few seconds; the rest stays spooled for next start
        runner.drain(timeout_s=5.0)
    finally:
        if server is not None:
            server.close()
        runner.close()


# --------------------------------------------------------------------------- spool


@cli.group()
def spool() -> None:
    """The agent's on-disk spool on this node: what waits, what the daemon rejected."""


_SPOOL_DIR_OPTION = click.option(
    "--spool-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The spool directory (default: agent.spool_dir of the configuration).",
)
REJECTED_COLUMNS = [("file", "rejected batch"), ("reason", "reason")]


@spool.command("status")
@_SPOOL_DIR_OPTION
@FORMAT_OPTION
@pass_ctx
def spool_status(ctx: Context, spool_dir: Path | None, fmt: str) -> None:
    """Pending batches, drop counters and rejected batches with their reasons (works while the agent runs)."""
    from gpuwatch.agent.spool import read_status

    directory = spool_dir or ctx.settings.agent.spool_dir
    try:
        status = read_status(directory)
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    rows = [{"file": name, "reason": " ".join(reason.split())} for name, reason in status.rejected]
    if OutputFormat(fmt) is OutputFormat.JSON:
        doc = dataclasses.asdict(status) | {"directory": str(status.directory), "rejected": rows}
        click.echo(json.dumps(doc, indent=2))
        return
    seqs = f", seq {status.oldest_seq}..{status.newest_seq}" if status.pending else ""
    click.echo(
        f"spool {status.directory}: {status.pending} batch(es) pending "
        f"({status.pending_bytes:,} bytes{seqs}); "
        f"dropped when full: {status.dropped_batches_total}; {len(rows)} rejected "
        f"(deleted from rejected/ when full: {status.rejected_dropped_total}; counters as last saved)"
    )
    if rows:
        click.echo(render(rows, REJECTED_COLUMNS, OutputFormat(fmt)))


@spool.command("requeue")
@_SPOOL_DIR_OPTION
@pass_ctx
def spool_requeue(ctx: Context, spool_dir: Path | None) -> None:
    """Send rejected batches again: move them from rejected/ back to the queue (agent stopped).

    After the cause is fixed - a daemon upgraded to the agent's wire version, a database
    constraint lifted. The agent sends them before newer batches; the daemon stores each once.
    """
    from gpuwatch.agent.spool import Spool, SpoolLockedError

    directory = spool_dir or ctx.settings.agent.spool_dir
    if not Path(directory).is_dir():
        raise click.ClickException(f"no spool at {directory}")
    try:
        queue = Spool(directory, ctx.settings.agent.spool_max_bytes)
    except SpoolLockedError:
        raise click.ClickException(
            f"spool {directory} is in use by a running agent: systemctl stop gpuwatch-agent, "
            "run this again, then systemctl start gpuwatch-agent"
        ) from None
    try:
        moved, left = queue.requeue_rejected()
    finally:
        queue.close()
    note = f"; {left} left in rejected/ (the spool is full: agent.spool_max_bytes)" if left else ""
    click.echo(f"requeued {moved} rejected batch(es) in {directory}{note}")


# --------------------------------------------------------------------------- tokens
@cli.group()
def token() -> None:
    """Per-node ingest tokens."""


@token.command("create")
@click.argument("node")
@click.option(
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the token to this file (mode 0600) instead of printing it.",
)
@pass_ctx
def token_create(ctx: Context, node: str, output: Path | None) -> None:
    """Register NODE (if new) and issue it a fresh token; the old one stops working."""
    from gpuwatch.sql import migrate
    from gpuwatch.sql.nodes import create_token
    from gpuwatch.wire import Batch

    try:
        Batch.model_validate({"node": node, "agent_version": "x", "samples": []})
    except Exception:
        raise click.ClickException(f"invalid node name {node!r}") from None
    engine = ctx.engine(create=True)
    migrate.upgrade(engine)
    if output is None:
        click.echo(create_token(engine, node))
        return
    with _secret_file(output) as tmp:  # made before the token, so a bad path loses no token
        tmp.write(create_token(engine, node) + "\n")
    click.echo(f"token for {node} written to {output}")


@contextmanager
def _secret_file(path: Path) -> Iterator[TextIO]:
    """A new file of mode 0600 beside ``path`` that replaces it when the block ends without an
    error (removed otherwise). A path that is there and is no regular file (a device such as
    /dev/null, a directory) is refused: its mode is never touched."""
    import os
    import tempfile

    if path.exists() and not path.is_file():
        raise click.ClickException(f"--output {path}: not a regular file (give a file path for the token)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    except OSError as exc:
        raise click.ClickException(f"--output {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w") as out:
            yield out
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------- db
@cli.group()
def db() -> None:
    """Database schema (Alembic migrations)."""


@db.command("upgrade")
@click.argument("revision", default="head")
@pass_ctx
def db_upgrade(ctx: Context, revision: str) -> None:
    """Upgrade the schema to REVISION (default: head)."""
    from gpuwatch.sql import migrate

    engine = ctx.engine(create=True)
    migrate.upgrade(engine, revision)
    click.echo(f"database at revision {migrate.current_revision(engine)}")


@db.command("downgrade")
@click.argument("revision")
@pass_ctx
def db_downgrade(ctx: Context, revision: str) -> None:
    """Downgrade the schema to REVISION ('base' drops everything)."""
    from gpuwatch.sql import migrate

    engine = ctx.engine()
    migrate.downgrade(engine, revision)
    click.echo(f"database at revision {migrate.current_revision(engine)}")


@db.command("current")
@pass_ctx
def db_current(ctx: Context) -> None:
    """Print the schema revision and whether it is the newest."""
    from gpuwatch.sql import migrate

    engine = ctx.engine()
    current, head = migrate.current_revision(engine), migrate.head_revision(engine)
    click.echo(f"current={current} head={head}{'' if current == head else ' (run: gpuwatch db upgrade)'}")


# --------------------------------------------------------------------------- reading
NODE_COLUMNS = [
    ("name", "node"),
    ("last_seen_at", "last seen (UTC)"),
    ("agent_version", "agent"),
    ("gpus", "GPUs"),
    ("mig_instances", "MIG instances"),
    ("batches", "batches"),
    ("samples_window", "samples"),
    ("gpu_samples_window", "GPU samples"),
    ("faults", "GPU faults"),
]
#: what a narrow terminal's node table leaves out first
NODE_DROP_FIRST = ("mig_instances", "agent_version", "batches", "samples_window", "gpu_samples_window")


@cli.command()
@FORMAT_OPTION
@click.option(
    "--window",
    type=MINUTES,
    default=60,
    show_default=True,
    help="Count samples and GPU faults of the last N minutes (at most 100 years).",
)
@click.option(
    "--faulty",
    is_flag=True,
    help="Only nodes with a GPU fault in the window: an XID, lost samples, a memory repair pending/failed.",
)
@click.option(
    "--silent",
    type=MINUTES,
    help="Only nodes not heard from in the last N minutes (or never): agents down, nodes off.",
)
@pass_ctx
def nodes(ctx: Context, fmt: str, window: int, faulty: bool, silent: int | None) -> None:
    """Nodes: last seen, GPUs, sample counts, GPU faults."""
    from gpuwatch.sql import migrate
    from gpuwatch.views.nodes import node_summaries

    engine = ctx.engine()
    if not migrate.is_up_to_date(engine):
        raise click.ClickException("database schema is not current; run: gpuwatch db upgrade")
    quiet = None if silent is None else timedelta(minutes=silent)
    listed = node_summaries(engine, timedelta(minutes=window), faulty=faulty, silent=quiet)
    rows = [
        n.as_json() | {"last_seen_at": n.last_seen_at} | ({} if fmt == "json" else {"faults": n.faults_text})
        for n in listed
    ]
    click.echo(
        render(
            rows,
            NODE_COLUMNS,
            OutputFormat(fmt),
            title=f"nodes (samples in the last {window} min)",
            empty=_no_nodes(window, faulty, silent),
            drop_first=NODE_DROP_FIRST,
        )
    )


def _no_nodes(window: int, faulty: bool, silent: int | None) -> str:
    """What an empty node table says: which filter matched nothing."""
    if faulty and silent is not None:
        return f"no node with a GPU fault in the last {window} min has been silent for {silent} min"
    if faulty:
        return f"no GPU faulted in the last {window} min"
    if silent is not None:
        return f"every node was heard from in the last {silent} min"
    return "no node has registered yet (gpuwatch token create NODE makes its ingest token)"


@cli.command("wire-schema")
@click.option("--markdown", is_flag=True, help="Print the field reference (v1's fields) as Markdown instead.")
@click.option(
    "--format-version",
    "version",
    type=click.Choice(["1", "2"]),
    default="1",
    show_default=True,
    help="Wire format: 1 (a list of samples) or 2 (columns per sample kind).",
)
def wire_schema(markdown: bool, version: str) -> None:
    """Print the JSON Schema of wire-format batches."""
    from gpuwatch import wire
    from gpuwatch.wire import v2 as wire_v2

    if markdown:
        click.echo(wire.fields_markdown())
        return
    click.echo(json.dumps(wire.json_schema() if version == "1" else wire_v2.json_schema(), indent=2))


#: the commands that modules add with ``register(cli)``, and the module adding each
SUBCOMMAND_MODULES: dict[str, str] = {
    "jobs": "gpuwatch.cli.jobs",
    "alerts": "gpuwatch.cli.alerts",
    "workload": "gpuwatch.workload.cli",
    "validate": "gpuwatch.workload.cli",
    "job": "gpuwatch.cli.job_detail",
    "import": "gpuwatch.cli.trace_import",
    "demo": "gpuwatch.cli.demo",
    "processes": "gpuwatch.cli.processes",
    "report": "gpuwatch.cli.report",
}


def main() -> None:
    from sqlalchemy.exc import ArgumentError, DBAPIError

    from gpuwatch import gc_tuning

    # the modules imported so far live as long as the command; the agent and the daemon settle
    # again, with their own thresholds, once their start-up is done
    gc_tuning.settle(gc_tuning.COMMAND_THRESHOLDS)
    try:
        cli(standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(130)
    except DBAPIError as exc:  # unreachable server, refused login, missing database, ...
        click.echo(f"Error: database: {database_problem(exc)}", err=True)
        sys.exit(1)
    except ArgumentError as exc:  # a URL SQLAlchemy cannot parse
        click.echo(f"Error: database URL: {exc}", err=True)
        sys.exit(1)


def database_problem(exc: BaseException) -> str:
    """The driver's own first line (``connection ... failed: Connection refused``), without
    SQLAlchemy's wrapping, the SQL or the background link."""
    orig = getattr(exc, "orig", None) or exc
    lines = [line.strip() for line in str(orig).splitlines() if line.strip()]
    return lines[0] if lines else type(orig).__name__


if __name__ == "__main__":
    main()
