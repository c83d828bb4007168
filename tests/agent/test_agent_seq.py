"""Sequence numbers: a number once given to a batch is never given again, even after a crash,
so every cycle a crash loses is a gap the daemon can see."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpuwatch.agent import Agent, Spool
from tests.agent.fakes import CpuCollector, agent_config
from tests.agent.spool_crash import CRASHED

ROOT = Path(__file__).resolve().parents[2]


def _crash_in_spool_write(spool_dir: Path, delivered: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.agent.spool_crash", str(spool_dir), str(delivered)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == CRASHED, proc.stderr


def _next_spooled_seq(spool_dir: Path) -> int:
    config = agent_config(spool_dir.parent, "http://127.0.0.1:9", spool_dir=spool_dir)
    spool = Spool(config.spool_dir, config.spool_max_bytes)
    with Agent(config, [CpuCollector()], spool, None) as agent:
        batch = agent.cycle()
        [item] = spool.peek_oldest_many(10, 1 << 30)
        spool.ack(item.path)  # delivered
    assert batch is not None and item.seq == batch.seq
    return batch.seq


def test_a_crash_inside_the_spool_write_leaves_a_gap(tmp_path: Path) -> None:
    """Seqs 0-2 delivered (the spool empty again), the process dies writing seq 3: the next
    agent on that spool sends 4, so the daemon sees that 3 is missing."""
    spool_dir = tmp_path / "spool"
    _crash_in_spool_write(spool_dir, delivered=3)
    assert _next_spooled_seq(spool_dir) == 4


def test_seqs_survive_clean_restarts_without_gaps(tmp_path: Path) -> None:
    spool_dir = tmp_path / "spool"
    seqs = [_next_spooled_seq(spool_dir) for _ in range(2)]
    assert seqs == [0, 1]
