"""Seconds of the command ``gpuwatch jobs --low-util --since 7d`` itself, process start to exit.

    .venv/bin/python bench/lowutil_command.py [--nodes 1000] [--days 7] [--eval-every-min 15]
                                              [--runs 5] [--db URL] [--keep] [--baseline TREE]

Fills a throwaway PostgreSQL database as ``bench/lowutil_query.py --no-samples`` does (127.0.0.1:5432
or $GPUWATCH_BENCH_PG): ``nodes`` nodes running back-to-back 8-GPU jobs of 2-12 h for ``days``
days up to the current hour, an evaluation every ``eval-every-min`` minutes of each job's run
(recent and whole-job windows, a third of the jobs wasting); or reads the database at ``--db``.
Then runs the installed command as a user would (a new process each run: interpreter start,
imports, schema check, the listing, rendering, writing to a pipe), as a table (the first
:data:`gpuwatch.cli.jobs.TABLE_PAGE` rows and a line saying how many more) and as JSON (every
row), and prints each one's median wall time over ``runs`` runs after a warm-up, the bytes it
wrote, and its own CPU seconds (user + system; the database server's work is not in them);
then the same command on an empty database (start-up alone) and the listing called in-process.
The issue's goal: under 1 s at 1,000 nodes and under 2 s at 10,000.

Each command imports the ``gpuwatch`` package of this tree (``PYTHONPATH``), with its bytecode
written by the warm-up run as an installed package has it (``PYTHONDONTWRITEBYTECODE`` is
dropped). ``--baseline TREE`` runs every command in turn with the package of another source
tree (``git worktree add --detach TREE <commit>``) on the same database, and prints that
tree's figures and the medians of the pairwise ratios (this tree / TREE): pairs taken in turn
keep a ratio meaningful on a machine whose speed drifts.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import lowutil_query as lq
from gpuwatch.sql.jobs import replace_job_gpus, upsert_jobs
from gpuwatch.sql.schema import nodes
from gpuwatch.views import LowUtilFilters, low_util_jobs

#: the tree whose ``gpuwatch`` package the commands import, unless ``--baseline`` names another
ROOT = Path(__file__).resolve().parents[1]
GPUWATCH = str(Path(sys.executable).with_name("gpuwatch"))
#: jobs per COPY of their verdicts (bounds the text held in memory at 10,000 nodes)
CHUNK_JOBS = 2000


def fill(engine: sa.Engine, n_nodes: int, days: float, every: timedelta) -> str:
    rng = random.Random(7)
    jobs = lq.make_jobs(n_nodes, 8, lq.NOW - timedelta(days=days), rng)
    with engine.begin() as conn:
        conn.execute(nodes.insert(), [{"name": f"g{n:04d}", "created_at": lq.NOW} for n in range(n_nodes)])
        upsert_jobs(conn, [j for j, _, _ in jobs], now=lq.NOW)
        replace_job_gpus(conn, {j.job_id: j.gpu_indices for j, _, _ in jobs})
    rows = sum(
        lq.load_verdicts(engine, jobs[i : i + CHUNK_JOBS], every) for i in range(0, len(jobs), CHUNK_JOBS)
    )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE"))
    wasting = sum(1 for _, _, cause in jobs if cause != "healthy")
    return f"{len(jobs):,} jobs ({wasting:,} wasting), {rows:,} verdict rows"


def run_command(url: str, *extra: str, runs: int, trees: tuple[Path, ...]) -> list[Runs]:
    """Per tree, the runs of ``gpuwatch --db URL jobs --low-util --since 7d EXTRA``: the trees'
    runs taken in turn, after one warm-up run each."""
    argv = [GPUWATCH, "--db", url, "jobs", "--low-util", "--since", "7d", *extra]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    found = [Runs() for _ in trees]
    for k in range(runs + 1):
        for tree, runs_of_tree in zip(trees, found, strict=True):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            done = subprocess.run(
                argv, capture_output=True, check=False, env={**env, "PYTHONPATH": str(tree)}
            )
            elapsed = time.perf_counter() - t
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.decode()[-300:]}")
            if k:  # the first run warms the page cache and writes the bytecode
                runs_of_tree.wall.append(elapsed)
                runs_of_tree.cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            runs_of_tree.size = len(done.stdout)
    return found


@dataclass
class Runs:
    """One tree's runs of one command: wall seconds, the command's own CPU seconds (user +
    system: the database server's work is not in them), bytes written."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    size: int = 0


def spread(times: list[float]) -> str:
    return f"median {statistics.median(times):5.2f} s ({min(times):.2f}-{max(times):.2f})"


def pairs(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def show(label: str, found: list[Runs], goal: float | None) -> None:
    """This tree's medians and ranges, and with a baseline its figures and the ratios."""
    this = found[0]
    verdict = ""
    if goal is not None:
        verdict = f"  ({'ok' if statistics.median(this.wall) < goal else 'over the goal'}: {goal:g} s)"
    size = f"{this.size / 1024:.0f} KiB"
    print(f"command, {label:<5} wall {spread(this.wall)}, cpu {spread(this.cpu)}, {size}{verdict}")
    if len(found) > 1:
        base = found[1]
        print(
            f"  baseline    wall {spread(base.wall)}, cpu {spread(base.cpu)}; this/baseline, median of "
            f"pairs: wall {pairs(this.wall, base.wall):.2f}, cpu {pairs(this.cpu, base.cpu):.2f}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--eval-every-min", type=float, default=15)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--db", help="time the command on this database instead of a generated one")
    ap.add_argument("--keep", action="store_true", help="keep the generated database (its URL is printed)")
    ap.add_argument("--baseline", type=Path, help="another source tree's gpuwatch, run in turn with this one")
    args = ap.parse_args()
    trees = (ROOT,) if args.baseline is None else (ROOT, args.baseline.resolve())
    names = []
    try:
        if args.db:
            url = args.db
        else:
            name, engine = lq.fresh_pg()
            names.append(name)
            t0 = time.perf_counter()
            facts = fill(engine, args.nodes, args.days, timedelta(minutes=args.eval_every_min))
            url = engine.url.render_as_string(hide_password=False)
            engine.dispose()
            if args.keep:
                names.remove(name)
                print(f"kept: {url}")
            print(
                f"generated {args.nodes:,} nodes x 8 GPUs x {args.days:g} d "
                f"in {time.perf_counter() - t0:.0f} s: {facts}"
            )
        empty_name, empty = lq.fresh_pg()
        names.append(empty_name)
        empty_url = empty.url.render_as_string(hide_password=False)
        empty.dispose()
        print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        goal = 1.0 if args.nodes <= 1000 else 2.0
        for label, extra in (("table", ()), ("json", ("--format", "json"))):
            show(label, run_command(url, *extra, runs=args.runs, trees=trees), goal)
        show("empty", run_command(empty_url, runs=args.runs, trees=trees), None)
        print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        engine = sa.create_engine(url)
        since = lq.NOW - timedelta(days=7)
        filters = LowUtilFilters(since=since, evaluated_since=since)
        times, found = [], []
        for _ in range(args.runs):
            t = time.perf_counter()
            found = low_util_jobs(engine, filters, now=lq.NOW)
            times.append(time.perf_counter() - t)
        engine.dispose()
        print(
            f"listing in-process (low_util_jobs): median {statistics.median(times):6.2f} s, "
            f"{len(found):,} jobs"
        )
    finally:
        for name in names:
            lq.drop_pg(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
