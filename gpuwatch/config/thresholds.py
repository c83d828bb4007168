"""Every number the cause rules compare against, in one frozen, documented model.

Each field says its default and where the default comes from. Sources:

* **DCGM** — NVIDIA DCGM User Guide, "Profiling Metrics": SM activity (``DCGM_FI_PROF_SM_ACTIVE``)
  below 0.5 "likely indicates ineffective GPU usage"; tensor-pipe activity is how mixed
  precision shows up.
* **jobstats** — Princeton Research Computing ``jobstats``: a GPU utilization of 15 % or less
  is shown red.
* **JDS** — Princeton Job Defense Shield: a GPU counts as idle when *every* sample in the
  window reads 0 %; jobs younger than a grace period are not judged.
* **project** — a gpuwatch default with no outside reference, chosen so the labelled corpus
  (``tests/classify/corpus``) separates its causes with margin; tune per site.

The model is standalone: ``Thresholds()`` gives the defaults, ``Thresholds(**table)`` reads a
``[classify]`` config table (unknown keys are refused).
"""

from __future__ import annotations

from pydantic import Field

from gpuwatch.config.section import Section


def _r(default: float, description: str) -> float:
    return Field(default, ge=0.0, le=1.0, description=description)


class Thresholds(Section):
    """Classifier thresholds (ratios are 0..1; rates in bytes/s; durations in seconds)."""

    # ------------------------------------------------------------------ windows
    grace_period_s: float = Field(
        600.0,
        ge=0,
        description="No verdict for a job younger than this (start-up, data staging). Source: JDS.",
    )
    recent_window_s: float = Field(
        600.0, gt=0, description="Length of the rolling 'recent' window. Source: project (matches the grace)."
    )
    min_window_minutes: int = Field(
        3, ge=1, description="A window with fewer minutes of GPU data gets no verdict. Source: project."
    )
    segment_min_minutes: int = Field(
        10,
        ge=1,
        description="A phase (segment window) lasts at least this many minutes of GPU data. Source: project.",
    )
    segment_min_shift_ratio: float = _r(
        0.3,
        "A GPU's mean utilization or SM activity must move by at least this between two phases "
        "to start a segment. Source: project.",
    )

    # ------------------------------------------------------------------ utilization
    util_low_ratio: float = _r(
        0.15, "Mean GPU utilization at or below this is 'low'. Source: jobstats (red)."
    )
    idle_zero_share: float = _r(
        1.0, "A GPU is idle when this share of its samples read exactly 0 %. Source: JDS (every sample zero)."
    )
    util_busy_ratio: float = _r(
        0.5, "Mean utilization at or above this counts as 'busy' (no-AMP, comm-bound). Source: project."
    )
    sm_active_low_ratio: float = _r(
        0.5, "SM activity below this is ineffective use of the GPU. Source: DCGM."
    )
    sm_occupancy_low_ratio: float = _r(
        0.2, "SM occupancy below this means too few warps resident (small kernels). Source: project."
    )

    # ------------------------------------------------------------------ input-bound
    duty_idle_fraction_ratio: float = _r(
        0.3,
        "Mean share of 1 s polls at 0 % inside samples at or above this, with bursts, is duty-cycling. "
        "Source: project.",
    )
    duty_burst_util_ratio: float = _r(
        0.6, "Utilization while not idle (mean / (1 - idle fraction)) at or above this. Source: project."
    )
    cpu_saturated_ratio: float = _r(
        0.9, "Job CPU use / allocated cores at or above this is saturated. Source: project."
    )
    cpu_busy_ratio: float = _r(
        0.5, "Job CPU use / allocated cores at or above this is 'busy' (CPU-only jobs). Source: project."
    )
    iowait_high_ratio: float = _r(
        0.2, "Host iowait share at or above this: the loader waits on storage. Source: project."
    )

    # ------------------------------------------------------------------ small work
    power_low_ratio: float = _r(
        0.35, "Mean power / enforced limit below this: the GPU barely works. Source: project."
    )
    memory_small_ratio: float = _r(
        0.25, "GPU memory used max / total below this: a small model or batch. Source: project."
    )

    # ------------------------------------------------------------------ mixed precision
    tensor_active_min_ratio: float = _r(
        0.05, "Tensor-pipe activity below this on a busy tensor-core GPU: no mixed precision. Source: DCGM."
    )
    fp64_active_min_ratio: float = _r(
        0.05,
        "FP64-pipe activity at or above this (and above FP32's) is a double-precision code, where "
        "FP16/BF16 autocast does not apply: no_mixed_precision is not claimed. Source: measured on an "
        "H200 (tests/gpu/fixtures/h200): deep-learning runs kept the FP64 pipe below 0.0001.",
    )

    # ------------------------------------------------------------------ memory
    gpu_memory_full_ratio: float = _r(
        0.95, "GPU memory used max / total at or above this is 'near full'. Source: project."
    )
    gpu_memory_pressure_util_ratio: float = _r(
        0.5, "... with mean utilization below this is GPU memory pressure. Source: project."
    )
    pcie_spill_bytes_per_s: float = Field(
        10e9,
        ge=0,
        description="Mean PCIe tx+rx per GPU at or above this, with GPU memory full and SM activity low, "
        "is spilling over the bus (offload, unified-memory paging): NVML utilization then reads high from "
        "the copies alone. Source: measured on an H200 (tests/gpu/fixtures/h200): the memory-pressure run "
        "moved 38 GB/s at 1 % SM activity, well-fed training 0.25-1.5 GB/s.",
    )
    host_memory_limit_ratio: float = _r(
        0.95, "Job cgroup memory max / limit at or above this is 'at limit'. Source: project."
    )
    host_swap_bytes_per_s: float = Field(
        1_048_576.0,
        ge=0,
        description="Host swap-in + swap-out at or above this is swapping (1 MiB/s). Source: project.",
    )
    memory_pressure_high_ratio: float = _r(
        0.1,
        "cgroup v2 memory PSI 'some' avg10 at or above this is pressure. Source: project (kernel PSI docs).",
    )

    # ------------------------------------------------------------------ never used
    gpu_memory_no_context_bytes: int = Field(
        128 * 1024 * 1024,
        ge=0,
        description="GPU memory used at or below this (128 MiB) means no CUDA context: the driver's own "
        "use with no process reads 0-3.4 MB on an H200, a context costs hundreds of MiB (780 MB to 1.7 GB "
        "measured). Source: measured on an H200 (tests/gpu/fixtures/h200).",
    )

    # ------------------------------------------------------------------ communication
    nvlink_high_bytes_per_s: float = Field(
        100e9, ge=0, description="Mean NVLink tx+rx per GPU at or above this is heavy. Source: project."
    )
    network_high_bytes_per_s: float = Field(
        2e9,
        ge=0,
        description="Mean NIC + IB bytes/s per node at or above this is heavy (16 Gb/s). Source: project.",
    )
    pcie_comm_bytes_per_s: float = Field(
        5e9,
        ge=0,
        description="Mean PCIe tx+rx per GPU at or above this, on a multi-GPU job with NVLink quiet, GPU "
        "memory not full, no idle gaps and SMs mostly inactive, is collectives crossing PCIe (a node "
        "without NVLink). Source: measured on an H200 (tests/gpu/fixtures/h200): two ranks' collectives "
        "through host memory moved 7.5 GB/s at 1 % SM activity, well-fed training 0.25-1.5 GB/s.",
    )

    # ------------------------------------------------------------------ throttling, faults
    throttled_share_ratio: float = _r(
        0.5,
        "A GPU throttled (any reason but gpu_idle and the power limiter alone) in at least this share of "
        "samples. Source: project.",
    )
    thermal_celsius: float = Field(
        85.0, description="Max temperature at or above this makes a throttle thermal. Source: project."
    )
    power_cap_ratio: float = _r(
        0.9,
        "Enforced power limit / the card's default limit below this is a power cap someone set: the power "
        "limiter then counts as throttling. Source: project (a cap within 10 % of the default costs a few "
        "per cent of speed at most).",
    )
    fault_min_samples: int = Field(
        1, ge=1, description="XID or lost samples needed for a GPU fault verdict. Source: project."
    )


DEFAULT_THRESHOLDS = Thresholds()
