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
#: page retirement (before Ampere, ECC on): None on Ampere and newer, which remap rows instead
PAGE_RETIREMENT = ("retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending")
#: row remapping (Ampere and newer): None before
ROW_REMAPPING = (
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "row_remap_pending",
    "row_remap_failed",
)
