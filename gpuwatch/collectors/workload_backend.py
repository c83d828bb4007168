"""Simulated GPUs driven by the reference workload's own step timing.

:class:`WorkloadDrivenBackend` reads an activity stream (:mod:`gpuwatch.collectors.activity_stream`)
and reports what NVML would have said about the GPU(s) that ran it. It *is* the simulated
backend (:class:`~gpuwatch.collectors.sim_backend.SimulatedBackend`): the same poll grid,
integer percents, noise, energy counter, memory reserve, GPM-per-model rule and
:func:`~gpuwatch.collectors.gpu_backend.util_stats` reduction, with one scenario per GPU whose
activity at poll time ``t`` is computed from the steps inside the trailing poll window
``(t - poll, t]``, as NVML's utilization is a trailing-window average:

* util = share of the window the device computed (``busy_s``) or ran collectives
  (``comm_s``: NCCL kernels count as kernels); a window with neither reads exactly 0 %, so
  idle fraction and std-dev over the polls show duty-cycling;
* SM active / occupancy / power / DRAM scale with how full a batch the busy steps had
  (``batch / full_batch``): a tiny batch keeps the GPU "busy" with most SMs idle;
  collectives add little SM activity;
* tensor active follows precision: bf16/fp16 steps drive the tensor pipes, fp32 leaves
  them at 0 (TF32 off) and loads the FP32 pipe instead;
* memory used is ``mem_bytes / mem_total_bytes`` of the workload's device, mapped onto the
  simulated card's usable memory, so 96 % of a 512 MiB CPU stand-in reads as 96 % of an H200;
* NVLink follows the comm share, PCIe the host<->device copy share (``copy_s``);
* power runs from idle to the enforced limit with the work done; an idle window throttles
  with ``gpu_idle`` at a low SM clock;
* the GPU has a compute process while the workload holds device memory or runs device
  steps; ``host`` steps (the cpu-only scenario) never touch it, and after the stream's end
  record the process is gone.

Virtual time zero is ``start`` when given; else, with ``follow=True`` (reading a live
stream), the wall time the workload started; else (replay) the first :meth:`sample` call's
time minus ``interval_s``, so the first sample covers ``[0, interval_s]``, as in the
simulated backend. CPU runs are short: sample them on a finer grid (``poll_interval_s``
0.1) to get enough polls per second of workload, or compress time with ``time_scale``.

**Time compression** (``time_scale`` = k > 1, what ``gpuwatch validate`` uses on CPU): virtual
second ``v`` since ``start`` shows the workload at stream second ``v / k``, and the trailing
poll window shrinks the same way, to ``poll_interval_s / k`` seconds of the stream. Nothing
else changes: every busy, wait, comm and copy stretch is the workload's own measured step
timing, only read k times faster, so a 20 s CPU run fills ``20 k`` virtual seconds of
1 s polls (several whole rollup minutes) with the duty cycle, shares and precision it had.
Rates that are shares (util, SM active, power share) keep their value; the energy counter
and byte rates are those of the virtual card over virtual time.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from gpuwatch.collectors.activity_stream import ActivityRecorder, StepRecord, Stream, parse_lines
from gpuwatch.collectors.gpu_backend import clamp_ratio
from gpuwatch.collectors.sim_backend import Activity, Scenario, SimulatedBackend
from gpuwatch.wire import GpuSample

#: the batch that fills the simulated card (the SMs' share of a step scales with batch / this)
FULL_BATCH = 64
#: SM clock shares: busy and idle (an idle card drops to a low clock and says gpu_idle)
_CLOCK_BUSY, _CLOCK_IDLE = 0.95, 0.17


@dataclass(frozen=True)
class _Seg:
    """One stretch of one record: [start, end) of a given nature."""

    start: float
    end: float
    fill: float  # batch / full batch, 0..1
    tensor: bool  # reduced precision


class GpuTimeline:
    """The activity of one simulated GPU: busy, comm and copy stretches and memory held."""

    def __init__(self, records: Iterable[StepRecord], *, mem_total_bytes: int, full_batch: int) -> None:
        self.busy: list[_Seg] = []
        self.comm: list[_Seg] = []
        self.copy: list[_Seg] = []
        self.mem: list[tuple[float, int]] = []  # (time, bytes held from then on)
        self.device_from: float | None = None  # first time the workload held the device
        self.mem_total = max(1, mem_total_bytes)
        for rec in sorted(records, key=lambda r: r.t):
            fill = min(1.0, rec.batch / full_batch) if rec.batch > 0 else 0.0
            tensor = rec.precision in ("bf16", "fp16")
            t = rec.t + rec.wait_s
            if rec.kind == "step":
                if rec.busy_s > 0:
                    self.busy.append(_Seg(t, t + rec.busy_s, fill, tensor))
                t += rec.busy_s
                if rec.comm_s > 0:
                    self.comm.append(_Seg(t, t + rec.comm_s, fill, tensor))
                t += rec.comm_s
                if rec.copy_s > 0:
                    self.copy.append(_Seg(t, t + rec.copy_s, fill, tensor))
            if rec.mem_bytes > 0 or rec.kind == "step":
                self.device_from = rec.t if self.device_from is None else min(self.device_from, rec.t)
            if rec.kind != "host":
                self.mem.append((rec.t, rec.mem_bytes))
        self._mem_t = [t for t, _ in self.mem]
        self._starts = {name: [s.start for s in segs] for name, segs in self._segs().items()}

    def _segs(self) -> dict[str, list[_Seg]]:
        return {"busy": self.busy, "comm": self.comm, "copy": self.copy}

    def overlap(self, name: str, a: float, b: float) -> list[tuple[_Seg, float]]:
        """Segments of ``name`` overlapping (a, b] with the seconds of overlap."""
        segs = self._segs()[name]
        starts = self._starts[name]
        out = []
        # segments never overlap each other within one GPU, so walk back from the first start >= b
        i = bisect.bisect_left(starts, b) - 1
        while i >= 0:
            seg = segs[i]
            if seg.end <= a:
                break
            out.append((seg, min(b, seg.end) - max(a, seg.start)))
            i -= 1
        return out

    def mem_at(self, t: float) -> int:
        i = bisect.bisect_right(self._mem_t, t) - 1
        return self.mem[i][1] if i >= 0 else 0


class StreamScenario(Scenario):
    """A sim-backend scenario whose activity at ``t`` is the workload's in ``(t - window, t]``."""

    def __init__(
        self, timeline: GpuTimeline, *, window_s: float, end_t: float | None, time_scale: float = 1.0
    ) -> None:
        self.timeline = timeline
        self.window_s = window_s / time_scale
        self.end_t = end_t
        self.time_scale = time_scale

    def at(self, t: float) -> Activity:
        t = t / self.time_scale  # virtual seconds -> seconds of the workload's stream
        tl = self.timeline
        a, w = t - self.window_s, self.window_s
        held = tl.device_from is not None and tl.device_from <= t and (self.end_t is None or t <= self.end_t)
        if not held:
            return Activity(sm_clock=_CLOCK_IDLE, throttle_reasons=("gpu_idle",), processes=0)
        busy = tl.overlap("busy", a, t)
        comm = tl.overlap("comm", a, t)
        copy = tl.overlap("copy", a, t)
        b = sum(s for _, s in busy) / w
        c = sum(s for _, s in comm) / w
        p = sum(s for _, s in copy) / w
        busy_time = sum(s for _, s in busy)
        fill = sum(seg.fill * s for seg, s in busy) / busy_time if busy_time > 0 else 0.0
        tensor = sum(s for seg, s in busy if seg.tensor) / busy_time if busy_time > 0 else 0.0
        memory = clamp_ratio(tl.mem_at(t) / tl.mem_total)
        util = clamp_ratio(b + c)
        if util <= 0.0:
            return Activity(
                memory_used=memory,
                pcie=0.8 * p,
                sm_clock=_CLOCK_IDLE if p == 0 else _CLOCK_BUSY,
                throttle_reasons=("gpu_idle",) if p == 0 else (),
                util_memory=0.6 * p,
                power=0.05 * p,
            )
        return Activity(
            util_gpu=util,
            util_memory=clamp_ratio(b * (0.25 + 0.35 * fill) + 0.3 * c + 0.6 * p),
            sm_active=clamp_ratio(b * (0.3 + 0.65 * fill) + 0.1 * c),
            sm_occupancy=clamp_ratio(b * (0.1 + 0.5 * fill) + 0.05 * c),
            tensor_active=clamp_ratio(b * tensor * (0.2 + 0.5 * fill)),
            dram_active=clamp_ratio(b * (0.2 + 0.4 * fill) + 0.2 * c + 0.3 * p),
            fp32_active=clamp_ratio(b * fill * (0.55 * (1 - tensor) + 0.1 * tensor)),
            fp16_active=clamp_ratio(b * fill * 0.25 * tensor),
            memory_used=memory,
            power=clamp_ratio(b * (0.2 + 0.7 * fill) + 0.25 * c + 0.05 * p),
            sm_clock=_CLOCK_BUSY,
            pcie=clamp_ratio(0.02 * b + 0.05 * c + 0.8 * p),
            nvlink=clamp_ratio(0.7 * c),
        )


