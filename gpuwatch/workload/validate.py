"""``gpuwatch validate``: run the scenarios under a real daemon and agent, classify, score.

For each scenario: a node token, a synthetic Slurm job (``slurm_jobs`` + ``job_gpus``: the
classifier's job, no attribution needed), ``gpuwatch workload --scenario X --activity-file F``
as a subprocess (torch never enters this process), and an in-process
:class:`~gpuwatch.agent.Agent` with two collectors pushing over HTTP to a
:class:`~gpuwatch.daemon.server.BackgroundServer`:

* ``gpu``: on CPU the workload-driven simulated backend
  (:class:`~gpuwatch.collectors.workload_backend.WorkloadDrivenBackend`) following the stream; with
  ``--device cuda`` the real NVML backend;
* ``job``: the workload's process tree's CPU use, measured from ``/proc`` (utime + stime of
  the workload and every descendant: loader workers, DDP ranks), against the job's allocated
  cores, which are the cores the workload is pinned to (``sched_setaffinity``, like a Slurm
  cpuset).

**Time compression** (CPU only). The classifier reads per-minute rollups, and a CPU run of
20 s has none. So the agent runs on a virtual clock ``k`` times faster than real time
(``k = virtual minutes * 60 / duration``): virtual ``V0 + k * s`` is the workload's stream
second ``s``; the agent samples every ``interval_s`` *virtual* seconds (the production 10 s),
the bridge polls at 1 s virtual, and each poll's trailing window is ``1/k`` s of the stream
(:mod:`gpuwatch.collectors.workload_backend`). Every busy/wait/comm/copy stretch is the workload's
own measured step timing; the job's CPU use is measured in real seconds (a rate in cores
does not change under compression). The simulated agent stays :data:`LAG_S` real seconds
behind the workload, because a step is recorded when it ends. The job starts at the workload's
``ready`` mark, not at stream second 0: start-up (torch's import, calibration, the warm-up
steps) takes 2 s on a slow CPU, which compression would turn into a minute and a half of
idle GPU at the start of a 6-minute job, where a real job of hours spends a sliver of its
time. The agent samples from stream second 0 all the same; those minutes lie before the
job's start, outside its windows. The job's start lies in the past (samples ahead of the
daemon's clock are refused), at a minute boundary; ``V0`` is that less the start-up.

With ``--device cuda`` the readings are the real card's, through the real NVML backend. By
default there is no compression (``k = 1``, real time), so a scenario needs a few real minutes
for its windows. ``virtual_minutes`` on CUDA compresses as on CPU, for a GPU lent by the minute:
the agent then samples every ``10/k`` real seconds and stamps the samples with virtual time;
NVML's own readings (utilization's window, GPM's counter rates, power) stay real-time rates,
and the NVML poller polls often enough (:func:`nvml_poll_interval`) that each sample still
averages several polls. Every CUDA run records what NVML returned, scenario by scenario, to
``<name>.nvml.jsonl`` in the output folder (the recording format of
:mod:`gpuwatch.collectors.recording`), and every run the job's CPU samples to
``<name>.job.jsonl``: :mod:`gpuwatch.workload.replay` scores them again without the GPU.

The daemon's own scheduler is paused: validate rolls the job's minutes up and classifies it
itself, with thresholds for short runs (:func:`validate_thresholds`).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from gpuwatch.collectors.base import Collector
from gpuwatch.config.thresholds import Thresholds
from gpuwatch.sql.rollups import floor_minute
from gpuwatch.wire import JobSample

#: expected (cause, window) per scenario: the cause the classifier must give as the window's
#: leading verdict; idle-after-start only shows in the recent window
EXPECTED: dict[str, tuple[str, str]] = {
    "idle": ("idle_allocation", "job"),
    "input-bound": ("input_bound", "job"),
    "small-batch": ("small_work", "job"),
    "fp32": ("no_mixed_precision", "job"),
    "amp": ("healthy", "job"),
    "healthy": ("healthy", "job"),
    "memory-pressure": ("gpu_memory_pressure", "job"),
    "comm-bound": ("communication_bound", "job"),
    "cpu-only": ("cpu_only", "job"),
    "idle-after-start": ("idle_allocation", "recent"),
}
ORDER = tuple(EXPECTED)
#: real seconds the agent stays behind a live CPU workload (steps are recorded when they end)
LAG_S = 2.0
#: the minutes a compressed run is stretched to unless told otherwise
DEFAULT_VIRTUAL_MINUTES = 6
#: the agent's sample interval, in (virtual) seconds: the production default
AGENT_INTERVAL_S = 10.0
#: the simulated card
SIM_MODEL = "NVIDIA H200"
#: the NVML poller's period in real time: 1 s as in production, shorter when compressed
NVML_POLL_S = 1.0
#: the NVML polls a compressed sample should still average
MIN_POLLS_PER_SAMPLE = 3


def nvml_poll_interval(scale: float) -> float:
    """Real seconds between NVML polls when the agent samples every ``AGENT_INTERVAL_S / scale``."""
    return min(NVML_POLL_S, AGENT_INTERVAL_S / scale / MIN_POLLS_PER_SAMPLE)


def validate_thresholds(virtual_minutes: int) -> Thresholds:
    """The classifier's defaults, but suited to a run of ``virtual_minutes`` minutes.

    No grace period (the whole run is the job), a recent window of a third of the run (so
    the idle tail of idle-after-start, 60 % of the run after its start-up, fills it), and two
    whole minutes as the least data a window needs. Every other threshold is the default.
    """
    recent = max(2, virtual_minutes // 3)
    return Thresholds(grace_period_s=0.0, recent_window_s=60.0 * recent, min_window_minutes=2)


# --------------------------------------------------------------------------- CPU of the workload
def _proc_table(proc: Path) -> dict[int, tuple[int, float]]:
    """pid -> (ppid, utime + stime seconds) of every process."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[int, float]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        try:
            out[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
        except (IndexError, ValueError):
            continue
    return out


def cpu_demand_seconds(proc: Path, pid: int) -> float | None:
    """Seconds the process's threads ran plus waited runnable for a CPU; None where unreadable.

    From ``/proc/<pid>/task/<tid>/schedstat`` (ns on a CPU, ns waiting on a run queue). A Slurm
    job's cpuset is its own, so what its threads wait for there is each other; validate pins the
    workload to cores other processes share too (CI, a laptop), and counting the wait makes the
    job's CPU use read the same however busy the machine is.
    """
    total = 0
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return None
    for task in tasks:
        try:
            run_ns, wait_ns, *_ = (task / "schedstat").read_text().split()
            total += int(run_ns) + int(wait_ns)
        except (OSError, ValueError):
            continue
    return total / 1e9 if tasks else None


class CpuTracker:
    """CPU seconds a process and all its descendants used or waited for, every ``period_s``.

    Each process counts the larger of its CPU time (utime + stime) and its demand (run plus
    run-queue wait, :func:`cpu_demand_seconds`). A process that exits keeps its last seen
    figure in the total (at most one period of it is lost). Times are seconds on ``clock``
    (the stream's clock: wall seconds since the workload's header).
    """

    def __init__(
        self, pid: int, clock: Callable[[], float], *, period_s: float = 0.1, proc: Path = Path("/proc")
    ) -> None:
        self.pid = pid
        self.clock = clock
        self.period_s = period_s
        self.proc = proc
        self.points: list[tuple[float, float]] = []
        self._seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="gpuwatch-validate-cpu", daemon=True)

    def poll(self) -> None:
        table = _proc_table(self.proc)
        tree, frontier = {self.pid}, [self.pid]
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        while frontier:
            for child in children.get(frontier.pop(), []):
                if child not in tree:
                    tree.add(child)
                    frontier.append(child)
        for pid in tree:
            if pid in table:
                demand = cpu_demand_seconds(self.proc, pid) or 0.0
                self._seen[pid] = max(self._seen.get(pid, 0.0), table[pid][1], demand)
        with self._lock:
            self.points.append((self.clock(), sum(self._seen.values())))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.period_s)

    def start(self) -> CpuTracker:
        self.poll()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.poll()

    def cpu_at(self, t: float) -> float:
        """CPU seconds used up to stream second ``t`` (interpolated, clamped to what was seen)."""
        with self._lock:
            points = list(self.points)
        if not points:
            return 0.0
        if t <= points[0][0]:
            return points[0][1]
        for (t0, c0), (t1, c1) in itertools.pairwise(points):
            if t0 <= t <= t1:
                return c0 if t1 <= t0 else c0 + (c1 - c0) * (t - t0) / (t1 - t0)
        return points[-1][1]


