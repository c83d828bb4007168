"""`gpuwatch spool status` and `requeue`: a batch the database refused, seen, requeued after the
fix, and stored - with a real agent and a real daemon."""

from __future__ import annotations

import json
import threading

import sqlalchemy as sa
from click.testing import CliRunner

from gpuwatch.cli.main import cli
from gpuwatch.config import load_settings
from gpuwatch.daemon.server import BackgroundServer
from gpuwatch.sql.nodes import create_token
from gpuwatch.sql.schema import ingested_batches
from tests import refusals
from tests.fault.conftest import make_agent


def _cli(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _run_agent(url: str, token: str, spool_dir, cycles: int) -> None:
    agent, _ = make_agent(url, token, spool_dir, node="node001", interval_s=0.05, gpus=2)
    try:
        agent.run(threading.Event(), max_cycles=cycles)
        assert agent.drain(20), "the agent's spool did not drain"
    finally:
        agent.close()


def test_refused_batch_is_shown_requeued_and_stored_after_the_fix(tmp_path):
    settings = load_settings(
        None, database={"url": f"sqlite:///{tmp_path / 'gpuwatch.db'}"}, daemon={"listen": "127.0.0.1:0"}
    )
    spool_dir = tmp_path / "spool"
    with BackgroundServer(settings) as daemon:
        token = create_token(daemon.engine, "node001")
        refusals.refuse_seq(daemon.engine, 1)  # the agent's second batch
        _run_agent(daemon.url, token, spool_dir, cycles=3)

        status = _cli("spool", "status", "--spool-dir", str(spool_dir), "--format", "json")
        assert status.exit_code == 0, status.output
        doc = json.loads(status.output)
        assert doc["pending"] == 0 and len(doc["rejected"]) == 1
        assert "the database refused this batch" in doc["rejected"][0]["reason"]
        table = _cli("spool", "status", "--spool-dir", str(spool_dir))
        assert "0 batch(es) pending" in table.output and "1 rejected" in table.output

        with daemon.engine.begin() as conn:  # the admin fixes the cause
            conn.execute(sa.text("DROP TRIGGER refuse"))
        requeue = _cli("spool", "requeue", "--spool-dir", str(spool_dir))
        assert requeue.exit_code == 0 and "requeued 1 rejected batch(es)" in requeue.output
        _run_agent(daemon.url, token, spool_dir, cycles=1)  # the agent starts again

        with daemon.engine.connect() as conn:
            seqs = sorted(conn.execute(sa.select(ingested_batches.c.seq)).scalars())
    assert seqs == [0, 1, 2, 3]
    assert (
        json.loads(_cli("spool", "status", "--spool-dir", str(spool_dir), "--format", "json").output)[
            "rejected"
        ]
        == []
    )


def test_requeue_refuses_a_spool_in_use_and_a_missing_one(tmp_path):
    from gpuwatch.agent.spool import Spool

    with Spool(tmp_path / "spool", 1 << 20):  # a running agent holds it
        busy = _cli("spool", "requeue", "--spool-dir", str(tmp_path / "spool"))
    assert busy.exit_code != 0 and "in use by a running agent" in busy.output
    missing = _cli("spool", "requeue", "--spool-dir", str(tmp_path / "nowhere"))
    assert missing.exit_code != 0 and "no spool at" in missing.output
