"""MIG GRES: a MIG-typed GPU GRES names no card, so the Slurm sync maps none for its job.

The answers are written in the shape ``squeue --json`` (24.05 data_parser) and ``scontrol show
job -d -o`` print, with the GRES a MIG node gives: ``AutoDetect=nvml`` types an instance
``<card>_<profile>``, a hand-written gres.conf by the profile (``Type=1g.18gb``).
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from gpuwatch.config import SlurmConfig
from gpuwatch.daemon.slurm_sync import SlurmSync
from gpuwatch.slurm.commands import SlurmClient
from gpuwatch.slurm.gres import gpu_count, gpu_indices, holds_mig, is_mig_type
from gpuwatch.slurm.scontrol import parse_scontrol_jobs
from gpuwatch.slurm.squeue import parse_squeue_json
from gpuwatch.sql.schema import job_gpus, slurm_jobs

NOW = datetime(2026, 12, 2, 13, 34, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "gres_type",
    ["1g.18gb", "3g.71gb", "7g.141gb", "1g.18gb+me", "1c.3g.40gb", "nvidia_h200_1g.18gb", "a100_2g.10gb"],
)
def test_mig_profiles_are_mig_types(gres_type: str) -> None:
    assert is_mig_type(gres_type)


@pytest.mark.parametrize("gres_type", [None, "", "a100", "h100_80gb", "a100-sxm4-80gb", "tesla", "h200"])
def test_card_types_are_not(gres_type: str | None) -> None:
    assert not is_mig_type(gres_type)


def test_mig_indices_are_left_out_whole_cards_kept() -> None:
    assert gpu_indices("gpu:1g.18gb:1(IDX:3)") == ()
    assert gpu_indices("gpu:nvidia_h200_3g.71gb:2(IDX:4-5)") == ()
    assert gpu_indices("gpu:h200:1(IDX:0),gpu:1g.18gb:1(IDX:3)") == (0,)
    assert gpu_indices("gpu:h200:2(IDX:0-1)") == (0, 1)
    assert holds_mig("gpu:h200:1(IDX:0),gpu:1g.18gb:1(IDX:3)")
    assert not holds_mig("gpu:h200:2(IDX:0-1),mps:100(IDX:0)")
    assert gpu_count("gpu:1g.18gb:2(IDX:3-4)") == 2  # an instance still counts as an allocated GPU


def _job(job_id: int, nodes: list[str], gres_detail: list[str], gpus: int) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "name": f"j{job_id}",
        "user_name": "alice",
        "user_id": 2001,
        "account": "physics",
        "partition": "gpu",
        "job_state": ["RUNNING"],
        "nodes": ",".join(nodes),
        "gres_detail": gres_detail,
        "job_resources": {"nodes": {"allocation": [{"index": i, "name": n} for i, n in enumerate(nodes)]}},
        "tres_alloc_str": f"cpu=4,mem=16G,node={len(nodes)},billing=4,gres/gpu={gpus}",
        "start_time": {"set": True, "infinite": False, "number": 1764682200},
        "end_time": {"set": True, "infinite": False, "number": 1764689400},
        "time_limit": {"set": True, "infinite": False, "number": 120},
    }


#: node mig01: card 0 whole (IDX 0), card 1 in MIG mode split 1g/1g/3g (IDX 1-3); node gpu01 whole
SQUEUE = json.dumps(
    {
        "jobs": [
            _job(501, ["mig01"], ["gpu:h200:1(IDX:0)"], 1),
            _job(502, ["mig01"], ["gpu:1g.18gb:1(IDX:2)"], 1),
            _job(503, ["mig01"], ["gpu:nvidia_h200_3g.71gb:1(IDX:3)"], 1),
            _job(504, ["gpu01", "mig01"], ["gpu:h200:2(IDX:0-1)", "gpu:1g.18gb:1(IDX:1)"], 3),
        ],
        "meta": {},
        "errors": [],
        "warnings": [],
    }
)


def test_squeue_maps_no_card_for_a_job_holding_an_instance() -> None:
    jobs = {j.job_id: j for j in parse_squeue_json(SQUEUE)}
    assert jobs["501"].gpu_indices == {"mig01": (0,)}
    assert jobs["502"].gpu_indices == {}  # IDX 2 is the card's second instance, not card 2
    assert jobs["503"].gpu_indices == {}
    # one instance anywhere: no map at all, so the whole job falls back to the agents' map
    assert jobs["504"].gpu_indices == {}
    assert [jobs[k].gpus for k in ("501", "502", "503", "504")] == [1, 1, 1, 3]


def test_scontrol_maps_no_card_for_a_job_holding_an_instance() -> None:
    text = "\n".join(
        [
            "JobId=601 JobName=a UserId=bob(1002) JobState=RUNNING NodeList=mig01 "
            "TRES=cpu=4,mem=4G,node=1,gres/gpu=1 Nodes=mig01 CPU_IDs=0-3 Mem=4096 GRES=gpu:1g.18gb:1(IDX:3)",
            "JobId=602 JobName=b UserId=bob(1002) JobState=RUNNING NodeList=gpu01,mig01 "
            "TRES=cpu=8,mem=8G,node=2,gres/gpu=2 Nodes=gpu01 CPU_IDs=0-3 Mem=4096 GRES=gpu:h200:1(IDX:1) "
            "Nodes=mig01 CPU_IDs=0-3 Mem=4096 GRES=gpu:h200_2g.35gb:1(IDX:4)",
            "JobId=603 JobName=c UserId=bob(1002) JobState=RUNNING NodeList=mig01 "
            "TRES=cpu=4,mem=4G,node=1,gres/gpu=1 Nodes=mig01 CPU_IDs=0-3 Mem=4096 GRES=gpu:h200:1(IDX:0)",
        ]
    )
    jobs = {j.job_id: j for j in parse_scontrol_jobs(text)}
    assert jobs["601"].gpu_indices == {}
    assert jobs["602"].gpu_indices == {}
    assert jobs["603"].gpu_indices == {"mig01": (0,)}


class _Runner:
    def __call__(self, argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, SQUEUE, "")


def test_sync_stores_jobs_but_no_card_for_instances(engine) -> None:
    sync = SlurmSync(engine, SlurmClient(runner=_Runner()), SlurmConfig(enabled=True), now=lambda: NOW)
    result = sync.sync_running()
    assert result is not None and result.jobs == 4
    with engine.connect() as conn:
        stored = set(conn.execute(sa.select(slurm_jobs.c.job_id)).scalars())
        rows = conn.execute(sa.select(job_gpus.c.job_id, job_gpus.c.node, job_gpus.c.gpu_index)).all()
    assert stored == {"501", "502", "503", "504"}
    assert sorted(tuple(r) for r in rows) == [("501", "mig01", 0)]
