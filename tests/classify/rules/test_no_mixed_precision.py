"""The no_mixed_precision rule: SMs busy while the tensor pipes stay near 0 on a GPU that has
tensor cores. Claimed only where tensor activity is measured (GPM); elsewhere it is Skipped.
The waste assumes mixed precision would halve the time."""

from __future__ import annotations

import pytest

from gpuwatch.classify.rules import no_mixed_precision
from gpuwatch.classify.verdict import Cause, Skipped, Verdict
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS as T

from .window import assert_verdict, window

#: fp32 pipe activity at or above this makes the claim surer: a constant in the rule, not a threshold
FP32_HEAVY = 0.3

#: an fp32 training loop on an H200: SMs busy, fp32 pipes busy, tensor pipes idle
FP32_TRAINING = {"sm_active": 0.8, "tensor_active": 0.0, "fp32_active": 0.6, "fp16_active": 0.0}


def fp32(**changes: object):
    return window(**{**FP32_TRAINING, **changes})


def test_fp32_training_on_tensor_cores() -> None:
    v = no_mixed_precision.rule(fp32(gpu_count=2, gpu_hours=2.0), T)
    assert_verdict(v, Cause.NO_MIXED_PRECISION, 0.85)
    assert v.gpu_hours_wasted == 1.0  # half of the two GPU-hours
    assert v.summary == "job j1: SMs busy (80%) but tensor cores idle (0%) — no mixed precision"
    signals = v.evidence["signals"]
    assert signals["sm_active"] == 0.8 and signals["tensor_active"] == 0.0
    assert signals["fp32_active"] == 0.6 and signals["fp16_active"] == 0.0 and signals["tensor_cores"] is True
    assert v.evidence["thresholds"] == {
        "sm_active_low_ratio": T.sm_active_low_ratio, "tensor_active_min_ratio": T.tensor_active_min_ratio,
    }  # fmt: skip
    assert any("halve the time" in note for note in v.evidence["notes"])


def test_busy_sms_with_little_fp32_is_a_weaker_claim() -> None:
    v = no_mixed_precision.rule(fp32(fp32_active=0.1), T)
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == 0.75


@pytest.mark.parametrize(("fp32_active", "confidence"), [(FP32_HEAVY, 0.85), (FP32_HEAVY - 0.01, 0.75)])
def test_the_fp32_share_that_raises_confidence(fp32_active: float, confidence: float) -> None:
    v = no_mixed_precision.rule(fp32(fp32_active=fp32_active), T)
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == confidence


def test_mixed_precision_is_healthy() -> None:
    assert no_mixed_precision.rule(window(), T) is None  # tensor pipes 50 % active


def test_a_card_without_tensor_cores_is_not_blamed() -> None:
    pascal = fp32(models=("Tesla P100-PCIE-16GB",), tensor_cores=False)
    assert no_mixed_precision.rule(pascal, T) is None


def test_idle_sms_are_not_no_mixed_precision() -> None:
    assert no_mixed_precision.rule(fp32(sm_active=0.2, util_mean=0.3), T) is None


def test_an_unknown_model_is_given_the_benefit_of_tensor_cores() -> None:
    v = no_mixed_precision.rule(fp32(models=(), tensor_cores=None), T)
    assert isinstance(v, Verdict) and v.evidence["signals"]["tensor_cores"] is None


@pytest.mark.parametrize(
    ("sm_active", "fires"), [(T.sm_active_low_ratio, True), (T.sm_active_low_ratio - 0.01, False)]
)
def test_the_sm_busy_threshold(sm_active: float, fires: bool) -> None:
    v = no_mixed_precision.rule(fp32(sm_active=sm_active), T)
    assert isinstance(v, Verdict) is fires


@pytest.mark.parametrize(
    ("tensor_active", "fires"),
    [(T.tensor_active_min_ratio, False), (T.tensor_active_min_ratio - 0.01, True)],
)
def test_the_tensor_activity_threshold(tensor_active: float, fires: bool) -> None:
    v = no_mixed_precision.rule(fp32(tensor_active=tensor_active), T)
    assert isinstance(v, Verdict) is fires


