"""Network interface traffic from ``/proc/net/dev``.

Each interface line is ``name: rx(bytes packets errs drop fifo frame compressed multicast)
tx(bytes packets errs drop fifo colls carrier compressed)``, cumulative since the device
came up. Rates are deltas over the collector's monotonic clock, so the first call returns
nothing. A counter that goes backwards (driver reload, device re-created, a 32-bit counter
wrapping) makes that device's rates unknown for this cycle: the device is left out rather
than sent with a negative or a made-up rate, and the next cycle has a clean baseline again.

``rx_errors``/``tx_errors`` are the ``errs`` counts during the interval (not since boot), so
a burst of errors shows up in the interval it happened in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuwatch.collectors.base import Collector, counter_deltas, read_parsed, register_proc_file
from gpuwatch.config import HostPaths
from gpuwatch.wire import NicSample

log = logging.getLogger(__name__)

DEFAULT_EXCLUDE = ("lo",)
_NUM_COLUMNS = 16


@dataclass(frozen=True)
class NetDevCounters:
    """The cumulative counters of one ``/proc/net/dev`` line that the sample uses."""

    rx_bytes: int
    rx_packets: int
    rx_errors: int
    tx_bytes: int
    tx_packets: int
    tx_errors: int


def parse_net_dev(text: str) -> dict[str, NetDevCounters]:
    """Parse ``/proc/net/dev`` into interface name -> counters (two header lines skipped)."""
    devices: dict[str, NetDevCounters] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        if not sep or "|" in line:  # the two header lines
            continue
        name = name.strip()
        values = rest.split()
        if len(values) < _NUM_COLUMNS:
            raise ValueError(f"{name}: {len(values)} columns, expected {_NUM_COLUMNS}")
        try:
            numbers = [int(v) for v in values[:_NUM_COLUMNS]]
        except ValueError:
            raise ValueError(f"{name}: non-integer counter in {rest.strip()!r}") from None
        devices[name] = NetDevCounters(
            rx_bytes=numbers[0],
            rx_packets=numbers[1],
            rx_errors=numbers[2],
            tx_bytes=numbers[8],
            tx_packets=numbers[9],
            tx_errors=numbers[10],
        )
    return devices


def nic_samples(
    prev: dict[str, NetDevCounters],
    cur: dict[str, NetDevCounters],
    elapsed_s: float,
    now: datetime,
    exclude: Iterable[str] = DEFAULT_EXCLUDE,
) -> list[NicSample]:
    """Rates for every interface in both snapshots, except excluded and reset ones."""
    skip = set(exclude)
    samples: list[NicSample] = []
    if elapsed_s <= 0:
        return samples
    for name in sorted(cur):
        if name in skip or name not in prev:
            continue
        delta = counter_deltas(prev[name], cur[name])
        if delta is None:
            log.debug("%s: a /proc/net/dev counter went backwards (reset or wrap); no rate this cycle", name)
            continue
        samples.append(
            NicSample(
                ts=now,
                device=name,
                rx_bytes_per_s=delta.rx_bytes / elapsed_s,
                tx_bytes_per_s=delta.tx_bytes / elapsed_s,
                rx_packets_per_s=delta.rx_packets / elapsed_s,
                tx_packets_per_s=delta.tx_packets / elapsed_s,
                rx_errors=delta.rx_errors,
                tx_errors=delta.tx_errors,
            )
        )
    return samples


class NicCollector(Collector):
    """Emits one :class:`NicSample` per interface from the second call on."""

    name = "nic"

    def __init__(
        self,
        paths: HostPaths,
        exclude: Iterable[str] = DEFAULT_EXCLUDE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._path = paths.proc / "net" / "dev"
        self._exclude = tuple(exclude)
        self._clock = clock
        self._prev: tuple[float, dict[str, NetDevCounters]] | None = None

    def collect(self, now: datetime) -> Sequence[NicSample]:
        cur = read_parsed(self._path, parse_net_dev)
        mono = self._clock()
        prev, self._prev = self._prev, (mono, cur)
        if prev is None:
            return []
        return nic_samples(prev[1], cur, mono - prev[0], now, self._exclude)


make_nic = register_proc_file("nic", "net/dev", NicCollector)
