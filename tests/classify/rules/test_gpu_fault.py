"""The gpu_fault rule: a fault and whose it is, from the XID codes (NVIDIA's Xid catalog)."""

from __future__ import annotations

import pytest

from gpuwatch.classify import xid
from gpuwatch.classify.rules import gpu_fault
from gpuwatch.classify.verdict import APPLICATION_FAULT_TEXT, TEXTS, Cause, Verdict
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS as T

from .window import gpu, window


def faulted(codes: tuple[int, ...], *, lost: int = 0) -> Verdict | None:
    g = gpu(xid_samples=3 if codes else 0, xid_codes=codes, lost_samples=lost)
    f = window(gpus=(g,), xid_samples=g.xid_samples, xid_codes=codes, lost_samples=lost, faulty_gpus=(g.gpu,))
    return gpu_fault.rule(f, T)


@pytest.mark.parametrize("codes", [(31,), (13,), (31, 43), (13, 43, 45)])
def test_the_programs_own_fault_goes_to_the_user(codes: tuple[int, ...]) -> None:
    v = faulted(codes)
    assert isinstance(v, Verdict) and v.cause is Cause.GPU_FAULT
    assert v.fix == APPLICATION_FAULT_TEXT.fix and "drain" not in v.fix
    assert v.evidence["signals"]["owner"] == "user" and "the GPUs are fine" in v.summary


@pytest.mark.parametrize("codes", [(79,), (48,), (94,), (31, 79), (74, 45), (119,)])
def test_a_node_fault_goes_to_the_admins(codes: tuple[int, ...]) -> None:
    v = faulted(codes)
    assert isinstance(v, Verdict) and v.fix == TEXTS[Cause.GPU_FAULT].fix and "drain the node" in v.fix
    assert v.evidence["signals"]["owner"] == "admin"


def test_an_unlisted_code_is_the_nodes() -> None:
    v = faulted((150,))
    assert isinstance(v, Verdict) and v.evidence["signals"]["owner"] == "admin"
    assert "XID 150 (not in gpuwatch's catalog" in v.summary


def test_a_channel_torn_down_at_exit_is_nobodys_fault() -> None:
    assert faulted((45,)) is None  # scancel of a running job reads XID 45


def test_a_lost_gpu_is_the_nodes_whatever_the_codes() -> None:
    v = faulted((31,), lost=2)
    assert (
        isinstance(v, Verdict)
        and v.evidence["confidence"]["base"] == 0.97
        and v.evidence["signals"]["owner"] == "admin"
    )
    assert "GPU lost in 2 samples" in v.summary


def test_xids_without_codes_rolled_up_are_the_nodes() -> None:
    g = gpu(xid_samples=2)
    v = gpu_fault.rule(window(gpus=(g,), xid_samples=2, faulty_gpus=(g.gpu,)), T)
    assert isinstance(v, Verdict) and v.evidence["signals"]["owner"] == "admin"
    assert "codes not rolled up" in v.summary


def test_no_fault_no_verdict() -> None:
    assert faulted(()) is None


def test_owner_rules() -> None:
    assert xid.owner_of([]) is xid.Owner.NOBODY
    assert xid.owner_of([45, 43]) is xid.Owner.USER
    assert xid.owner_of([43, 48]) is xid.Owner.ADMIN
