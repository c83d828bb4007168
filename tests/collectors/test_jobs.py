"""Jobs collector: per-Slurm-job CPU and memory from cgroup v2 and v1 trees."""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

import pytest
from hosttrees import INTERVAL_S, LATER, NOW, paths_at, real_host_two_reads, two_snapshots

from gpuwatch.collectors.base import run_collector
from gpuwatch.collectors.jobs import (
    LIMITS_REFRESH_S,
    JobsCollector,
    cpu_used_cores,
    job_id_from_dir,
    make_jobs,
    parse_cpu_list,
    parse_cpu_stat_usage_ns,
    parse_memory_max,
    parse_pressure_some_avg10,
    parse_v1_limit,
)
from gpuwatch.collectors.keptfiles import KeptFile
from gpuwatch.config import HostPaths, Settings
from gpuwatch.wire import JobSample

GIB = 1024**3
V2_SCOPE = ("cgroup", "system.slice", "slurmstepd.scope")
#: no cap (every counter file kept open), none kept (opened per read), some kept and some not
FD_CAPS = [None, 0, 3]


def fds_under(root: Path) -> list[str]:
    """What this process's open fds point to inside ``root`` (``/proc/self/fd``)."""
    fd_dir = "/proc/self/fd"
    targets = []
    for name in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except OSError:  # the fd listdir itself used, closed by now
            continue
        if target.startswith(str(root.resolve())):
            targets.append(target)
    return targets


@pytest.mark.parametrize("max_kept_fds", FD_CAPS)
def test_cgroup_v2_three_jobs(host, clock, max_kept_fds):
    tree = host("cgroup_v2")
    collector = JobsCollector(tree.paths, clock=clock, max_kept_fds=max_kept_fds)
    first, second = two_snapshots(collector, tree, clock)
    assert [s.job_id for s in first] == ["100", "101", "102"]
    assert all(s.cpu_used_cores is None for s in first)  # first sighting: no rate yet
    # job 100 ended, job 103 started between the snapshots
    assert [s.job_id for s in second] == ["101", "102", "103"]
    j101, j102, j103 = second
    assert j101 == JobSample(
        ts=LATER,
        job_id="101",
        cpu_used_cores=4.0,  # usage_usec +40 s of CPU in 10 s
        cpu_allocated_cores=8,  # 0-3,8-11
        memory_used_bytes=32 * GIB,
        memory_limit_bytes=64 * GIB,
        memory_swap_bytes=0,
        memory_pressure_ratio=0.125,  # some avg10=12.50
        cgroup_version=2,
    )
    assert j102.cpu_used_cores == 0.5
    assert j102.cpu_allocated_cores == 1
    assert j102.memory_limit_bytes is None  # memory.max "max"
    assert j102.memory_swap_bytes == 2 * 1024 * 1024
    assert j102.memory_pressure_ratio == 0.0
    assert j103.cpu_used_cores is None
    assert (j103.cpu_allocated_cores, j103.memory_limit_bytes) == (3, 16 * GIB)
    assert j103.memory_pressure_ratio == 0.25


def test_non_numeric_job_dir_is_skipped_with_a_debug_log_once(host, clock, caplog):
    tree = host("cgroup_v2")
    collector = JobsCollector(tree.paths, clock=clock)
    with caplog.at_level(logging.DEBUG, logger="gpuwatch.collectors.jobs"):
        two_snapshots(collector, tree, clock)
    skipped = [r for r in caplog.records if "job_A0B1C2D3" in r.getMessage()]
    assert len(skipped) == 1
    assert "SLUID" in skipped[0].getMessage()
    assert not any("/system:" in r.getMessage() for r in caplog.records)  # Slurm's own cgroup


