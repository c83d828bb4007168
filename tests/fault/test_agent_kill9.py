"""``kill -9`` of a real agent process in the middle of spool writes, again and again.

The agent (64 simulated GPUs, so every batch is a large file, every 50 ms) cannot reach a
daemon, so everything it makes stays in the spool. After the kills a new agent on the same
spool replays it: every stored batch is whole, none is stored twice, nothing half-written is
ever sent, and at most one cycle per kill is lost.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from gpuwatch.agent.spool import TMP_PREFIX
from gpuwatch.sql.gpu_readings import read_gpu_samples
from gpuwatch.sql.nodes import create_token
from gpuwatch.wire import v2 as wire_v2
from tests.daemon_process import DaemonProcess
from tests.fault.conftest import make_agent, stored_batches, wait_for

pytestmark = pytest.mark.slow

GPUS = 64
KILLS = 6


def _batch_files(spool) -> list:
    if not spool.exists():
        return []
    return sorted(p for p in spool.iterdir() if p.suffix == ".json" and p.name[0].isdigit())


def _id_of(path) -> str:
    """The batch id in a spool file's name (``<seq>-<batch id>.json``)."""
    return path.name.split("-", 1)[1][:-5]


def test_kill9_during_spool_writes_then_replay_stores_each_batch_whole_once(migrated, tmp_path):
    db_url, engine = migrated
    token = create_token(engine, "kill-node")
    daemon = DaemonProcess(db_url, tmp_path / "daemon.log")  # not started until the replay
    spool = tmp_path / "spool"
    env = daemon.agent_env(
        "kill-node", token, spool, gpus=GPUS, interval_s=0.05, backoff_initial_s="0.05", backoff_max_s="0.2"
    )
    rng = random.Random(7)
    temp_seen = 0
    for _ in range(KILLS):
        before = len(_batch_files(spool))
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuwatch", "agent"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(lambda b=before: len(_batch_files(spool)) >= b + 3, 20, "the agent to spool batches")
            # kill while it writes: poll for a temp file (a write in progress), bounded
            deadline = time.monotonic() + rng.uniform(0.05, 0.5)
            while time.monotonic() < deadline:
                if any(p.name.startswith(TMP_PREFIX) for p in spool.iterdir()):
                    break
                time.sleep(0.001)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        temp_seen += any(p.name.startswith(TMP_PREFIX) for p in spool.iterdir())
    files = _batch_files(spool)
    on_disk = {}
    for path in files:  # every renamed batch file is a complete batch
        batch = wire_v2.decode(path.read_bytes())  # a torn file would fail to parse here
        on_disk[str(batch.batch_id)] = (batch.seq, len(batch.samples), batch.samples[0].ts)
    assert len(on_disk) == len(files) >= KILLS * 3
    seqs = sorted(seq for seq, _, _ in on_disk.values())
    assert len(set(seqs)) == len(seqs), "no sequence number twice"
    lost = seqs[-1] - seqs[0] + 1 - len(seqs)
    assert lost <= KILLS, f"{lost} seq gaps for {KILLS} kills: at most the cycle in memory per kill"

    daemon.start()
    agent, pusher = make_agent(daemon.url, token, spool, node="kill-node", gpus=GPUS)
    try:
        assert not any(p.name.startswith(TMP_PREFIX) for p in spool.iterdir()), "open removes temp files"
        assert len(agent.spool) == len(files)
        agent.start_sender()
        assert agent.drain(40), f"replay did not finish: {len(agent.spool)} left"
    finally:
        agent.close()
        daemon.stop()
    assert agent.rejected_batches == 0, "a half-written batch must never be sent"
    # what the daemon acknowledged (the backlog merged into a few batches) is what it recorded
    delivered = {str(b.batch_id): len(b.samples) for b in pusher.delivered}
    assert stored_batches(engine) == delivered
    assert sum(delivered.values()) == sum(n for _, n, _ in on_disk.values()), "each batch whole, once"
    # replayed oldest first, each once: the cycles' first stamps in spool-file order
    firsts = {ts for _, _, ts in on_disk.values()}
    replayed = [s.ts for b in pusher.delivered for s in b.samples if s.ts in firsts]
    assert list(dict.fromkeys(replayed)) == [on_disk[_id_of(p)][2] for p in files]
    with engine.connect() as conn:
        per_ts = Counter(r.ts for r in read_gpu_samples(conn))
    assert len(per_ts) == len(files) and set(per_ts.values()) == {GPUS}, "every GPU of every batch, once"
    print(
        f"{KILLS} kills, {len(files)} batches replayed, {lost} cycles lost, temp files at kill: {temp_seen}"
    )
