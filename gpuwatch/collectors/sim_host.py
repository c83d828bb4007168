"""Simulated host and job-cgroup samples to go with simulated GPUs.

The simulated GPU backend says what a job's GPUs do; a cause like "input-bound" or "host
memory pressure" also needs what its CPUs, memory, network and cgroup show. A
:class:`HostProfile` describes that, and :func:`host_samples` turns it into the wire samples
the real host collectors would send — for the demo (``gpuwatch demo``) and the labelled
classifier corpus (``tests/classify/corpus.py``), so both build the same kind of node.
Every value is jittered by a seeded RNG the caller owns.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime

from gpuwatch import wire

GIB = 2**30
HOST_CORES = 64
HOST_MEMORY = 512 * GIB


@dataclass(frozen=True)
class HostProfile:
    """What one simulated node's CPUs, memory, network and the job's cgroup show."""

    cpu_alloc: float = 8.0  # cores allocated to the job per node
    cpu_used: float = 4.0  # cores the job uses per node
    iowait: float = 0.01
    swap_bytes_per_s: float = 0.0
    job_memory_ratio: float = 0.3  # used / limit
    job_memory_limit: int = 64 * GIB
    job_memory_cache_ratio: float = 0.0  # of the limit, page cache inside the used share (reclaimable)
    memory_pressure: float | None = 0.0
    nic_bytes_per_s: float = 2e6
    ib_bytes_per_s: float | None = None  # None: no IB port on the node
    job_samples: bool = True  # False: no cgroup data for the job
    threads_per_core: int | None = None  # SMT siblings per core the node reports (None: unknown)


def jitter(rng: random.Random, value: float, spread: float = 0.03) -> float:
    return max(0.0, value * (1.0 + spread * (2 * rng.random() - 1)))


def host_samples(h: HostProfile, job_id: str, ts: datetime, rng: random.Random) -> list:
    """CPU, memory, NIC, (IB) and (job cgroup) samples of one node at ``ts``."""
    used = min(h.cpu_alloc, jitter(rng, h.cpu_used))
    busy = min(1.0, max(0.02, used / HOST_CORES + 0.01))
    iowait = min(1.0 - busy, jitter(rng, h.iowait))
    swap = jitter(rng, h.swap_bytes_per_s)
    job_used = min(h.job_memory_limit, int(jitter(rng, h.job_memory_ratio, 0.005) * h.job_memory_limit))
    out: list = [
        wire.CpuSample(
            ts=ts,
            cores=HOST_CORES,
            busy_ratio=busy,
            user_ratio=busy * 0.9,
            system_ratio=busy * 0.1,
            iowait_ratio=iowait,
            threads_per_core=h.threads_per_core,
        ),
        wire.MemorySample(
            ts=ts,
            total_bytes=HOST_MEMORY,
            available_bytes=HOST_MEMORY - job_used - 8 * GIB,
            used_bytes=job_used + 8 * GIB,
            swap_total_bytes=16 * GIB,
            swap_used_bytes=int(min(16 * GIB, swap * 60)),
            swap_in_bytes_per_s=swap / 2,
            swap_out_bytes_per_s=swap / 2,
        ),
        wire.NicSample(
            ts=ts,
            device="eth0",
            rx_bytes_per_s=jitter(rng, h.nic_bytes_per_s * 0.7),
            tx_bytes_per_s=jitter(rng, h.nic_bytes_per_s * 0.3),
            rx_packets_per_s=1000,
            tx_packets_per_s=1000,
        ),
    ]
    if h.ib_bytes_per_s is not None:
        out.append(
            wire.InfinibandSample(
                ts=ts,
                device="mlx5_0",
                port=1,
                rx_bytes_per_s=jitter(rng, h.ib_bytes_per_s / 2),
                tx_bytes_per_s=jitter(rng, h.ib_bytes_per_s / 2),
                link_rate_bytes_per_s=25e9,
            )
        )
    if h.job_samples:
        out.append(
            wire.JobSample(
                ts=ts,
                job_id=job_id,
                cpu_used_cores=used,
                cpu_allocated_cores=h.cpu_alloc,
                memory_used_bytes=job_used,
                memory_cache_bytes=min(job_used, int(h.job_memory_cache_ratio * h.job_memory_limit)),
                memory_limit_bytes=h.job_memory_limit,
                memory_swap_bytes=int(swap * 30) if swap else 0,
                memory_pressure_ratio=h.memory_pressure,
                cgroup_version=2,
            )
        )
    return out
