"""The demo's scheduler stays off while the virtual backfill arrives.

On the real clock, a rollup or classification pass over minutes that are still being sent
would mark them done or store verdicts of half a job; on a busy machine the backfill takes
long enough for that to happen (the demo's idle job then lost its recent-window verdict).
"""

from __future__ import annotations

import threading

import sqlalchemy as sa
from apscheduler.schedulers.background import BackgroundScheduler

from gpuwatch.cli.demo import run_demo
from gpuwatch.config import load_settings
from gpuwatch.sql.schema import verdicts


def _watch_scheduler_starts(monkeypatch, engine) -> list[int]:  # type: ignore[no-untyped-def]
    """Each scheduler start records how many verdicts were stored at that moment."""
    starts: list[int] = []
    original = BackgroundScheduler.start

    def start(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        with engine.connect() as conn:
            starts.append(conn.execute(sa.select(sa.func.count()).select_from(verdicts)).scalar_one())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(BackgroundScheduler, "start", start)
    return starts


def test_demo_without_serve_never_starts_the_scheduler(db_url, engine, monkeypatch) -> None:
    starts = _watch_scheduler_starts(monkeypatch, engine)
    settings = load_settings(database={"url": db_url})
    result = run_demo(settings, node_count=3, cycles=60, echo=lambda _line: None)
    assert result.rows, "the demo classified nothing"
    assert starts == []


def test_demo_serve_starts_the_scheduler_after_the_backfill_is_classified(
    db_url, engine, monkeypatch
) -> None:
    starts = _watch_scheduler_starts(monkeypatch, engine)
    settings = load_settings(database={"url": db_url}, daemon={"listen": "127.0.0.1:0"})
    stop = threading.Event()
    runner = threading.Thread(
        target=run_demo,
        args=(settings,),
        kwargs={"node_count": 3, "cycles": 60, "serve": True, "echo": lambda _line: None, "stop": stop},
        daemon=True,
    )
    runner.start()
    try:
        for _ in range(1200):  # the backfill's own pace: a busy machine is slow, not wrong
            if starts or not runner.is_alive():
                break
            stop.wait(0.25)
    finally:
        stop.set()
        runner.join(timeout=60)
    assert len(starts) == 1, "the scheduler never started while serving"
    assert starts[0] > 0, "the scheduler started before the backfill's verdicts were stored"
