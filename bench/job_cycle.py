"""CPU per cycle of the jobs collector (Slurm job cgroups) at 8 / 64 / 256 jobs.

    .venv/bin/python bench/job_cycle.py [--jobs 8,64,256] [--cycles 100] [--rounds 3]
                                        [--cgroup 2,1] [--baseline main] [--kernfs MOUNT]

Builds a fake cgroup tree of N jobs in a temp dir: real files, each job a copy of a recorded
fixture job (``tests/fixtures/hosts/cgroup_v2/t0/.../job_101`` for v2; ``job_201`` under
``cpuacct``, ``memory`` and ``cpuset`` for v1). Then runs the collector of this checkout and
the one at ``--baseline`` (``git show <rev>:gpuwatch/collectors/jobs.py``, loaded as a
separate module) against the same tree, alternating in ``--rounds`` rounds of ``--cycles``
cycles, and prints the median over rounds of CPU time (``time.process_time``) per cycle, each
side, and the ratio. Copied files live on tmpfs or disk, where the kernel's side of an open
or a read costs less than on cgroupfs; ``--kernfs /sys/fs/cgroup`` (root, cgroup v1
hierarchies) makes N real, empty job cgroups instead, under a name no collector reads, and
removes them at the end.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpuwatch.collectors import base  # noqa: E402
from gpuwatch.collectors.jobs import JobsCollector  # noqa: E402
from gpuwatch.config import HostPaths  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "hosts"
V2_SCOPE = ("system.slice", "slurmstepd.scope")
V1_JOB = ("slurm", "uid_1000", "job_201")
V1_CONTROLLERS = ("cpuacct", "memory", "cpuset")
FIRST_JOB_ID = 1000


def build_v2_tree(cgroup: Path, jobs: int) -> None:
    """``cgroup/`` as Slurm cgroup/v2 leaves it, with ``jobs`` copies of fixture job_101."""
    recorded = FIXTURES / "cgroup_v2" / "t0" / "cgroup"
    cgroup.mkdir(parents=True)
    shutil.copy(recorded / "cgroup.controllers", cgroup / "cgroup.controllers")
    scope = cgroup.joinpath(*V2_SCOPE)
    shutil.copytree(recorded.joinpath(*V2_SCOPE, "system"), scope / "system")
    for i in range(jobs):
        shutil.copytree(recorded.joinpath(*V2_SCOPE, "job_101"), scope / f"job_{FIRST_JOB_ID + i}")


def build_v1_tree(cgroup: Path, jobs: int) -> None:
    """``cgroup/`` as Slurm cgroup/v1 leaves it, with ``jobs`` copies of fixture job_201."""
    recorded = FIXTURES / "cgroup_v1" / "t0" / "cgroup"
    cgroup.mkdir(parents=True)
    for controller in V1_CONTROLLERS:
        uid_dir = cgroup.joinpath(controller, *V1_JOB[:-1])
        uid_dir.mkdir(parents=True)
        for i in range(jobs):
            shutil.copytree(recorded.joinpath(controller, *V1_JOB), uid_dir / f"job_{FIRST_JOB_ID + i}")


def build_tree(cgroup: Path, jobs: int, version: int = 2) -> None:
    """A fake cgroup mount at ``cgroup`` holding ``jobs`` Slurm jobs in cgroup ``version``."""
    (build_v2_tree if version == 2 else build_v1_tree)(cgroup, jobs)


def _make_cgroup(path: Path, made: list[Path]) -> None:
    """mkdir one real v1 cgroup; a cpuset one gets its parent's CPUs and memory nodes."""
    path.mkdir()
    made.append(path)
    if (path.parent / "cpuset.cpus").exists():
        for name in ("cpuset.cpus", "cpuset.mems"):
            (path / name).write_text((path.parent / name).read_text())


@contextmanager
def kernfs_v1_tree(mount: Path, jobs: int) -> Iterator[Path]:
    """``jobs`` real, empty Slurm-like job cgroups in the v1 hierarchies under ``mount``.

    Made under ``<mount>/<controller>/gpuwatch-bench-<pid>/`` (a name no collector reads) and
    removed on exit; yields a temp dir whose ``<controller>`` links point there, as a
    cgroup root for the collector. Needs root and cgroup v1 hierarchies.
    """
    made: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="jobs-bench-kernfs-") as tmp:
        root = Path(tmp) / "cgroup"
        root.mkdir()
        try:
            for controller in V1_CONTROLLERS:
                top = mount / controller / f"gpuwatch-bench-{os.getpid()}"
                (root / controller).symlink_to(top)
                for level in (top, top / "slurm", top / "slurm" / "uid_0"):
                    _make_cgroup(level, made)
                for i in range(jobs):
                    _make_cgroup(top / "slurm" / "uid_0" / f"job_{FIRST_JOB_ID + i}", made)
            yield root
        finally:
            for path in reversed(made):
                path.rmdir()