def test_without_gpm_it_says_so() -> None:
    a100 = fp32(models=("NVIDIA A100-SXM4-80GB",), has_gpm=False, sm_active=None, tensor_active=None)
    skipped = no_mixed_precision.rule(a100, T)
    assert isinstance(skipped, Skipped) and skipped.cause is Cause.NO_MIXED_PRECISION
    assert skipped.reason == "tensor activity not measured (no GPM on NVIDIA A100-SXM4-80GB)"


def test_without_gpm_or_a_model_name() -> None:
    skipped = no_mixed_precision.rule(fp32(models=(), tensor_cores=None, tensor_active=None), T)
    assert isinstance(skipped, Skipped) and skipped.reason.endswith("(no GPM on unknown model)")


def test_without_gpm_a_card_without_tensor_cores_is_skipped_too() -> None:
    """The missing signal is checked first: a Pascal card is 'not checked', not ruled out."""
    pascal = fp32(models=("Tesla P100-PCIE-16GB",), tensor_cores=False, sm_active=None, tensor_active=None)
    assert isinstance(no_mixed_precision.rule(pascal, T), Skipped)


def test_tensor_activity_without_sm_activity_is_no_verdict() -> None:
    assert no_mixed_precision.rule(fp32(sm_active=None), T) is None


def test_a_double_precision_code_is_not_told_to_use_bf16() -> None:
    """A CFD solver on an H100: SMs busy, FP64 pipes carry the work, tensor pipes idle."""
    cfd = fp32(fp32_active=0.1, fp64_active=0.45)
    assert no_mixed_precision.rule(cfd, T) is None


@pytest.mark.parametrize(
    ("fp64_active", "fires"),
    [(T.fp64_active_min_ratio - 0.01, True), (T.fp64_active_min_ratio, False)],
)
def test_the_fp64_threshold(fp64_active: float, fires: bool) -> None:
    v = no_mixed_precision.rule(fp32(fp32_active=0.0, fp64_active=fp64_active), T)
    assert isinstance(v, Verdict) is fires


def test_fp64_busier_than_fp32_is_needed() -> None:
    """Some FP64 beside a heavier FP32 loop (a DL job's double-precision loss): still FP32 work."""
    v = no_mixed_precision.rule(fp32(fp32_active=0.6, fp64_active=0.1), T)
    assert isinstance(v, Verdict) and v.evidence["signals"]["fp64_active"] == 0.1


def test_fp64_not_measured_leaves_the_claim_as_it_was() -> None:
    v = no_mixed_precision.rule(fp32(fp64_active=None), T)
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == 0.85


def test_a_code_that_runs_no_deep_learning_framework_is_left_alone() -> None:
    """The agent inspected the processes and found no framework: an FP32 CUDA code has no
    tensor-core path to switch on."""
    assert no_mixed_precision.rule(fp32(frameworks=()), T) is None


def test_frameworks_not_inspected_keep_the_claim_and_say_so() -> None:
    v = no_mixed_precision.rule(fp32(frameworks=None), T)
    assert isinstance(v, Verdict) and "frameworks" in v.evidence["missing"]
    assert "torch.autocast" in v.fix and not v.summary.endswith(")")


@pytest.mark.parametrize(
    ("frameworks", "named", "api"),
    [
        (("pytorch",), "(PyTorch)", "torch.autocast"),
        (("jax",), "(JAX)", "jax_default_matmul_precision"),
        (("tensorflow",), "(TensorFlow)", "set_global_policy('mixed_bfloat16')"),
        (("jax", "pytorch"), "(JAX, PyTorch)", "torch.autocast"),  # both loaded: the default text
    ],
)
def test_the_fix_names_the_frameworks_api(frameworks: tuple[str, ...], named: str, api: str) -> None:
    v = no_mixed_precision.rule(fp32(frameworks=frameworks), T)
    assert isinstance(v, Verdict) and v.summary.endswith(f"no mixed precision {named}")
    assert api in v.fix and v.evidence["signals"]["frameworks"] == list(frameworks)
    assert "frameworks" not in v.evidence["missing"]