class JobCpuCollector(Collector):
    """The synthetic job's ``job`` samples: cores used since the previous sample, cores allocated.

    With ``record``, each sample is also appended to that file as one JSON line
    (:func:`job_cpu_line`), so ``gpuwatch validate --replay`` can send the same CPU use again.
    """

    name = "job"

    def __init__(
        self,
        tracker: CpuTracker,
        job_id: str,
        cpus: int,
        stream_time: Callable[[datetime], float],
        record: Path | None = None,
    ) -> None:
        self.tracker = tracker
        self.job_id = job_id
        self.cpus = cpus
        self.stream_time = stream_time
        self.record = record
        self._last: float | None = None

    def collect(self, now: datetime) -> list[JobSample]:
        t = self.stream_time(now)
        last, self._last = self._last, t
        if last is None or t <= last:
            return []
        used = max(0.0, (self.tracker.cpu_at(t) - self.tracker.cpu_at(last)) / (t - last))
        if self.record is not None:
            with self.record.open("a", encoding="utf-8") as out:
                out.write(job_cpu_line(now, used, self.cpus) + "\n")
        return [JobSample(ts=now, job_id=self.job_id, cpu_used_cores=used, cpu_allocated_cores=self.cpus)]


def job_cpu_line(now: datetime, used_cores: float, allocated_cores: int) -> str:
    """One line of a ``<name>.job.jsonl`` recording."""
    return json.dumps(
        {"t": now.isoformat(), "cpu_used_cores": round(used_cores, 6), "cpu_allocated_cores": allocated_cores}
    )


