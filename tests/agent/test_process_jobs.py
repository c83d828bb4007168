"""Each GPU process reading carries its Slurm job, taken from the same cycle's attribution."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from gpuwatch.agent import Agent
from gpuwatch.agent.process_jobs import with_process_jobs
from gpuwatch.collectors.base import Collector
from gpuwatch.wire import AttributionSample, GpuProcess, GpuSample
from gpuwatch.wire.v1 import _Sample
from tests.agent.fakes import agent_config

T = datetime(2026, 12, 7, 3, 0, tzinfo=timezone.utc)


def _gpu(index: int, *processes: GpuProcess) -> GpuSample:
    return GpuSample(ts=T, gpu_index=index, util_gpu_ratio=0.5, processes=list(processes))


def _attribution(index: int, job: str, *pids: int) -> AttributionSample:
    return AttributionSample(ts=T, gpu_index=index, job_id=job, source="process", pids=list(pids))


def _jobs(samples: Sequence[_Sample]) -> dict[int, str | None]:
    return {p.pid: p.job_id for s in samples if isinstance(s, GpuSample) for p in s.processes or ()}


def test_each_process_gets_the_job_its_pid_is_attributed_to() -> None:
    samples = [
        _gpu(0, GpuProcess(pid=10), GpuProcess(pid=11, job_id="kept")),
        _gpu(1, GpuProcess(pid=12), GpuProcess(pid=13), GpuProcess(pid=14)),
        _attribution(0, "7", 10, 11),
        _attribution(1, "8", 12),
        _attribution(1, "9", 13),
        _attribution(1, "10", 13),  # a pid two jobs claim: named by neither
    ]
    out = with_process_jobs(samples)
    assert _jobs(out) == {10: "7", 11: "kept", 12: "8", 13: None, 14: None}
    assert out[2:] == samples[2:], "the attribution samples as they were"
    assert _jobs(samples)[10] is None, "the input is not changed"


def test_a_gpu_whose_processes_were_not_read_gives_its_one_job() -> None:
    samples = [
        _gpu(0, GpuProcess(pid=10), GpuProcess(pid=11)),
        _gpu(1, GpuProcess(pid=12)),
        _gpu(2, GpuProcess(pid=13)),
        AttributionSample(ts=T, gpu_index=0, job_id="7", source="prolog"),  # pids None: not read
        AttributionSample(ts=T, gpu_index=1, job_id="8", source="prolog"),
        AttributionSample(ts=T, gpu_index=1, job_id="9", source="prolog"),  # GPU 1 shared: neither
        _attribution(0, "5", 11),  # a pid named: its job, whatever the GPU's
        AttributionSample(ts=T, gpu_index=2, job_id="6", source="prolog", pids=[]),  # read: none of its
    ]
    assert _jobs(with_process_jobs(samples)) == {10: "7", 11: "5", 12: None, 13: None}


def test_no_attribution_leaves_the_samples_alone() -> None:
    samples = [_gpu(0, GpuProcess(pid=10))]
    assert with_process_jobs(samples) == samples


def test_the_agents_batch_names_the_jobs(tmp_path: Path) -> None:
    class Board(Collector):
        name = "board"

        def collect(self, now: datetime) -> Sequence[_Sample]:
            return [_gpu(0, GpuProcess(pid=4242))]

    class Attribution(Collector):
        name = "attribution"

        def collect(self, now: datetime) -> Sequence[_Sample]:
            return [_attribution(0, "123", 4242)]

    agent = Agent(agent_config(tmp_path, "http://127.0.0.1:9"), [Board(), Attribution()], None, None)
    try:
        batch = agent.collect_batch()
    finally:
        agent.close()
    assert _jobs(batch.samples) == {4242: "123"}
