"""The ``attribution`` collector on the fixture trees tests/fixtures/hosts/attribution_*/."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuwatch.collectors import REGISTRY, load_all
from gpuwatch.collectors.attribution import (
    GPU_PROCESSES,
    AttributionCollector,
    GpuProcessBoard,
    GpuSeen,
    attribute,
    attribution_collector,
)
from gpuwatch.collectors.base import run_collector
from gpuwatch.config import HostPaths, Settings
from gpuwatch.slurm.attribution import read_gpu_maps
from gpuwatch.wire import AttributionSample, Batch, GpuProcess, GpuSample

HOSTS = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"
NOW = datetime(2026, 12, 2, 13, 34, 0, tzinfo=timezone.utc)


def paths(case: str) -> HostPaths:
    root = HOSTS / case
    return HostPaths(proc=root / "proc", run=root / "run", sys=root / "sys", cgroup=root / "cgroup")


def gpu_sample(index: int, pids: list[int] | None, uuid: str | None = None, ts: datetime = NOW) -> GpuSample:
    procs = None if pids is None else [GpuProcess(pid=p, used_memory_bytes=1 << 30) for p in pids]
    return GpuSample(ts=ts, gpu_index=index, uuid=uuid, processes=procs)


def board_with(samples: list[GpuSample]) -> GpuProcessBoard:
    board = GpuProcessBoard()
    board.publish(samples)
    return board


def summary(samples) -> list[tuple]:
    return [(s.gpu_index, s.job_id, s.source, s.user, s.uid, s.pids) for s in samples]


V1_GPUS = [gpu_sample(0, [26693]), gpu_sample(1, []), gpu_sample(2, [27001]), gpu_sample(3, [27100, 27200])]
V2_GPUS = [
    gpu_sample(0, [5001], "GPU-aaaa"),
    gpu_sample(1, [], "GPU-bbbb"),
    gpu_sample(2, [5004, 5002, 5003], "GPU-cccc"),
    gpu_sample(3, [5006], "GPU-dddd"),
]


def test_v1_recorded_node_all_three_sources() -> None:
    collector = AttributionCollector(paths("attribution_v1"), board_with(V1_GPUS))
    out = collector.collect(NOW)
    assert summary(out) == [
        (0, "25", "prolog", "alice", 2001, [26693]),  # recorded cgroup agrees with the map file
        (1, "25", "prolog", "alice", 2001, []),  # allocated, no process: idle, still reported
        (2, "26", "process", None, 2001, [27001]),  # no map file: from /proc/<pid>/cgroup (v1)
        (3, "27", "environ", None, 2001, [27100]),  # outside Slurm's cgroups: environ
    ]  # pid 27200 (nvidia-smi, no job) gives nothing
    assert all(s.ts == NOW and s.gpu_uuid is None for s in out)
    Batch(node="vm", agent_version="t", samples=out)  # valid on the wire


def test_v2_uuid_placement_shared_gpu_and_sluid() -> None:
    out = AttributionCollector(paths("attribution_v2"), board_with(V2_GPUS)).collect(NOW)
    assert summary(out) == [
        (0, "101", "prolog", "carol", 3002, [5001]),  # GRES 1 = GPU-aaaa = NVML 0
        (1, "100", "prolog", "bob", 3001, []),  # GRES 0 = GPU-bbbb = NVML 1, idle
        (2, "102", "prolog", "bob", 3001, [5002, 5003]),
        (2, "103", "process", None, 3003, [5004]),  # sharing GPU 2: its own sample
        (3, "104", "environ", None, 3004, [5006]),  # SLUID cgroup dir: environ fallback
    ]
    assert [s.gpu_uuid for s in out] == ["GPU-aaaa", "GPU-bbbb", "GPU-cccc", "GPU-cccc", "GPU-dddd"]
    assert len({(s.gpu_index, s.job_id) for s in out}) == len(out)  # no duplicates


def test_without_gpu_view_map_files_alone_at_their_gres_index() -> None:
    out = AttributionCollector(paths("attribution_v2"), GpuProcessBoard()).collect(NOW)
    assert summary(out) == [
        (0, "100", "prolog", "bob", 3001, None),  # None: no process list to look at
        (1, "101", "prolog", "carol", 3002, None),
        (2, "102", "prolog", "bob", 3001, None),
    ]
    assert [s.gpu_uuid for s in out] == ["GPU-bbbb", "GPU-aaaa", "GPU-cccc"]


def test_stale_board_is_ignored() -> None:
    board = board_with([gpu_sample(2, [27001], ts=NOW - timedelta(seconds=10))])
    out = AttributionCollector(paths("attribution_v1"), board, max_age_s=5).collect(NOW)
    assert [(s.gpu_index, s.job_id, s.pids) for s in out] == [(0, "25", None), (1, "25", None)]


def test_gpu_without_process_support_keeps_pids_unknown() -> None:
    out = attribute(
        read_gpu_maps(HOSTS / "attribution_v1" / "run" / "gpuwatch"),
        {0: GpuSeen(0, None, None), 1: GpuSeen(1, None, ())},
        NOW,
        HOSTS / "attribution_v1" / "proc",
    )
    assert [(s.gpu_index, s.pids) for s in out] == [(0, None), (1, [])]


def test_one_process_on_two_gpus_and_two_of_one_job(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid, job in ((11, "7"), (12, "7")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(f"0::/system.slice/slurmstepd.scope/job_{job}/step_0\n")
    gpus = {0: GpuSeen(0, "GPU-0", (11, 12)), 1: GpuSeen(1, "GPU-1", (11,))}
    out = attribute(read_gpu_maps(tmp_path / "run"), gpus, NOW, proc)
    assert summary(out) == [(0, "7", "process", None, None, [11, 12]), (1, "7", "process", None, None, [11])]


def test_no_prolog_no_gpus_is_no_data(tmp_path: Path) -> None:
    empty = HostPaths(proc=tmp_path / "proc", run=tmp_path / "run")
    run = run_collector(AttributionCollector(empty, GpuProcessBoard()), NOW)
    assert (run.samples, run.error) == ([], None)


def test_map_file_for_a_uuid_not_seen_uses_its_gres_index(tmp_path: Path) -> None:
    gpu = tmp_path / "run" / "gpuwatch" / "gpu"
    gpu.mkdir(parents=True)
    (gpu / "GPU-zzzz").write_text("job_id=9\nuid=1\nuser=u\ngpu_index=3\ngpu_uuid=GPU-zzzz\n")
    (gpu / "GPU-yyyy").write_text("job_id=9\nuid=1\nuser=u\ngpu_uuid=GPU-yyyy\n")  # no index at all
    out = attribute(read_gpu_maps(gpu.parent), {}, NOW, tmp_path / "proc")
    assert [(s.gpu_index, s.job_id, s.gpu_uuid) for s in out] == [(3, "9", "GPU-zzzz")]


def test_registered_after_gpu_and_reads_the_shared_board() -> None:
    load_all()
    names = list(REGISTRY)
    assert names.index("attribution") > names.index("gpu")
    settings = Settings().with_overrides(
        host_paths={
            "proc": str(HOSTS / "attribution_v1" / "proc"),
            "run": str(HOSTS / "attribution_v1" / "run"),
        }
    )
    collector = attribution_collector(settings)
    assert collector.board is GPU_PROCESSES
    assert collector.max_age_s == settings.agent.interval_s / 2
    try:
        GPU_PROCESSES.publish(V1_GPUS)
        assert [s.source for s in collector.collect(NOW)] == ["prolog", "prolog", "process", "environ"]
    finally:
        GPU_PROCESSES.clear()
    assert all(isinstance(s, AttributionSample) and s.pids is None for s in collector.collect(NOW))


@pytest.mark.parametrize("case", ["attribution_v1", "attribution_v2"])
def test_fixture_trees_are_complete(case: str) -> None:
    for pid_dir in (HOSTS / case / "proc").iterdir():
        assert {p.name for p in pid_dir.iterdir()} >= {"cgroup", "environ", "status"}


def test_mig_instances_placed_by_their_mig_uuid(tmp_path: Path) -> None:
    """Two jobs on two MIG instances of card 1 (prolog files named by MIG UUID): each is
    reported under its instance's index (1000 + 10 x card + slot), never under the card."""
    gpu = tmp_path / "gpu"
    gpu.mkdir()
    for job, uuid in (("60", "MIG-aaaa-0001"), ("61", "MIG-aaaa-0002")):
        (gpu / uuid).write_text(f"job_id={job}\nuid=2001\nuser=alice\ngpu_index=\ngpu_uuid={uuid}\n")
    seen = [
        gpu_sample(0, [], "GPU-whole"),
        gpu_sample(1, None, "GPU-card"),  # the MIG-mode card lists no processes of its own
        gpu_sample(1010, [], "MIG-aaaa-0001"),
        gpu_sample(1011, [], "MIG-aaaa-0002"),
    ]
    out = attribute(read_gpu_maps(tmp_path), board_with(seen).latest(NOW, 5), NOW, tmp_path / "proc")
    assert [(s.gpu_index, s.job_id, s.source, s.gpu_uuid, s.pids) for s in out] == [
        (1010, "60", "prolog", "MIG-aaaa-0001", []),
        (1011, "61", "prolog", "MIG-aaaa-0002", []),
    ]
