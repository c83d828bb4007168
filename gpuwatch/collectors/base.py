"""What every collector is, and the wrapper that runs one.

A collector reads one data source through :class:`~gpuwatch.config.HostPaths` (never a
literal ``/proc``), keeps whatever previous snapshot it needs for rates, and returns wire
samples. Parsing lives in pure ``parse_*`` functions beside it so tests feed them recorded
bytes. "No data" (no InfiniBand HCA, no Slurm job on the node) is an empty list; a real
failure raises, and :func:`run_collector` turns it into a recorded error so one broken
collector never stops the others (node_exporter's ``execute()``).
"""

from __future__ import annotations

import errno
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from gpuwatch.config import HostPaths, Settings
from gpuwatch.wire.v1 import _Sample

log = logging.getLogger(__name__)

T = TypeVar("T")
C = TypeVar("C")


def parse_uint(text: str) -> int:
    """A file holding one non-negative decimal integer: a sysfs counter, a cgroup's
    ``memory.current`` or ``cpuacct.usage``."""
    value = text.strip()
    if not value.isdigit():
        raise ValueError(f"not a non-negative integer: {value!r}")
    return int(value)


def counter_deltas(prev: C, cur: C) -> C | None:
    """Per-counter increase between two snapshots of a dataclass of cumulative counters (one
    device's ``/proc/diskstats`` or ``/proc/net/dev`` line); None if any counter went backwards
    (a reset or wrap: no rate this cycle)."""
    deltas = {f.name: getattr(cur, f.name) - getattr(prev, f.name) for f in fields(cur)}
    if any(d < 0 for d in deltas.values()):
        return None
    return replace(cur, **deltas)


def read_parsed(path: Path, parse: Callable[[str], T]) -> T:
    """``parse(text of path)`` for a file the collector cannot do without.

    A parse error names the file, so the collector's recorded error says which one was bad.
    """
    text = path.read_text()
    try:
        return parse(text)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def read_optional(
    path: Path, parse: Callable[[str], T], missing: Collection[int] = (errno.ENOENT,)
) -> T | None:
    """:func:`read_parsed`, or None when the file is absent ("no data", not a failure).

    ``missing`` lists the errnos that mean absent (cgroup files of a job that just ended also
    raise ENODEV).
    """
    try:
        return read_parsed(path, parse)
    except OSError as exc:
        if exc.errno in missing:
            return None
        raise


class Collector(ABC):
    """One data source. Subclasses set ``name`` and implement :meth:`collect`."""

    name: str = ""
    #: collectors that are on unless ``agent.collectors_disabled`` names them
    default_enabled: bool = True

    @abstractmethod
    def collect(self, now: datetime) -> Sequence[_Sample]:
        """Read the source once and return samples stamped ``now``.

        Counter-based collectors return nothing on their first call (they need two
        snapshots) and rates over the time between calls afterwards.
        """

    def close(self) -> None:  # noqa: B027 - optional hook, most collectors hold nothing
        """Release handles (NVML, event threads)."""


@dataclass
class CollectorRun:
    """Outcome of one collector run: its samples, duration and error if it failed."""

    name: str
    samples: list[_Sample] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None


_logged_failures: set[tuple[str, str]] = set()


def run_collector(collector: Collector, now: datetime) -> CollectorRun:
    """Run one collector, timing it; an exception becomes ``error`` and is logged once."""
    start = time.perf_counter()
    try:
        samples = list(collector.collect(now))
    except Exception as exc:  # a broken collector must not stop the agent
        message = f"{type(exc).__name__}: {exc}"
        key = (collector.name, message)
        if key not in _logged_failures:
            _logged_failures.add(key)
            log.warning("collector %s failed: %s", collector.name, message, exc_info=True)
        return CollectorRun(collector.name, [], time.perf_counter() - start, message)
    return CollectorRun(collector.name, samples, time.perf_counter() - start)


CollectorFactory = Callable[[Settings], Collector | None]

#: name -> factory; a factory returns None when the source does not exist on this host
REGISTRY: dict[str, CollectorFactory] = {}


def register(name: str) -> Callable[[CollectorFactory], CollectorFactory]:
    """Class/function decorator adding a collector factory under ``name``."""

    def deco(factory: CollectorFactory) -> CollectorFactory:
        if name in REGISTRY:
            raise ValueError(f"collector {name!r} registered twice")
        REGISTRY[name] = factory
        return factory

    return deco


def register_proc_file(name: str, proc_file: str, make: Callable[[HostPaths], Collector]) -> CollectorFactory:
    """Register the collector of one ``/proc`` file (``proc_file`` below ``host_paths.proc``):
    its factory gives None where that file is absent (not Linux)."""

    def factory(settings: Settings) -> Collector | None:
        paths = settings.host_paths
        return make(paths) if (paths.proc / proc_file).exists() else None

    factory.__doc__ = f"The {name} collector, or None where there is no ``/proc/{proc_file}`` (not Linux)."
    return register(name)(factory)
