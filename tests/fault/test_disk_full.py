"""The spool's disk fills up: oldest batches dropped, counted, logged, and the daemon sees the count.

The spool lives on a 2 MiB tmpfs (we are root in the test container). Where mounting is not
allowed, the same path is driven by an injected ENOSPC from the spool's one write function
(a full disk as the kernel reports it), and the test says so.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
from pathlib import Path

import pytest

from gpuwatch.agent import spool as spool_module
from gpuwatch.sql.nodes import create_token
from gpuwatch.sql.readings import read_samples
from tests.daemon_process import DaemonProcess
from tests.fault.conftest import make_agent

pytestmark = pytest.mark.slow

GPUS = 16
CYCLES = 60


def _mount_tmpfs(where: Path) -> bool:
    where.mkdir(parents=True)
    if os.geteuid() != 0:
        return False
    out = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(where)], capture_output=True
    )
    return out.returncode == 0


def _fill(where: Path, leave_bytes: int) -> Path:
    """A filler file taking all but ``leave_bytes`` of the filesystem."""
    st = os.statvfs(where)
    filler = where / "filler"
    with filler.open("wb") as fh:
        fh.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave_bytes))
    return filler


@pytest.fixture
def full_disk(tmp_path, monkeypatch):
    """(spool dir, filler file or None): a nearly full tmpfs, or an injected ENOSPC budget."""
    where = tmp_path / "spool"
    mounted = _mount_tmpfs(where)
    if not mounted:
        print("tmpfs mount not permitted here: injecting ENOSPC past a 300 kB budget instead")
        budget = {"free": 300_000}
        real = spool_module._write_durable

        def write_durable(final: Path, data: bytes) -> None:
            used = sum(p.stat().st_size for p in final.parent.glob("0*.json"))
            if final.suffix == ".json" and used + len(data) > budget["free"]:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(final))
            real(final, data)

        monkeypatch.setattr(spool_module, "_write_durable", write_durable)
        yield where, None, budget
        return
    try:
        yield where, "mounted", None
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_disk_full_drops_oldest_counts_logs_and_reports(full_disk, migrated, tmp_path, caplog):
    where, mounted, budget = full_disk
    db_url, engine = migrated
    token = create_token(engine, "full-node")
    daemon = DaemonProcess(db_url, tmp_path / "daemon.log")  # down while the disk fills
    agent, pusher = make_agent(daemon.url, token, where, node="full-node", gpus=GPUS)
    filler = _fill(where, 300_000) if mounted else None
    try:
        with caplog.at_level(logging.WARNING, logger="gpuwatch.agent.spool"):
            for _ in range(CYCLES):
                agent.cycle()
        assert agent.cycles == CYCLES and agent.cycle_errors == 0, "the sample loop never dies of it"
        dropped = agent.spool.dropped_total
        assert dropped > 0
        assert "spool disk full" in caplog.text and "dropped" in caplog.text
        names = sorted(p.name for p in where.glob("0*.json"))
        seqs = [int(n[:20]) for n in names]
        assert seqs[0] > 0, "the OLDEST batches went"
        assert seqs[-1] == CYCLES - 1, "the newest batch is kept"
        assert len(seqs) + dropped == CYCLES, "each batch either kept or counted as dropped"
        # space again, the daemon back: the next batch carries the count to the daemon
        if filler is not None:
            filler.unlink()
        else:
            budget["free"] = 10**9
        agent.cycle()
        daemon.start()
        agent.start_sender()
        assert agent.drain(30), f"{len(agent.spool)} left"
    finally:
        agent.close()
        daemon.stop()
    with engine.connect() as conn:
        seen = max(r.dropped_batches_total for r in read_samples(conn, "agent"))
    assert seen == dropped
    # every kept cycle delivered (one agent sample per cycle), in one merged batch or several
    delivered = [s for b in pusher.delivered for s in b.samples if s.kind == "agent"]
    assert len(delivered) == CYCLES + 1 - dropped
    print(f"{'tmpfs 2 MiB' if mounted else 'injected ENOSPC'}: {dropped} of {CYCLES} batches dropped")
