"""InfiniBand port traffic from ``/sys/class/infiniband/<hca>/ports/<n>/counters``.

Per port, from the kernel's PMA counters (IBTA PortCounters/PortCountersExtended):

- ``port_rcv_data``/``port_xmit_data`` count 4-byte words (IBTA spec: octets / 4), so they
  are multiplied by 4 to give bytes;
- ``port_rcv_packets``/``port_xmit_packets`` count packets;
- ``ports/<n>/rate`` is the link rate as text, e.g. ``200 Gb/sec (4X HDR)``, converted to
  bytes/s (signalling rate as the kernel reports it, divided by 8).

Rates need two snapshots, so the first call returns nothing. A data counter that went
backwards (HCA reset, counters cleared with ``perfquery -R``) leaves that port out for the
cycle. HCAs without the extended counters expose 32-bit counters that *saturate* at
2**32-1 rather than wrap; a saturated data counter says nothing about traffic, so the port
is left out too. A saturated packet counter only nulls the packet rate.

No ``/sys/class/infiniband`` (no HCA, driver not loaded) is not an error: an empty list.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from gpuwatch.collectors.base import Collector, parse_uint, read_optional, register
from gpuwatch.config import HostPaths, Settings
from gpuwatch.wire import InfinibandSample

log = logging.getLogger(__name__)

#: IBTA: PortXmitData/PortRcvData are in units of 32-bit words
IB_DATA_WORD_BYTES = 4
#: the value at which the legacy 32-bit PMA counters stop counting
SATURATED_32 = 2**32 - 1

_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec\b")
_COUNTER_FILES = ("port_rcv_data", "port_xmit_data", "port_rcv_packets", "port_xmit_packets")


@dataclass(frozen=True)
class PortCounters:
    """Cumulative counters of one IB port; data already converted from words to bytes."""

    rx_bytes: int
    tx_bytes: int
    rx_packets: int | None
    tx_packets: int | None
    #: raw word counters kept to spot 32-bit saturation
    rx_words: int
    tx_words: int


@dataclass(frozen=True)
class PortSnapshot:
    """One port read at one time."""

    counters: PortCounters
    link_rate_bytes_per_s: float | None


def parse_rate(text: str) -> float:
    """``ports/<n>/rate`` text, e.g. ``200 Gb/sec (4X HDR)`` or ``2.5 Gb/sec (1X SDR)``, to bytes/s."""
    match = _RATE_RE.match(text)
    if match is None:
        raise ValueError(f"unrecognised rate {text.strip()!r}, expected '<n> Gb/sec (...)'")
    return float(match.group(1)) * 1e9 / 8


def port_counters(raw: dict[str, int | None]) -> PortCounters:
    """Build :class:`PortCounters` from counter file name -> value (packets may be None)."""
    rx_words, tx_words = raw["port_rcv_data"], raw["port_xmit_data"]
    if rx_words is None or tx_words is None:
        raise ValueError("port_rcv_data and port_xmit_data are required")
    return PortCounters(
        rx_bytes=rx_words * IB_DATA_WORD_BYTES,
        tx_bytes=tx_words * IB_DATA_WORD_BYTES,
        rx_packets=raw.get("port_rcv_packets"),
        tx_packets=raw.get("port_xmit_packets"),
        rx_words=rx_words,
        tx_words=tx_words,
    )


def _packet_rate(prev: int | None, cur: int | None, elapsed_s: float) -> float | None:
    if prev is None or cur is None or cur < prev or cur == SATURATED_32:
        return None
    return (cur - prev) / elapsed_s


def port_sample(
    device: str, port: int, prev: PortSnapshot, cur: PortSnapshot, elapsed_s: float, now: datetime
) -> InfinibandSample | None:
    """Rates of one port over the interval; None when the data counters cannot give one."""
    p, c = prev.counters, cur.counters
    if elapsed_s <= 0:
        return None
    if c.rx_bytes < p.rx_bytes or c.tx_bytes < p.tx_bytes:
        log.debug("%s port %d: data counter went backwards (reset); no rate this cycle", device, port)
        return None
    if SATURATED_32 in (c.rx_words, c.tx_words):
        log.debug("%s port %d: 32-bit data counter saturated; no rate this cycle", device, port)
        return None
    return InfinibandSample(
        ts=now,
        device=device,
        port=port,
        rx_bytes_per_s=(c.rx_bytes - p.rx_bytes) / elapsed_s,
        tx_bytes_per_s=(c.tx_bytes - p.tx_bytes) / elapsed_s,
        rx_packets_per_s=_packet_rate(p.rx_packets, c.rx_packets, elapsed_s),
        tx_packets_per_s=_packet_rate(p.tx_packets, c.tx_packets, elapsed_s),
        link_rate_bytes_per_s=cur.link_rate_bytes_per_s,
    )


def _read_port(port_dir: Path) -> PortSnapshot:
    counters_dir = port_dir / "counters"
    raw: dict[str, int | None] = {}
    for name in _COUNTER_FILES:
        raw[name] = read_optional(counters_dir / name, parse_uint)
    try:
        counters = port_counters(raw)
    except ValueError as exc:
        raise ValueError(f"{counters_dir}: {exc}") from exc
    rate_path = port_dir / "rate"
    try:
        rate_text = rate_path.read_text()
    except OSError:  # absent, or EINVAL from the driver while the port is down
        rate = None
    else:
        try:
            rate = parse_rate(rate_text)
        except ValueError as exc:
            raise ValueError(f"{rate_path}: {exc}") from exc
    return PortSnapshot(counters=counters, link_rate_bytes_per_s=rate)


class InfinibandCollector(Collector):
    """Emits one :class:`InfinibandSample` per HCA port from the second call on."""

    name = "infiniband"

    def __init__(self, paths: HostPaths, clock: Callable[[], float] = time.monotonic) -> None:
        self._root = paths.sys / "class" / "infiniband"
        self._clock = clock
        self._prev: tuple[float, dict[tuple[str, int], PortSnapshot]] | None = None

    def _read_all(self) -> dict[tuple[str, int], PortSnapshot]:
        ports: dict[tuple[str, int], PortSnapshot] = {}
        if not self._root.is_dir():
            return ports
        for hca in sorted(self._root.iterdir()):
            ports_dir = hca / "ports"
            if not ports_dir.is_dir():
                continue
            for port_dir in sorted(ports_dir.iterdir()):
                if not port_dir.name.isdigit() or not (port_dir / "counters").is_dir():
                    continue
                ports[(hca.name, int(port_dir.name))] = _read_port(port_dir)
        return ports

    def collect(self, now: datetime) -> Sequence[InfinibandSample]:
        cur = self._read_all()
        mono = self._clock()
        prev, self._prev = self._prev, (mono, cur)
        if prev is None:
            return []
        elapsed = mono - prev[0]
        samples = []
        for (device, port), snap in sorted(cur.items()):
            before = prev[1].get((device, port))
            if before is None:
                continue
            sample = port_sample(device, port, before, snap, elapsed, now)
            if sample is not None:
                samples.append(sample)
        return samples


@register("infiniband")
def make_infiniband(settings: Settings) -> Collector | None:
    """Always the collector: the IB driver may load after the agent starts (openibd ordering)."""
    return InfinibandCollector(settings.host_paths)
