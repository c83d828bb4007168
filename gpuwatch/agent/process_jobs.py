"""Each GPU process named with its Slurm job, from the same cycle's attribution.

The GPU collector reads the processes on each GPU (pid, memory, SM use) but not whose they are;
the attribution collector maps GPUs and pids to Slurm jobs (prolog map files, cgroups) into its
``AttributionSample``. :func:`with_process_jobs` copies that job onto each process reading, so
``gpuwatch processes`` answers "which pid of which job held GPU 3" from the readings alone, and
the agent's ``/metrics`` names the job of each process too.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuwatch.wire import AttributionSample, GpuProcess, GpuSample
from gpuwatch.wire.v1 import _Sample


def with_process_jobs(samples: Sequence[_Sample]) -> list[_Sample]:
    """``samples`` with each GPU process given its job: the job whose attributed ``pids`` hold
    its pid, else, where the attribution did not read the GPU's processes (``pids`` None), the
    one job the GPU is attributed to (Slurm confines a job's processes to its GPUs). A process
    that names a job keeps it; a pid two jobs claim, or a GPU two jobs share, names none."""
    by_pid: dict[int, str | None] = {}
    by_gpu: dict[int, set[str]] = {}
    for sample in samples:
        if not isinstance(sample, AttributionSample):
            continue
        if sample.pids is None:
            by_gpu.setdefault(sample.gpu_index, set()).add(sample.job_id)
        for pid in sample.pids or ():
            by_pid[pid] = sample.job_id if by_pid.get(pid, sample.job_id) == sample.job_id else None
    if not by_pid and not by_gpu:
        return list(samples)
    out: list[_Sample] = []
    for sample in samples:
        if isinstance(sample, GpuSample) and sample.processes:
            gpu_jobs = by_gpu.get(sample.gpu_index, set())
            only = next(iter(gpu_jobs)) if len(gpu_jobs) == 1 else None
            named = [_named(p, by_pid, only) for p in sample.processes]
            if named != sample.processes:
                sample = sample.model_copy(update={"processes": named})
        out.append(sample)
    return out


def _named(process: GpuProcess, by_pid: dict[int, str | None], gpu_job: str | None) -> GpuProcess:
    if process.job_id is not None:
        return process
    job = by_pid.get(process.pid, gpu_job)
    return process if job is None else process.model_copy(update={"job_id": job})
