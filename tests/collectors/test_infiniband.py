"""InfiniBand collector: /sys/class/infiniband port counters (4-byte words) and link rate."""

from __future__ import annotations

import pytest
from hosttrees import LATER, NOW, paths_at, two_snapshots

from gpuwatch.collectors.base import run_collector
from gpuwatch.collectors.infiniband import (
    SATURATED_32,
    InfinibandCollector,
    PortSnapshot,
    make_infiniband,
    parse_rate,
    port_counters,
    port_sample,
)
from gpuwatch.config import HostPaths, Settings
from gpuwatch.wire import InfinibandSample

PORT1 = ("mlx5_0", 1)


def test_two_ports_rates_in_bytes_from_words(host, clock):
    tree = host("infiniband")
    first, second = two_snapshots(InfinibandCollector(tree.paths, clock=clock), tree, clock)
    assert first == []
    assert [(s.device, s.port) for s in second] == [("mlx5_0", 1), ("mlx5_0", 2)]
    one, two = second
    assert one.ts == LATER
    # port_rcv_data +625M words, port_xmit_data +1250M words, x4 bytes, over 10 s
    assert (one.rx_bytes_per_s, one.tx_bytes_per_s) == (250_000_000.0, 500_000_000.0)
    assert (one.rx_packets_per_s, one.tx_packets_per_s) == (200_000.0, 300_000.0)
    assert one.link_rate_bytes_per_s == 25e9  # 200 Gb/sec (4X HDR)
    assert (two.rx_bytes_per_s, two.tx_bytes_per_s) == (10_000_000.0, 0.0)
    assert (two.rx_packets_per_s, two.tx_packets_per_s) == (10_000.0, 0.0)
    assert two.link_rate_bytes_per_s == 12.5e9  # 100 Gb/sec (2X HDR)


def test_no_infiniband_class_is_an_empty_list_not_an_error(host, clock):
    tree = host("typical")
    collector = InfinibandCollector(tree.paths, clock=clock)
    first, second = two_snapshots(collector, tree, clock)
    assert first == second == []
    assert run_collector(collector, NOW).error is None


def test_counter_reset_skips_that_port(host, clock):
    tree = host("counter_reset")
    _, samples = two_snapshots(InfinibandCollector(tree.paths, clock=clock), tree, clock)
    assert [(s.device, s.port) for s in samples] == [("mlx5_1", 1)]  # mlx5_0 counters cleared
    [sample] = samples
    assert (sample.rx_bytes_per_s, sample.tx_bytes_per_s) == (1_000_000.0, 2_000_000.0)
    assert (sample.rx_packets_per_s, sample.tx_packets_per_s) == (1_000.0, 2_000.0)


def _snap(rx_words: int, tx_words: int, rx_pk: int | None = 0, tx_pk: int | None = 0) -> PortSnapshot:
    raw = {
        "port_rcv_data": rx_words,
        "port_xmit_data": tx_words,
        "port_rcv_packets": rx_pk,
        "port_xmit_packets": tx_pk,
    }
    return PortSnapshot(port_counters(raw), None)


def test_saturated_32bit_data_counter_gives_no_rate():
    assert port_sample(*PORT1, _snap(100, 100), _snap(SATURATED_32, 200), 10.0, NOW) is None


def test_saturated_packet_counter_nulls_only_packets():
    sample = port_sample(*PORT1, _snap(100, 100, 10, 10), _snap(200, 200, SATURATED_32, 20), 10.0, NOW)
    assert sample is not None
    assert sample.rx_bytes_per_s == 40.0
    assert sample.rx_packets_per_s is None
    assert sample.tx_packets_per_s == 1.0


def test_missing_packet_counters_and_rate_are_null(copied_host, clock):
    root = copied_host("infiniband", "t0")
    port = root / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "counters" / "port_rcv_packets").unlink()
    (port / "rate").unlink()
    collector = InfinibandCollector(paths_at(root), clock=clock)
    collector.collect(NOW)
    clock.advance(10)
    [one, _] = collector.collect(LATER)
    assert one.rx_packets_per_s is None
    assert one.tx_packets_per_s == 0.0
    assert one.link_rate_bytes_per_s is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("200 Gb/sec (4X HDR)\n", 25e9),
        ("400 Gb/sec (4X NDR)", 50e9),
        ("2.5 Gb/sec (1X SDR)\n", 312_500_000.0),
        ("56 Gb/sec (4X FDR)\n", 7e9),
    ],
)
def test_parse_rate(text, expected):
    assert parse_rate(text) == expected


def test_malformed_rate_raises():
    with pytest.raises(ValueError, match="unrecognised rate 'fast'"):
        parse_rate("fast\n")


@pytest.mark.parametrize(("name", "text"), [("port_rcv_data", "lots\n"), ("rate", "100 Mb/s\n")])
def test_malformed_file_raises_naming_it(copied_host, name, text):
    root = copied_host("infiniband", "t0")
    port = root / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "2"
    (port / ("counters" if name.startswith("port_") else "") / name).write_text(text)
    collector = InfinibandCollector(paths_at(root))
    with pytest.raises(ValueError, match=rf"ports/2/.*{name}: "):
        collector.collect(NOW)
    run = run_collector(collector, NOW)
    assert run.error is not None and name in run.error


def test_missing_data_counter_raises(copied_host):
    root = copied_host("infiniband", "t0")
    (
        root / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters" / "port_xmit_data"
    ).unlink()
    with pytest.raises(ValueError, match="port_xmit_data are required"):
        InfinibandCollector(paths_at(root)).collect(NOW)


def test_factory_always_builds_the_collector(host, tmp_path):
    assert isinstance(make_infiniband(Settings(host_paths=host("infiniband").paths)), InfinibandCollector)
    # no HCA yet is fine: the driver may load later
    assert isinstance(make_infiniband(Settings(host_paths=paths_at(tmp_path))), InfinibandCollector)


def test_real_host():
    paths = HostPaths()
    if not (paths.sys / "class" / "infiniband").is_dir():
        pytest.skip("no /sys/class/infiniband here")
    collector = InfinibandCollector(paths)
    collector.collect(NOW)
    samples = collector.collect(LATER)
    assert all(isinstance(s, InfinibandSample) for s in samples)