@contextmanager
def job_tree(jobs: int, version: int, kernfs: Path | None) -> Iterator[Path]:
    """A cgroup root with ``jobs`` jobs: copied fixture files, or real v1 cgroups (``kernfs``)."""
    if kernfs is not None:
        with kernfs_v1_tree(kernfs, jobs) as root:
            yield root
        return
    with tempfile.TemporaryDirectory(prefix="jobs-bench-") as tmp:
        build_tree(Path(tmp) / "cgroup", jobs, version)
        yield Path(tmp) / "cgroup"


@contextmanager
def _registry_slot_free(name: str):
    """Let a second copy of a collector module register itself, then put the first back."""
    kept = base.REGISTRY.pop(name, None)
    try:
        yield
    finally:
        if kept is not None:
            base.REGISTRY[name] = kept


def load_baseline(rev: str) -> ModuleType:
    """``gpuwatch/collectors/jobs.py`` as it is at git ``rev``, as a module of its own."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:gpuwatch/collectors/jobs.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="jobs-baseline-")) / "jobs_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("jobs_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    with _registry_slot_free("jobs"):
        spec.loader.exec_module(module)
    return module


def cpu_per_cycle(collect: Callable[[datetime], Any], cycles: int) -> float:
    """Mean CPU seconds per ``collect`` call over ``cycles`` calls."""
    now = datetime.now(timezone.utc)
    start = time.process_time()
    for _ in range(cycles):
        collect(now)
    return (time.process_time() - start) / cycles


class StepClock:
    """A monotonic clock that moves ``interval_s`` per reading: one reading per collector cycle,
    so limit re-reads come as often per cycle as on a node sampling every ``interval_s``."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.now = 0.0

    def __call__(self) -> float:
        self.now += self.interval_s
        return self.now


def compare(paths: HostPaths, baseline: ModuleType | None, options: argparse.Namespace) -> dict[str, float]:
    """Median over rounds of CPU per cycle for this checkout's collector and the baseline's."""
    sides: dict[str, Any] = {
        "new": JobsCollector(paths, clock=StepClock(options.interval), max_kept_fds=options.max_kept_fds)
    }
    if baseline is not None:
        sides["baseline"] = baseline.JobsCollector(paths, clock=StepClock(options.interval))
    per_round: dict[str, list[float]] = {name: [] for name in sides}
    for collector in sides.values():
        collector.collect(datetime.now(timezone.utc))  # first cycle opens and primes rates
    for _ in range(options.rounds):
        for name, collector in sides.items():
            per_round[name].append(cpu_per_cycle(collector.collect, options.cycles))
    for collector in sides.values():
        collector.close()
    return {name: statistics.median(values) for name, values in per_round.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", default="8,64,256", help="comma-separated job counts")
    ap.add_argument("--cycles", type=int, default=100, help="cycles per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cgroup", default="2,1", help="comma-separated cgroup versions (2, 1)")
    ap.add_argument("--baseline", default="main", help="git rev to compare with; 'none' to skip")
    ap.add_argument("--interval", type=float, default=10.0, help="virtual seconds between cycles")
    ap.add_argument("--max-kept-fds", type=int, default=None, help="fd cap of the new collector")
    ap.add_argument(
        "--kernfs",
        type=Path,
        default=None,
        help="v1 cgroup mount (/sys/fs/cgroup) to make real job cgroups in, instead of copied files",
    )
    args = ap.parse_args()
    baseline = None if args.baseline == "none" else load_baseline(args.baseline)
    versions = [1] if args.kernfs is not None else [int(v) for v in args.cgroup.split(",")]
    where = "cgroupfs" if args.kernfs is not None else "files"
    for version in versions:
        for jobs in (int(n) for n in args.jobs.split(",")):
            with job_tree(jobs, version, args.kernfs) as cgroup:
                result = compare(HostPaths(cgroup=cgroup), baseline, args)
            line = f"cgroup v{version} ({where}) {jobs:>4} jobs: new {result['new'] * 1e3:6.3f} ms/cycle"
            if "baseline" in result:
                line += (
                    f", {args.baseline} {result['baseline'] * 1e3:6.3f} ms/cycle,"
                    f" {result['baseline'] / result['new']:5.1f}x less CPU"
                )
            print(line, flush=True)


if __name__ == "__main__":
    main()
