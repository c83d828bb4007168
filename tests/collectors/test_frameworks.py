"""Frameworks from ``/proc/<pid>/maps``: the parser on recorded maps, the lookup on a /proc tree
and on live processes, and the GPU collector adding them to real GPUs' samples."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpuwatch.collectors.frameworks import FrameworkLookup, frameworks_in_maps
from gpuwatch.collectors.gpu import GpuCollector
from gpuwatch.collectors.nvml_backend import NvmlBackend
from gpuwatch.collectors.sim_backend import SimulatedBackend
from tests.gpu.fake_pynvml import FakeNvml

MAPS = Path(__file__).parent / "fixtures" / "maps"
NOW = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("recording", "expected"),
    [("torch-2.13.0-cpu.txt", {"pytorch"}), ("jax-0.10.2-cpu.txt", {"jax"}), ("python3-plain.txt", set())],
)
def test_recorded_maps(recording: str, expected: set[str]) -> None:
    assert frameworks_in_maps((MAPS / recording).read_text()) == expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so", "pytorch"),
        ("/usr/local/lib/python3.10/dist-packages/torch/lib/libc10_cuda.so", "pytorch"),
        ("/venv/lib/python3.11/site-packages/tensorflow/libtensorflow_framework.so.2", "tensorflow"),
        ("/venv/lib/python3.11/site-packages/tensorflow/python/_pywrap_tensorflow_internal.so", "tensorflow"),
        ("/venv/lib/python3.10/site-packages/jaxlib/xla_extension.so", "jax"),
        ("/venv/lib/python3.12/site-packages/jax_cuda12_plugin/xla_cuda_plugin.so", "jax"),
        ("/venv/lib/python3.10/site-packages/paddle/base/libpaddle.so", "paddle"),
    ],
)
def test_gpu_builds_and_other_frameworks(path: str, expected: str) -> None:
    line = f"7f3a2c000000-7f3a2e5f1000 r-xp 00000000 103:02 1234567                    {path}"
    assert frameworks_in_maps(line) == {expected}


@pytest.mark.parametrize(
    "path",
    [
        "/usr/lib/x86_64-linux-gnu/libcublas.so.12",  # CUDA libraries alone are not a framework
        "/opt/gromacs/lib/libgromacs.so.9",
        "/home/u/torch_utils/helpers.py",  # not a shared object
        "[heap]",
    ],
)
def test_what_is_not_a_framework(path: str) -> None:
    assert frameworks_in_maps(f"7f3a2c000000-7f3a2e5f1000 r-xp 00000000 103:02 1 {path}") == set()


def _process(proc: Path, pid: int, maps: str, start: int = 4242) -> None:
    base = proc / str(pid)
    base.mkdir(parents=True, exist_ok=True)
    fields = ["S", "1"] + ["0"] * 17 + [str(start), "0", "0"]
    (base / "stat").write_text(f"{pid} (python3 (worker)) {' '.join(fields)}\n")
    (base / "maps").write_text(maps)


def test_the_lookup_reads_a_process_once_and_again_when_its_pid_is_reused(tmp_path: Path) -> None:
    torch_maps = (MAPS / "torch-2.13.0-cpu.txt").read_text()
    _process(tmp_path, 100, torch_maps)
    lookup = FrameworkLookup(tmp_path)
    assert lookup.of_pid(100) == {"pytorch"}
    (tmp_path / "100" / "maps").write_text("")  # same process: the answer is kept
    assert lookup.of_pid(100) == {"pytorch"}
    _process(tmp_path, 100, (MAPS / "jax-0.10.2-cpu.txt").read_text(), start=9999)  # a new process
    assert lookup.of_pid(100) == {"jax"}


def test_unreadable_processes_are_unknown_not_none(tmp_path: Path) -> None:
    _process(tmp_path, 7, (MAPS / "python3-plain.txt").read_text())
    _process(tmp_path, 8, (MAPS / "torch-2.13.0-cpu.txt").read_text())
    lookup = FrameworkLookup(tmp_path)
    assert lookup.of_pid(12345) is None  # exited
    assert lookup.of_pids([12345]) is None  # nothing known
    assert lookup.of_pids([7, 12345]) == []  # read, and runs none
    assert lookup.of_pids([7, 8]) == ["pytorch"]


@pytest.fixture
def live_torch() -> Iterator[int]:
    """A real Python process with torch imported, until the test ends."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch not installed (the workload extra)")
    code = "import sys, torch; print('ready', flush=True); sys.stdin.read()"
    with subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            yield child.pid
        finally:
            child.kill()


def test_a_live_torch_process(live_torch: int) -> None:
    lookup = FrameworkLookup()
    assert lookup.of_pid(live_torch) == {"pytorch"}
    with subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    ) as plain:
        try:
            assert lookup.of_pid(plain.pid) == frozenset()
        finally:
            plain.kill()


def test_the_collector_names_the_framework_of_a_real_gpus_processes(tmp_path: Path) -> None:
    _process(tmp_path, 4242, (MAPS / "torch-2.13.0-cpu.txt").read_text())
    fake = FakeNvml(["H200", "H200"])
    fake.gpus[0].processes = [(4242, 10 * 2**30)]
    backend = NvmlBackend(nvml=fake, start_poller=False, clock=fake.clock)  # type: ignore[arg-type]
    try:
        fake.advance(10)
        busy, empty = GpuCollector(backend, frameworks=FrameworkLookup(tmp_path)).collect(NOW)
    finally:
        backend.close()
    assert busy.frameworks == ["pytorch"]
    assert empty.processes == [] and empty.frameworks is None  # no process: nothing to tell


def test_simulated_processes_are_not_looked_up(tmp_path: Path) -> None:
    sim = SimulatedBackend("training", gpus=1, seed=3)
    pid = sim.sample(NOW)[0].processes[0].pid  # type: ignore[index]
    _process(tmp_path, pid, (MAPS / "torch-2.13.0-cpu.txt").read_text())
    (sample,) = GpuCollector(
        SimulatedBackend("training", gpus=1, seed=3), frameworks=FrameworkLookup(tmp_path)
    ).collect(NOW)
    assert sample.frameworks is None