class WorkloadDrivenBackend(SimulatedBackend):
    """Simulated GPUs replaying (or following) a reference-workload activity stream.

    ``source`` is an activity file, a :class:`Stream` or a live :class:`ActivityRecorder`.
    One GPU per rank of the stream (``gpus`` to force a count); ``model`` is the simulated
    card. A file is re-read at every :meth:`sample`, so a stream still being written is
    followed as it grows. ``time_scale`` compresses time (see the module doc): virtual
    second ``v`` reads the stream at ``v / time_scale``.
    """

    name = "workload"
    simulated = True

    def __init__(
        self,
        source: str | os.PathLike[str] | Stream | ActivityRecorder,
        *,
        model: str = "NVIDIA H200",
        gpus: int | None = None,
        seed: int = 0,
        poll_interval_s: float = 1.0,
        interval_s: float = 10.0,
        start: datetime | None = None,
        follow: bool = False,
        full_batch: int = FULL_BATCH,
        time_scale: float = 1.0,
    ) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        self.source = source
        self.time_scale = time_scale
        self.full_batch = full_batch
        stream = self._read()
        count = gpus if gpus is not None else max(1, stream.header.world_size)
        if start is None and follow:
            start = datetime.fromtimestamp(stream.header.wall_time, timezone.utc)
        super().__init__(
            "idle",
            gpus=count,
            seed=seed,
            model=model,
            poll_interval_s=poll_interval_s,
            interval_s=interval_s,
            start=start,
        )
        self._load(stream)

    def _read(self) -> Stream:
        source = self.source
        if isinstance(source, Stream):
            return source
        if isinstance(source, ActivityRecorder):
            return source.stream()
        with open(Path(source), encoding="utf-8") as handle:
            stream = parse_lines(handle)
        if stream is None:
            raise ValueError(f"{source}: no activity stream header (kind=start)")
        return stream

    def _load(self, stream: Stream) -> None:
        self.stream = stream
        per_gpu: dict[int, list[StepRecord]] = {}
        for rec in stream.records:
            per_gpu.setdefault(rec.gpu, []).append(rec)
        total = stream.header.mem_total_bytes
        self.scenarios = [
            StreamScenario(
                GpuTimeline(per_gpu.get(gpu, []), mem_total_bytes=total, full_batch=self.full_batch),
                window_s=self.poll_interval_s,
                end_t=stream.end_t,
                time_scale=self.time_scale,
            )
            for gpu in range(len(self.scenarios))
        ]

    def sample(self, now: datetime) -> list[GpuSample]:
        if not isinstance(self.source, Stream):
            self._load(self._read())
        return super().sample(now)
