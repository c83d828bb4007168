"""Right-sizing advice and estimated savings: where they must appear, and where they must not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwatch.cards import GIB, card_for, cards
from gpuwatch.views.advice import Advice, estimated_saving, right_sizing, site_cards
from gpuwatch.views.usage import JobUsage

MIB = 2**20
H100 = ("NVIDIA H100 80GB HBM3", 81559 * MIB)
H200 = ("NVIDIA H200", 143771 * MIB)
A100_80 = ("NVIDIA A100-SXM4-80GB", 81920 * MIB)

#: a busy, well-sized 4-GPU H100 job that ran an hour of its 2-hour limit: nothing to advise
BUSY = JobUsage(
    elapsed_s=3600,
    time_limit_s=7200,
    gpus=4,
    gpu_hours_allocated=4.0,
    gpu_efficiency=0.95,
    sm_active=0.8,
    idle_gpus=(),
    gpu_memory_used_max_bytes=60 * GIB,
    gpu_memory_total_bytes=H100[1],
    gpu_model=H100[0],
    cpu_cores_allocated=32.0,
    cpu_cores_used=20.0,
    memory_requested_bytes=256 * GIB,
    memory_used_max_bytes=180 * GIB,
    measured_minutes=60,
    input_gap_share=0.0,
)


def kinds(advice: tuple[Advice, ...]) -> dict[str, Advice]:
    return {a.kind: a for a in advice}


def test_a_busy_well_sized_job_gets_no_advice() -> None:
    assert right_sizing(BUSY, None, "COMPLETED", site_cards([H100, A100_80])) == ()


def test_no_advice_from_a_few_minutes() -> None:
    short = replace(BUSY, idle_gpus=("n/gpu3",), measured_minutes=5, memory_used_max_bytes=GIB)
    assert right_sizing(short, "idle_allocation", "COMPLETED") == ()


def test_idle_gpus_ask_for_fewer() -> None:
    usage = replace(BUSY, idle_gpus=("n/gpu2", "n/gpu3"))
    gpus = kinds(right_sizing(usage, "idle_allocation", "COMPLETED"))["gpus"]
    assert gpus.request == "--gpus=2" and "2 of 4 GPUs stayed idle" in gpus.reason
    assert gpus.basis["idle_gpus"] == ["n/gpu2", "n/gpu3"]


def test_a_cpu_only_job_is_sent_to_a_cpu_partition() -> None:
    usage = replace(BUSY, gpus=1, idle_gpus=("n/gpu0",), gpu_memory_used_max_bytes=0, gpu_efficiency=0.0)
    found = kinds(right_sizing(usage, "cpu_only", "COMPLETED"))
    assert found["gpus"].request == "no GPUs" and "CPU partition" in found["gpus"].reason
    assert "gpu_size" not in found  # no memory peak to size a GPU by


@pytest.mark.parametrize(
    ("peak_gib", "sm", "expected"),
    [
        (6, 0.10, "a 1g.10gb MIG slice"),  # 7.5 GiB with headroom, a seventh of the SMs at most 80 % busy
        (6, 0.30, "a 3g.40gb MIG slice"),  # the work needs 3/7 of the SMs
        (14, 0.10, "a 1g.20gb MIG slice"),  # the memory needs the 1g slice with twice the memory
        (6, 0.90, None),  # the kernels fill the card: no slice holds the work
        (70, 0.10, None),  # no slice holds 70 GiB
    ],
)
def test_a_mig_slice_only_where_memory_and_work_both_fit(peak_gib, sm, expected) -> None:
    usage = replace(BUSY, gpus=1, sm_active=sm, gpu_memory_used_max_bytes=peak_gib * GIB)
    found = kinds(right_sizing(usage, "small_work", "COMPLETED")).get("gpu_size")
    assert (found.request if found else None) == expected


def test_without_gpm_the_mig_advice_rests_on_utilization() -> None:
    usage = replace(BUSY, gpus=1, sm_active=None, gpu_efficiency=0.1, gpu_memory_used_max_bytes=6 * GIB)
    found = kinds(right_sizing(usage, "small_work", "COMPLETED"))["gpu_size"]
    assert found.basis["activity_signal"] == "utilization" and found.request == "a 1g.10gb MIG slice"


def test_an_unknown_card_gets_no_size_advice() -> None:
    usage = replace(
        BUSY, gpus=1, sm_active=0.05, gpu_memory_used_max_bytes=GIB, gpu_model="Tesla V100-SXM2-32GB",
        gpu_memory_total_bytes=32510 * MIB,
    )  # fmt: skip
    assert "gpu_size" not in kinds(right_sizing(usage, "small_work", "COMPLETED"))


def test_a_smaller_card_of_the_same_architecture_only() -> None:
    usage = replace(
        BUSY, gpu_model=H200[0], gpu_memory_total_bytes=H200[1], gpu_memory_used_max_bytes=50 * GIB
    )
    found = kinds(right_sizing(usage, None, "COMPLETED", site_cards([H200, H100])))["gpu_size"]
    assert found.request == "H100 80GB GPUs"
    # an A100 holds the memory too, but runs the kernels slower: not advised
    assert "gpu_size" not in kinds(right_sizing(usage, None, "COMPLETED", site_cards([H200, A100_80])))
    # a peak the smaller card would not hold with headroom
    big = replace(usage, gpu_memory_used_max_bytes=70 * GIB)
    assert "gpu_size" not in kinds(right_sizing(big, None, "COMPLETED", site_cards([H200, H100])))


def test_cores_for_a_loader_only_when_the_cpus_were_saturated() -> None:
    starved = replace(BUSY, cpu_cores_allocated=8.0, cpu_cores_used=7.9)
    cpus = kinds(right_sizing(starved, "input_bound", "COMPLETED"))["cpus"]
    assert cpus.request == "--cpus-per-gpu=4" and "99% busy" in cpus.reason
    waiting_on_io = replace(BUSY, cpu_cores_allocated=8.0, cpu_cores_used=3.0)
    assert "cpus" not in kinds(right_sizing(waiting_on_io, "input_bound", "COMPLETED"))


def test_fewer_cores_when_most_sat_idle() -> None:
    idle_cores = replace(BUSY, cpu_cores_allocated=64.0, cpu_cores_used=6.0)
    cpus = kinds(right_sizing(idle_cores, None, "COMPLETED"))["cpus"]
    assert cpus.request == "--cpus-per-gpu=2"  # 6 x 1.25 = 7.5 -> 8 cores over 4 GPUs
    few = replace(BUSY, cpu_cores_allocated=4.0, cpu_cores_used=0.5)  # too few cores to matter
    assert "cpus" not in kinds(right_sizing(few, None, "COMPLETED"))


def test_memory_down_to_the_peak_with_headroom_and_up_under_pressure() -> None:
    low = replace(BUSY, memory_requested_bytes=64 * GIB, memory_used_max_bytes=10 * GIB)
    assert kinds(right_sizing(low, None, "COMPLETED"))["memory"].request == "--mem=13G"
    small_request = replace(BUSY, memory_requested_bytes=4 * GIB, memory_used_max_bytes=GIB)
    assert "memory" not in kinds(right_sizing(small_request, None, "COMPLETED"))
    short = replace(BUSY, memory_requested_bytes=64 * GIB, memory_used_max_bytes=64 * GIB)
    assert kinds(right_sizing(short, "host_memory_pressure", "COMPLETED"))["memory"].request == "--mem=96G"


@pytest.mark.parametrize(
    ("state", "elapsed_s", "limit_s", "expected"),
    [
        ("COMPLETED", 3600, 86400, "--time=01:30:00"),
        ("COMPLETED", 20 * 3600, 86400, None),  # used most of its limit
        ("COMPLETED", 600, 3600, None),  # a short limit costs the scheduler little
        ("TIMEOUT", 3600, 86400, None),  # did not finish: its need is unknown
        ("RUNNING", 3600, 86400, None),
    ],
)
def test_time_limit_only_for_completed_jobs_far_under_it(state, elapsed_s, limit_s, expected) -> None:
    usage = replace(BUSY, elapsed_s=elapsed_s, time_limit_s=limit_s)
    found = kinds(right_sizing(usage, None, state)).get("time")
    assert (found.request if found else None) == expected


def test_a_running_job_is_advised_on_its_run_so_far() -> None:
    usage = replace(BUSY, idle_gpus=("n/gpu3",))
    [gpus] = right_sizing(usage, "idle_allocation", "RUNNING")
    assert gpus.reason.endswith("(so far: still running)")


def test_savings_where_the_fix_has_a_measured_effect() -> None:
    idle = estimated_saving(BUSY, "idle_allocation", "job", 4.0, 2.0)
    assert idle is not None and idle.gpu_hours == 2.0
    cpu_only = estimated_saving(BUSY, "cpu_only", "job", 1.0, 1.0)
    assert cpu_only is not None and cpu_only.gpu_hours == 1.0
    loader = estimated_saving(replace(BUSY, input_gap_share=0.6), "input_bound", "job", 4.0, 2.7)
    assert loader is not None and loader.gpu_hours == pytest.approx(2.4) and "60%" in loader.basis
    amp = estimated_saving(BUSY, "no_mixed_precision", "job", 4.0, 2.0)
    assert amp is not None and amp.gpu_hours == 2.0 and "assumed" in amp.basis


def test_a_small_job_saves_what_its_slice_leaves_to_others() -> None:
    usage = replace(BUSY, gpus=1, sm_active=0.1, gpu_memory_used_max_bytes=6 * GIB)
    advice = right_sizing(usage, "small_work", "COMPLETED")
    saving = estimated_saving(usage, "small_work", "job", 1.0, 0.9, advice)
    assert saving is not None and saving.gpu_hours == pytest.approx(6 / 7, abs=1e-4)
    assert estimated_saving(usage, "small_work", "job", 1.0, 0.9, ()) is None  # no slice advised


@pytest.mark.parametrize(
    "cause", [None, "healthy", "gpu_fault", "throttled", "communication_bound", "gpu_memory_pressure",
              "host_memory_pressure", "unknown_low"],
)  # fmt: skip
def test_no_saving_where_the_fix_has_no_measured_effect(cause) -> None:
    assert estimated_saving(BUSY, cause, "job", 4.0, 3.0) is None


def test_input_bound_saving_needs_the_whole_job_window() -> None:
    usage = replace(BUSY, input_gap_share=0.6)
    assert estimated_saving(usage, "input_bound", "recent", 0.6, 0.4) is None


@pytest.mark.parametrize(
    ("model", "mib", "card"),
    [
        ("NVIDIA H100 80GB HBM3", 81559, "H100 80GB"),
        ("NVIDIA H100 NVL", 95830, "H100 NVL 94GB"),
        ("NVIDIA H200", 143771, "H200 141GB"),
        ("NVIDIA A100-SXM4-40GB", 40536, "A100 40GB"),
        ("NVIDIA A100-SXM4-80GB", 81920, "A100 80GB"),
        ("Tesla V100-SXM2-32GB", 32510, None),
        ("NVIDIA H100 80GB HBM3", None, None),
    ],
)
def test_cards_match_nvml_names_and_memory(model, mib, card) -> None:
    found = card_for(model, None if mib is None else mib * MIB)
    assert (found.name if found else None) == card


def test_every_card_lists_its_slices_smallest_first_within_the_card() -> None:
    for card in cards():
        assert card.mig, card.name
        assert all(p.memory_gb < card.memory_gb and 1 <= p.compute_sevenths <= 4 for p in card.mig)
        assert [p.compute_sevenths for p in card.mig] == sorted(p.compute_sevenths for p in card.mig)
