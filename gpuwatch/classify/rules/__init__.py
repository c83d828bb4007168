"""One module per cause. Each exposes ``rule(features, thresholds) -> Verdict | Skipped | None``:

* a :class:`~gpuwatch.classify.verdict.Verdict` when the cause is seen,
* :class:`~gpuwatch.classify.verdict.Skipped` when a signal it needs is missing (no GPM on the
  card, no cgroup data), so the final verdict can say what could not be checked,
* ``None`` when the cause is ruled out.

:data:`RULES` is the order they run in; ``unknown_low`` and ``healthy`` are the fallbacks the
engine uses when no rule fires.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuwatch.classify.features import WindowFeatures
from gpuwatch.classify.rules import (
    communication_bound,
    cpu_only,
    gpu_fault,
    gpu_memory_pressure,
    host_memory_pressure,
    idle_allocation,
    input_bound,
    no_mixed_precision,
    small_work,
    throttled,
)
from gpuwatch.classify.verdict import Skipped, Verdict
from gpuwatch.config.thresholds import Thresholds

Rule = Callable[[WindowFeatures, Thresholds], "Verdict | Skipped | None"]

RULES: tuple[Rule, ...] = (
    gpu_fault.rule,
    cpu_only.rule,
    idle_allocation.rule,
    gpu_memory_pressure.rule,
    host_memory_pressure.rule,
    input_bound.rule,
    communication_bound.rule,
    small_work.rule,
    no_mixed_precision.rule,
    throttled.rule,
)
