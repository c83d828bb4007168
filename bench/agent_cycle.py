"""CPU time and memory of one agent sample cycle on this host.

    .venv/bin/python bench/agent_cycle.py [--cycles 200] [--gpus 8] [--wire 1,2]

Runs the real collectors against this machine's /proc and /sys (cpu, memory, nic,
infiniband, disk, jobs) plus the simulated GPU backend with N GPUs, building and
serializing one batch per cycle exactly as the agent does (no network; in wire format v2,
the agent's default, or each of ``--wire``). Prints the CPU
time per cycle for host collectors alone, for the GPU simulation alone, and for the
whole cycle, with the process RSS. The simulated GPU figure is NOT the cost of NVML on a
real GPU (bench/gpu_probe.py measures that on an H200).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuwatch.agent import Agent
from gpuwatch.collectors import build_collectors
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
    args = ap.parse_args()
    settings = load_settings(None, gpu={"backend": "sim", "sim_gpus": args.gpus, "sim_scenario": "training"})
    collectors = build_collectors(settings)
    host = [c for c in collectors if c.name != "gpu"]
    gpu = [c for c in collectors if c.name == "gpu"]
    for wire_format in (int(v) for v in args.wire.split(",")):
        for label, chosen in (
            ("host collectors", host),
            (f"sim GPU x{args.gpus}", gpu),
            ("whole cycle", collectors),
        ):
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
