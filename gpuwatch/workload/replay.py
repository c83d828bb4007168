"""``gpuwatch validate --replay DIR``: score a recorded validate run again, without its GPU.

A CUDA run of ``gpuwatch validate --out DIR`` leaves in DIR, per scenario, the NVML readings
the agent sent (``<name>.nvml.jsonl``), the job's CPU samples (``<name>.job.jsonl``) and
``validate.json`` with each job's virtual start and end. Replay sends the same samples through
a fresh agent → daemon (HTTP, SQLite by default) → rollups → classifier and scores the verdicts
like a live run. The recorded stamps are shifted by whole minutes into the recent past, so
every sample lands in the same position of its minute bucket as it did live.

That is how a classifier change is checked against a real GPU's readings on any machine::

    gpuwatch validate --replay tests/gpu/fixtures/h200/validate

The rules and thresholds are today's, except the three window settings, which are the run's
own (recorded in ``validate.json``). A run without ``<name>.job.jsonl`` replays the job
window's measured CPU ratio (``features.job.cpu_ratio``) as a constant.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from gpuwatch.collectors.base import Collector
from gpuwatch.config.thresholds import Thresholds
from gpuwatch.sql.rollups import floor_minute
from gpuwatch.wire import JobSample
from gpuwatch.workload.validate import (
    EXPECTED,
    ORDER,
    ScenarioOutcome,
    ValidateReport,
    classify_run,
    clocked_agent,
)

#: minutes between the replayed job's end and now: past every "ahead of the clock" check
_SLACK = timedelta(minutes=5)


class ReplayedJobCpu(Collector):
    """The job's recorded CPU samples, each sent at the cycle it was taken in (or a constant)."""

    name = "job"

    def __init__(
        self, job_id: str, by_time: dict[datetime, tuple[float, int]], constant: tuple[float, int] | None
    ) -> None:
        self.job_id = job_id
        self.by_time = by_time
        self.constant = constant
        self._first = True

    def collect(self, now: datetime) -> list[JobSample]:
        first, self._first = self._first, False
        # without a job recording: the live collector's first call only started its rate
        found = self.by_time.get(now) if self.by_time else None if first else self.constant
        if found is None:
            return []
        used, allocated = found
        return [JobSample(ts=now, job_id=self.job_id, cpu_used_cores=used, cpu_allocated_cores=allocated)]


def read_job_cpu(path: Path, shift: timedelta) -> dict[datetime, tuple[float, int]]:
    """``<name>.job.jsonl`` as {shifted stamp: (cores used, cores allocated)}; {} when absent."""
    if not path.exists():
        return {}
    out: dict[datetime, tuple[float, int]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            t = datetime.fromisoformat(row["t"]) + shift
            out[t] = (float(row["cpu_used_cores"]), int(row["cpu_allocated_cores"]))
    return out


def replay_shift(first: datetime, last: datetime, now: datetime) -> timedelta:
    """Whole minutes that move [first, last] to end at least ``_SLACK`` before ``now``."""
    target = floor_minute(now - (last - first) - _SLACK)
    return target - floor_minute(first)


def load_run(run_dir: Path) -> dict[str, Any]:
    """The run's ``validate.json``; ValueError naming the folder when it is missing or unreadable."""
    path = run_dir / "validate.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{run_dir}: no validate.json (is it a `gpuwatch validate --out` folder?)") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None


def run_thresholds(run: dict[str, Any]) -> Thresholds:
    """Today's defaults with the run's own window settings."""
    return Thresholds(**run.get("thresholds", {}))


