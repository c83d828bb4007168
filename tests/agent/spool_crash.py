"""Run as ``python -m tests.agent.spool_crash SPOOL_DIR DELIVERED``: an agent spools ``DELIVERED``
cycles, the daemon takes them all (the spool empties), and the process dies (``os._exit``, no
clean-up, as under ``kill -9``) inside the next cycle's spool write, before the file exists."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from gpuwatch.agent import Agent, Spool
from gpuwatch.agent import spool as spool_mod
from tests.agent.fakes import CpuCollector, agent_config

#: the exit status that says the crash happened where it was meant to
CRASHED = 86


def _dies_writing_a_batch(final: Path, data: bytes, write=spool_mod._write_durable) -> None:
    """The spool's durable write, except that a batch file's write kills the process."""
    if final.name[0].isdigit() and final.parent.name != spool_mod.REJECTED_DIR:
        os._exit(CRASHED)
    write(final, data)


def main(spool_dir: Path, delivered: int) -> None:
    config = agent_config(spool_dir.parent, "http://127.0.0.1:9", spool_dir=spool_dir)
    spool = Spool(config.spool_dir, config.spool_max_bytes)
    agent = Agent(config, [CpuCollector()], spool, None)
    for _ in range(delivered):
        agent.cycle()
    for item in spool.peek_oldest_many(delivered, 1 << 30):
        spool.ack(item.path)  # stored by the daemon
    spool_mod._write_durable = _dies_writing_a_batch
    agent.cycle()
    raise SystemExit("the spool write did not happen")


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