@pytest.mark.parametrize("max_kept_fds", FD_CAPS)
def test_cgroup_v1_two_jobs_one_under_slurm_nodename(host, clock, max_kept_fds):
    tree = host("cgroup_v1")
    collector = JobsCollector(tree.paths, clock=clock, max_kept_fds=max_kept_fds)
    first, second = two_snapshots(collector, tree, clock)
    assert [s.job_id for s in first] == ["201", "202"]
    j201, j202 = second
    assert j201 == JobSample(
        ts=LATER,
        job_id="201",
        cpu_used_cores=8.0,  # cpuacct.usage +80e9 ns in 10 s
        cpu_allocated_cores=8,  # 0-7
        memory_used_bytes=20 * GIB,
        memory_limit_bytes=None,  # 9223372036854771712: unlimited
        memory_swap_bytes=0,
        memory_pressure_ratio=None,  # no PSI per cgroup in v1
        cgroup_version=1,
    )
    # slurm_gpu-node-07/uid_1001/job_202 (multiple slurmd per host)
    assert j202.cpu_used_cores == 2.5
    assert j202.cpu_allocated_cores == 8  # 8-11,16-19
    assert j202.memory_used_bytes == 28 * GIB
    assert j202.memory_limit_bytes == 32 * GIB
    assert j202.memory_swap_bytes == GIB  # memsw - usage
    assert j202.cgroup_version == 1


def test_v1_without_swap_accounting_or_cpuset(copied_host, clock):
    root = copied_host("cgroup_v1", "t1")
    job = root / "cgroup" / "memory" / "slurm" / "uid_1000" / "job_201"
    (job / "memory.memsw.usage_in_bytes").unlink()
    (root / "cgroup" / "cpuset" / "slurm" / "uid_1000" / "job_201" / "cpuset.cpus").unlink()
    [j201, _] = JobsCollector(paths_at(root), clock=clock).collect(NOW)
    assert j201.memory_swap_bytes is None
    assert j201.cpu_allocated_cores is None
    assert j201.memory_used_bytes == 20 * GIB


def test_v2_optional_files_absent_are_null(copied_host, clock):
    root = copied_host("cgroup_v2", "t1")
    job = root.joinpath(*V2_SCOPE, "job_101")
    for name in ("memory.swap.current", "memory.pressure", "cpuset.cpus.effective"):
        (job / name).unlink()
    [j101, *_] = JobsCollector(paths_at(root), clock=clock).collect(NOW)
    assert (j101.memory_swap_bytes, j101.memory_pressure_ratio, j101.cpu_allocated_cores) == (
        None,
        None,
        None,
    )


def test_multiple_slurmd_v2_scope_name(copied_host, clock):
    root = copied_host("cgroup_v2", "t1")
    scope = root.joinpath(*V2_SCOPE)
    scope.rename(scope.with_name("gpu-node-07_slurmstepd.scope"))
    samples = JobsCollector(paths_at(root), clock=clock).collect(NOW)
    assert [s.job_id for s in samples] == ["101", "102", "103"]


def _job_dir(root: Path, job: str) -> Path:
    return root.joinpath(*V2_SCOPE, job)


def test_counters_are_reread_each_cycle(copied_host, clock):
    root = copied_host("cgroup_v2", "t1")
    collector = JobsCollector(paths_at(root), clock=clock)
    collector.collect(NOW)
    job = _job_dir(root, "job_101")
    usage_usec = int((job / "cpu.stat").read_text().split()[1])
    (job / "cpu.stat").write_text(f"usage_usec {usage_usec + 30_000_000}\nuser_usec 1\n")  # +30 s
    (job / "memory.current").write_text(f"{3 * GIB}\n")
    clock.advance(INTERVAL_S)
    j101 = collector.collect(LATER)[0]
    assert (j101.cpu_used_cores, j101.memory_used_bytes) == (3.0, 3 * GIB)


def test_a_removed_job_cgroup_drops_out_and_its_files_are_closed(copied_host, clock):
    root = copied_host("cgroup_v2", "t1")
    collector = JobsCollector(paths_at(root), clock=clock)
    collector.collect(NOW)
    job = _job_dir(root, "job_102")
    assert fds_under(job)
    shutil.rmtree(job)
    clock.advance(INTERVAL_S)
    samples = collector.collect(LATER)
    assert [s.job_id for s in samples] == ["101", "103"]
    assert samples[0].cpu_used_cores == 0.0  # the others keep their rates
    assert fds_under(job) == []


