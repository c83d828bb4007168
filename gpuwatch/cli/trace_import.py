"""``gpuwatch import FILE --jobs JOBS.json``: replay recorded or hand-made data into a database.

``FILE`` is wire-format batches as JSON lines (one :class:`gpuwatch.wire.Batch` per line, as
``gpuwatch agent --record`` or ``docs/examples/make_example.py`` write them). Nodes are
created as needed **without tokens** (an imported node cannot push). Batches are stored with
:class:`~gpuwatch.daemon.store.batch_store.BatchStore` (a batch id already stored is skipped, so importing
twice is harmless); the job file goes through :func:`gpuwatch.sql.jobs.upsert_jobs` and
:func:`~gpuwatch.sql.jobs.replace_job_gpus`; the imported time span is rolled up
(:meth:`Rollup.roll <gpuwatch.sql.rollups.Rollup.roll>`); with ``--classify-at`` the jobs are
evaluated (:func:`gpuwatch.classify.runner.evaluate_jobs`) and the low-util table
(:func:`gpuwatch.views.low_util_jobs`) printed.

The job file is a JSON list of objects: ``job_id`` (required), ``user``, ``account``,
``partition``, ``state``, ``start``, ``end``, ``submit`` (ISO 8601 with offset), ``nodes``
(list), ``gpus`` (``{node: [indices]}``), ``cpus``, ``memory_bytes``, ``name``, ``qos``,
``uid``, ``time_limit_s``, ``elapsed_s``, ``exit_code``, ``array_job_id``, ``array_task_id``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gpuwatch.cli.render import OutputFormat, format_option

if TYPE_CHECKING:
    import sqlalchemy as sa

    from gpuwatch.cli.main import Context
    from gpuwatch.slurm.model import SlurmJob

_TIMES = ("submit", "start", "end")
_PLAIN = (
    "name",
    "user",
    "uid",
    "account",
    "partition",
    "qos",
    "state",
    "state_reason",
    "array_job_id",
    "array_task_id",
    "time_limit_s",
    "elapsed_s",
    "cpus",
    "memory_bytes",
    "exit_code",
    "exit_signal",
)


def _time(value: Any, field: str) -> datetime | None:
    if value is None:
        return None
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"{field}: {value!r} has no UTC offset")
    return parsed.astimezone(timezone.utc)


def parse_jobs(doc: Any) -> list[SlurmJob]:
    """The job file's objects as :class:`SlurmJob` (``ValueError`` on a malformed entry)."""
    from gpuwatch.slurm.model import SlurmJob, normalize_state

    if not isinstance(doc, list):
        raise ValueError("the job file must hold a JSON list of job objects")
    out = []
    for n, item in enumerate(doc):
        if not isinstance(item, dict) or "job_id" not in item:
            raise ValueError(f"job #{n}: an object with a job_id is required")
        gpus = {str(node): tuple(int(i) for i in idx) for node, idx in (item.get("gpus") or {}).items()}
        nodes = tuple(item.get("nodes") or sorted(gpus))
        kw: dict[str, Any] = {k: item[k] for k in _PLAIN if item.get(k) is not None}
        if "state" in kw:
            kw["state"] = normalize_state(kw["state"]) or kw["state"]
        kw.update({k: _time(item.get(k), k) for k in _TIMES})
        out.append(
            SlurmJob(
                str(item["job_id"]),
                "import",
                nodes=nodes,
                gpus=item.get("gpu_count", sum(len(i) for i in gpus.values())),
                gpu_indices=gpus,
                **kw,
            )
        )
    return out


def _node_ids(engine: sa.Engine, names: set[str]) -> dict[str, int]:
    import sqlalchemy as sa

    from gpuwatch.clock import utcnow
    from gpuwatch.sql.schema import nodes

    with engine.begin() as conn:
        have = dict(
            conn.execute(sa.select(nodes.c.name, nodes.c.id).where(nodes.c.name.in_(sorted(names)))).all()
        )
        for name in sorted(names - set(have)):
            conn.execute(nodes.insert().values(name=name, created_at=utcnow()))
        return dict(
            conn.execute(sa.select(nodes.c.name, nodes.c.id).where(nodes.c.name.in_(sorted(names)))).all()
        )


