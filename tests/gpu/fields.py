"""GpuSample fields that some GPUs never have, named once for every backend's tests."""

from __future__ import annotations

#: the GPM activity ratios (NVIDIA Hopper and later): None on older cards and on AMD
GPM_ACTIVITY = (
    "sm_active_ratio",
    "sm_occupancy_ratio",
    "tensor_active_ratio",
    "dram_active_ratio",
    "fp32_active_ratio",
    "fp16_active_ratio",
    "fp64_active_ratio",
)
#: fields only a MIG instance has, in the model's order
MIG_INSTANCE_ONLY = (
    "parent_gpu_index",
    "parent_uuid",
    "mig_gpu_instance_id",
    "mig_compute_instance_id",
    "card_fraction_ratio",
)
