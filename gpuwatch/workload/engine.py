"""The training loops behind the scenarios: real torch, synthetic data, timed steps.

Every loop times its own steps and writes them to an :class:`ActivityRecorder`: how long it
waited for data (or slept), how long the device computed (the step ends with a device
synchronize, so the time is the device's, not the launch queue's), how long collectives and
host<->device copies took, the batch, the precision and the device memory held.

Imported only when a workload runs: this module imports torch at the top.
"""

from __future__ import annotations

import functools
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from gpuwatch.collectors.activity_stream import (
    ActivityRecorder,
    StepRecord,
    StreamHeader,
    read_stream,
    shares,
)
from gpuwatch.workload._torch import import_torch

torch = import_torch()
nn = torch.nn
F = torch.nn.functional
data = torch.utils.data

#: the CPU stand-in's nominal device memory: what ``mem_bytes`` is a share of on CPU, and the
#: bound on what the memory-pressure scenario may hold there
CPU_DEVICE_BYTES = 512 * 1024 * 1024
IMAGE_SIZE = 32
#: unrecorded steps before the timeline starts (kernel selection is not the job's steady state)
WARMUP_STEPS = 3
CLASSES = 10


# --------------------------------------------------------------------------- the run context
@dataclass
class RunContext:
    """What one scenario run is given: where, how long, where the timeline goes."""

    scenario: str
    device: str  # "cuda" or "cpu", resolved
    duration_s: float
    recorder: ActivityRecorder
    activity_file: Path | None = None
    seed: int = 0

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"


def resolve_device(choice: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; ``cuda`` without one is an error."""
    if choice not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device {choice!r}: auto, cpu or cuda")
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda, but torch sees no CUDA device")
    return choice


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cuda_model_width() -> int:
    """The healthy plan's CNN width for this card: enough work per step to fill its SMs.

    Width 64 at batch 256 kept an H200's 132 SMs only 45 % active (launch-bound 12 ms steps;
    tests/gpu/fixtures/h200/run2), so the width grows with the multiprocessor count.
    """
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return 256 if sms >= 100 else 128 if sms >= 64 else 64


def default_threads(workers: int) -> int:
    """torch intra-op threads: the cores the loader workers leave, one kept for the rest, at most 4.

    Oversubscribing a small host (threads + workers > cores) makes every step's time noise.
    """
    return max(1, min(4, cpu_count() - workers - 1))


def device_header(ctx: RunContext, *, world_size: int = 1, query: bool = True) -> StreamHeader:
    """The stream header; ``query=False`` never asks CUDA (no context for cpu-only)."""
    if ctx.cuda and not query:
        name, total = None, CPU_DEVICE_BYTES  # nothing is ever held on it
    elif ctx.cuda:
        props = torch.cuda.get_device_properties(0)
        name, total = props.name, int(props.total_memory)
    else:
        name, total = f"CPU stand-in ({cpu_count()} cores)", CPU_DEVICE_BYTES
    return StreamHeader(
        scenario=ctx.scenario,
        device=ctx.device,
        mem_total_bytes=total,
        world_size=world_size,
        device_name=name,
        wall_time=time.time() - ctx.recorder.now(),
        pid=os.getpid(),
    )


# --------------------------------------------------------------------------- models
class BasicBlock(nn.Module):
    """The ResNet basic block: two 3x3 convs with batch norm and a skip connection."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: Any) -> Any:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.skip(x))


class SmallResNet(nn.Module):
    """A ResNet-style CNN for 32x32 images: stem, three stages of basic blocks, linear head."""

    def __init__(self, width: int = 32, blocks: int = 1, classes: int = CLASSES) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        layers: list[nn.Module] = []
        cin = width
        for stage, cout in enumerate((width, 2 * width, 4 * width)):
            for i in range(blocks):
                layers.append(BasicBlock(cin, cout, 2 if (stage > 0 and i == 0) else 1))
                cin = cout
        self.stages = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: Any) -> Any:
        return self.head(F.adaptive_avg_pool2d(self.stages(self.stem(x)), 1).flatten(1))


class WideMLP(nn.Module):
    """Many parameters, little compute per sample: the comm-bound scenario's model."""

    def __init__(self, width: int, layers: int) -> None:
        super().__init__()
        self.body = nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(width, width), nn.GELU())])

    def forward(self, x: Any) -> Any:
        return self.body(x)


def param_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


