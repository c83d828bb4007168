"""``gpuwatch demo``: the whole pipeline on one machine, no GPU or Slurm needed.

A daemon on the configured database (SQLite by default) in a thread, and one agent per
simulated node, each with a different simulated-GPU scenario, pushing over real HTTP.
Everything shown is labelled simulated (``simulated=true`` on every GPU sample).
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from gpuwatch.config import Settings

DEMO_SCENARIOS = ("training", "idle", "input-bound", "no-amp", "small-batch", "memory-pressure", "comm-bound")


def run_demo(
    settings: Settings, *, node_count: int, cycles: int, interval_s: float, echo: Callable[[str], None]
) -> None:
    from gpuwatch.agent import Agent, Pusher, Spool
    from gpuwatch.cli.main import NODE_COLUMNS
    from gpuwatch.cli.render import OutputFormat, render
    from gpuwatch.collectors import build_collectors
    from gpuwatch.daemon.server import BackgroundServer
    from gpuwatch.sql.nodes import create_token
    from gpuwatch.sql.queries import node_summaries

    daemon_settings = settings.with_overrides(daemon={"listen": "127.0.0.1:0"})
    echo(f"database: {settings.database.url}")
    with BackgroundServer(daemon_settings) as server, tempfile.TemporaryDirectory() as spool_root:
        echo(f"daemon:   {server.url} (simulated GPUs; every GPU sample is marked simulated)")
        agents: list[Agent] = []
        for i in range(node_count):
            node = f"demo-node{i + 1:02d}"
            scenario = DEMO_SCENARIOS[i % len(DEMO_SCENARIOS)]
            token = create_token(server.engine, node)
            node_settings = settings.with_overrides(
                agent={
                    "node": node,
                    "daemon_url": server.url,
                    "token": token,
                    "interval_s": interval_s,
                    "spool_dir": Path(spool_root) / node,
                },
                gpu={"backend": "sim", "sim_scenario": scenario, "sim_seed": i},
            )
            spool = Spool(node_settings.agent.spool_dir, node_settings.agent.spool_max_bytes)
            pusher = Pusher(server.url, node, token, node_settings.agent.push_timeout_s)
            agents.append(Agent(node_settings, build_collectors(node_settings), spool=spool, pusher=pusher))
            echo(f"agent:    {node} scenario={scenario}")
        stop = threading.Event()
        threads = [
            threading.Thread(target=a.run, args=(stop,), kwargs={"max_cycles": cycles}, daemon=True)
            for a in agents
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=cycles * interval_s + 60)
        for a in agents:
            a.drain(30)
            a.close()
        rows = [
            n.as_json() | {"last_seen_at": n.last_seen_at}
            for n in node_summaries(server.engine, timedelta(hours=1))
        ]
        echo(render(rows, NODE_COLUMNS, OutputFormat.TABLE, title="nodes"))
