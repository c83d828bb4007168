"""deploy/slurm/prolog.sh and epilog.sh, run with bash in a fake Slurm environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from gpuwatch.slurm.attribution import read_gpu_maps

ROOT = Path(__file__).resolve().parents[2]
PROLOG = ROOT / "deploy" / "slurm" / "prolog.sh"
EPILOG = ROOT / "deploy" / "slurm" / "epilog.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")


def run(script: Path, run_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        "PATH": "/usr/bin:/bin",
        "GPUWATCH_RUN_DIR": str(run_dir),
        "GPUWATCH_NVIDIA_PROC": str(run_dir / "no-nvidia"),
        "GPUWATCH_PROLOG_NVIDIA_SMI": "0",
    }
    return subprocess.run(
        ["bash", str(script)], env={**base, **env}, capture_output=True, text=True, timeout=20, check=False
    )


def job_env(job: str, gpus: str, uid: str = "2001", user: str = "alice") -> dict[str, str]:
    return {"SLURM_JOB_ID": job, "SLURM_JOB_GPUS": gpus, "SLURM_JOB_UID": uid, "SLURM_JOB_USER": user}


def test_prolog_writes_one_file_per_gpu(tmp_path: Path) -> None:
    proc = run(PROLOG, tmp_path, **job_env("25", "0,2-3"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    names = sorted(p.name for p in (tmp_path / "gpu").iterdir())
    assert names == ["0", "2", "3"]  # no temporaries left
    maps = read_gpu_maps(tmp_path)
    assert {i: e.job_id for i, e in maps.by_index.items()} == {0: "25", 2: "25", 3: "25"}
    entry = maps.by_index[2]
    assert (entry.uid, entry.user, entry.gpu_index, entry.gpu_uuid) == (2001, "alice", 2, None)
    assert entry.written_at is not None and abs(entry.written_at.timestamp() - time.time()) < 60
    assert oct((tmp_path / "gpu" / "0").stat().st_mode & 0o777) == "0o644"


def test_prolog_uuid_files_from_driver_proc(tmp_path: Path) -> None:
    nv = tmp_path / "nv"
    for minor, bus, uuid in ((0, "0000:01:00.0", "GPU-0000-aaaa"), (1, "0000:41:00.0", "GPU-1111-bbbb")):
        d = nv / bus
        d.mkdir(parents=True)
        (d / "information").write_text(
            f"Model: \t\t NVIDIA H200\nIRQ:   \t\t 100\nGPU UUID: \t\t {uuid}\nDevice Minor: \t\t {minor}\n"
        )
    proc = run(PROLOG, tmp_path, GPUWATCH_NVIDIA_PROC=str(nv), **job_env("31", "1"))
    assert proc.returncode == 0, proc.stderr
    maps = read_gpu_maps(tmp_path)
    assert set(maps.by_index) == {1}
    assert set(maps.by_uuid) == {"GPU-1111-bbbb"}
    assert maps.by_index[1].gpu_uuid == "GPU-1111-bbbb"


def test_prolog_ignores_jobs_without_gpus_or_id(tmp_path: Path) -> None:
    assert run(PROLOG, tmp_path, **job_env("26", "")).returncode == 0
    assert run(PROLOG, tmp_path, SLURM_JOB_GPUS="0").returncode == 0
    assert run(PROLOG, tmp_path, **job_env("x; rm -rf /", "0")).returncode == 0
    assert not (tmp_path / "gpu").exists()


def test_prolog_failure_never_fails_the_job(tmp_path: Path) -> None:
    (tmp_path / "gpu").write_text("a file where the directory should be")
    proc = run(PROLOG, tmp_path, **job_env("27", "0"))
    assert proc.returncode == 0
    assert "gpuwatch prolog: could not write GPU map for job 27" in proc.stderr


def test_epilog_removes_only_its_own_files(tmp_path: Path) -> None:
    assert run(PROLOG, tmp_path, **job_env("40", "0,1")).returncode == 0
    assert run(PROLOG, tmp_path, **job_env("41", "1,2")).returncode == 0  # GPU 1 now belongs to 41
    gpu = tmp_path / "gpu"
    (gpu / ".3.40.1234").write_text("job_id=40\n")  # leftover temporary of job 40
    (gpu / ".3.41.1234").write_text("job_id=41\n")
    proc = run(EPILOG, tmp_path, SLURM_JOB_ID="40")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in gpu.iterdir()) == [".3.41.1234", "1", "2"]
    assert {i: e.job_id for i, e in read_gpu_maps(tmp_path).by_index.items()} == {1: "41", 2: "41"}
    assert run(EPILOG, tmp_path, SLURM_JOB_ID="41").returncode == 0
    assert sorted(p.name for p in gpu.iterdir()) == []


def test_epilog_without_dir_or_job(tmp_path: Path) -> None:
    assert run(EPILOG, tmp_path, SLURM_JOB_ID="5").returncode == 0
    assert run(EPILOG, tmp_path).returncode == 0


def test_scripts_are_executable_and_strict() -> None:
    for script in (PROLOG, EPILOG):
        assert os.access(script, os.X_OK)
        text = script.read_text()
        assert text.startswith("#!/usr/bin/env bash\n")
        assert "set -Eeuo pipefail" in text
        assert "curl" not in text and "scontrol" not in text.split("set -Eeuo", 1)[1]


def test_prolog_mig_instances_by_their_uuids(tmp_path: Path) -> None:
    """A job given MIG instances: CUDA_VISIBLE_DEVICES holds MIG UUIDs, and SLURM_JOB_GPUS counts
    MIG devices, not cards; so one file per MIG UUID and no index file."""
    migs = "MIG-1b2c3d4e-0000-5555-aaaa-000000000001,MIG-1b2c3d4e-0000-5555-aaaa-000000000002"
    proc = run(PROLOG, tmp_path, CUDA_VISIBLE_DEVICES=migs, **job_env("50", "0,1"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    maps = read_gpu_maps(tmp_path)
    assert maps.by_index == {}
    assert sorted(maps.by_uuid) == migs.split(",")
    entry = maps.by_uuid["MIG-1b2c3d4e-0000-5555-aaaa-000000000002"]
    assert (entry.job_id, entry.user, entry.gpu_index) == ("50", "alice", None)
    assert entry.gpu_uuid == "MIG-1b2c3d4e-0000-5555-aaaa-000000000002"
    assert run(EPILOG, tmp_path, SLURM_JOB_ID="50").returncode == 0
    assert list((tmp_path / "gpu").iterdir()) == []


def test_prolog_whole_gpus_in_cuda_visible_devices_keep_the_gres_files(tmp_path: Path) -> None:
    proc = run(PROLOG, tmp_path, CUDA_VISIBLE_DEVICES="0,1", **job_env("51", "2,3"))
    assert proc.returncode == 0, proc.stderr
    assert sorted(read_gpu_maps(tmp_path).by_index) == [2, 3]
