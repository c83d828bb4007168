"""The daemon's Slurm sync and the agent's attribution against the live cluster.

Needs tests/slurm/start-slurm.sh (skips without it, fails with ``CI=true``). Jobs are
submitted as the test user ``alice`` (account ``physics``) when running as root, else as
the current user; each test cancels its jobs and stays well under a minute.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from gpuwatch.collectors.attribution import AttributionCollector
from gpuwatch.collectors.gpu_processes import GpuProcessBoard
from gpuwatch.config import HostPaths, SlurmConfig
from gpuwatch.daemon.slurm_sync import SlurmSync
from gpuwatch.slurm.attribution import read_gpu_maps
from gpuwatch.slurm.commands import SlurmClient
from gpuwatch.sql.schema import job_gpus, slurm_jobs
from gpuwatch.wire import GpuProcess, GpuSample

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PROLOG, EPILOG = ROOT / "deploy" / "slurm" / "prolog.sh", ROOT / "deploy" / "slurm" / "epilog.sh"
TEST_USER = "alice"


def _submitter() -> tuple[list[str], str]:
    """(argv prefix, user name) to submit with: alice through runuser when root, else ourselves."""
    if os.geteuid() == 0 and shutil.which("runuser"):
        try:
            pwd.getpwnam(TEST_USER)
            return ["runuser", "-u", TEST_USER, "--"], TEST_USER
        except KeyError:
            pass
    return [], pwd.getpwuid(os.getuid()).pw_name


class Jobs:
    """Submits ``sleep`` jobs and cancels every one of them at the end."""

    def __init__(self) -> None:
        self.prefix, self.user = _submitter()
        self.ids: list[str] = []

    def submit(self, name: str, *args: str) -> str:
        out = subprocess.run(
            [*self.prefix, "sbatch", "--parsable", "-J", name, "-t", "3", "-o", "/dev/null", "-D", "/tmp",
             *args, "--wrap", "sleep 90"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
        job_id = out.strip().split(";")[0]
        self.ids.append(job_id)
        return job_id

    def squeue(self) -> dict[str, dict[str, str]]:
        """What Slurm's own text output says: job -> user, account, state, nodes, per-node GRES."""
        out = subprocess.run(
            ["squeue", "-h", "-a", "-t", "all", "-o", "%i|%u|%a|%T|%N"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
        found = {}
        for line in out.splitlines():
            job, user, account, state, nodes = line.split("|")
            found[job] = {"user": user, "account": account, "state": state, "nodes": nodes}
        return found

    def wait(
        self, predicate: Callable[[dict[str, dict[str, str]]], bool], what: str, timeout_s: float = 40
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            seen = self.squeue()
            if predicate(seen):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not reached in {timeout_s} s; squeue: {seen}")
            time.sleep(0.5)

    def running(self, *ids: str) -> None:
        self.wait(lambda seen: all(seen.get(i, {}).get("state") == "RUNNING" for i in ids), f"{ids} RUNNING")

    def cancel(self) -> None:
        if self.ids:
            subprocess.run(["scancel", *self.ids], timeout=30, check=False)


@pytest.fixture
def live_jobs(slurm_cluster: None) -> Iterator[Jobs]:
    jobs = Jobs()
    try:
        yield jobs
    finally:
        jobs.cancel()


def pids_of(job_id: str) -> list[int]:
    """``scontrol listpids``: the job's processes on this node (slurmstepd excluded)."""
    out = subprocess.run(
        ["scontrol", "listpids", job_id], capture_output=True, text=True, timeout=30, check=True
    )
    pids = []
    for line in out.stdout.splitlines()[1:]:
        fields = line.split()
        if fields and fields[0].isdigit() and fields[1] == job_id and Path(f"/proc/{fields[0]}").exists():
            pids.append(int(fields[0]))
    return sorted(pids)


def wait_pids(job_id: str, timeout_s: float = 20) -> list[int]:
    """The job's pids once slurmstepd has started them (RUNNING in squeue comes first) and the
    list is stable over two looks (the batch shell forks its command). Until its step is
    registered on the node, ``scontrol listpids`` exits non-zero: on a busy machine that can
    outlast the first looks, so it counts as no pids yet."""
    deadline, last = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        try:
            pids = pids_of(job_id)
        except subprocess.CalledProcessError:
            pids = []
        if pids and pids == last:
            return pids
        last = pids
        time.sleep(0.3)
    raise AssertionError(f"scontrol listpids {job_id}: no stable process list in {timeout_s} s ({last})")


def job_env(pid: int) -> dict[str, str]:
    """The batch step's environment: what Slurm gave the job (SLURM_JOB_GPUS, ...)."""
    out = {}
    for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        key, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep and key.startswith("SLURM_"):
            out[key] = value
    return out


def gpus_given(env: dict[str, str]) -> list[int]:
    """``SLURM_JOB_GPUS`` (``0,1``; empty or absent for a job without GPUs)."""
    return [int(i) for i in env.get("SLURM_JOB_GPUS", "").split(",") if i.strip()]


def test_sync_agrees_with_slurm_then_records_the_cancel(live_jobs: Jobs, engine: sa.Engine) -> None:
    since = datetime.now(timezone.utc)
    one = live_jobs.submit("gw-idle-gpu1", "--gres=gpu:1")
    two = live_jobs.submit("gw-gpu2", "--gres=gpu:2")
    cpu = live_jobs.submit("gw-cpu")
    live_jobs.running(one, two, cpu)
    truth = live_jobs.squeue()
    given = {j: job_env(wait_pids(j)[0]) for j in (one, two, cpu)}  # SLURM_JOB_GPUS as the job sees it

    sync = SlurmSync(engine, SlurmClient(timeout_s=30), SlurmConfig(enabled=True))
    result = sync.sync_running()
    assert result is not None, sync.failures
    assert sync.client.squeue_json is True
    with engine.connect() as conn:
        rows = {r["job_id"]: r for r in conn.execute(sa.select(slurm_jobs)).mappings()}
        held = conn.execute(sa.select(job_gpus.c.job_id, job_gpus.c.node, job_gpus.c.gpu_index)).all()
    uid = pwd.getpwnam(live_jobs.user).pw_uid
    assert os.geteuid() != 0 or (live_jobs.user, truth[one]["account"]) == (TEST_USER, "physics")
    for job_id, gpus in ((one, 1), (two, 2), (cpu, 0)):
        row, slurm = rows[job_id], truth[job_id]
        assert (row["user_name"], row["uid"], row["account"], row["state"]) == (
            slurm["user"], uid, slurm["account"], "RUNNING",
        )  # fmt: skip
        assert (
            row["nodes"] == [slurm["nodes"]]
            and row["gpus"] == gpus
            and row["start_at"] >= since.replace(microsecond=0)
        )
        expected = {(slurm["nodes"], i) for i in gpus_given(given[job_id])}
        assert {(n, i) for j, n, i in held if j == job_id} == expected
        assert len(expected) == gpus
    assert not {i for j, _, i in held if j == one} & {i for j, _, i in held if j == two}  # no GPU twice

    live_jobs.cancel()
    live_jobs.wait(
        lambda seen: all(seen.get(i, {}).get("state") != "RUNNING" for i in (one, two, cpu)), "ended"
    )
    assert sync.sync_running() is not None  # squeue now says CANCELLED, without gres_detail
    deadline = time.monotonic() + 30
    while True:  # slurmdbd records the end asynchronously
        assert sync.sync_finished() is not None, sync.failures
        with engine.connect() as conn:
            ended = {
                r["job_id"]: r
                for r in conn.execute(sa.select(slurm_jobs)).mappings()
                if r["job_id"] in (one, two, cpu)
            }
        if all(r["state"] == "CANCELLED" and r["source"].startswith("sacct") for r in ended.values()):
            break
        assert time.monotonic() < deadline, f"sacct never showed them CANCELLED: {ended}"
        time.sleep(1)
    for row in ended.values():
        assert row["end_at"] is not None and row["start_at"] <= row["end_at"] <= datetime.now(timezone.utc)
        assert row["elapsed_s"] is not None and row["elapsed_s"] < 60
        assert row["uid"] == uid  # sacct has no uid: squeue's stays
    with engine.connect() as conn:
        kept = conn.execute(
            sa.select(sa.func.count()).select_from(job_gpus).where(job_gpus.c.job_id.in_([one, two]))
        ).scalar_one()
    assert kept == 3  # the GPUs they held stay recorded after the end


def test_prolog_and_attribution_agree_with_the_allocation(live_jobs: Jobs, tmp_path: Path) -> None:
    job = live_jobs.submit("gw-attr-gpu2", "--gres=gpu:2")
    live_jobs.running(job)
    pids = wait_pids(job)
    env = job_env(pids[0])
    allocated = gpus_given(env)
    assert env["SLURM_JOB_ID"] == job and len(allocated) == 2
    squeue_view = next(j for j in SlurmClient(timeout_s=30).jobs() if j.job_id == job)
    assert sorted(i for idx in squeue_view.gpu_indices.values() for i in idx) == allocated

    # the real prolog, run as slurmd would with the job's variables (nothing set in slurm.conf)
    run_dir = tmp_path / "run" / "gpuwatch"
    prolog_env = {
        "PATH": "/usr/bin:/bin",
        "GPUWATCH_RUN_DIR": str(run_dir),
        "GPUWATCH_NVIDIA_PROC": str(tmp_path / "no-nvidia"),
        "GPUWATCH_PROLOG_NVIDIA_SMI": "0",
        **{
            k: env[k]
            for k in ("SLURM_JOB_ID", "SLURM_JOB_GPUS", "SLURM_JOB_UID", "SLURM_JOB_USER")
            if k in env
        },
    }
    done = subprocess.run(["bash", str(PROLOG)], env=prolog_env, capture_output=True, text=True, timeout=20)
    assert (done.returncode, done.stderr) == (0, "")
    assert sorted(read_gpu_maps(run_dir).by_index) == allocated

    # the GPU collector's view: the job's real processes on its first GPU, none on the second
    first, second = allocated
    now = datetime.now(timezone.utc)
    board = GpuProcessBoard()
    board.publish(
        [
            GpuSample(ts=now, gpu_index=first, processes=[GpuProcess(pid=p) for p in pids]),
            GpuSample(ts=now, gpu_index=second, processes=[]),
        ]
    )
    paths = HostPaths(proc=Path("/proc"), run=tmp_path / "run")
    got = AttributionCollector(paths, board).collect(now)
    uid = pwd.getpwnam(live_jobs.user).pw_uid
    assert [(s.gpu_index, s.job_id, s.source, s.user, s.uid, s.pids) for s in got] == [
        (first, job, "prolog", live_jobs.user, uid, pids),
        (second, job, "prolog", live_jobs.user, uid, []),  # allocated and idle: still reported
    ]

    # without the map files: the processes' real cgroups (v1 here) name the job
    assert subprocess.run(["bash", str(EPILOG)], env={**prolog_env}, timeout=20).returncode == 0
    assert read_gpu_maps(run_dir).by_index == {}
    got = AttributionCollector(paths, board).collect(now)
    assert [(s.gpu_index, s.job_id, s.source, s.uid, s.pids) for s in got] == [
        (first, job, "process", uid, pids)
    ]
