"""CPU time and memory of one agent sample cycle on this host.

    .venv/bin/python bench/agent_cycle.py [--cycles 200] [--gpus 8] [--wire 1,2]
                                          [--jobs 64 [--jobs-baseline main]]

Runs the real collectors against this machine's /proc and /sys (cpu, memory, nic,
infiniband, disk, jobs) plus the simulated GPU backend with N GPUs, building and
serializing one batch per cycle exactly as the agent does (no network; in wire format v2,
the agent's default, or each of ``--wire``). Prints the CPU
time per cycle for host collectors alone, for the GPU simulation alone, and for the
whole cycle, with the process RSS. The simulated GPU figure is NOT the cost of NVML on a
real GPU (bench/gpu_probe.py measures that on an H200).

``--jobs N`` points the jobs collector at a fake cgroup v2 tree of N Slurm jobs in a temp dir
(``bench/job_cycle.py`` builds it); ``--jobs-baseline REV`` adds the whole cycle once more
with the jobs collector as it is at git ``REV``, for a before/after.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.job_cycle import StepClock, build_tree, load_baseline
from gpuwatch.agent import Agent
from gpuwatch.collectors import build_collectors
from gpuwatch.collectors.jobs import JobsCollector
from gpuwatch.config import load_settings
from gpuwatch.wire import v2 as wire_v2


def measure(agent: Agent, cycles: int, wire_format: int) -> tuple[list[float], int]:
    """CPU per cycle (collect + encode as the agent spools it) and the last body's bytes."""
    agent.collect_batch()  # first cycle primes counters (no rates yet)
    cpu = []
    body = b""
    for _ in range(cycles):
        t = time.process_time()
        body = wire_v2.encode(agent.collect_batch(), wire_format)
        cpu.append(time.process_time() - t)
    return cpu, len(body)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument(
        "--wire", default="2", help="comma-separated wire formats to encode in (1, 2), side by side"
    )
    ap.add_argument("--jobs", type=int, default=None, help="Slurm jobs in a fake cgroup v2 tree")
    ap.add_argument("--jobs-baseline", default=None, help="git rev of the jobs collector to compare")
    args = ap.parse_args()
    overrides = {}
    if args.jobs is not None:
        cgroup = Path(tempfile.mkdtemp(prefix="agent-cycle-")) / "cgroup"
        build_tree(cgroup, args.jobs)
        overrides["host_paths"] = {"cgroup": str(cgroup)}
    settings = load_settings(
        None, gpu={"backend": "sim", "sim_gpus": args.gpus, "sim_scenario": "training"}, **overrides
    )
    collectors = build_collectors(settings)
    interval_s = settings.agent.interval_s
    if args.jobs is not None:  # one virtual interval per cycle: limits re-read as often as on a node
        jobs = JobsCollector(settings.host_paths, StepClock(interval_s))
        collectors = [jobs if c.name == "jobs" else c for c in collectors]
    host = [c for c in collectors if c.name != "gpu"]
    gpu = [c for c in collectors if c.name == "gpu"]
    runs = [("host collectors", host), (f"sim GPU x{args.gpus}", gpu), ("whole cycle", collectors)]
    if args.jobs_baseline is not None:
        old = load_baseline(args.jobs_baseline).JobsCollector(settings.host_paths, StepClock(interval_s))
        runs.append(
            (f"whole, jobs@{args.jobs_baseline}", [old if c.name == "jobs" else c for c in collectors])
        )
    for wire_format in (int(v) for v in args.wire.split(",")):
        for label, chosen in runs:
            agent = Agent(settings, chosen, spool=None, pusher=None)
            cpu, size = measure(agent, args.cycles, wire_format)
            print(
                f"v{wire_format} {label:>16}: CPU per cycle median {statistics.median(cpu) * 1e3:.2f} ms, "
                f"p95 {statistics.quantiles(cpu, n=20)[18] * 1e3:.2f} ms over {args.cycles} cycles, "
                f"{size:,} B per batch ({', '.join(c.name for c in chosen)})"
            )
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"max RSS of this process: {rss_mb:.1f} MB")


if __name__ == "__main__":
    main()