# --------------------------------------------------------------------------- results
@dataclass
class ScenarioOutcome:
    scenario: str
    expected: str
    window: str
    got: str | None = None
    confidence: float | None = None
    summary_text: str | None = None
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    features: dict[str, dict[str, Any]] = field(default_factory=dict)
    workload: dict[str, Any] = field(default_factory=dict)
    virtual_start: str | None = None
    virtual_end: str | None = None
    time_scale: float = 1.0
    agent_cycles: int = 0
    cpus: int = 0
    gpus: list[int] = field(default_factory=list)
    wall_s: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.got == self.expected

    def as_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "expected": self.expected,
            "window": self.window,
            "got": self.got,
            "ok": self.ok,
            "confidence": self.confidence,
            "summary": self.summary_text,
            "samples_per_s": self.workload.get("samples_per_s"),
            "workload": self.workload,
            "verdicts": self.verdicts,
            "features": self.features,
            "virtual_start": self.virtual_start,
            "virtual_end": self.virtual_end,
            "time_scale": self.time_scale,
            "agent_cycles": self.agent_cycles,
            "cpus": self.cpus,
            "gpus": self.gpus,
            "wall_s": round(self.wall_s, 2),
            "error": self.error,
        }


@dataclass
class ValidateReport:
    simulated: bool
    device: str
    duration_s: float
    virtual_minutes: int | None
    thresholds: dict[str, Any]
    outcomes: list[ScenarioOutcome]
    total_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes)

    def confusion(self) -> dict[str, dict[str, int]]:
        matrix: dict[str, dict[str, int]] = {}
        for o in self.outcomes:
            row = matrix.setdefault(o.expected, {})
            got = o.got or ("error" if o.error else "no verdict")
            row[got] = row.get(got, 0) + 1
        return matrix

    def as_json(self) -> dict[str, Any]:
        return {
            "simulated": self.simulated,
            "device": self.device,
            "duration_s": self.duration_s,
            "virtual_minutes": self.virtual_minutes,
            "thresholds": self.thresholds,
            "ok": self.ok,
            "total_s": round(self.total_s, 1),
            "confusion": self.confusion(),
            "scenarios": [o.as_json() for o in self.outcomes],
        }