# --------------------------------------------------------------------------- data
class SyntheticImages(data.Dataset):
    """Labelled 3x32x32 images made up on the fly, with optional costly CPU preprocessing.

    ``rounds`` = 0: a cheap dataset (a slice of a pre-made bank). ``rounds`` > 0: each sample
    is generated at 2x resolution and run through ``rounds`` passes of an augmentation
    pipeline (blur, flip, jitter, normalise) before being downsampled: the per-sample CPU
    cost of a decode-and-augment input pipeline.
    """

    def __init__(self, length: int = 1_000_000, *, rounds: int = 0, seed: int = 0) -> None:
        self.length = length
        self.rounds = rounds
        self.seed = seed
        gen = torch.Generator().manual_seed(seed)
        self.bank = torch.randn(256, 3, IMAGE_SIZE, IMAGE_SIZE, generator=gen)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[Any, int]:
        label = index % CLASSES
        if self.rounds == 0:
            return self.bank[index % len(self.bank)], label
        return preprocess(self.bank[index % len(self.bank)], self.rounds, index), label


def preprocess(image: Any, rounds: int, index: int) -> Any:
    """The expensive pipeline: ``rounds`` augmentation passes on a 2x-upsampled copy."""
    big = F.interpolate(image.unsqueeze(0), scale_factor=2.0, mode="bilinear", align_corners=False)
    for r in range(rounds):
        big = F.avg_pool2d(big, 3, stride=1, padding=1)
        if (index + r) % 2:
            big = big.flip(-1)
        big = (big - big.mean()) / (big.std() + 1e-5)
        big = big + 0.01 * math.sin(index + r)
    return F.avg_pool2d(big, 2).squeeze(0)


def calibrate_rounds(target_ms: float) -> int:
    """Augmentation rounds that cost about ``target_ms`` per sample on this host's CPU."""
    if target_ms <= 0:
        return 0
    sample = torch.randn(3, IMAGE_SIZE, IMAGE_SIZE)
    with torch.inference_mode():
        preprocess(sample, 4, 0)  # warm the kernels
        t0 = time.perf_counter()
        preprocess(sample, 40, 0)
        per_round = max(1e-6, (time.perf_counter() - t0) / 40)
    return max(1, round(target_ms / 1000 / per_round))


def make_loader(dataset: Any, *, batch_size: int, workers: int, pin: bool) -> Any:
    kwargs: dict[str, Any] = {}
    if workers > 0:
        # fork is cheap, but Python 3.12+ warns about forking a threaded process (torch's)
        kwargs["multiprocessing_context"] = "fork" if sys.version_info < (3, 12) else "forkserver"
        kwargs["prefetch_factor"] = 2
        # workers start once: a forkserver worker imports torch (about 5 s for 8 workers on the
        # H200 machine), and a loader that restarts them every epoch stalls the GPU each time
        kwargs["persistent_workers"] = True
    return data.DataLoader(
        dataset, batch_size=batch_size, num_workers=workers, pin_memory=pin, drop_last=True, **kwargs
    )


def forever(loader: Any) -> Iterator[Any]:
    while True:
        yield from loader


# --------------------------------------------------------------------------- precision
def autocast_dtype(device: str) -> Any:
    """bf16 where the device has it (CPU autocast, Ampere+), else fp16 (with a GradScaler)."""
    if device == "cuda" and not torch.cuda.is_bf16_supported():
        return torch.float16
    return torch.bfloat16


@functools.cache
def cpu_bf16_is_native(size: int = 256, rounds: int = 5) -> bool:
    """Whether this CPU multiplies bf16 about as fast as fp32 (AVX512-BF16, AMX, Arm BF16).

    Where it does not (an AVX2-only CPU), PyTorch emulates bf16 and autocast makes a step
    ~10x slower than fp32 (measured: 38 vs 430 samples/s for the healthy plan on an AVX2
    EPYC): every reduced-precision scenario would turn into a compute-bound crawl and stop
    showing what it is meant to. Measured, not read from CPU flags, so it holds on any
    architecture: the best of ``rounds`` products of two ``size``-square matrices.
    """
    a32, b32 = torch.randn(size, size), torch.randn(size, size)
    a16, b16 = a32.bfloat16(), b32.bfloat16()

    def best(a: Any, b: Any) -> float:
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t0)
        return min(times)

    best(a32, b32), best(a16, b16)  # warm-up: first calls pay for allocation and dispatch
    return best(a16, b16) <= 2.0 * best(a32, b32)


