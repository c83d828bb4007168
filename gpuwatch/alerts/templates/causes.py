"""Per-cause wording: a title, what the cause means for the job, and a default fix.

Texts are :class:`string.Template` strings (Jinja2 is not a dependency); the placeholders are
the keys of :func:`gpuwatch.alerts.templates.job.context` — ``$gpus``, ``$mean_util``,
``$duration``, ``$gpu_hours_wasted``, ``$job_id`` — and any top-level evidence key. The
verdict's own ``fix`` (written by the cause rule from its evidence) wins over ``fix`` here.
A test holds this table to :data:`gpuwatch.config.alerts.CAUSES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from string import Template


@dataclass(frozen=True)
class CauseText:
    title: str
    meaning: Template
    fix: Template
    #: Slack header emoji code
    emoji: str = ":warning:"


def _t(text: str) -> Template:
    return Template(" ".join(text.split()))


CAUSE_TEXTS: dict[str, CauseText] = {
    "idle_allocation": CauseText(
        "GPUs allocated but idle",
        _t("""$idle of the job's $gpus GPU(s) read 0 % utilization in every sample for $duration.
        Idle GPUs cannot be used by anyone else while the job holds them."""),
        _t("""If the work is done, end the job (scancel $job_id); for interactive sessions, release
        the allocation when you step away. If the code should use the GPU, check that it sees one
        (torch.cuda.is_available(), CUDA_VISIBLE_DEVICES)."""),
        ":zzz:",
    ),
    "input_bound": CauseText(
        "Waiting for input data",
        _t("""The GPUs alternate between bursts of work and waiting: the data loader (CPU
        decoding, file reads) cannot feed them fast enough."""),
        _t("""Use more data-loader workers (DataLoader(num_workers=...), matching the CPUs you
        request), pin_memory=True, prefetching, and data on fast local or parallel storage in a
        format that needs little decoding."""),
        ":hourglass_flowing_sand:",
    ),
    "small_work": CauseText(
        "Too little work per GPU",
        _t("""The GPUs run kernels, but each keeps only a small part of the chip busy (low SM
        activity or occupancy): the batch or the model is small for this GPU."""),
        _t("""Use a larger batch size, fuse small operations (torch.compile, CUDA graphs), or
        request a smaller GPU / a MIG slice / fewer GPUs."""),
        ":mag:",
    ),
    "no_mixed_precision": CauseText(
        "Tensor cores unused",
        _t("""The GPUs are busy, but the tensor cores are idle: the job computes in FP32 on a GPU
        whose tensor cores would do the same work several times faster."""),
        _t("""Enable mixed precision (torch.autocast with bfloat16, or TF32 via
        torch.backends.cuda.matmul.allow_tf32 = True)."""),
        ":1234:",
    ),
    "gpu_memory_pressure": CauseText(
        "GPU memory full, compute idle",
        _t("""GPU memory is nearly full while compute stays low: the job is limited by memory
        (small batches forced by memory, or allocator thrashing)."""),
        _t("""Reduce memory per sample (activation checkpointing, mixed precision, a smaller
        optimizer state), or spread the model over more GPUs."""),
        ":floppy_disk:",
    ),
    "host_memory_pressure": CauseText(
        "Host memory at its limit",
        _t("""The job's host memory is at its cgroup limit or swapping, which stalls the process
        that feeds the GPUs."""),
        _t("""Request more memory (--mem) or load less into RAM at once (memory-mapped datasets,
        fewer cached samples)."""),
        ":floppy_disk:",
    ),
    "communication_bound": CauseText(
        "Waiting on communication",
        _t("""Network, NVLink or (on a node without NVLink) PCIe traffic is high while the GPUs
        compute little between bursts: the job spends its time exchanging data between GPUs or
        nodes."""),
        _t("""Overlap communication with compute (gradient bucketing), use fewer nodes with more
        GPUs each, larger batches per GPU, or gradient accumulation."""),
        ":satellite:",
    ),
    "cpu_only": CauseText(
        "CPU-only job on GPU nodes",
        _t("""The job runs on the CPUs and never uses its $gpus GPU(s)."""),
        _t("""Submit to a CPU partition without --gres=gpu, or make the code use the GPU."""),
        ":desktop_computer:",
    ),
    "throttled": CauseText(
        "GPUs throttled",
        _t("""The GPUs ran below their clocks because of power or thermal limits."""),
        _t("""Nothing to change in the job: the administrators have been told. If it persists,
        mention job $job_id when you contact them."""),
        ":thermometer:",
    ),
    "gpu_fault": CauseText(
        "GPU errors",
        _t("""A GPU of this job reported hardware or driver errors (XID or uncorrected ECC), which
        can slow or corrupt the computation."""),
        _t("""Check the job's results; resubmit excluding the node if it fails. The administrators
        have been told."""),
        ":rotating_light:",
    ),
    "unknown_low": CauseText(
        "Low GPU use, cause unclear",
        _t("""The GPUs were used well below their capacity (mean GPU utilization $mean_util over
        $duration), and no single cause fits the evidence."""),
        _t("""Profile a short run (nsys profile, torch.profiler) to see where the time goes, or
        ask the research computing team for help."""),
        ":grey_question:",
    ),
}


def cause_text(cause: str) -> CauseText:
    return CAUSE_TEXTS.get(
        cause,
        CauseText(cause.replace("_", " ").capitalize(), _t("$summary"), _t("")),
    )