# --------------------------------------------------------------------------- one scenario
_KEY_FEATURES = (
    "util_mean",
    "idle_fraction_mean",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "power_ratio",
    "memory_used_ratio_max",
    "nvlink_bytes_per_s",
    "pcie_bytes_per_s",
    "cpu_ratio",
)


def _wait_stream(path: Path, proc: subprocess.Popen, timeout_s: float, until: str) -> Any:
    """The workload's activity stream once it has its header (``until="start"``) or its
    start-up has ended (``until="ready"``); fails if the workload exits or times out first."""
    from gpuwatch.collectors.activity_stream import read_stream

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            try:
                stream = read_stream(path)
            except ValueError:  # no header yet
                stream = None
            if stream is not None and (until == "start" or stream.ready_t is not None):
                return stream
        if proc.poll() is not None:
            raise RuntimeError(f"workload exited ({proc.returncode}) before its activity stream's {until}")
        time.sleep(0.05)
    raise RuntimeError(f"no activity stream {until} within {timeout_s:g} s")


def _physical_gpu(index: int) -> int:
    """torch's device index -> the NVML index, through CUDA_VISIBLE_DEVICES when it lists numbers."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    parts = [p.strip() for p in visible.split(",") if p.strip()]
    if index < len(parts) and parts[index].isdigit():
        return int(parts[index])
    return index


@dataclass
class Harness:
    """What every scenario shares: the daemon, the thresholds, where files go, the options."""

    engine: Any
    url: str
    out_dir: Path
    device: str
    duration_s: float
    virtual_minutes: int
    thresholds: Thresholds
    cpus: tuple[int, ...]
    compressed: bool = True
    seed: int = 0
    on_progress: Callable[[str, float, float], None] | None = None

    @property
    def simulated(self) -> bool:
        return self.device != "cuda"

    def run(self, index: int, name: str) -> ScenarioOutcome:
        expected, window = EXPECTED[name]
        outcome = ScenarioOutcome(name, expected, window, cpus=len(self.cpus))
        started = time.monotonic()
        try:
            self._run(index, name, outcome)
        except Exception as exc:  # one broken scenario is reported, the others still run
            outcome.error = f"{type(exc).__name__}: {exc}"
        outcome.wall_s = time.monotonic() - started
        return outcome

    def _run(self, index: int, name: str, outcome: ScenarioOutcome) -> None:
        from gpuwatch.collectors.activity_stream import read_stream
        from gpuwatch.collectors.frameworks import FrameworkLookup
        from gpuwatch.collectors.gpu import GpuCollector
        from gpuwatch.sql.nodes import create_token

        node = f"validate-{name}"
        job_id = f"validate-{os.getpid()}-{index + 1}"
        token = create_token(self.engine, node)
        activity = self.out_dir / f"{name}.jsonl"
        activity.unlink(missing_ok=True)
        log = open(self.out_dir / f"{name}.log", "w", encoding="utf-8")  # noqa: SIM115
        cmd = [
            sys.executable, "-m", "gpuwatch", "workload", "--scenario", name,
            "--duration", f"{self.duration_s:g}", "--device", self.device, "--json",
            "--activity-file", str(activity), "--seed", str(self.seed),
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            if hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(proc.pid, self.cpus)  # before torch counts its cores
            wall0 = _wait_stream(activity, proc, 180.0, "start").header.wall_time
            ready_t = _wait_stream(activity, proc, 180.0, "ready").ready_t

            def stream_now() -> float:
                return time.time() - wall0

            if self.compressed:
                scale = self.virtual_minutes * 60.0 / self.duration_s
                now = datetime.now(timezone.utc)
                job_start = floor_minute(now) - timedelta(minutes=self.virtual_minutes + 4)
                lag = LAG_S if self.simulated else 0.0  # NVML reads the card as it is now
            else:
                scale, lag = 1.0, 0.0
                job_start = datetime.fromtimestamp(wall0 + ready_t, timezone.utc)
            # stream second 0 in virtual time: start-up lies before the job's start
            v0 = job_start - timedelta(seconds=ready_t * scale)
            outcome.time_scale = round(scale, 4)

            def stream_time(now: datetime) -> float:
                return (now - v0).total_seconds() / scale

            tracker = CpuTracker(proc.pid, stream_now).start()
            job_record = self.out_dir / f"{name}.job.jsonl"
            job_record.unlink(missing_ok=True)
            gpu_backend = self._gpu_backend(activity, v0, scale, name)
            collectors = [
                # on a real GPU, the workload's processes are read as the agent reads them
                GpuCollector(gpu_backend, frameworks=FrameworkLookup()),
                JobCpuCollector(tracker, job_id, len(self.cpus), stream_time, record=job_record),
            ]
            clock = {"now": v0}
            spool_dir = Path(tempfile.mkdtemp(prefix=f"spool-{name}-", dir=self.out_dir))
            agent = clocked_agent(self.url, node, token, collectors, spool_dir, clock)
            try:
                # the simulated bridge replays the stream from its second 0; a real GPU can only be
                # read as it is now, so its cycles start at the present (after the start-up)
                first = 0 if self.simulated else math.floor(stream_now() / (AGENT_INTERVAL_S / scale))
                clock["now"] = v0 + timedelta(seconds=first * AGENT_INTERVAL_S)
                agent.cycle()  # the first cycle only starts the rate counters
                end_t = self._drive(
                    agent, clock, proc, activity, v0, scale, lag, stream_now, name, first_cycle=first
                )
            finally:
                tracker.stop()
                agent.drain(60)
                agent.close()
            stdout, _ = proc.communicate(timeout=60)
            if proc.returncode != 0:
                raise RuntimeError(
                    f"workload exited {proc.returncode} (see {self.out_dir / (name + '.log')})"
                )
            outcome.workload = json.loads(stdout) if stdout.strip() else {}
            (self.out_dir / f"{name}.json").write_text(json.dumps(outcome.workload, indent=2, sort_keys=True))
            stream = read_stream(activity)
            if stream.end_t is not None:
                end_t = stream.end_t
            v_end = v0 + timedelta(seconds=end_t * scale)
            outcome.virtual_start, outcome.virtual_end = job_start.isoformat(), v_end.isoformat()
            outcome.agent_cycles = agent.cycles
            gpus = (
                sorted({r.gpu for r in stream.records} or {0})
                if not self.simulated
                else list(range(max(1, stream.header.world_size)))
            )
            if not self.simulated:
                gpus = [_physical_gpu(g) for g in gpus]
            classify_run(
                self.engine,
                self.thresholds,
                outcome,
                job_id=job_id,
                node=node,
                gpus=gpus,
                cpus=len(self.cpus),
                start=job_start,
                end=v_end,
            )
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            log.close()

    def _gpu_backend(self, activity: Path, v0: datetime, scale: float, name: str) -> Any:
        if self.simulated:
            from gpuwatch.collectors.workload_backend import WorkloadDrivenBackend

            return WorkloadDrivenBackend(
                activity,
                model=SIM_MODEL,
                seed=self.seed,
                poll_interval_s=1.0,
                interval_s=AGENT_INTERVAL_S,
                start=v0,
                time_scale=scale,
            )
        from gpuwatch.collectors.nvml_backend import NvmlBackend
        from gpuwatch.collectors.recording import RecordingBackend

        recording = self.out_dir / f"{name}.nvml.jsonl"
        recording.unlink(missing_ok=True)
        return RecordingBackend(
            NvmlBackend(poll_interval_s=nvml_poll_interval(scale), watch_events=False), recording
        )

    def _drive(
        self,
        agent: Any,
        clock: dict[str, datetime],
        proc: subprocess.Popen,
        activity: Path,
        v0: datetime,
        scale: float,
        lag: float,
        stream_now: Callable[[], float],
        name: str,
        first_cycle: int = 0,
    ) -> float:
        """Agent cycles every AGENT_INTERVAL_S virtual seconds after ``first_cycle`` up to the
        stream's end; its end (stream s)."""
        from gpuwatch.collectors.activity_stream import read_stream

        step = AGENT_INTERVAL_S / scale  # stream seconds per cycle
        expected_end = self.duration_s + 5.0
        k = first_cycle
        while True:
            k += 1
            s = k * step
            while proc.poll() is None and stream_now() < s + lag:
                time.sleep(min(0.05, max(0.0, s + lag - stream_now())))
            end_t = read_stream(activity).end_t if proc.poll() is not None else None
            if proc.poll() is not None and not self.simulated:
                end_t = stream_now() if end_t is None else end_t
            if end_t is not None and s >= end_t:
                clock["now"] = v0 + timedelta(seconds=end_t * scale)
                agent.cycle()
                return end_t
            if proc.poll() is not None and end_t is None:
                raise RuntimeError("workload ended without an end record")
            clock["now"] = v0 + timedelta(seconds=s * scale)
            agent.cycle()
            if self.on_progress is not None:
                self.on_progress(name, s, max(expected_end, s))


