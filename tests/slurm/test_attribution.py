"""Agent-side attribution: prolog map files, /proc/<pid>/cgroup and environ."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpuwatch.slurm.attribution import (
    job_id_from_cgroup,
    job_id_from_environ,
    job_id_of_pid,
    parse_gpu_map,
    read_gpu_maps,
)

from .conftest import V2205

MAP = "job_id=25\nuid=2001\nuser=alice\nstep=\ngpu_index=1\ngpu_uuid=GPU-aaaa\nwritten_at=1796218396\n"


def test_recorded_cgroup_and_environ(ids) -> None:
    job = ids["gpu2"]
    assert job_id_from_cgroup((V2205 / f"proc_cgroup_job{job}.txt").read_text()) == job
    assert job_id_from_environ((V2205 / f"proc_environ_job{job}.bin").read_bytes()) == job


@pytest.mark.parametrize(
    ("text", "job"),
    [
        ("7:cpuacct,cpu:/slurm/uid_1000/job_123/step_0/task_0\n", "123"),
        ("4:memory:/slurm_node01/uid_0/job_42/step_batch/task_0\n", "42"),
        ("0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0\n", "123"),
        ("0::/system.slice/slurmstepd.scope/job_77/step_extern/slurm_processes\n", "77"),
        ("12:freezer:/slurm/uid_5/job_9\n", "9"),
        ("1:name=systemd:/user.slice\n0::/\n", None),
        ("0::/docker/job_5/abc\n", None),  # not under a slurm directory
        ("0::/system.slice/slurmstepd.scope/job_s1a2b3c4/step_0\n", None),  # SLUID (26.05+)
        ("", None),
    ],
)
def test_job_id_from_cgroup(text: str, job: str | None) -> None:
    assert job_id_from_cgroup(text) == job


@pytest.mark.parametrize(
    ("data", "job"),
    [
        (b"PATH=/bin\0SLURM_JOB_ID=123\0SLURM_JOBID=123\0", "123"),
        (b"SLURM_JOBID=5\0", "5"),
        (b"SLURM_JOB_ID=\0", None),
        (b"SLURM_JOB_ID=abc\0", None),
        (b"XSLURM_JOB_ID=4\0", None),
        (b"", None),
        (b"\xff\xfe=\0SLURM_JOB_ID=8", "8"),
    ],
)
def test_job_id_from_environ(data: bytes, job: str | None) -> None:
    assert job_id_from_environ(data) == job


def test_parse_gpu_map() -> None:
    entry = parse_gpu_map(MAP + "future_key=1\n# comment\n")
    assert entry is not None
    assert (entry.job_id, entry.uid, entry.user, entry.step, entry.gpu_index, entry.gpu_uuid) == (
        "25", 2001, "alice", None, 1, "GPU-aaaa",
    )  # fmt: skip
    assert entry.written_at == datetime.fromtimestamp(1796218396, tz=timezone.utc)
    assert parse_gpu_map("") is None
    assert parse_gpu_map("job_id=\nuid=1") is None
    assert parse_gpu_map("job_id=12;rm\n") is None


def test_read_gpu_maps(tmp_path: Path) -> None:
    assert read_gpu_maps(tmp_path).by_index == {}  # no gpu/ dir: prolog not installed
    gpu = tmp_path / "gpu"
    gpu.mkdir()
    (gpu / "1").write_text(MAP)
    (gpu / "GPU-aaaa").write_text(MAP)
    (gpu / ".1.25.999").write_text("job_id=99\n")  # a temporary: skipped
    (gpu / "0").write_text("garbage")
    maps = read_gpu_maps(tmp_path)
    assert set(maps.by_index) == {1}
    assert maps.by_index[1].job_id == "25"
    assert set(maps.by_uuid) == {"GPU-aaaa"}


def test_job_id_of_pid_self_and_fake_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert job_id_of_pid(os.getpid())[1] in (None, "process", "environ")
    assert job_id_of_pid(999_999_999) == (None, None)
    proc = tmp_path / "42"
    proc.mkdir()
    (proc / "cgroup").write_text("0::/user.slice\n")
    (proc / "environ").write_bytes(b"SLURM_JOB_ID=7\0")
    assert job_id_of_pid(42, proc=tmp_path) == ("7", "environ")
    (proc / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_8/step_0/user/task_0\n")
    assert job_id_of_pid(42, proc=tmp_path) == ("8", "process")
