"""The idle_allocation rule: all or some of a job's GPUs read 0 % in every sample of the window (JDS);
the waste is the idle GPUs' share of the allocation.

The rule compares no number itself: a GPU is idle when its share of 0 % samples reaches
``idle_zero_share`` (:func:`gpuwatch.classify.features._gpu_features`), and the rule claims the
window's ``idle_gpus``. The threshold is tested where it is applied, feeding the rule."""

from __future__ import annotations

import pytest

from gpuwatch.classify.features import GpuFeatures, GpuRef, _gpu_features
from gpuwatch.classify.rules import idle_allocation
from gpuwatch.classify.verdict import Cause, Verdict
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS as T

from .window import assert_verdict, gpu, window


def idle_gpu(index: int) -> GpuFeatures:
    """An H200 at 0 % in every sample, holding a CUDA context (600 MiB) it never uses."""
    return gpu(
        gpu=f"n1/gpu{index}", util_mean=0.0, util_p50=0.0, util_p95=0.0, util_max=0.0, util_std=0.0,
        zero_share=1.0, idle_fraction_mean=1.0, burst_util=0.0, sm_active=0.0, tensor_active=0.0,
        memory_used_max_bytes=600 * 2**20, power_ratio=0.1, idle=True,
    )  # fmt: skip


def job(*gpus: GpuFeatures, **changes: object):
    """A one-node job holding ``gpus`` for an hour, its idle GPUs those flagged idle."""
    return window(
        gpu_count=len(gpus), gpus_with_data=sum(1 for g in gpus if g.samples), gpus=gpus,
        idle_gpus=tuple(g.gpu for g in gpus if g.idle), gpu_hours=float(len(gpus)), **changes,
    )  # fmt: skip


def test_every_gpu_idle() -> None:
    v = idle_allocation.rule(job(idle_gpu(0), idle_gpu(1), util_mean=0.0, job_util_max=0.0), T)
    assert_verdict(v, Cause.IDLE_ALLOCATION, 0.88)
    assert v.gpu_hours == 2.0 and v.gpu_hours_wasted == 2.0
    assert v.summary == "job j1: all 2 GPUs idle (0 % in every sample) — n1/gpu0, n1/gpu1"
    signals = v.evidence["signals"]
    assert signals["idle_gpus"] == ["n1/gpu0", "n1/gpu1"]
    assert signals["zero_share"] == {"n1/gpu0": 1.0, "n1/gpu1": 1.0}
    assert signals["idle_gpu_memory_used_bytes"] == {"n1/gpu0": 600 * 2**20, "n1/gpu1": 600 * 2**20}
    assert signals["gpu_count"] == 2 and signals["job_util_max"] == 0.0
    assert v.evidence["thresholds"] == {"idle_zero_share": T.idle_zero_share}
    assert v.evidence["missing"] == []


def test_one_idle_gpu_of_four_wastes_a_quarter() -> None:
    v = idle_allocation.rule(job(gpu(gpu="n1/gpu0"), gpu(gpu="n1/gpu1"), gpu(gpu="n1/gpu2"), idle_gpu(3)), T)
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == 0.85
    assert v.gpu_hours == 4.0 and v.gpu_hours_wasted == 1.0
    assert v.summary == "job j1: 1 of 4 GPUs idle (0 % in every sample) — n1/gpu3"
    # only the idle GPU's numbers are evidence
    assert v.evidence["signals"]["zero_share"] == {"n1/gpu3": 1.0}
    assert v.evidence["signals"]["idle_gpu_memory_used_bytes"] == {"n1/gpu3": 600 * 2**20}


def test_a_long_list_of_idle_gpus_is_shortened() -> None:
    v = idle_allocation.rule(job(*(idle_gpu(i) for i in range(6))), T)
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == 0.88 and v.gpu_hours_wasted == 6.0
    assert v.summary.endswith("all 6 GPUs idle (0 % in every sample) — n1/gpu0, n1/gpu1, n1/gpu2, "
                              "n1/gpu3 and 2 more")  # fmt: skip
    assert len(v.evidence["signals"]["idle_gpus"]) == 6


@pytest.mark.parametrize(("count", "tail"), [(4, "n1/gpu2, n1/gpu3"), (5, "n1/gpu3 and 1 more")])
def test_up_to_four_idle_gpus_are_listed_in_full(count: int, tail: str) -> None:
    v = idle_allocation.rule(job(*(idle_gpu(i) for i in range(count))), T)
    assert isinstance(v, Verdict) and v.summary.endswith(tail)


def test_a_healthy_window_is_not_idle() -> None:
    assert idle_allocation.rule(window(), T) is None
    assert idle_allocation.rule(job(gpu(gpu="n1/gpu0"), gpu(gpu="n1/gpu1")), T) is None


def test_a_barely_used_gpu_is_not_idle() -> None:
    """1 % utilization, mostly 0 % samples: low (another rule's), but not idle."""
    barely = gpu(util_mean=0.01, zero_share=0.9, idle_fraction_mean=0.95, sm_active=0.01, idle=False)
    assert idle_allocation.rule(job(barely, util_mean=0.01, sm_active=0.01), T) is None


def _one_hour(zero_samples: int) -> GpuFeatures:
    """One GPU's features from an hour of 10 s samples, ``zero_samples`` of them at 0 %, the rest
    in the lowest busy bin."""
    n = 360
    row = {
        "minutes": 60, "samples": n, "util_gpu_ratio_n": n, "util_gpu_ratio_sum": 0.05 * (n - zero_samples),
        "bin0": zero_samples, "bin1": n - zero_samples,
    }  # fmt: skip
    return _gpu_features(GpuRef(1, "n1", 0), row, "NVIDIA H200", None, T)


@pytest.mark.parametrize(("below", "fires"), [(0, True), (1, False)])
def test_the_idle_zero_share_threshold(below: int, fires: bool) -> None:
    """A GPU whose share of 0 % samples is exactly ``idle_zero_share`` is idle; one sample fewer
    is not, and the rule then has nothing to claim."""
    zeros = round(T.idle_zero_share * 360) - below
    g = _one_hour(zeros)
    assert g.zero_share == pytest.approx(zeros / 360, abs=1e-6)
    assert g.idle is fires
    v = idle_allocation.rule(job(g), T)
    assert isinstance(v, Verdict) is fires
    if fires:
        assert v.evidence["signals"]["zero_share"] == {"n1/gpu0": g.zero_share}


def test_a_gpu_without_samples_is_missing_not_idle() -> None:
    """A GPU with no utilization samples is listed as missing; it is not counted idle, so the
    waste is the one idle GPU's half."""
    silent = gpu(gpu="n1/gpu1", samples=0, util_samples=0, util_mean=None, zero_share=None, idle=False)
    v = idle_allocation.rule(job(idle_gpu(0), silent), T)
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == 0.85
    assert v.gpu_hours_wasted == 1.0
    assert v.evidence["missing"] == ["util_gpu"]
    assert v.evidence["notes"] == ["no utilization samples for n1/gpu1"]


def test_gpus_without_samples_alone_are_no_verdict() -> None:
    """No samples at all is no evidence of idleness: the GPU is not flagged, the rule is silent."""
    silent = _gpu_features(GpuRef(1, "n1", 0), None, "NVIDIA H200", None, T)
    assert silent.util_samples == 0 and silent.idle is False
    assert idle_allocation.rule(job(silent, util_mean=None), T) is None
