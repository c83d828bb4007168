"""Generator of the labelled classifier corpus (``tests/classify/corpus/*.json``).

A case is data: a label (the cause the recent window must lead with; ``healthy``; or
``none`` for no verdict at all), the GPU model, nodes x GPUs, a simulated-backend scenario
(a name or spec such as ``"training,gpu7=idle"``, or a custom scenario defined in the case
file), a seed, the job's age, and a host profile: the job cgroup's CPU use and allocation,
memory vs its limit, the node's iowait, swap, NIC and InfiniBand rates.

:func:`build` turns a case into what a real deployment would hold: wire batches per node
(GPU samples from :class:`SimulatedBackend`, CPU/memory/NIC/IB/job/attribution samples
matching the profile) plus a ``slurm_jobs`` row and ``job_gpus`` rows. :func:`load` stores
them (BatchStore + Core inserts). Everything is a pure function of the case, so both
databases get identical input.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from functools import cache
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from gpuwatch import wire
from gpuwatch.collectors import sim_backend as sim
from gpuwatch.collectors.sim_host import HostProfile, host_samples
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.schema import job_gpus, slurm_jobs

CORPUS_DIR = Path(__file__).parent / "corpus"
#: every case starts here (seconds off the minute on purpose)
T0 = datetime(2026, 3, 2, 8, 0, 7, tzinfo=timezone.utc)
INTERVAL_S = 10

_BASE_ACTIVITIES = {
    "training": sim.TRAINING,
    "idle": sim.IDLE,
    "loader_wait": sim.LOADER_WAIT,
    "all_reduce": sim.ALL_REDUCE,
}


#: the corpus calls the host profile ``Host``
Host = HostProfile


@dataclass(frozen=True)
class Case:
    name: str
    label: str
    why: str
    scenario: str
    model: str = "H200"
    nodes: int = 1
    gpus: int = 4
    seed: int = 0
    minutes: int = 15  # job age at evaluation (or duration, when finished)
    finished_after_min: int | None = None  # job ended this many minutes after start
    gpu_source: str = "job_gpus"  # "job_gpus" | "attribution" (no job_gpus rows)
    slurm_row: bool = True
    host: Host = field(default_factory=Host)
    #: a power cap an admin set on every GPU (nvidia-smi -pl), watts; None: the card's default
    power_cap_watts: float | None = None
    #: the frameworks the agent finds mapped into the job's GPU processes ([] none runs one);
    #: None: not inspected (an agent that does not send them)
    frameworks: list[str] | None = None
    #: "train": the cases the thresholds were set against; "validation": written from the physics
    #: of a job and never tuned against (docs/classification.md reports both)
    split: str = "train"
    scenarios: dict[str, Any] = field(default_factory=dict)  # custom scenarios of the case file
    #: what the listing must show for the job (``Evaluation.shown``): ``"cause@window"``, or
    #: ``"none"`` for no waste shown; None: not checked beyond the label
    listing: str | None = None

    @property
    def start(self) -> datetime:
        return T0

    @property
    def now(self) -> datetime:
        return T0 + timedelta(minutes=self.minutes)

    @property
    def end(self) -> datetime | None:
        return None if self.finished_after_min is None else T0 + timedelta(minutes=self.finished_after_min)


# ---------------------------------------------------------------------------- scenarios


def _activity(spec: str | dict) -> sim.Activity:
    if isinstance(spec, str):
        return _BASE_ACTIVITIES[spec]
    spec = dict(spec)
    base = _BASE_ACTIVITIES[spec.pop("base")] if "base" in spec else sim.Activity()
    if "throttle_reasons" in spec:
        spec["throttle_reasons"] = tuple(spec["throttle_reasons"])
    return sim.Activity(**{**base.__dict__, **spec})


def _scenario(name: str, custom: dict[str, Any]) -> sim.Scenario | str:
    if name not in custom:
        return name  # one of sim.SCENARIOS
    spec = custom[name]
    kind = spec["kind"]
    if kind == "steady":
        return sim.Steady(_activity(spec["activity"]))
    if kind == "duty":
        return sim.DutyCycle(_activity(spec["on"]), _activity(spec["off"]), spec["period_s"], spec["on_s"])
    if kind == "switch":
        before, after = (_scenario(spec[k], custom) for k in ("before", "after"))
        return sim.Switch(_object(before), _object(after), spec["at_s"])
    if kind == "xid":
        base = _object(_scenario(spec["base"], custom))
        return sim.XidThenLost(base, spec["xid"], spec["at_s"], spec["lost_after_s"])
    raise ValueError(f"unknown custom scenario kind {kind!r}")


def _object(scenario: sim.Scenario | str) -> sim.Scenario:
    return sim.SCENARIOS[scenario] if isinstance(scenario, str) else scenario


def backend(case: Case, node: int) -> sim.SimulatedBackend:
    spec = case.scenario.split("|")[node] if "|" in case.scenario else case.scenario
    default, overrides = sim.parse_scenario_spec(spec)
    return sim.SimulatedBackend(
        _scenario(default, case.scenarios),
        gpus=case.gpus,
        seed=case.seed * 101 + node,
        model=case.model,
        overrides={i: _scenario(s, case.scenarios) for i, s in overrides.items()},
        interval_s=INTERVAL_S,
        start=case.start,
        power_cap_watts=case.power_cap_watts,
    )


# ---------------------------------------------------------------------------- samples


def _with_frameworks(samples: list[wire.GpuSample], frameworks: list[str] | None) -> list[wire.GpuSample]:
    """What the agent's process lookup adds to a real GPU's samples: the frameworks, on GPUs
    that have compute processes."""
    if frameworks is None:
        return samples
    return [s.model_copy(update={"frameworks": frameworks}) if s.processes else s for s in samples]


def job_id(index: int) -> str:
    return f"{9000 + index}"


def node_name(index: int, node: int) -> str:
    return f"c{index:02d}n{node}"


@dataclass(frozen=True)
class Built:
    case: Case
    job_id: str
    batches: dict[str, list[wire.Batch]]  # node name -> batches
    slurm_row: dict[str, Any] | None
    job_gpu_rows: list[dict[str, Any]]


def build(case: Case, index: int) -> Built:
    jid = job_id(index)
    last = case.end if case.end is not None else case.now
    cycles = int((last - case.start).total_seconds() // INTERVAL_S)
    batches: dict[str, list[wire.Batch]] = {}
    for node in range(case.nodes):
        name = node_name(index, node)
        gpu = backend(case, node)
        rng = random.Random(f"{case.seed}-{node}")
        chunk: list = []
        out: list[wire.Batch] = []
        for k in range(1, cycles + 1):
            ts = case.start + timedelta(seconds=INTERVAL_S * k)
            chunk.extend(_with_frameworks(gpu.sample(ts), case.frameworks))
            chunk.extend(host_samples(case.host, jid, ts, rng))
            chunk.extend(
                wire.AttributionSample(
                    ts=ts, gpu_index=i, job_id=jid, user="alice", uid=1000, source="prolog"
                )
                for i in range(case.gpus)
            )
            following = ts + timedelta(seconds=INTERVAL_S)
            # a batch per 10 wall-clock minutes, cut on a minute boundary so each rollup
            # minute comes from one batch (one storage path: INSERT or COPY)
            if (following.minute % 10 == 0 and following.minute != ts.minute) or k == cycles:
                out.append(wire.Batch(node=name, agent_version="corpus", seq=len(out), samples=chunk))
                chunk = []
        batches[name] = out
    now = case.now
    row = None
    if case.slurm_row:
        row = {
            "job_id": jid,
            "source": "squeue" if case.end is None else "sacct",
            "name": case.name,
            "user_name": "alice",
            "uid": 1000,
            "account": "lab",
            "partition": "gpu",
            "state": "RUNNING" if case.end is None else "COMPLETED",
            "submit_at": case.start - timedelta(minutes=1),
            "start_at": case.start,
            "end_at": case.end,
            "time_limit_s": 86400,
            "nodes": [node_name(index, n) for n in range(case.nodes)],
            "cpus": int(case.host.cpu_alloc * case.nodes),
            "memory_bytes": case.host.job_memory_limit * case.nodes,
            "gpus": case.gpus * case.nodes,
            "first_seen_at": case.start,
            "updated_at": now,
        }
    gpu_rows = []
    if case.gpu_source == "job_gpus" and row is not None:
        gpu_rows = [
            {"job_id": jid, "node": node_name(index, n), "gpu_index": i}
            for n in range(case.nodes)
            for i in range(case.gpus)
        ]
    return Built(case, jid, batches, row, gpu_rows)


# ---------------------------------------------------------------------------- the corpus


def _case(data: dict[str, Any], custom: dict[str, Any]) -> Case:
    data = dict(data)
    host = Host(**data.pop("host", {}))
    return Case(host=host, scenarios=custom, **data)


@cache
def cases() -> tuple[Case, ...]:
    out: list[Case] = []
    for path in sorted(CORPUS_DIR.glob("*.json")):
        doc = json.loads(path.read_text())
        custom = doc.get("scenarios", {})
        out.extend(_case(c, custom) for c in doc["cases"])
    names = [c.name for c in out]
    assert len(names) == len(set(names)), "case names must be unique"
    assert {c.split for c in out} <= {"train", "validation"}, "split is train or validation"
    return tuple(out)


@cache
def built_corpus() -> tuple[Built, ...]:
    return tuple(build(case, i) for i, case in enumerate(cases()))


def built_cases(names: Sequence[str], minutes: int) -> tuple[Built, ...]:
    """The named cases, each run ``minutes`` long, built as :func:`build` builds them (each
    keeps its place in the corpus, so its job id and node names)."""
    by_name = {c.name: (i, c) for i, c in enumerate(cases())}
    return tuple(build(replace(by_name[name][1], minutes=minutes), by_name[name][0]) for name in names)


def load(engine: sa.Engine, built: tuple[Built, ...]) -> None:
    """Store every case's batches and Slurm rows into ``engine``'s database."""
    store = BatchStore(engine)
    for b in built:
        for name, node_batches in b.batches.items():
            create_token(engine, name)
            with engine.connect() as conn:
                node_id = get_node(conn, name).id
            for batch in node_batches:
                store.store(node_id, batch)
    with engine.begin() as conn:
        rows = [b.slurm_row for b in built if b.slurm_row]
        if rows:
            conn.execute(slurm_jobs.insert(), rows)
        gpu_rows = [r for b in built for r in b.job_gpu_rows]
        if gpu_rows:
            conn.execute(job_gpus.insert(), gpu_rows)
