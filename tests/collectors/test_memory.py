"""Memory collector: /proc/meminfo levels and /proc/vmstat swap rates."""

from __future__ import annotations

import os

import pytest
from hosttrees import LATER, NOW, paths_at, real_host, real_host_two_reads, two_snapshots

from gpuwatch.collectors.base import run_collector
from gpuwatch.collectors.memory import (
    MemoryCollector,
    page_rate,
    parse_meminfo,
    parse_vmstat_swap,
)
from gpuwatch.wire import MemorySample

KIB = 1024


def test_levels_every_call_swap_rates_from_the_second(host, clock):
    tree = host("typical")
    collector = MemoryCollector(tree.paths, clock=clock, page_size=4096)
    [first], [second] = two_snapshots(collector, tree, clock)
    assert first.ts == NOW
    assert first.swap_in_bytes_per_s is None
    assert first.swap_out_bytes_per_s is None
    assert second.ts == LATER
    assert second.total_bytes == 527977160 * KIB
    assert second.available_bytes == 411234564 * KIB
    assert second.used_bytes == (527977160 - 411234564) * KIB
    assert second.swap_total_bytes == 8388604 * KIB
    assert second.swap_used_bytes == 262144 * KIB
    # pswpin +2560 pages, pswpout +5120 pages, 4 KiB pages, 10 s
    assert second.swap_in_bytes_per_s == 1048576.0
    assert second.swap_out_bytes_per_s == 2097152.0


def test_swap_counter_going_backwards_is_null_not_negative(host, clock):
    tree = host("counter_reset")
    collector = MemoryCollector(tree.paths, clock=clock, page_size=4096)
    _, [sample] = two_snapshots(collector, tree, clock)
    assert sample.swap_in_bytes_per_s is None  # pswpin 5000 -> 10
    assert sample.swap_out_bytes_per_s == 1048576.0


def test_page_size_defaults_to_the_hosts(host, clock):
    tree = host("typical")
    collector = MemoryCollector(tree.paths, clock=clock)
    _, [sample] = two_snapshots(collector, tree, clock)
    assert sample.swap_in_bytes_per_s == 2560 * os.sysconf("SC_PAGE_SIZE") / 10


def test_no_vmstat_gives_null_rates(copied_host, clock):
    root = copied_host("typical", "t1")
    (root / "proc" / "vmstat").unlink()
    collector = MemoryCollector(paths_at(root), clock=clock, page_size=4096)
    collector.collect(NOW)
    clock.advance(10)
    [sample] = collector.collect(LATER)
    assert sample.swap_in_bytes_per_s is None
    assert sample.total_bytes == 527977160 * KIB


def test_parse_meminfo_without_swap_lines():
    info = parse_meminfo("MemTotal: 100 kB\nMemFree: 10 kB\nMemAvailable: 40 kB\nHugePages_Total: 0\n")
    assert (info.total_bytes, info.available_bytes, info.swap_total_bytes) == (102400, 40960, 0)


def test_parse_vmstat_without_swap_lines():
    counters = parse_vmstat_swap("nr_free_pages 12\npgpgin 3\n")
    assert counters.pswpin is None and counters.pswpout is None


def test_page_rate_rules():
    assert page_rate(None, 10, 4096, 1.0) is None
    assert page_rate(10, 5, 4096, 1.0) is None
    assert page_rate(10, 20, 4096, 0.0) is None
    assert page_rate(10, 20, 4096, 2.0) == 20480.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("MemTotal: 100 kB\nMemFree: 10 kB\n", "no MemAvailable"),
        ("MemTotal: lots kB\nMemAvailable: 10 kB\n", "MemTotal: not an integer"),
        ("MemTotal:\nMemAvailable: 10 kB\n", "MemTotal: no value"),
    ],
)
def test_malformed_meminfo_raises_naming_the_file(copied_host, text, message):
    root = copied_host("typical", "t0")
    (root / "proc" / "meminfo").write_text(text)
    collector = MemoryCollector(paths_at(root), page_size=4096)
    with pytest.raises(ValueError, match=rf"proc/meminfo: {message}"):
        collector.collect(NOW)
    run = run_collector(collector, NOW)
    assert run.error is not None and "proc/meminfo" in run.error


def test_malformed_vmstat_raises(copied_host):
    root = copied_host("typical", "t0")
    (root / "proc" / "vmstat").write_text("pswpin many\n")
    with pytest.raises(ValueError, match=r"proc/vmstat: pswpin: not an integer"):
        MemoryCollector(paths_at(root), page_size=4096).collect(NOW)


def test_real_host():
    paths = real_host("meminfo")
    [sample] = real_host_two_reads(MemoryCollector(paths))
    assert isinstance(sample, MemorySample)
    assert 0 < sample.available_bytes <= sample.total_bytes
    assert sample.used_bytes == sample.total_bytes - sample.available_bytes
    assert sample.swap_in_bytes_per_s is None or sample.swap_in_bytes_per_s >= 0