def import_trace(engine: sa.Engine, batches_path: Path, jobs_doc: Any, group: int = 50) -> dict[str, Any]:
    """Store the batches and jobs, roll up their span; returns counts, the span and the job ids."""
    from gpuwatch.daemon.store.batch_store import BatchStore, IngestStatus
    from gpuwatch.sql.jobs import replace_job_gpus, upsert_jobs
    from gpuwatch.sql.rollups import Rollup, floor_minute
    from gpuwatch.wire import Batch
    from gpuwatch.wire.text import without_nul

    jobs = parse_jobs(jobs_doc)
    batches: list[Batch] = []
    with open(batches_path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    batches.append(Batch.model_validate_json(without_nul(line)))
                except ValueError as exc:
                    raise ValueError(
                        f"{batches_path}:{n}: not a wire batch: {str(exc).splitlines()[0]}"
                    ) from None
    ids = _node_ids(engine, {b.node for b in batches} | {n for j in jobs for n in j.nodes})
    store = BatchStore(engine)
    stored = samples = 0
    for i in range(0, len(batches), group):
        chunk = batches[i : i + group]
        for result in store.store_many([(ids[b.node], b) for b in chunk]):
            if result.status is IngestStatus.STORED:
                stored += 1
                samples += result.samples
    with engine.begin() as conn:
        upsert_jobs(conn, jobs)
        replace_job_gpus(conn, {j.job_id: j.gpu_indices for j in jobs})
    stamps = [s.ts for b in batches for s in b.samples]
    span = (min(stamps), max(stamps)) if stamps else None
    if span is not None:
        Rollup(engine).roll(floor_minute(span[0]), floor_minute(span[1]) + timedelta(minutes=1))
    by_node: dict[str, int] = defaultdict(int)
    for b in batches:
        by_node[b.node] += 1
    return {
        "batches": len(batches),
        "stored": stored,
        "samples": samples,
        "nodes": dict(by_node),
        "jobs": [j.job_id for j in jobs],
        "span": span,
    }


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--jobs",
    "jobs_file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSON list of job descriptions (see docs/cli.md).",
)
@click.option(
    "--classify-at",
    help="Evaluate the imported jobs at this ISO 8601 time, or 'end' (each job at its end, or at its "
    "last GPU minute), store the verdicts and print the low-util table.",
)
@format_option(*OutputFormat, help="Format of the low-util table printed with --classify-at.")
@click.pass_obj
def import_(ctx: Context, file: Path, jobs_file: Path, classify_at: str | None, fmt: str) -> None:
    """Load wire-format batches (JSONL) and a job file into the database; optionally classify."""
    from gpuwatch.classify.runner import evaluate_jobs
    from gpuwatch.cli.jobs import render_low_util
    from gpuwatch.sql import migrate
    from gpuwatch.views import LowUtilFilters, low_util_jobs

    at: datetime | None = None
    if classify_at and classify_at != "end":
        try:
            at = _time(classify_at, "--classify-at")
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--classify-at") from None
    try:
        jobs_doc = json.loads(jobs_file.read_text(encoding="utf-8"))
        parse_jobs(jobs_doc)
    except ValueError as exc:
        raise click.ClickException(f"{jobs_file}: {exc}") from None
    engine = ctx.engine()
    if not migrate.is_up_to_date(engine):
        raise click.ClickException("database schema is not current; run: gpuwatch db upgrade")
    try:
        report = import_trace(engine, file, jobs_doc)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    span = report["span"]
    click.echo(
        f"imported {report['stored']} of {report['batches']} batch(es), {report['samples']} samples, "
        f"{len(report['nodes'])} node(s), {len(report['jobs'])} job(s)"
        + (f"; rolled up {span[0].isoformat()} .. {span[1].isoformat()}" if span else ""),
        err=True,
    )
    if classify_at is None:
        return
    found = evaluate_jobs(engine, report["jobs"], at)
    click.echo(f"classified {sum(1 for v in found.values() if v)} of {len(report['jobs'])} job(s)", err=True)
    now = at or max((v.window_end for vs in found.values() for v in vs), default=None) or span[1]
    rows = low_util_jobs(engine, LowUtilFilters(job_ids=tuple(report["jobs"])), now=now)
    click.echo(render_low_util(rows, OutputFormat(fmt), "Imported jobs with low GPU use"))


def register(cli: click.Group) -> None:
    cli.add_command(import_)
