"""The `gpuwatch` command: tokens, schema, nodes in three formats, agent --once, demo."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

from click.testing import CliRunner

from gpuwatch.cli.main import cli
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.gpu_readings import read_gpu_samples
from gpuwatch.sql.nodes import get_node, node_for_token
from gpuwatch.wire import Batch


def _run(*args: str, env: dict | None = None):
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    return result


def test_token_create_db_and_nodes_formats(db_url, tmp_path):
    assert _run("--db", db_url, "db", "upgrade").exit_code == 0
    empty = _run("--db", db_url, "nodes").output
    assert empty.strip() == "no node has registered yet (gpuwatch token create NODE makes its ingest token)"
    assert _run("--db", db_url, "nodes", "--format", "json").output.strip() == "[]"
    out = tmp_path / "tok"
    result = _run("--db", db_url, "token", "create", "gpu017", "--output", str(out))
    assert result.exit_code == 0, result.output
    token = out.read_text().strip()
    assert token.startswith("gw1_") and oct(out.stat().st_mode & 0o777) == "0o600"
    engine = create_engine(db_url)
    with engine.connect() as conn:
        node = get_node(conn, "gpu017")
    from datetime import timedelta

    from gpuwatch.clock import utcnow
    from tests import factories

    BatchStore(engine).store(node.id, factories.batch(node="gpu017", start=utcnow() - timedelta(minutes=2)))
    engine.dispose()

    as_json = json.loads(_run("--db", db_url, "nodes", "--format", "json").output)
    assert as_json == [
        {
            "name": "gpu017",
            "last_seen_at": as_json[0]["last_seen_at"],
            "agent_version": "test",
            "gpus": 2,
            "mig_instances": 0,
            "batches": 1,
            "samples_window": 20,
            "gpu_samples_window": 4,
            "faults": [],
        }
    ]
    rows = list(csv.DictReader(io.StringIO(_run("--db", db_url, "nodes", "--format", "csv").output)))
    assert rows[0]["name"] == "gpu017" and rows[0]["gpus"] == "2"
    table = _run("--db", db_url, "nodes").output
    assert "gpu017" in table and "GPU samples" in table
    from gpuwatch.sql import migrate

    head_engine = create_engine(db_url)
    head = migrate.head_revision(head_engine)
    head_engine.dispose()
    assert f"current={head} head={head}" in _run("--db", db_url, "db", "current").output


def test_bad_node_name_and_bad_config(tmp_path, sqlite_url):
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "token", "create", "bad name!"])
    assert result.exit_code != 0 and "invalid node name" in result.output
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[agent]\ninterval_s = 0\n")
    result = CliRunner().invoke(cli, ["--config", str(cfg), "agent", "--once"])
    assert result.exit_code != 0 and "agent.interval_s" in result.output


def test_agent_once_prints_a_valid_batch_with_simulated_gpus(tmp_path):
    env = {"GPUWATCH_GPU__BACKEND": "sim", "GPUWATCH_GPU__SIM_GPUS": "2", "GPUWATCH_AGENT__NODE": "n1"}
    proc = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "agent", "--once"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**__import__("os").environ, **env},
    )
    assert proc.returncode == 0, proc.stderr
    batch = Batch.model_validate_json(proc.stdout)
    kinds = [s.kind for s in batch.samples]
    assert kinds.count("gpu") == 2 and "cpu" in kinds and "memory" in kinds and kinds[-1] == "agent"
    assert batch.node == "n1"


def test_agent_without_token_says_how_to_get_one(tmp_path):
    result = CliRunner().invoke(
        cli, ["agent"], env={"GPUWATCH_GPU__BACKEND": "none", "GPUWATCH_AGENT__NODE": "n9"}
    )
    assert result.exit_code != 0 and "gpuwatch token create n9" in result.output


def test_wire_schema_command():
    doc = json.loads(_run("wire-schema").output)
    assert doc["title"] == "Batch"


def test_demo_runs_the_whole_pipeline(sqlite_url):
    result = _run("--db", sqlite_url, "demo", "--nodes", "2", "--cycles", "2", "--interval", "0.2")
    assert result.exit_code == 0, result.output
    assert "demo-node01" in result.output and "demo-node02" in result.output
    engine = create_engine(sqlite_url)
    with engine.connect() as conn:
        gpu_rows = sum(r.simulated for r in read_gpu_samples(conn))
    engine.dispose()
    assert gpu_rows == 2 * 2 * 4  # nodes x cycles x simulated GPUs, all marked simulated


def test_agent_once_replays_a_recording(tmp_path):
    """`gpuwatch agent --record` output played back through gpu.backend = replay."""
    import os

    record = tmp_path / "rec.jsonl"
    base = {**os.environ, "GPUWATCH_AGENT__NODE": "n1", "GPUWATCH_GPU__SIM_GPUS": "3"}
    first = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "agent", "--once", "--record", str(record)],
        capture_output=True, text=True, timeout=60, env={**base, "GPUWATCH_GPU__BACKEND": "sim"},
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert len(record.read_text().splitlines()) == 2  # --once samples twice (rates need two)
    replayed = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "agent", "--once"],
        capture_output=True, text=True, timeout=60,
        env={**base, "GPUWATCH_GPU__BACKEND": "replay", "GPUWATCH_GPU__REPLAY_FILE": str(record)},
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    gpus = [s for s in Batch.model_validate_json(replayed.stdout).samples if s.kind == "gpu"]
    recorded = Batch.model_validate_json(first.stdout)
    assert [g.gpu_index for g in gpus] == [0, 1, 2]
    assert [g.util_gpu_ratio for g in gpus] == [
        s.util_gpu_ratio for s in recorded.samples if s.kind == "gpu"
    ]  # the second recorded reading comes back second


def test_help_groups_every_command_by_who_runs_it():
    import click
    from click.testing import CliRunner

    from gpuwatch.cli.main import COMMAND_SECTIONS, cli

    out = CliRunner().invoke(cli, ["--help"]).output
    titles = [title for title, _ in COMMAND_SECTIONS]
    assert [line.rstrip(":") for line in out.splitlines() if line.rstrip(":") in titles] == titles
    listed = {line.split()[0] for line in out.split(titles[0], 1)[1].splitlines() if line.startswith("  ")}
    assert listed == set(cli.list_commands(click.Context(cli))), "a command is missing from --help"
    assert "\nOther:" not in out  # every command has its section
    admin = out.split(titles[0] + ":", 1)[1].split("\n\n", 1)[0]
    assert [line.split()[0] for line in admin.strip().splitlines()] == list(COMMAND_SECTIONS[0][1])


def test_a_command_no_section_names_is_still_listed():
    import click
    from click.testing import CliRunner

    from gpuwatch.cli.main import cli

    @click.command("extra-tool")
    def extra() -> None:
        """A command added by a plugin."""

    cli.add_command(extra)
    try:
        out = CliRunner().invoke(cli, ["--help"]).output
    finally:
        cli.commands.pop("extra-tool")
    assert "Other:\n  extra-tool  A command added by a plugin." in out


def test_each_command_names_the_module_that_adds_it():
    """``gpuwatch jobs`` imports the module behind ``jobs`` only: the map from command to
    module must name every command the modules add, and the right module for each."""
    import importlib

    import click

    from gpuwatch.cli.main import SUBCOMMAND_MODULES

    every = click.Group()
    for name, module in SUBCOMMAND_MODULES.items():
        alone = click.Group()
        importlib.import_module(module).register(alone)
        assert name in alone.commands, (name, module)
        importlib.import_module(module).register(every)
    assert set(every.commands) == set(SUBCOMMAND_MODULES)


def test_a_command_imports_its_own_module_only(sqlite_url):
    """In a fresh interpreter, ``gpuwatch jobs --low-util`` loads neither the demo nor the
    workload nor Alembic (each a part of every command's start when it did)."""
    assert _run("--db", sqlite_url, "db", "upgrade").exit_code == 0
    probe = (
        "import sys\n"
        "from gpuwatch.cli.main import cli\n"
        f"cli(['--db', {sqlite_url!r}, 'jobs', '--low-util'], standalone_mode=False)\n"
        "print(sorted(m for m in ('gpuwatch.cli.demo', 'gpuwatch.workload.cli', 'alembic',\n"
        "                         'gpuwatch.cli.jobs') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "no jobs match" in out and out.strip().splitlines()[-1] == "['gpuwatch.cli.jobs']"


#: modules ``gpuwatch jobs --low-util --format json`` needs none of: the other questions' read
#: models (a job's page and its series, the overview, a node, the report), the classifier's
#: feature code, the web view and its framework, the alerts, the plots, the table renderer
NOT_FOR_THE_LISTING = (
    "gpuwatch.views.job",
    "gpuwatch.views._job_series",
    "gpuwatch.views.overview",
    "gpuwatch.views.node",
    "gpuwatch.views.report",
    "gpuwatch.classify.features",
    "gpuwatch.web",
    "gpuwatch.alerts",
    "fastapi",
    "matplotlib",
    "rich",
)


def test_the_low_util_listing_imports_its_own_read_model_only(sqlite_url):
    """``gpuwatch.views`` hands each name on from its module when it is first asked for: in a
    fresh interpreter the JSON listing loads ``gpuwatch.views.lowutil`` and none of
    :data:`NOT_FOR_THE_LISTING`, while ``from gpuwatch.views import ...`` still finds every name."""
    assert _run("--db", sqlite_url, "db", "upgrade").exit_code == 0
    watched = (*NOT_FOR_THE_LISTING, "gpuwatch.views.lowutil")
    probe = (
        "import sys\n"
        "from gpuwatch.cli.main import cli\n"
        f"cli(['--db', {sqlite_url!r}, 'jobs', '--low-util', '--format', 'json'], standalone_mode=False)\n"
        f"print(sorted(m for m in {watched!r} if m in sys.modules))\n"
        "import gpuwatch.views\n"
        "print(all(getattr(gpuwatch.views, name) is not None for name in gpuwatch.views.__all__))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-3:] == ["[]", "['gpuwatch.views.lowutil']", "True"]


def test_token_create_never_touches_a_path_that_is_no_regular_file(sqlite_url, tmp_path):
    """``--output`` names the token's file: a device (``/dev/null``) or a directory is refused
    before any token is made, and its mode stays as it was (the old token keeps working)."""
    assert (
        _run("--db", sqlite_url, "token", "create", "gpu017", "--output", str(tmp_path / "t1")).exit_code == 0
    )
    first = (tmp_path / "t1").read_text()
    before = os.stat("/dev/null").st_mode
    for path in ("/dev/null", str(tmp_path)):
        result = _run("--db", sqlite_url, "token", "create", "gpu017", "--output", path)
        assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    assert os.stat("/dev/null").st_mode == before
    engine = create_engine(sqlite_url)
    with engine.connect() as conn:
        assert node_for_token(conn, first.strip()) == "gpu017"  # no new token was issued
    engine.dispose()
    again = tmp_path / "t1"
    again.chmod(0o644)  # an existing file is replaced by a new one of mode 0600
    assert _run("--db", sqlite_url, "token", "create", "gpu017", "--output", str(again)).exit_code == 0
    assert oct(again.stat().st_mode & 0o777) == "0o600" and again.read_text() != first
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".t1.")]  # no temporary file left
