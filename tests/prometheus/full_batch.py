"""A batch with every kind of sample and every exported series in it, from the fake NVML.

GPU 0 is an H200 with every reading and an XID, GPU 1 an A100 in MIG mode, GPU 2 a lost H200,
GPU 3 a V100 that retires pages (which the newer cards remap rows for instead);
the host samples cover every kind; an attribution and a process job id both name jobs.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pynvml

from gpuwatch.collectors.nvml_backend import NvmlBackend
from gpuwatch.wire import (
    AgentSample,
    AttributionSample,
    Batch,
    CpuSample,
    DiskSample,
    GpuProcess,
    GpuSample,
    InfinibandSample,
    JobSample,
    MemorySample,
    NicSample,
)
from tests.gpu.fake_pynvml import FakeMig, FakeNvml

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
NODE = "gpu-node-07"
GIB = 1024**3


def fake_node() -> tuple[FakeNvml, NvmlBackend]:
    fake = FakeNvml(["H200", "A100", "H200", "V100"])
    h200, a100, _, v100 = fake.gpus
    h200.util_gpu, h200.util_memory, h200.power_mw, h200.temperature = 87, 40, 650_000, 71
    h200.sm_clock_mhz, h200.memory_used, h200.ecc_corrected = 1980, 100 * GIB, 3
    h200.reasons = pynvml.nvmlClocksEventReasonSwPowerCap
    h200.remapped_correctable, h200.remap_pending, h200.pcie_replays = 2, True, 11
    v100.retired_sbe, v100.retired_dbe, v100.retired_pending = [0x1F000, 0x2A000], [0x3B000], True
    h200.processes = [(4242, 99 * GIB)]
    h200.gpm_rates = {
        getattr(pynvml, name): rate
        for name, rate in (
            ("NVML_GPM_METRIC_GRAPHICS_UTIL", 95.0),
            ("NVML_GPM_METRIC_SM_UTIL", 80.0),
            ("NVML_GPM_METRIC_SM_OCCUPANCY", 40.0),
            ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 50.0),
            ("NVML_GPM_METRIC_DRAM_BW_UTIL", 55.0),
            ("NVML_GPM_METRIC_FP32_UTIL", 10.0),
            ("NVML_GPM_METRIC_FP16_UTIL", 20.0),
            ("NVML_GPM_METRIC_FP64_UTIL", 1.0),
            ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", 1000.0),
            ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", 500.0),
            ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", 2000.0),
            ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", 3000.0),
        )
    }
    a100.mig_mode = (pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE)
    a100.mig_devices = [FakeMig(0, 1, 0, 40 * GIB, GIB), FakeMig(1, 2, 0, 40 * GIB)]
    fake.gpus[2].failure = pynvml.NVMLError_GpuIsLost
    return fake, NvmlBackend(nvml=fake, start_poller=False, clock=fake.clock)


def gpu_samples(fake: FakeNvml, backend: NvmlBackend) -> list[GpuSample]:
    """Two samples (rates need two), the second with an XID 13 on GPU 0."""
    fake.advance(10)
    backend.sample(NOW - timedelta(seconds=10))
    fake.raise_event(0, pynvml.nvmlEventTypeXidCriticalError, 13)
    assert backend.events is not None
    backend.events.wait_once(10)
    backend.poll()
    backend.poll()  # two polls: a std-dev
    fake.advance(10)
    samples = backend.sample(NOW)
    # the attribution below names job 555 for GPU 0; the process says 777 (a second job)
    first = samples[0]
    procs = [p.model_copy(update={"job_id": "777"}) for p in first.processes or []] or [GpuProcess(pid=1)]
    samples[0] = first.model_copy(update={"processes": procs})
    return samples


def host_samples() -> list:
    return [
        CpuSample(
            ts=NOW,
            cores=64,
            busy_ratio=0.5,
            user_ratio=0.4,
            system_ratio=0.05,
            iowait_ratio=0.05,
            steal_ratio=0.0,
            per_core_busy_ratio=[0.5] * 64,
            load1=12.5,
            threads_per_core=2,
        ),
        MemorySample(
            ts=NOW,
            total_bytes=512 * GIB,
            available_bytes=400 * GIB,
            used_bytes=112 * GIB,
            swap_total_bytes=8 * GIB,
            swap_used_bytes=GIB,
            swap_in_bytes_per_s=0.0,
            swap_out_bytes_per_s=4096.0,
        ),
        NicSample(
            ts=NOW,
            device="eth0",
            rx_bytes_per_s=1e6,
            tx_bytes_per_s=2e6,
            rx_packets_per_s=1000,
            tx_packets_per_s=2000,
            rx_errors=1,
            tx_errors=0,
        ),
        InfinibandSample(
            ts=NOW,
            device="mlx5_0",
            port=1,
            rx_bytes_per_s=5e9,
            tx_bytes_per_s=4e9,
            rx_packets_per_s=1e6,
            tx_packets_per_s=1e6,
            link_rate_bytes_per_s=50e9,
        ),
        DiskSample(
            ts=NOW,
            device="nvme0n1",
            read_bytes_per_s=1e8,
            write_bytes_per_s=2e7,
            reads_per_s=900,
            writes_per_s=100,
            busy_ratio=0.3,
        ),
        JobSample(
            ts=NOW,
            job_id="555",
            cpu_used_cores=7.5,
            cpu_allocated_cores=16,
            memory_used_bytes=64 * GIB,
            memory_limit_bytes=128 * GIB,
            memory_swap_bytes=0,
            memory_cache_bytes=8 * GIB,
            memory_pressure_ratio=0.01,
            cgroup_version=2,
        ),
        AttributionSample(
            ts=NOW,
            gpu_index=0,
            gpu_uuid=None,
            job_id="555",
            user="alice",
            uid=1001,
            source="prolog",
            pids=[4242],
        ),
        AgentSample(
            ts=NOW,
            spool_batches=2,
            spool_bytes=40_000,
            dropped_batches_total=1,
            collector_errors={"infiniband": "OSError: gone"},
            collector_seconds={"gpu": 0.004, "cpu": 0.001, "infiniband": 0.0002},
        ),
    ]


def full_batch(fake: FakeNvml, backend: NvmlBackend) -> Batch:
    return Batch(
        node=NODE,
        agent_version="test",
        seq=7,
        created_at=NOW,
        samples=[*gpu_samples(fake, backend), *host_samples()],
    )


class AgentCounters:
    """What AgentMetrics reads from a running Agent."""

    cycles = 42
    cycle_errors = 1
    skipped_ticks = 2
    sent_batches = 40
    rejected_batches = 0
    retried_sends = 5
    bundles_sent = 3
    merged_sends = 2
