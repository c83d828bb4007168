"""Disk collector: /proc/diskstats rates for whole disks, io_ticks busy ratio."""

from __future__ import annotations

import pytest
from hosttrees import (
    LATER,
    NOW,
    assert_fails_naming_the_file,
    paths_at,
    real_host,
    real_host_two_reads,
    two_snapshots,
)

from gpuwatch.collectors.disk import (
    DiskCollector,
    DiskCounters,
    disk_sample,
    is_whole_disk,
    parse_diskstats,
)
from gpuwatch.wire import DiskSample


def test_whole_disks_only_with_rates_and_busy_ratio(host, clock):
    tree = host("typical")
    first, second = two_snapshots(DiskCollector(tree.paths, clock=clock), tree, clock)
    assert first == []
    by_dev = {s.device: s for s in second}
    # partitions (no /sys/block entry) and loop/zram (by name) are left out
    assert sorted(by_dev) == ["dm-0", "nvme0n1", "sda"]
    nvme = by_dev["nvme0n1"]
    assert nvme.ts == LATER
    # +204800 sectors read, +409600 written, x512 bytes, over 10 s
    assert (nvme.read_bytes_per_s, nvme.write_bytes_per_s) == (10_485_760.0, 20_971_520.0)
    assert (nvme.reads_per_s, nvme.writes_per_s) == (2_000.0, 500.0)
    assert nvme.busy_ratio == 0.25  # io_ticks +2500 ms
    sda = by_dev["sda"]
    assert (sda.read_bytes_per_s, sda.write_bytes_per_s) == (40_960.0, 245_760.0)
    assert (sda.reads_per_s, sda.writes_per_s) == (10.0, 30.0)
    assert sda.busy_ratio == 0.1
    assert by_dev["dm-0"].busy_ratio == 1.0  # io_ticks +10004 ms in 10 s: capped


def test_exclude_prefixes_is_a_constructor_argument(host, clock):
    tree = host("typical")
    _, samples = two_snapshots(DiskCollector(tree.paths, clock=clock, exclude_prefixes=()), tree, clock)
    assert [s.device for s in samples] == ["dm-0", "loop0", "loop1", "nvme0n1", "sda", "zram0"]


def test_counter_reset_skips_that_device(host, clock):
    tree = host("counter_reset")
    _, samples = two_snapshots(DiskCollector(tree.paths, clock=clock), tree, clock)
    assert [s.device for s in samples] == ["nvme0n1"]  # sda re-attached: counters restarted
    [nvme] = samples
    assert (nvme.reads_per_s, nvme.read_bytes_per_s) == (100.0, 409_600.0)
    assert (nvme.writes_per_s, nvme.write_bytes_per_s) == (0.0, 0.0)
    assert nvme.busy_ratio == 0.5


def test_old_kernel_fourteen_fields():
    stats = parse_diskstats("   8       0 sda 10 0 80 5 20 0 160 7 0 30 12\n")
    assert stats["sda"] == DiskCounters(
        reads=10, sectors_read=80, writes=20, sectors_written=160, io_ticks_ms=30
    )


def test_slash_in_disk_name_maps_to_bang_in_sysfs(tmp_path):
    (tmp_path / "cciss!c0d0").mkdir()
    assert is_whole_disk("cciss/c0d0", tmp_path)
    assert not is_whole_disk("cciss/c0d0p1", tmp_path)


def test_no_time_passed_gives_no_sample():
    c = DiskCounters(1, 2, 3, 4, 5)
    assert disk_sample("sda", c, c, 0.0, NOW) is None


@pytest.mark.parametrize("line", ["   8 0 sdz 1 2 3\n", "   8 0 sdz 1 2 3 4 5 6 7 8 9 x 11\n"])
def test_malformed_diskstats_raises_naming_the_file(copied_host, line):
    root = copied_host("typical", "t0")
    path = root / "proc" / "diskstats"
    path.write_text(path.read_text() + line)
    assert_fails_naming_the_file(DiskCollector(paths_at(root)), r"proc/diskstats: ")


def test_real_host():
    paths = real_host("diskstats")
    samples = real_host_two_reads(DiskCollector(paths))
    assert all(isinstance(s, DiskSample) for s in samples)
    assert not any(s.device.startswith(("loop", "ram", "zram")) for s in samples)