def compute_dtype(device: str, dtype: Any | None) -> Any | None:
    """The precision steps really compute in: the job's ``dtype``, except bf16 on a CPU that
    only emulates it, where the CPU run computes in fp32.

    The recorded precision stays the job's own (what the simulated bridge turns into
    tensor-core activity); the summary's ``compute_precision`` says what ran.
    """
    if device == "cpu" and dtype is torch.bfloat16 and not cpu_bf16_is_native():
        return None
    return dtype


def precision_name(dtype: Any | None) -> str:
    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def strict_fp32() -> None:
    """No TF32 on tensor cores: a job that never opted into reduced precision (the fp32 case)."""
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    torch.backends.cudnn.conv.fp32_precision = "ieee"


# --------------------------------------------------------------------------- the training loop
@dataclass(frozen=True)
class TrainPlan:
    """Knobs of one single-process training run; the scenarios differ only in these."""

    batch_size: int
    amp: bool = True
    workers: int = 0
    preprocess_ms: float = 0.0  # per-sample CPU cost in the Dataset (input-bound)
    width: int = 32
    blocks: int = 1
    train_share: float = 1.0  # idle-after-start: train this share of the run, then hold and sleep
    hoard_share: float = 0.0  # memory-pressure: fill device memory up to this share of it
    page_bytes: int = 0  # memory-pressure: bytes paged out to the host and back every step
    #: memory-pressure: page this share of each step's time at least (more rounds of
    #: ``page_bytes`` where one round is quicker than that on this host); 0: one round
    page_share: float = 0.0
    host_only: bool = False  # cpu-only: never touch the device
    sleep_only: bool = False  # idle: set up, then sleep
    threads: int | None = None  # torch intra-op threads; default: the cores the loader leaves


def _sync(device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _mem_bytes(device: Any, model: nn.Module, batch_bytes: int, extra: int) -> int:
    """Device memory held: the caching allocator's reservation, or the CPU stand-in's count."""
    if device.type == "cuda":
        return int(torch.cuda.memory_reserved(device))
    # params + grads + momentum, the batch and ~8x its size in activations, plus any hoard
    return 3 * param_bytes(model) + 9 * batch_bytes + extra


def train(ctx: RunContext, plan: TrainPlan) -> dict[str, Any]:
    """Run ``plan`` for ``ctx.duration_s`` seconds, recording every step; the summary dict."""
    rec = ctx.recorder
    torch.manual_seed(ctx.seed)
    use_device = "cpu" if plan.host_only else ctx.device
    device = torch.device(use_device, 0) if use_device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        if not plan.amp:
            strict_fp32()
    torch.set_num_threads(plan.threads or default_threads(plan.workers))
    kind = "host" if plan.host_only else "step"
    model = SmallResNet(plan.width, plan.blocks).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    dtype = autocast_dtype(device.type) if plan.amp else None
    scaler = torch.amp.GradScaler("cuda") if dtype is torch.float16 else None
    precision = precision_name(dtype)
    computed = compute_dtype(device.type, dtype)
    dataset = SyntheticImages(rounds=calibrate_rounds(plan.preprocess_ms), seed=ctx.seed)
    loader = make_loader(dataset, batch_size=plan.batch_size, workers=plan.workers, pin=device.type == "cuda")
    batch_bytes = plan.batch_size * 3 * IMAGE_SIZE * IMAGE_SIZE * 4

    def step(xb: Any, yb: Any) -> None:
        xb = xb.to(device, non_blocking=True)
        yb = yb.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=computed or torch.bfloat16, enabled=computed is not None):
            loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        _sync(device)

    # warm-up off the timeline: kernel selection (cuDNN, oneDNN) takes a few steps per shape
    warm = dataset.bank[: plan.batch_size].repeat(math.ceil(plan.batch_size / len(dataset.bank)), 1, 1, 1)
    for _ in range(1 if plan.sleep_only else WARMUP_STEPS):
        t_warm = time.monotonic()
        step(warm[: plan.batch_size], torch.arange(plan.batch_size) % CLASSES)
        step_s = time.monotonic() - t_warm
    hoard, staging, extra, page_rounds = [], None, 0, 1
    if plan.hoard_share > 0:
        hoard, staging, extra = _fill_memory(device, model, plan, batch_bytes)
        _page(hoard, staging, device)  # the first round also faults the staging pages in
        page_rounds = page_rounds_for(plan.page_share, step_s, _page(hoard, staging, device))
    batches = forever(loader)
    # the loader's first batch off the timeline too: its workers' start-up is the job's
    # start-up, seconds that a job of hours never notices and a run of seconds would be
    # measured on (seen on the H200: a 5 s stall, a third of a 15 s run)
    primed = None if plan.sleep_only else next(batches)
    start = rec.ready()
    train_until = start + ctx.duration_s * plan.train_share
    stop_at = start + ctx.duration_s
    steps = 0
    while not plan.sleep_only:
        t0 = rec.now()
        if t0 >= train_until and steps > 0:
            break
        if primed is not None:
            (xb, yb), primed = primed, None
        else:
            xb, yb = next(batches)
        t1 = rec.now()
        step(xb, yb)
        t2 = rec.now()
        copy_s = 0.0
        if staging is not None:
            copy_s = sum(_page(hoard, staging, device) for _ in range(page_rounds))
        steps += 1
        rec.step(
            t0,
            kind=kind,
            wait_s=t1 - t0,
            busy_s=t2 - t1,
            copy_s=copy_s,
            precision=None if plan.host_only else precision,
            mem_bytes=0 if plan.host_only else _mem_bytes(device, model, batch_bytes, extra),
            batch=plan.batch_size,
        )
    del batches, loader  # shuts the loader's (persistent) workers down before the idle phase
    mem = 0 if plan.host_only else _mem_bytes(device, model, batch_bytes, extra)
    while (t0 := rec.now()) < stop_at:
        time.sleep(min(0.25, stop_at - t0))
        rec.step(t0, kind="sleep", wait_s=rec.now() - t0, precision=None, mem_bytes=mem)
    rec.finish()
    summary = summarize(ctx, rec.records, batch_size=plan.batch_size, precision=precision)
    summary["plan"] = asdict(plan)
    del hoard, staging
    return summary


