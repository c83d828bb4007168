"""Each GPU process named with its Slurm job, from the same cycle's attribution.

The GPU collector reads the processes on each GPU (pid, memory, SM use) but not whose they are;
the attribution collector maps those pids to Slurm jobs (prolog map files, cgroups) into its
``AttributionSample.pids``. :func:`with_process_jobs` copies that job onto each process reading,
so ``gpuwatch processes`` answers "which pid of which job held GPU 3" from the readings alone,
and the agent's ``/metrics`` names the job of each process too.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuwatch.wire import AttributionSample, GpuProcess, GpuSample
from gpuwatch.wire.v1 import _Sample


def with_process_jobs(samples: Sequence[_Sample]) -> list[_Sample]:
    """``samples`` with every GPU process the cycle's attribution names given its job (a process
    that names one already keeps it; a pid two jobs claim is left without)."""
    jobs: dict[int, str | None] = {}
    for sample in samples:
        if isinstance(sample, AttributionSample):
            for pid in sample.pids or ():
                jobs[pid] = sample.job_id if jobs.get(pid, sample.job_id) == sample.job_id else None
    if not jobs:
        return list(samples)
    out: list[_Sample] = []
    for sample in samples:
        if isinstance(sample, GpuSample) and any(_unnamed(p, jobs) for p in sample.processes or ()):
            processes = [
                p.model_copy(update={"job_id": jobs[p.pid]}) if _unnamed(p, jobs) else p
                for p in sample.processes or ()
            ]
            sample = sample.model_copy(update={"processes": processes})
        out.append(sample)
    return out


def _unnamed(process: GpuProcess, jobs: dict[int, str | None]) -> bool:
    """A process without a job whose pid the attribution gives one job."""
    return process.job_id is None and jobs.get(process.pid) is not None