@pytest.mark.parametrize("gone", [errno.ENODEV, errno.ENOENT])
def test_a_job_gone_while_being_read_is_skipped_then_found_again(copied_host, clock, monkeypatch, gone):
    root = copied_host("cgroup_v2", "t1")
    collector = JobsCollector(paths_at(root), clock=clock)
    collector.collect(NOW)
    job = _job_dir(root, "job_101")
    real_read = KeptFile.read

    def read(self: KeptFile) -> bytes | None:
        if self.path.startswith(str(job)):  # the kernel's answer for a removed cgroup's kept fd
            raise OSError(gone, os.strerror(gone), self.path)
        return real_read(self)

    monkeypatch.setattr(KeptFile, "read", read)
    assert [s.job_id for s in collector.collect(LATER)] == ["102", "103"]
    assert fds_under(job) == []
    monkeypatch.undo()
    again = collector.collect(LATER)
    assert [s.job_id for s in again] == ["101", "102", "103"]
    assert again[0].cpu_used_cores is None  # a new sighting: no rate yet
    assert again[0].memory_limit_bytes == 64 * GIB


def test_a_new_job_appears_on_the_next_cycle(copied_host, clock):
    root = copied_host("cgroup_v2", "t1")
    collector = JobsCollector(paths_at(root), clock=clock)
    assert [s.job_id for s in collector.collect(NOW)] == ["101", "102", "103"]
    shutil.copytree(_job_dir(root, "job_103"), _job_dir(root, "job_1040"))
    clock.advance(INTERVAL_S)
    samples = collector.collect(LATER)
    assert [s.job_id for s in samples] == ["101", "102", "103", "1040"]
    assert samples[-1].cpu_used_cores is None
    assert samples[-1].memory_limit_bytes == 16 * GIB


def test_a_requeued_job_with_a_new_cgroup_is_read_from_the_new_one(copied_host, clock):
    root = copied_host("cgroup_v2", "t1")
    collector = JobsCollector(paths_at(root), clock=clock)
    collector.collect(NOW)
    old, new = _job_dir(root, "job_101"), _job_dir(root, "job_101.new")
    shutil.copytree(old, new)  # made before the old one goes, so it cannot reuse its inode
    (new / "memory.max").write_text(f"{2 * GIB}\n")
    (new / "memory.current").write_text(f"{GIB}\n")
    shutil.rmtree(old)
    new.rename(old)
    j101 = collector.collect(LATER)[0]
    assert (j101.memory_limit_bytes, j101.memory_used_bytes) == (2 * GIB, GIB)
    assert not [t for t in fds_under(root) if t.endswith("(deleted)")]  # none left on the old files


def test_limits_are_cached_and_reread_every_refresh_period(copied_host, clock):
    root = copied_host("cgroup_v2", "t1")
    collector = JobsCollector(paths_at(root), clock=clock)
    collector.collect(NOW)
    job = _job_dir(root, "job_101")
    (job / "memory.max").write_text(f"{96 * GIB}\n")  # an admin raised the limit
    (job / "cpuset.cpus.effective").write_text("0-3\n")  # CPUs 8-11 went offline
    clock.advance(INTERVAL_S)
    cached = collector.collect(LATER)[0]
    assert (cached.memory_limit_bytes, cached.cpu_allocated_cores) == (64 * GIB, 8)
    clock.advance(LIMITS_REFRESH_S)
    fresh = collector.collect(LATER)[0]
    assert (fresh.memory_limit_bytes, fresh.cpu_allocated_cores) == (96 * GIB, 4)


def test_an_optional_file_that_appears_is_read_after_the_refresh_period(copied_host, clock):
    root = copied_host("cgroup_v2", "t1")
    job = _job_dir(root, "job_101")
    swap = (job / "memory.swap.current").read_text()
    (job / "memory.swap.current").unlink()
    collector = JobsCollector(paths_at(root), clock=clock)
    assert collector.collect(NOW)[0].memory_swap_bytes is None
    (job / "memory.swap.current").write_text(swap)
    clock.advance(LIMITS_REFRESH_S)
    assert collector.collect(LATER)[0].memory_swap_bytes == 0


@pytest.mark.parametrize("case", ["cgroup_v2", "cgroup_v1"])
def test_close_closes_every_file_and_a_later_collect_reopens(copied_host, clock, case):
    root = copied_host(case, "t1")
    collector = JobsCollector(paths_at(root), clock=clock)
    before = collector.collect(NOW)
    assert fds_under(root)
    collector.close()
    assert fds_under(root) == []
    assert collector.collect(NOW) == before
    collector.close()


def test_cgroup_mount_gone_closes_every_file(copied_host, clock):
    root = copied_host("cgroup_v2", "t1")
    collector = JobsCollector(paths_at(root), clock=clock)
    collector.collect(NOW)
    (root / "cgroup").rename(root / "elsewhere")
    assert collector.collect(LATER) == []
    assert fds_under(root) == []