def _fill_memory(
    device: Any, model: nn.Module, plan: TrainPlan, batch_bytes: int
) -> tuple[list[Any], Any, int]:
    """Hoard device memory up to ``plan.hoard_share`` of it, and a host buffer to page through."""
    chunk = 64 * 1024 * 1024
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        held = total - free
        want = max(0, int(plan.hoard_share * total) - held)
    else:
        held = _mem_bytes(device, model, batch_bytes, 0)
        want = max(0, int(plan.hoard_share * CPU_DEVICE_BYTES) - held)
    hoard = []
    held_bytes = 0
    while want >= 4096:
        size = min(chunk, want)
        hoard.append(torch.empty(size // 4, dtype=torch.float32, device=device).fill_(1.0))
        want -= size
        held_bytes += size // 4 * 4
    page = min(plan.page_bytes, held_bytes)
    staging = None
    if page >= chunk:
        staging = torch.empty(page // 4, dtype=torch.float32, pin_memory=device.type == "cuda")
    return hoard, staging, held_bytes


def page_rounds_for(share: float, step_s: float, page_s: float) -> int:
    """Rounds of paging per step so that paging is at least ``share`` of a step's time.

    The copy and compute speeds differ by host (a CPU with fast fp32 and slow memcpy pages
    a smaller share than one the other way round), and the scenario must show its pattern
    on any of them: util under the memory-pressure rule's 0.5 with room to spare.
    """
    if share <= 0 or page_s <= 0:
        return 1
    return max(1, math.ceil(share / (1.0 - share) * step_s / page_s))


def _page(hoard: list[Any], staging: Any, device: Any) -> float:
    """Copy ``staging``'s worth of the hoard out to the host and back (offloading to fit)."""
    t0 = time.monotonic()
    offset = 0
    for block in hoard:
        n = block.numel()
        if offset + n > staging.numel():
            break
        staging[offset : offset + n].copy_(block, non_blocking=True)
        offset += n
    _sync(device)
    offset = 0
    for block in hoard:
        n = block.numel()
        if offset + n > staging.numel():
            break
        block.copy_(staging[offset : offset + n], non_blocking=True)
        offset += n
    _sync(device)
    return time.monotonic() - t0


# --------------------------------------------------------------------------- summaries
def summarize(
    ctx: RunContext, records: list[StepRecord], *, batch_size: int, precision: str, world_size: int = 1
) -> dict[str, Any]:
    """Throughput and time shares of a run; the first step (warm-up) is left out of samples/s."""
    work = [r for r in records if r.kind in ("step", "host")]
    measured = work[world_size:] if len(work) > world_size else work
    samples = sum(r.batch for r in measured)
    span = max(r.end for r in measured) - min(r.t for r in measured) if measured else 0.0
    return {
        "scenario": ctx.scenario,
        "device": ctx.device,
        "device_name": ctx.recorder.header.device_name if ctx.recorder.header else None,
        "duration_s": round(ctx.duration_s, 3),
        "world_size": world_size,
        "steps": len(work),
        "samples": sum(r.batch for r in work),
        "samples_per_s": round(samples / span, 2) if span > 0 else 0.0,
        "batch_size": batch_size,
        "precision": precision,
        "compute_precision": "fp32"
        if precision == "bf16" and compute_dtype(ctx.device, torch.bfloat16) is None
        else precision,
        "mem_bytes_max": max((r.mem_bytes for r in records), default=0),
        "mem_total_bytes": ctx.recorder.header.mem_total_bytes if ctx.recorder.header else None,
        **shares(records),
        "activity_file": str(ctx.activity_file) if ctx.activity_file else None,
        "torch": torch.__version__,
    }


# --------------------------------------------------------------------------- distributed
@dataclass(frozen=True)
class DdpPlan:
    """The comm-bound run: ``world_size`` ranks, a wide MLP, a tiny batch."""

    width: int
    layers: int
    batch_size: int
    world_size: int = 2
    amp: bool = True
    bucket_cap_mb: int = 25


_RANK_CODE = (
    "import json, sys; from gpuwatch.workload.engine import ddp_rank_main; "
    "ddp_rank_main(json.loads(sys.argv[1]))"
)
#: how long ranks may run past the duration (start-up, rendezvous, the last step) before a kill
DDP_GRACE_S = 120.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def train_ddp(ctx: RunContext, plan: DdpPlan) -> dict[str, Any]:
    """Start ``plan.world_size`` rank processes on this node; they append to one activity file.

    Ranks are plain ``python -c`` subprocesses (as ``torchrun`` would start them), not
    ``multiprocessing`` spawn, so the caller's ``__main__`` is never re-imported. The run is
    bounded: ranks that outlive the duration by :data:`DDP_GRACE_S` are killed.
    """
    rec = ctx.recorder
    with tempfile.TemporaryDirectory(prefix="gpuwatch-ddp-") as tmp:
        path = rec.path if rec.path is not None else Path(tmp) / "activity.jsonl"
        if rec.path is None:  # ranks need a file to write to; keep the header there too
            with ActivityRecorder(path, t0=rec.t0) as side:
                side.start(rec.header)  # type: ignore[arg-type]
        env = dict(os.environ)
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        port = _free_port()
        procs = []
        for rank in range(plan.world_size):
            spec = {
                "rank": rank,
                "plan": asdict(plan),
                "path": str(path),
                "t0": rec.t0,
                "device": ctx.device,
                "duration_s": ctx.duration_s,
                "port": port,
                "seed": ctx.seed,
            }
            procs.append(subprocess.Popen([sys.executable, "-c", _RANK_CODE, json.dumps(spec)], env=env))
        deadline = time.monotonic() + ctx.duration_s + DDP_GRACE_S
        failed = _wait_all(procs, deadline)
        if failed:
            raise RuntimeError(f"comm-bound: {failed}")
        records = read_stream(path).records
    for record in records:
        rec.records.append(record)
    rec.finish()
    precision = precision_name(autocast_dtype(ctx.device) if plan.amp else None)
    summary = summarize(
        ctx, records, batch_size=plan.batch_size, precision=precision, world_size=plan.world_size
    )
    summary["plan"] = asdict(plan)
    return summary


def _wait_all(procs: list[subprocess.Popen[bytes]], deadline: float) -> str | None:
    """Wait for every rank; on a failure or the deadline, kill the rest. What went wrong, or None."""
    problem = None
    pending = list(procs)
    while pending and problem is None:
        for proc in list(pending):
            code = proc.poll()
            if code is None:
                continue
            pending.remove(proc)
            if code != 0:
                problem = f"rank {procs.index(proc)} exited with {code}"
        if pending and time.monotonic() > deadline:
            problem = f"ranks still running {DDP_GRACE_S:.0f} s past the duration; killed"
        if pending and problem is None:
            time.sleep(0.05)
    for proc in pending:
        proc.kill()
        proc.wait()
    return problem


def ddp_rank_main(spec: dict[str, Any]) -> None:
    """Entry point of one rank process (see :func:`train_ddp`).

    A rank that finished leaves with ``os._exit(0)`` once its activity file is closed and its
    process group destroyed: at interpreter finalization gloo's worker threads can still hold
    work objects, and tearing those down then aborts the process ("terminate called without
    an active exception", SIGABRT; seen in about 1 run in 12 on 2 CPUs, pytorch#179291). An
    exception still ends the rank the normal way, with its traceback and a non-zero status.
    """
    _ddp_rank(
        spec["rank"],
        DdpPlan(**spec["plan"]),
        spec["path"],
        spec["t0"],
        spec["device"],
        spec["duration_s"],
        spec["port"],
        spec["seed"],
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _ddp_rank(
    rank: int, plan: DdpPlan, path: str, t0: float, device_kind: str, duration_s: float, port: int, seed: int
) -> None:
    """One rank: DDP over gloo (CPU, or CUDA with fewer GPUs than ranks) or NCCL."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    world = plan.world_size
    cuda = device_kind == "cuda"
    nccl = cuda and torch.cuda.device_count() >= world
    index = rank if nccl else 0
    device = torch.device("cuda", index) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.set_num_threads(max(1, cpu_count() // world))
    torch.manual_seed(seed)
    dist.init_process_group(
        "nccl" if nccl else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=120),
        **({"device_id": device} if nccl else {}),
    )
    rec = ActivityRecorder(path, t0=t0, rank=rank, gpu=rank)  # one simulated GPU per rank
    try:
        model = WideMLP(plan.width, plan.layers).to(device)
        ddp = DistributedDataParallel(
            model, device_ids=[index] if cuda else None, bucket_cap_mb=plan.bucket_cap_mb
        )
        timing = {"comm_s": 0.0}
        ddp.register_comm_hook(timing, _timed_allreduce(device, world))
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
        dtype = autocast_dtype(device.type) if plan.amp else None
        precision = precision_name(dtype)
        computed = compute_dtype(device.type, dtype)
        x = torch.randn(plan.batch_size, plan.width, device=device)
        flag = torch.zeros(1, device=device)

        def step() -> None:
            with torch.autocast(device.type, dtype=computed or torch.bfloat16, enabled=computed is not None):
                loss = ddp(x).float().square().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            _sync(device)

        step()  # warm-up off the timeline (both ranks: it is collective)
        # the run starts when the slowest rank is ready, so start-up never eats the duration
        ready = torch.tensor([rec.now()], dtype=torch.float64, device=device)
        dist.all_reduce(ready, op=dist.ReduceOp.MAX)
        stop_at = float(ready.item()) + duration_s
        if rank == 0:
            rec.ready()  # one mark for the file both ranks write
        while True:
            flag.fill_(1.0 if rec.now() >= stop_at else 0.0)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if flag.item() > 0:
                break
            timing["comm_s"] = 0.0
            start = rec.now()
            step()
            wall = rec.now() - start
            comm = min(wall, timing["comm_s"])
            mem = int(torch.cuda.memory_reserved(device)) if cuda else 3 * param_bytes(model)
            rec.step(
                start,
                busy_s=wall - comm,
                comm_s=comm,
                precision=precision,
                mem_bytes=mem,
                batch=plan.batch_size,
            )
        dist.barrier()  # no rank tears down while its peer still talks to it
    finally:
        rec.close()
        dist.destroy_process_group()


def _timed_allreduce(device: Any, world: int) -> Callable[[dict[str, float], Any], Any]:
    """A DDP comm hook: all-reduce each bucket synchronously and add its time to ``comm_s``.

    Synchronous on purpose: the comm time is measured, not hidden behind backward, which is
    how a job whose collectives dominate its steps behaves anyway.
    """
    import torch.distributed as dist

    # no annotations: DDP checks them at run time and wants dist.GradBucket objects, not strings
    def hook(state, bucket):  # type: ignore[no-untyped-def]
        buffer = bucket.buffer()
        _sync(device)
        t0 = time.monotonic()
        dist.all_reduce(buffer)
        _sync(device)
        state["comm_s"] += time.monotonic() - t0
        buffer.div_(world)
        fut: Any = torch.futures.Future()
        fut.set_result(buffer)
        return fut

    return hook
