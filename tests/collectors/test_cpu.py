"""CPU collector: /proc/stat ratios from two snapshots, /proc/loadavg."""

from __future__ import annotations

import shutil
import time

import pytest
from hosttrees import FIXTURES, LATER, NOW, paths_at, real_host

from gpuwatch.collectors.base import run_collector
from gpuwatch.collectors.cpu import (
    CpuCollector,
    CpuTimes,
    cpu_ratios,
    parse_cpu_list,
    parse_proc_stat,
    per_core_busy,
    threads_per_core,
)
from gpuwatch.wire import CpuSample


def test_first_call_no_sample_then_ratios_from_known_deltas(host):
    tree = host("typical")
    collector = CpuCollector(tree.paths)
    assert collector.collect(NOW) == []
    tree.advance()
    [sample] = collector.collect(LATER)
    # deltas over 4 CPUs x 1000 jiffies (tests/fixtures/hosts/README.md)
    assert sample.ts == LATER
    assert sample.cores == 4
    assert sample.busy_ratio == 0.25
    assert sample.user_ratio == 0.1825  # user + nice: 730 / 4000
    assert sample.system_ratio == 0.0625  # system + irq + softirq: 250 / 4000
    assert sample.iowait_ratio == 0.05
    assert sample.steal_ratio == 0.005
    assert sample.per_core_busy_ratio == [0.75, 0.1, 0.1, 0.05]
    assert sample.load1 == 1.25
    assert sample.threads_per_core == 2  # cpu0/cpu2 and cpu1/cpu3 are SMT siblings


def test_guest_time_is_not_counted_twice():
    # guest (9th column) is already inside user; 100 more guest jiffies must change nothing
    t0 = parse_proc_stat("cpu 0 0 0 0 0 0 0 0 0 0\n").total
    t1 = parse_proc_stat("cpu 50 0 0 50 0 0 0 0 100 7\n").total
    ratios = cpu_ratios(t0, t1)
    assert ratios is not None
    assert ratios.busy == 0.5
    assert ratios.user == 0.5


def test_iowait_going_backwards_is_clamped(host):
    tree = host("counter_reset")
    collector = CpuCollector(tree.paths)
    collector.collect(NOW)
    tree.advance()
    [sample] = collector.collect(LATER)
    # cpu0: user +500, idle +500, iowait -10 -> 0; cpu1: idle +1000
    assert sample.busy_ratio == 0.25
    assert sample.iowait_ratio == 0.0
    assert sample.per_core_busy_ratio == [0.5, 0.0]


def test_no_time_passed_gives_no_sample(host):
    collector = CpuCollector(host("typical").paths)
    collector.collect(NOW)
    assert collector.collect(LATER) == []


def test_old_kernel_without_steal_column():
    stat = parse_proc_stat("cpu 1 2 3 4 5 6 7\ncpu0 1 2 3 4 5 6 7\n")
    assert stat.total == CpuTimes(1, 2, 3, 4, 5, 6, 7, 0)
    assert list(stat.per_core) == [0]


def test_cpu_going_offline_drops_per_core_only():
    before = parse_proc_stat("cpu 0 0 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0\n")
    after = parse_proc_stat("cpu 10 0 0 10 0 0 0 0\ncpu0 10 0 0 10 0 0 0 0\n")
    assert per_core_busy(before, after) is None
    assert cpu_ratios(before.total, after.total).busy == 0.5


def test_missing_loadavg_gives_null_load(copied_host):
    root = copied_host("typical", "t0")
    (root / "proc" / "loadavg").unlink()
    collector = CpuCollector(paths_at(root))
    collector.collect(NOW)
    (root / "proc" / "stat").write_text((FIXTURES / "typical" / "t1" / "proc" / "stat").read_text())
    [sample] = collector.collect(LATER)
    assert sample.load1 is None
    assert sample.busy_ratio == 0.25


@pytest.mark.parametrize(
    "text",
    ["intr 1 2 3\n", "cpu 1 2 3\n", "cpu 1 2 x 4 5 6 7 8\n", "cpu 1 2 3 4 5 6 7 8\ncpuX 1 2 3 4 5 6 7\n"],
)
def test_malformed_stat_raises_naming_the_file(copied_host, text):
    root = copied_host("typical", "t0")
    (root / "proc" / "stat").write_text(text)
    collector = CpuCollector(paths_at(root))
    with pytest.raises(ValueError, match=r"proc/stat: "):
        collector.collect(NOW)
    run = run_collector(collector, NOW)
    assert run.samples == []
    assert run.error is not None and run.error.startswith("ValueError: ")


def test_missing_stat_is_a_failure(tmp_path):
    run = run_collector(CpuCollector(paths_at(tmp_path)), NOW)
    assert run.error is not None and "FileNotFoundError" in run.error


def test_real_host():
    paths = real_host("stat")
    collector = CpuCollector(paths)
    assert collector.collect(NOW) == []
    time.sleep(0.2)
    samples = collector.collect(LATER)
    assert len(samples) <= 1
    for sample in samples:
        assert isinstance(sample, CpuSample)
        assert sample.cores >= 1
        assert sample.busy_ratio <= 1.0
        assert sample.per_core_busy_ratio is None or len(sample.per_core_busy_ratio) == sample.cores


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0", [0]), ("0,64\n", [0, 64]), ("0-1", [0, 1]), ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11])],
)
def test_cpu_lists(text, cpus):
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["0-", "a", "3-1", "0,,x"])
def test_a_bad_cpu_list_is_refused(text):
    with pytest.raises(ValueError, match="not a CPU list"):
        parse_cpu_list(text)


def test_threads_per_core_is_the_largest_sibling_set():
    assert threads_per_core(["0", "1"]) == 1
    assert threads_per_core(["0,64", "1,65", "2"]) == 2  # a core with its sibling offline
    assert threads_per_core([]) is None


def test_no_topology_in_sysfs_gives_none(copied_host):
    root = copied_host("typical", "t0")
    shutil.rmtree(root / "sys" / "devices")
    collector = CpuCollector(paths_at(root))
    collector.collect(NOW)
    (root / "proc" / "stat").write_text((FIXTURES / "typical" / "t1" / "proc" / "stat").read_text())
    [sample] = collector.collect(LATER)
    assert sample.threads_per_core is None and sample.cores == 4


def test_a_garbled_topology_is_none_not_a_failure(copied_host):
    root = copied_host("typical", "t0")
    (root / "sys" / "devices" / "system" / "cpu" / "cpu1" / "topology" / "thread_siblings_list").write_text(
        "x\n"
    )
    collector = CpuCollector(paths_at(root))
    collector.collect(NOW)
    (root / "proc" / "stat").write_text((FIXTURES / "typical" / "t1" / "proc" / "stat").read_text())
    [sample] = collector.collect(LATER)
    assert sample.threads_per_core is None and sample.busy_ratio == 0.25
