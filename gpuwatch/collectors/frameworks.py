"""Which deep-learning framework a GPU process runs, from the libraries mapped into it.

Why: the classifier's advice depends on it. "Use mixed precision" is the fix for a PyTorch job
whose tensor cores sit idle, and the wrong one for a CUDA simulation written in FP32 or FP64 that
has no tensor-core path to switch on; the API to name differs between PyTorch, JAX and
TensorFlow. The process name cannot tell (every one of them is ``python``), but the shared
libraries a process has mapped can: ``/proc/<pid>/maps`` lists them by path, and a process that
holds a CUDA context has its framework's CUDA library loaded.

:func:`frameworks_in_maps` is the pure parser; :class:`FrameworkLookup` reads ``/proc`` once per
process (keyed by pid and start time, so a reused pid is read again) and keeps the answer.
The agent runs as root, so it can read every job's processes; a process that exited or that it
may not read gives no answer rather than an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

#: (framework, a pattern on a mapped file's path): libraries each framework's wheels install
#: and every process that imports it maps
_LIBRARIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    # torch/lib/libtorch_cpu.so and libc10.so in every build; libtorch_cuda.so, libc10_cuda.so
    # in CUDA builds (recorded: tests/collectors/fixtures/maps/torch-2.13.0-cpu.txt)
    ("pytorch", re.compile(r"/libtorch_(cpu|cuda)\.so|/libc10(_cuda)?\.so")),
    # tensorflow/libtensorflow_framework.so.2, python/_pywrap_tensorflow_internal.so
    ("tensorflow", re.compile(r"/libtensorflow_(framework|cc)\.so|/_pywrap_tensorflow_internal\.so")),
    # jaxlib/_jax.so and libjax_common.so (recorded: jax-0.10.2-cpu.txt), jaxlib/xla_extension.so
    # before jaxlib 0.4.36; the CUDA plugin's modules
    ("jax", re.compile(r"/jaxlib/(xla_extension|_jax|libjax_common)[^/]*\.so|/jax_cuda\d+_plugin/")),
    ("paddle", re.compile(r"/paddle/(base|fluid)/libpaddle\.so")),
    ("mxnet", re.compile(r"/libmxnet\.so")),
)


def frameworks_in_maps(text: str) -> frozenset[str]:
    """The frameworks whose libraries ``/proc/<pid>/maps`` text shows mapped; empty for none."""
    found: set[str] = set()
    for line in text.splitlines():
        slash = line.find("/")
        if slash < 0 or ".so" not in line:
            continue
        path = line[slash:]
        for name, pattern in _LIBRARIES:
            if name not in found and pattern.search(path):
                found.add(name)
    return frozenset(found)


def _start_time(stat: str) -> str | None:
    """Field 22 of ``/proc/<pid>/stat`` (the start time in clock ticks); the command name in
    field 2 may hold spaces and parentheses, so fields are counted after its last ``)``."""
    _, sep, rest = stat.rpartition(")")
    fields = rest.split()
    return fields[19] if sep and len(fields) > 19 else None


class FrameworkLookup:
    """Frameworks per process, read once per process from ``proc`` (``/proc``)."""

    def __init__(self, proc: Path | str = "/proc", max_cached: int = 4096) -> None:
        self.proc = Path(proc)
        self.max_cached = max_cached
        self._cache: dict[tuple[int, str], frozenset[str]] = {}

    def of_pid(self, pid: int) -> frozenset[str] | None:
        """The process's frameworks; None when it cannot be read (exited, not permitted)."""
        base = self.proc / str(pid)
        try:
            start = _start_time((base / "stat").read_text(errors="replace"))
        except OSError:
            return None
        key = (pid, start or "")
        if key in self._cache:
            return self._cache[key]
        try:
            found = frameworks_in_maps((base / "maps").read_text(errors="replace"))
        except OSError:
            return None
        if len(self._cache) >= self.max_cached:  # pids of processes long gone
            self._cache.clear()
        self._cache[key] = found
        return found

    def of_pids(self, pids: Iterable[int]) -> list[str] | None:
        """The frameworks of these processes, sorted; [] when none runs one; None when no
        process could be read (nothing is known, which is not the same as "none")."""
        names: set[str] = set()
        read = False
        for pid in pids:
            found = self.of_pid(pid)
            if found is not None:
                read = True
                names |= found
        return sorted(names) if read else None