def classify_run(
    engine: Any,
    thresholds: Thresholds,
    outcome: ScenarioOutcome,
    *,
    job_id: str,
    node: str,
    gpus: Sequence[int],
    cpus: int,
    start: datetime,
    end: datetime,
) -> None:
    """Store the run's job, roll its minutes up, classify it; verdicts and features into ``outcome``."""
    from gpuwatch.classify.engine import classify_job
    from gpuwatch.classify.features import job_windows, load_scope
    from gpuwatch.slurm.model import SlurmJob
    from gpuwatch.sql.jobs import replace_job_gpus, upsert_jobs
    from gpuwatch.sql.rollups import Rollup

    job = SlurmJob(
        job_id=job_id,
        source="validate",
        name=f"validate {outcome.scenario}",
        state="COMPLETED",
        start=start,
        end=end,
        nodes=(node,),
        cpus=cpus,
        gpus=len(gpus),
        gpu_indices={node: tuple(gpus)},
    )
    outcome.gpus = list(gpus)
    with engine.begin() as conn:
        upsert_jobs(conn, [job])
        replace_job_gpus(conn, {job_id: {node: list(gpus)}})
    rollup = Rollup(engine)
    rollup.roll(floor_minute(start), floor_minute(end) + timedelta(minutes=1))
    rollup.run_once()  # moves the rolled-until edge past this job (the scheduler is paused)
    now = end + timedelta(seconds=1)
    found = classify_job(engine, job_id, now, thresholds)
    outcome.verdicts = [
        {
            "window": v.window_kind,
            "cause": v.cause.value,
            "confidence": v.confidence,
            "summary": v.summary,
            "evidence": v.evidence,
        }
        for v in found
    ]
    with engine.connect() as conn:
        scope = load_scope(conn, job_id)
        windows = job_windows(conn, scope, now, thresholds) if scope is not None else None
    if windows is not None:
        for f in windows:
            data = f.to_dict()
            outcome.features[f.kind] = {key: data.get(key) for key in _KEY_FEATURES}
            outcome.features[f.kind]["minutes"] = max((g.minutes for g in f.gpus), default=0)
    lead = next((v for v in found if v.window_kind == outcome.window), None)
    if lead is None:
        outcome.error = outcome.error or f"no verdict for the {outcome.window} window"
        return
    outcome.got = lead.cause.value
    outcome.confidence = lead.confidence
    outcome.summary_text = lead.summary