def replay_validate(
    run_dir: Path,
    *,
    scenarios: Sequence[str] | None = None,
    db_url: str | None = None,
    on_done: Callable[[ScenarioOutcome], None] | None = None,
) -> ValidateReport:
    """Replay every recorded scenario of ``run_dir`` (or ``scenarios``) under one daemon."""
    from gpuwatch.config import Settings
    from gpuwatch.daemon.server import BackgroundServer

    run_dir = Path(run_dir)
    run = load_run(run_dir)
    recorded = {s["scenario"]: s for s in run.get("scenarios", [])}
    names = list(scenarios) if scenarios else [n for n in ORDER if (run_dir / f"{n}.nvml.jsonl").exists()]
    missing = [n for n in names if not (run_dir / f"{n}.nvml.jsonl").exists() or n not in recorded]
    if missing:
        raise ValueError(f"{run_dir}: no recording of {', '.join(missing)}")
    thresholds = run_thresholds(run)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpuwatch-replay-") as tmp:
        url = db_url or f"sqlite:///{Path(tmp) / 'replay.db'}"
        settings = Settings().with_overrides(database={"url": url}, daemon={"listen": "127.0.0.1:0"})
        outcomes = []
        with BackgroundServer(settings) as server:
            server.scheduler.pause()  # replay rolls up and classifies itself, as validate does
            for index, name in enumerate(names):
                outcome = _replay_one(server, thresholds, run_dir, recorded[name], index, Path(tmp))
                outcomes.append(outcome)
                if on_done is not None:
                    on_done(outcome)
    report = ValidateReport(
        simulated=bool(run.get("simulated", False)),
        device=f"replay of {run.get('device', '?')} ({run_dir})",
        duration_s=float(run.get("duration_s", 0.0)),
        virtual_minutes=run.get("virtual_minutes"),
        thresholds=thresholds.model_dump(include={"grace_period_s", "recent_window_s", "min_window_minutes"}),
        outcomes=outcomes,
    )
    report.total_s = time.monotonic() - started
    return report


def _replay_one(
    server: Any, thresholds: Thresholds, run_dir: Path, recorded: dict[str, Any], index: int, tmp: Path
) -> ScenarioOutcome:
    name = recorded["scenario"]
    expected, window = EXPECTED[name]
    outcome = ScenarioOutcome(
        name, expected, window, workload=recorded.get("workload") or {}, cpus=int(recorded.get("cpus") or 0)
    )
    started = time.monotonic()
    try:
        _drive(server, thresholds, run_dir, recorded, index, tmp, outcome)
    except Exception as exc:  # one broken recording is reported, the others still replay
        outcome.error = f"{type(exc).__name__}: {exc}"
    outcome.wall_s = time.monotonic() - started
    return outcome


def _drive(
    server: Any,
    thresholds: Thresholds,
    run_dir: Path,
    recorded: dict[str, Any],
    index: int,
    tmp: Path,
    outcome: ScenarioOutcome,
) -> None:
    from gpuwatch.collectors.gpu import GpuCollector
    from gpuwatch.collectors.recording import ReplayBackend, read_recording
    from gpuwatch.sql.nodes import create_token

    name = outcome.scenario
    gpu_path = run_dir / f"{name}.nvml.jsonl"
    lines = read_recording(gpu_path)
    if not lines:
        raise ValueError(f"{gpu_path}: empty recording")
    start = datetime.fromisoformat(recorded["virtual_start"])
    end = datetime.fromisoformat(recorded["virtual_end"])
    shift = replay_shift(min(lines[0][0], start), max(lines[-1][0], end), datetime.now(timezone.utc))
    gpus = recorded.get("gpus") or sorted({s.gpu_index for _, samples in lines for s in samples})
    cpus = outcome.cpus
    ratio = (recorded.get("features") or {}).get("job", {}).get("cpu_ratio")
    constant = None if ratio is None or not cpus else (ratio * cpus, cpus)
    node = f"replay-{name}"
    job_id = f"replay-{os.getpid()}-{index + 1}"
    token = create_token(server.engine, node)
    spool_dir = Path(tempfile.mkdtemp(prefix=f"spool-{name}-", dir=tmp))
    clock = {"now": lines[0][0] + shift}
    collectors = [
        GpuCollector(ReplayBackend(gpu_path)),
        ReplayedJobCpu(job_id, read_job_cpu(run_dir / f"{name}.job.jsonl", shift), constant),
    ]
    agent = clocked_agent(server.url, node, token, collectors, spool_dir, clock)
    try:
        for t, _ in lines:
            clock["now"] = t + shift
            agent.cycle()
    finally:
        agent.drain(60)
        agent.close()
    outcome.agent_cycles = agent.cycles
    outcome.virtual_start, outcome.virtual_end = (start + shift).isoformat(), (end + shift).isoformat()
    outcome.time_scale = float(recorded.get("time_scale") or 1.0)
    classify_run(
        server.engine,
        thresholds,
        outcome,
        job_id=job_id,
        node=node,
        gpus=gpus,
        cpus=cpus,
        start=start + shift,
        end=end + shift,
    )
