"""The ``gpu`` collector and the factory that picks its backend.

``gpu.backend`` picks the backend (:func:`make_backend`): ``auto`` uses NVML when
``nvmlInit`` succeeds, else :mod:`~gpuwatch.collectors.amdsmi_backend` when amdsmi finds an
AMD GPU, and otherwise disables the collector, saying why once in the log; a node without
GPUs is "no data", not a failure. The backends themselves implement
:class:`~gpuwatch.collectors.gpu_backend.GpuBackend`.
"""

from __future__ import annotations

import logging
from datetime import datetime

from gpuwatch.collectors.base import Collector, register
from gpuwatch.collectors.frameworks import FrameworkLookup
from gpuwatch.collectors.gpu_backend import GpuBackend, GpuBackendUnavailable
from gpuwatch.collectors.gpu_processes import GPU_PROCESSES
from gpuwatch.config import GpuBackendKind, GpuConfig, Settings
from gpuwatch.wire import GpuSample

log = logging.getLogger(__name__)


class GpuCollector(Collector):
    """The ``gpu`` collector: whatever backend was chosen, sampled once per agent cycle.

    Each sample of a real GPU gets ``frameworks``, the deep-learning frameworks its compute
    processes have mapped (:mod:`gpuwatch.collectors.frameworks`), where ``frameworks`` (a
    lookup over ``/proc``) is given; simulated processes have no ``/proc`` entry to read.
    """

    name = "gpu"

    def __init__(self, backend: GpuBackend, frameworks: FrameworkLookup | None = None) -> None:
        self.backend = backend
        self.frameworks = frameworks

    def collect(self, now: datetime) -> list[GpuSample]:
        samples = self.backend.sample(now)
        if self.frameworks is not None and not self.backend.simulated:
            samples = [_with_frameworks(s, self.frameworks) for s in samples]
        # the attribution collector (which runs after this one) maps these pids to Slurm jobs
        GPU_PROCESSES.publish(samples)
        return samples

    def close(self) -> None:
        self.backend.close()


def _with_frameworks(sample: GpuSample, lookup: FrameworkLookup) -> GpuSample:
    if sample.processes is None or sample.frameworks is not None:
        return sample
    found = lookup.of_pids(p.pid for p in sample.processes)
    return sample if found is None else sample.model_copy(update={"frameworks": found})


_auto_disabled_logged = False


def make_backend(config: GpuConfig, *, interval_s: float) -> GpuBackend | None:
    """The backend ``config.backend`` asks for, or None when the collector is off.

    ``interval_s`` is the agent's sample interval; the simulated backends use it as the
    length of their first interval. ``nvml`` that cannot initialise raises
    :class:`GpuBackendUnavailable`; ``auto`` in the same case logs once and returns None.
    Each backend module is imported only when chosen: NVML's loads ``pynvml``.
    """
    global _auto_disabled_logged
    if config.backend is GpuBackendKind.NONE:
        return None
    if config.backend is GpuBackendKind.REPLAY:
        from gpuwatch.collectors.recording import ReplayBackend

        if config.replay_file is None:
            raise GpuBackendUnavailable("gpu.backend = 'replay' needs gpu.replay_file")
        return ReplayBackend(config.replay_file, loop=config.replay_loop)
    if config.backend is GpuBackendKind.SIM:
        from gpuwatch.collectors.sim_backend import SimulatedBackend

        return SimulatedBackend(
            config.sim_scenario,
            gpus=config.sim_gpus,
            seed=config.sim_seed,
            model=config.sim_model,
            poll_interval_s=config.poll_interval_s,
            interval_s=interval_s,
            mig=config.sim_mig,
        )
    if config.backend is GpuBackendKind.WORKLOAD:
        # simulated GPUs following a live `gpuwatch workload --activity-file` stream (no torch)
        from gpuwatch.collectors.workload_backend import WorkloadDrivenBackend

        if config.activity_file is None:
            raise GpuBackendUnavailable("gpu.backend = 'workload' needs gpu.activity_file")
        try:
            return WorkloadDrivenBackend(
                config.activity_file,
                model=config.sim_model,
                seed=config.sim_seed,
                poll_interval_s=config.poll_interval_s,
                interval_s=interval_s,
                follow=True,
            )
        except (OSError, ValueError) as exc:
            raise GpuBackendUnavailable(f"gpu.activity_file {config.activity_file}: {exc}") from exc
    from gpuwatch.collectors.amdsmi_backend import AmdSmiBackend  # imports amdsmi only when started
    from gpuwatch.collectors.nvml_backend import NvmlBackend

    if config.backend is GpuBackendKind.AMDSMI:
        try:
            return AmdSmiBackend(poll_interval_s=config.poll_interval_s)
        except GpuBackendUnavailable as exc:
            raise GpuBackendUnavailable(f"gpu.backend = 'amdsmi' but amdsmi cannot start: {exc}") from exc
    try:
        return NvmlBackend(poll_interval_s=config.poll_interval_s, watch_events=config.watch_events)
    except GpuBackendUnavailable as exc:
        if config.backend is GpuBackendKind.NVML:
            raise GpuBackendUnavailable(f"gpu.backend = 'nvml' but NVML cannot start: {exc}") from exc
        nvml_reason = exc
    try:  # auto: AMD GPUs next
        return AmdSmiBackend(poll_interval_s=config.poll_interval_s)
    except GpuBackendUnavailable as exc:
        if not _auto_disabled_logged:
            _auto_disabled_logged = True
            log.info("no NVIDIA GPU/driver (%s) nor AMD GPU (%s); GPU collector disabled", nvml_reason, exc)
        return None


@register("gpu")
def gpu_collector(settings: Settings) -> GpuCollector | None:
    """Factory for the agent: the GPU collector, or None on a node without GPUs."""
    backend = make_backend(settings.gpu, interval_s=settings.agent.interval_s)
    return (
        None
        if backend is None
        else GpuCollector(backend, frameworks=FrameworkLookup(settings.host_paths.proc))
    )