def clocked_agent(
    url: str, node: str, token: str, collectors: list[Collector], spool_dir: Path, clock: dict[str, datetime]
) -> Any:
    """An agent pushing to ``url`` whose ``now`` is ``clock["now"]``, its sender started."""
    from gpuwatch.agent import Agent, Pusher, Spool
    from gpuwatch.config import AgentConfig

    config = AgentConfig(
        node=node, daemon_url=url, token=token, interval_s=AGENT_INTERVAL_S, spool_dir=spool_dir
    )
    agent = Agent(
        config,
        collectors,
        Spool(spool_dir, config.spool_max_bytes),
        Pusher(url, node, token, config.push_timeout_s),
        now=lambda: clock["now"],
    )
    agent.start_sender()
    return agent


# --------------------------------------------------------------------------- the whole run
def run_validate(
    scenarios: Sequence[str],
    *,
    duration_s: float,
    device: str = "cpu",
    virtual_minutes: int | None = None,
    db_url: str | None = None,
    out_dir: Path | None = None,
    cpus: int | None = None,
    seed: int = 0,
    on_progress: Callable[[str, float, float], None] | None = None,
    on_done: Callable[[ScenarioOutcome], None] | None = None,
) -> ValidateReport:
    """Run ``scenarios`` one after the other under one daemon; the report.

    ``virtual_minutes``: the minutes each run is stretched to (6 when None on CPU); on CUDA
    None means real time, no compression.
    """
    from gpuwatch.config import Settings
    from gpuwatch.daemon.server import BackgroundServer

    unknown = [s for s in scenarios if s not in EXPECTED]
    if unknown:
        raise ValueError(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(ORDER)}")
    started = time.monotonic()
    compressed = device != "cuda" or virtual_minutes is not None
    if compressed:
        minutes = virtual_minutes if virtual_minutes is not None else DEFAULT_VIRTUAL_MINUTES
    else:
        minutes = max(2, math.floor(duration_s / 60))
    thresholds = validate_thresholds(minutes)
    if hasattr(os, "sched_getaffinity"):
        available = sorted(os.sched_getaffinity(0))
    else:
        available = list(range(os.cpu_count() or 1))
    pinned = tuple(available[: cpus or len(available)])
    with tempfile.TemporaryDirectory(prefix="gpuwatch-validate-") as tmp:
        folder = Path(out_dir) if out_dir is not None else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        url = db_url or f"sqlite:///{Path(tmp) / 'validate.db'}"
        settings = Settings().with_overrides(database={"url": url}, daemon={"listen": "127.0.0.1:0"})
        with BackgroundServer(settings) as server:
            server.scheduler.pause()  # validate rolls up and classifies itself (see the module doc)
            harness = Harness(
                engine=server.engine,
                url=server.url,
                out_dir=folder,
                device=device,
                duration_s=duration_s,
                virtual_minutes=minutes,
                thresholds=thresholds,
                compressed=compressed,
                cpus=pinned,
                seed=seed,
                on_progress=on_progress,
            )
            outcomes = []
            for i, name in enumerate(scenarios):
                outcome = harness.run(i, name)
                outcomes.append(outcome)
                if on_done is not None:
                    on_done(outcome)
        report = ValidateReport(
            simulated=device != "cuda",
            device=device,
            duration_s=duration_s,
            virtual_minutes=minutes if compressed else None,
            thresholds=thresholds.model_dump(
                include={"grace_period_s", "recent_window_s", "min_window_minutes"}
            ),
            outcomes=outcomes,
        )
        report.total_s = time.monotonic() - started
        if out_dir is not None:
            (folder / "validate.json").write_text(json.dumps(report.as_json(), indent=2, default=str))
        return report


def parse_scenarios(text: str | None) -> list[str]:
    if not text:
        return list(ORDER)
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in EXPECTED]
    if unknown:
        raise ValueError(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(ORDER)}")
    return names