def test_no_cgroup_or_no_slurm_is_an_empty_list(host, tmp_path, clock):
    assert JobsCollector(host("typical").paths, clock=clock).collect(NOW) == []  # no cgroup dir
    (tmp_path / "cg").mkdir()
    (tmp_path / "cg" / "cgroup.controllers").write_text("cpu memory\n")
    paths = HostPaths(cgroup=tmp_path / "cg")
    assert JobsCollector(paths, clock=clock).collect(NOW) == []  # v2, no slurmstepd.scope
    (tmp_path / "cg" / "cgroup.controllers").unlink()
    assert JobsCollector(paths, clock=clock).collect(NOW) == []  # v1, no slurm dirs


@pytest.mark.parametrize(
    ("case", "relpath", "text", "message"),
    [
        ("cgroup_v2", (*V2_SCOPE, "job_101", "memory.current"), "lots\n", "not a non-negative integer"),
        ("cgroup_v2", (*V2_SCOPE, "job_101", "cpu.stat"), "user_usec 1\n", "no usage_usec line"),
        ("cgroup_v2", (*V2_SCOPE, "job_101", "cpuset.cpus.effective"), "0-\n", "bad CPU list"),
        ("cgroup_v2", (*V2_SCOPE, "job_101", "memory.pressure"), "full avg10=1.00\n", "no 'some' line"),
        (
            "cgroup_v1",
            ("cgroup", "cpuacct", "slurm", "uid_1000", "job_201", "cpuacct.usage"),
            "-1\n",
            "not a",
        ),
    ],
)
def test_malformed_file_raises_naming_it(copied_host, case, relpath, text, message):
    root = copied_host(case, "t1")
    root.joinpath(*relpath).write_text(text)
    collector = JobsCollector(paths_at(root))
    with pytest.raises(ValueError, match=rf"{relpath[-1]}: {message}"):
        collector.collect(NOW)
    run = run_collector(collector, NOW)
    assert run.error is not None and relpath[-2] in run.error


@pytest.mark.parametrize(
    ("text", "count"), [("0-3,8\n", 5), ("12\n", 1), ("0-3,8-11", 8), ("\n", None), ("0-127", 128)]
)
def test_parse_cpu_list(text, count):
    assert parse_cpu_list(text) == count


@pytest.mark.parametrize("text", ["a", "3-1", "0,,2", "1-2-3"])
def test_parse_cpu_list_rejects(text):
    with pytest.raises(ValueError):
        parse_cpu_list(text)


def test_small_parsers():
    assert parse_memory_max("max\n") is None
    assert parse_memory_max("1073741824\n") == GIB
    assert parse_v1_limit("9223372036854771712\n") is None  # 4 KiB pages
    assert parse_v1_limit("9223372036854710272\n") is None  # 64 KiB pages
    assert parse_v1_limit("34359738368\n") == 32 * GIB
    assert parse_cpu_stat_usage_ns("usage_usec 1500\nuser_usec 1000\n") == 1_500_000
    assert parse_pressure_some_avg10("some avg10=3.00 avg60=1.00 avg300=0.50 total=9\n") == 0.03


def test_job_dir_names():
    assert job_id_from_dir("job_123") == "123"
    assert job_id_from_dir("job_A0B1C2D3") is None
    assert job_id_from_dir("job_") is None
    assert job_id_from_dir("system") is None
    assert job_id_from_dir("step_0") is None


def test_cpu_used_cores_rules():
    assert cpu_used_cores(0, 20_000_000_000, 10.0) == 2.0
    assert cpu_used_cores(10, 5, 10.0) is None  # went backwards
    assert cpu_used_cores(0, 10, 0.0) is None


def test_factory(host, tmp_path):
    assert isinstance(make_jobs(Settings(host_paths=host("cgroup_v2").paths)), JobsCollector)
    assert make_jobs(Settings(host_paths=paths_at(tmp_path / "nowhere"))) is None


def test_real_host():
    paths = HostPaths()
    if not paths.cgroup.is_dir():
        pytest.skip("no cgroup mount here")
    samples = real_host_two_reads(JobsCollector(paths))
    assert all(isinstance(s, JobSample) and s.cgroup_version in (1, 2) for s in samples)
