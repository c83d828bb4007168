"""NIC collector: /proc/net/dev rates, loopback exclusion, counter resets."""

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

from gpuwatch.collectors.nic import NetDevCounters, NicCollector, nic_samples, parse_net_dev
from gpuwatch.wire import NicSample


def test_first_call_nothing_then_rates_per_device(host, clock):
    tree = host("typical")
    first, second = two_snapshots(NicCollector(tree.paths, clock=clock), tree, clock)
    assert first == []
    by_dev = {s.device: s for s in second}
    assert sorted(by_dev) == ["docker0", "eth0", "ib0"]  # lo excluded
    eth0 = by_dev["eth0"]
    assert eth0.ts == LATER
    assert (eth0.rx_bytes_per_s, eth0.tx_bytes_per_s) == (125_000_000.0, 25_000_000.0)
    assert (eth0.rx_packets_per_s, eth0.tx_packets_per_s) == (100_000.0, 40_000.0)
    assert (eth0.rx_errors, eth0.tx_errors) == (3, 0)  # errors during the interval
    ib0 = by_dev["ib0"]
    assert (ib0.rx_bytes_per_s, ib0.tx_bytes_per_s) == (5_000_000.0, 1_000_000.0)
    assert (ib0.rx_packets_per_s, ib0.tx_packets_per_s) == (2_000.0, 500.0)
    docker0 = by_dev["docker0"]
    assert docker0.rx_bytes_per_s == 0.0 and docker0.tx_packets_per_s == 0.0


def test_exclusion_list_is_a_constructor_argument(host, clock):
    tree = host("typical")
    _, none_excluded = two_snapshots(NicCollector(tree.paths, exclude=(), clock=clock), tree, clock)
    assert [s.device for s in none_excluded] == ["docker0", "eth0", "ib0", "lo"]
    tree.advance("t0")
    collector = NicCollector(tree.paths, exclude=("lo", "docker0"), clock=clock)
    _, two = two_snapshots(collector, tree, clock)
    assert [s.device for s in two] == ["eth0", "ib0"]


def test_counter_going_backwards_skips_that_device_this_cycle(host, clock):
    tree = host("counter_reset")
    _, samples = two_snapshots(NicCollector(tree.paths, clock=clock), tree, clock)
    assert [s.device for s in samples] == ["eth1"]  # eth0's driver reloaded: no rate, no negative
    [eth1] = samples
    assert (eth1.rx_bytes_per_s, eth1.tx_bytes_per_s) == (1_000_000.0, 2_000_000.0)
    assert (eth1.rx_packets_per_s, eth1.tx_packets_per_s) == (1_000.0, 2_000.0)


def test_device_new_since_last_call_has_no_rate_yet():
    counters = NetDevCounters(10, 1, 0, 10, 1, 0)
    assert nic_samples({}, {"eth9": counters}, 10.0, NOW) == []
    assert nic_samples({"eth9": counters}, {"eth9": counters}, 0.0, NOW) == []


def test_parse_handles_name_glued_to_first_counter():
    # the kernel pads names to 6 columns; a long counter can follow the colon with no space
    text = "h1|\nh2|\n  eth0:1234567890123 5 0 0 0 0 0 0 7 8 0 0 0 0 0 0\n"
    assert parse_net_dev(text)["eth0"] == NetDevCounters(1234567890123, 5, 0, 7, 8, 0)


@pytest.mark.parametrize("line", ["  eth0: 1 2 3\n", "  eth0: 1 2 3 4 5 6 7 8 9 x 1 2 3 4 5 6\n"])
def test_malformed_net_dev_raises_naming_the_file(copied_host, line):
    root = copied_host("typical", "t0")
    path = root / "proc" / "net" / "dev"
    path.write_text(path.read_text() + line)
    assert_fails_naming_the_file(NicCollector(paths_at(root)), r"proc/net/dev: eth0: ")


def test_real_host():
    paths = real_host("net/dev")
    samples = real_host_two_reads(NicCollector(paths))
    assert all(isinstance(s, NicSample) for s in samples)
    assert "lo" not in {s.device for s in samples}
