"""The scenarios: one registry entry each, a docstring saying what it reproduces.

Every docstring has the same four parts: what the scenario reproduces, the signals it should
give (on a real GPU through NVML, and through the simulated bridge), the fix, and how the
throughput changes with the fix. ``docs/workload.md`` says the same at more length.

Importing this module does not import torch: the functions import the engine when they run,
so ``gpuwatch --help`` and the registry's names work without the ``workload`` extra.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwatch.collectors.activity_stream import ActivityRecorder, Stream

if TYPE_CHECKING:
    from gpuwatch.workload.engine import RunContext

ScenarioFn = Callable[["RunContext"], dict[str, Any]]


@dataclass(frozen=True)
class Scenario:
    """One registered scenario."""

    name: str
    run: ScenarioFn
    distributed: bool = False
    #: False for a scenario that must never create a CUDA context (cpu-only)
    touches_device: bool = True

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.run) or ""

    @property
    def summary(self) -> str:
        return self.doc.splitlines()[0] if self.doc else ""


SCENARIOS: dict[str, Scenario] = {}


def scenario(
    name: str, *, distributed: bool = False, touches_device: bool = True
) -> Callable[[ScenarioFn], ScenarioFn]:
    def add(fn: ScenarioFn) -> ScenarioFn:
        if name in SCENARIOS:
            raise ValueError(f"scenario {name!r} registered twice")
        SCENARIOS[name] = Scenario(name, fn, distributed, touches_device)
        return fn

    return add


def _plan(ctx: RunContext, **overrides: Any) -> Any:
    """The healthy plan for this device, with ``overrides``: each scenario changes one thing."""
    from gpuwatch.workload.engine import TrainPlan, cpu_count, cuda_model_width

    if ctx.cuda:
        workers = min(8, max(1, cpu_count() - 1))
        # the width asks CUDA for the card: not for a plan that names its own (cpu-only never
        # creates a CUDA context)
        width = overrides["width"] if "width" in overrides else cuda_model_width()
        base: dict[str, Any] = {"batch_size": 256, "width": width, "blocks": 2, "workers": workers}
    else:
        base = {"batch_size": 64, "width": 16, "blocks": 1, "workers": 0}
    return TrainPlan(**{**base, **overrides})


# --------------------------------------------------------------------------- the scenarios
@scenario("healthy")
def healthy(ctx: RunContext) -> dict[str, Any]:
    """A well-fed training loop: the baseline every other scenario is measured against.

    Reproduces: a ResNet-style CNN trained with autocast (bf16, fp16 where bf16 is missing),
    a batch that fills the device and enough loader workers for cheap data.
    Signals (GPU): util near 100 % with no 0 % polls, SM active high, tensor active well above
    0, power well above idle. Simulated: the same, from busy share near 1 in every window.
    Fix: none needed.
    Throughput: the reference figure; input-bound and small-batch runs are slower.
    """
    from gpuwatch.workload.engine import train

    return train(ctx, _plan(ctx))


@scenario("idle")
def idle(ctx: RunContext) -> dict[str, Any]:
    """The GPU is allocated and holds a model, but the job only sleeps.

    Reproduces: a job waiting on something else (a debugger, an interactive session left
    open, a stuck rendezvous) while its GPU stays allocated.
    Signals (GPU): a compute process holding memory, every poll at 0 %, power near idle.
    Simulated: busy share 0 in every window, memory held, one process.
    Fix: release the allocation (end the job, ``scancel``), or don't request a GPU for it.
    Throughput: zero samples/s; the fix frees the GPU for someone else.
    """
    from gpuwatch.workload.engine import train

    return train(ctx, _plan(ctx, sleep_only=True))


@scenario("input-bound")
def input_bound(ctx: RunContext) -> dict[str, Any]:
    """Per-sample CPU preprocessing so costly that a loader worker per core cannot keep up.

    Reproduces: a decode-and-augment input pipeline that saturates every CPU the job has
    (one DataLoader worker per allocated core, on CUDA up to 8) and still starves the
    device: each step waits on the loader, then computes in a short burst.
    Signals (GPU): duty-cycling utilization (many 0 % polls between bursts), low mean util,
    the job's CPUs saturated. Simulated: wait share high, idle fraction of the polls > 0.4,
    mean util < 0.5, high std-dev.
    Fix: cheaper or cached preprocessing (pre-decoded data, GPU augmentation: DALI,
    torchvision.transforms.v2 on the device), more CPUs per GPU in the job request,
    ``pin_memory`` and prefetching.
    Throughput: rises towards the healthy figure as the wait share falls.
    """
    from gpuwatch.workload.engine import cpu_count, train

    if ctx.cuda:
        return train(ctx, _plan(ctx, workers=min(8, cpu_count()), preprocess_ms=8.0))
    return train(ctx, _plan(ctx, workers=cpu_count(), threads=1, preprocess_ms=40.0))


@scenario("small-batch")
def small_batch(ctx: RunContext) -> dict[str, Any]:
    """A batch far too small for the device: every kernel fills a sliver of the SMs.

    Reproduces: batch size 4 on a model and GPU that could take hundreds.
    Signals (GPU): util moderate to high (kernels do run), but SM active and occupancy low,
    power low, little memory used. Simulated: busy share high, SM active / occupancy / power
    scaled down by the batch's share of a full one, memory small.
    Fix: a larger batch (scale the learning rate), or several jobs on one GPU (MPS, MIG).
    Throughput: several times higher in samples/s with the full batch.
    """
    from gpuwatch.workload.engine import train

    return train(ctx, _plan(ctx, batch_size=4))


@scenario("fp32")
def fp32(ctx: RunContext) -> dict[str, Any]:
    """Plain fp32 training on a tensor-core GPU: no autocast, TF32 off.

    Reproduces: a job that never opted into mixed precision, so the tensor cores idle.
    Signals (GPU): util and SM active high, tensor active near 0, FP32 pipe busy.
    Simulated: precision fp32 in every step, so tensor active reads 0 while busy is high.
    Fix: ``torch.autocast`` with bf16 (or fp16 with a GradScaler): the ``amp`` scenario.
    Throughput: the ``amp`` scenario runs the same model faster on a tensor-core GPU (on a
    CPU the difference depends on its bf16 support; nothing is claimed there).
    """
    from gpuwatch.workload.engine import train

    return train(ctx, _plan(ctx, amp=False))


@scenario("amp")
def amp(ctx: RunContext) -> dict[str, Any]:
    """The fp32 scenario fixed: the same model and batch under autocast (bf16 / fp16).

    Reproduces: the fix for ``fp32``; on CUDA bf16 where supported, else fp16 with a
    GradScaler; on CPU bf16 autocast.
    Signals (GPU): tensor active well above 0 at the same or higher util.
    Simulated: precision bf16/fp16 recorded, so tensor active is high while busy.
    Fix: this is the fix.
    Throughput: higher than ``fp32`` on a tensor-core GPU.
    """
    from gpuwatch.workload.engine import train

    return train(ctx, _plan(ctx, amp=True))


@scenario("memory-pressure")
def memory_pressure(ctx: RunContext) -> dict[str, Any]:
    """Device memory filled almost to the top, and the job pages data to the host to fit.

    Reproduces: a job that hoards device memory (caches, a batch sized to the limit) and then
    offloads to host memory every step to make room (a ZeRO-offload-like pattern). On CPU
    the stand-in device is 512 MiB, so the run holds well under 1 GB.
    Signals (GPU): memory used at or above 95 % of total with low util, PCIe traffic high.
    Simulated: memory share ~0.97, copy share high, so util is low and PCIe high. On CPU the
    paging repeats until it is at least 65 % of a step (``page_share``): memcpy and compute
    speeds differ by host, and one 384 MiB round was under half a step on some.
    Fix: free what is hoarded (drop caches, ``del`` + ``empty_cache``), a batch that fits,
    activation checkpointing instead of offloading, or a GPU with more memory.
    Throughput: up by the share of each step spent paging.
    """
    from gpuwatch.workload.engine import train

    if ctx.cuda:
        return train(ctx, _plan(ctx, hoard_share=0.97, page_bytes=8 * 1024**3))
    return train(ctx, _plan(ctx, hoard_share=0.97, page_bytes=384 * 1024**2, page_share=0.65))


@scenario("comm-bound", distributed=True)
def comm_bound(ctx: RunContext) -> dict[str, Any]:
    """DDP over two ranks with a wide model and a tiny batch: all-reduce dominates each step.

    Reproduces: data-parallel training whose gradients are large next to its compute, with
    NCCL on a node with two GPUs, gloo otherwise (CPU, or one GPU shared by both ranks).
    Signals (GPU): util busy but SM active low, NVLink (or PCIe / network) traffic high.
    Simulated: comm share high in every window; util counts the collective kernels, NVLink
    rate follows the comm share.
    Fix: a bigger batch per rank or gradient accumulation (fewer all-reduces per sample),
    overlap of comm with backward (DDP's default buckets), bf16 gradient compression
    (``bf16_compress_hook``), or model parallelism that sends less.
    Throughput: rises with samples per all-reduce.
    """
    from gpuwatch.workload.engine import DdpPlan, torch, train_ddp

    if ctx.cuda and torch.cuda.device_count() >= 2:
        plan = DdpPlan(width=8192, layers=8, batch_size=8)
    elif ctx.cuda:
        plan = DdpPlan(width=4096, layers=4, batch_size=8)
    else:
        plan = DdpPlan(width=2048, layers=1, batch_size=1, amp=False)
    return train_ddp(ctx, plan)


@scenario("cpu-only", touches_device=False)
def cpu_only(ctx: RunContext) -> dict[str, Any]:
    """A GPU job that never touches its GPU: the model trains on the host CPU.

    Reproduces: a script that forgot ``.to("cuda")`` (or a CPU-only job queued on a GPU
    partition).
    Signals (GPU): no compute process, every poll 0 %, no memory used, while the job's CPUs
    are busy. Simulated: only ``host`` steps, so the GPU shows no process and no activity.
    Fix: move the model and batches to the device, or submit to a CPU partition.
    Throughput: on a real GPU node, many times higher once on the device.
    Threads: torch's default, one per core the job has (``cpu_count``), as such a script
    would run.
    """
    from gpuwatch.workload.engine import cpu_count, train

    plan = _plan(ctx, host_only=True, workers=0, batch_size=64, width=16, blocks=1, threads=cpu_count())
    return train(ctx, plan)


@scenario("idle-after-start")
def idle_after_start(ctx: RunContext) -> dict[str, Any]:
    """Trains well for the first 40 % of the run, then holds the GPU and sleeps.

    Reproduces: a job that finished its real work (or hung) but keeps its allocation: a
    whole-job mean hides it, a recent window does not.
    Signals (GPU): busy windows, then 0 % polls with memory still held.
    Simulated: busy share near 1 early, then 0, memory constant.
    Fix: end the job when the work is done (exit, ``scancel``); a time limit that fits.
    Throughput: healthy while it trains; the idle tail is pure waste.
    """
    from gpuwatch.workload.engine import train

    return train(ctx, _plan(ctx, train_share=0.4))


# --------------------------------------------------------------------------- running one
@dataclass
class RunResult:
    """A finished run: its JSON summary and its activity stream."""

    summary: dict[str, Any]
    stream: Stream


def run_scenario(
    name: str,
    *,
    duration_s: float = 30.0,
    device: str = "auto",
    activity_file: str | Path | None = None,
    seed: int = 0,
) -> RunResult:
    """Run scenario ``name`` for ``duration_s`` seconds; imports torch."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown workload scenario {name!r}; known: {sorted(SCENARIOS)}")
    if duration_s <= 0:
        raise ValueError("duration must be positive")
    from gpuwatch.workload.engine import RunContext, device_header, resolve_device

    entry = SCENARIOS[name]
    path = Path(activity_file) if activity_file is not None else None
    with ActivityRecorder(path) as recorder:
        ctx = RunContext(name, resolve_device(device), duration_s, recorder, path, seed)
        header = device_header(ctx, world_size=2 if entry.distributed else 1, query=entry.touches_device)
        recorder.start(header)
        summary = entry.run(ctx)
        return RunResult(summary, recorder.stream())
