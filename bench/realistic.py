"""GPU values that move as a training job's do, for the storage benchmarks.

``bench/ingest.py``'s batches carry the same values every cycle, which compress far better than
a GPU's readings do: utilization in whole percent around 95 %, power in milliwatts, the
total-energy counter rising by what the power spent, temperature in whole degrees, SM clocks that
step down now and then, GPM ratios, and PCIe and NVLink rates with noise.
"""

from __future__ import annotations

import random

from gpuwatch import wire


class Realistic:
    """Rewrites GPU samples with moving values; one instance keeps each GPU's energy counter."""

    def __init__(self, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.energy: dict[tuple[str, int], float] = {}

    def gpu(self, node: str, s: wire.GpuSample) -> wire.GpuSample:
        rng = self.rng
        key = (node, s.gpu_index)
        util = min(100, max(0, round(rng.gauss(95, 4)))) / 100
        power = round(rng.uniform(520_000, 690_000)) / 1000  # NVML: milliwatts
        self.energy[key] = self.energy.get(key, rng.uniform(1e8, 1e9)) + power * 10
        sm = rng.uniform(0.55, 0.75)
        return s.model_copy(
            update={
                "util_gpu_ratio": util,
                "util_memory_ratio": min(100, max(0, round(rng.gauss(40, 5)))) / 100,
                "util_gpu_idle_fraction_ratio": rng.choice([0.0, 0.0, 0.0, 0.1]),
                "util_gpu_stddev_ratio": round(rng.uniform(0, 0.05), 4),
                "memory_used_bytes": (60_000 + rng.choice([0, 0, 0, 2, 4])) * 2**20,
                "power_watts": power,
                "power_default_limit_watts": 700.0,
                "energy_joules": round(self.energy[key], 3),
                "sm_clock_hz": rng.choice([1980, 1980, 1980, 1965, 1950]) * 1e6,
                "sm_clock_max_hz": 1980e6,
                "memory_clock_hz": 2619e6,
                "memory_clock_max_hz": 2619e6,
                "temperature_celsius": float(rng.randint(58, 74)),
                "throttle_reasons": rng.choice([[], [], ["sw_power_cap"]]),
                "pcie_tx_bytes_per_s": rng.uniform(1e8, 3e9),
                "pcie_rx_bytes_per_s": rng.uniform(1e8, 3e9),
                "nvlink_tx_bytes_per_s": rng.uniform(1e10, 1e11),
                "nvlink_rx_bytes_per_s": rng.uniform(1e10, 1e11),
                "ecc_corrected_errors": 0,
                "ecc_uncorrected_errors": 0,
                # a healthy H200: rows remapped, nothing pending (pages are not retired on it)
                "remapped_rows_correctable": 0,
                "remapped_rows_uncorrectable": 0,
                "row_remap_pending": False,
                "row_remap_failed": False,
                "pcie_replay_errors": 0,
                "frameworks": ["pytorch"],
                "sm_active_ratio": sm,
                "sm_occupancy_ratio": sm * rng.uniform(0.4, 0.6),
                "tensor_active_ratio": sm * rng.uniform(0.3, 0.5),
                "dram_active_ratio": rng.uniform(0.2, 0.5),
                "fp32_active_ratio": rng.uniform(0.0, 0.1),
                "fp16_active_ratio": sm * rng.uniform(0.2, 0.4),
                "fp64_active_ratio": 0.0,
                "gr_engine_active_ratio": util,
            }
        )

    def samples(self, node: str, samples: list) -> list:
        """``samples`` with each GPU sample's values moved (host samples as they are)."""
        return [self.gpu(node, s) if isinstance(s, wire.GpuSample) else s for s in samples]


def realistic(batches: list[wire.Batch], seed: int = 1) -> list[wire.Batch]:
    """``batches`` with their GPU samples' values moved (:class:`Realistic`)."""
    moving = Realistic(seed)
    return [b.model_copy(update={"samples": moving.samples(b.node, b.samples)}) for b in batches]
