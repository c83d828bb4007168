"""The weekly digests' right-sizing advice and estimated saving: the figures ``gpuwatch report``
shows, sent through the outbox to a real SMTP server and a Slack Web API stand-in; said where the
report has them, and nowhere else."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa
from click.testing import CliRunner

from gpuwatch.alerts import outbox
from gpuwatch.alerts.digest import Digests
from gpuwatch.alerts.worker import Worker
from gpuwatch.cli.main import cli
from gpuwatch.sql import job_hours
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.schema import UTIL_BINS, gpu_minutes, job_gpus, slurm_jobs
from gpuwatch.views.job_totals import store_job_totals
from tests.alerts.conftest import add_verdict, make_config
from tests.alerts.test_email import body

DAY = datetime(2026, 12, 2, 0, 0, tzinfo=timezone.utc)  # a Wednesday; the digest is due at 09:00
NOW = DAY + timedelta(hours=9, minutes=30)
START, END = DAY - timedelta(days=7) + timedelta(hours=9), DAY + timedelta(hours=9)  # its week
NODE = "g1"


def _ended_job(
    engine: sa.Engine, job_id: str, user: str, account: str, start: datetime, busy: tuple[float, ...]
) -> None:
    """A completed two-hour job on ``NODE`` with one GPU per entry of ``busy`` (its utilization
    every minute of the run, 0 for a GPU idle throughout), every minute measured."""
    with engine.connect() as conn:
        node_id = get_node(conn, NODE).id
    first = 2 * int(job_id) % 8  # each job its own GPUs
    end = start + timedelta(hours=2)
    minutes = [start + timedelta(minutes=m) for m in range(120)]
    rows = [
        {
            **{f"util_bin_{b}": 6 * (b == math.ceil(10 * util)) for b in range(UTIL_BINS)},
            "node_id": node_id, "gpu_index": first + g, "minute": minute, "samples": 6, "lost_samples": 0,
            "energy_joules": 24_000.0, "energy_power_samples": 0, "util_gpu_ratio_sum": 6 * util,
            "util_gpu_ratio_n": 6,
        }
        for g, util in enumerate(busy)
        for minute in minutes
    ]  # fmt: skip
    with engine.begin() as conn:
        conn.execute(
            slurm_jobs.insert().values(
                job_id=job_id, source="sacct", name="train", user_name=user, account=account,
                partition="gpu", state="COMPLETED", gpus=len(busy), start_at=start, end_at=end,
                first_seen_at=start, updated_at=end,
            )
        )  # fmt: skip
        conn.execute(
            job_gpus.insert(),
            [{"job_id": job_id, "node": NODE, "gpu_index": first + g} for g in range(len(busy))],
        )
        conn.execute(gpu_minutes.insert(), rows)


def _week(engine: sa.Engine) -> None:
    """alice: a job with one of its two GPUs idle all run, its whole-job verdict idle_allocation
    (2 of 4 GPU-hours: releasing the idle GPU returns them). bob: both GPUs busy, throttled: a
    cause whose fix has no measured saving, and nothing to request differently."""
    create_token(engine, NODE)
    alice_start, bob_start = DAY - timedelta(days=2), DAY - timedelta(days=2, hours=-4)
    _ended_job(engine, "1", "alice", "nlp", alice_start, (0.6, 0.0))
    _ended_job(engine, "2", "bob", "vision", bob_start, (0.5, 0.5))
    add_verdict(
        engine, "1", "idle_allocation", evaluated_at=alice_start + timedelta(hours=2), window_kind="job",
        wasted=2.0, gpus=2, evidence={"signals": {"idle_gpus": ["g1:1"]}},
    )  # fmt: skip
    add_verdict(
        engine, "2", "throttled", evaluated_at=bob_start + timedelta(hours=2), window_kind="job",
        wasted=1.5, gpus=2, mean_util=0.5,
    )  # fmt: skip
    with engine.begin() as conn:  # the rollup pass sums the hours, the totals pass stores each job's
        job_hours.advance(conn, END)
    assert store_job_totals(engine, now=NOW) == 2


def _report(url: str, by: str) -> dict[str, dict]:
    """``gpuwatch report`` of the digest's week as JSON, by its group."""
    args = ["--db", url, *f"report --by {by} --since 7d --until {END.isoformat()} --format json".split()]
    out = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert out.exit_code == 0, out.output
    return {row[by]: row for row in json.loads(out.output)}


ADVICE = "Next time: of the jobs that ran wholly within the week, 1 job could have requested fewer GPUs"
SAVING = "Estimated saving: about 2.0 GPU-hours had the causes found been fixed. An estimate:"


def test_weekly_digests_carry_the_reports_advice_and_saving(migrated, smtp_server, slack_api, clock):
    url, engine = migrated
    _week(engine)
    users, accounts = _report(url, "user"), _report(url, "account")
    # what the CLI shows: alice's job could have used one GPU and its fix returns 2 GPU-hours;
    # bob's job has no advice and no estimate
    assert (users["alice"]["jobs_advised_gpus"], users["alice"]["saving_gpu_hours"]) == (1, 2.0)
    assert users["alice"]["jobs_advised_gpu_size"] == 0
    assert (users["bob"]["jobs_advised_gpus"], users["bob"]["jobs_advised_gpu_size"]) == (0, 0)
    assert users["bob"]["saving_gpu_hours"] is None
    assert (accounts["nlp"]["jobs_advised_gpus"], accounts["nlp"]["saving_gpu_hours"]) == (1, 2.0)

    slack_api.users |= {f"{who}@example.edu": f"U0{who.upper()}" for who in ("alice", "bob", "pi", "head")}
    cfg = make_config(
        smtp_port=smtp_server.port,
        slack_api_url=slack_api.api_url,
        account_owners={"nlp": ["pi@example.edu"], "vision": ["head@example.edu"]},
        digest={"daily_admin": False, "weekly_weekday": 2, "weekly_at": "09:00",
                "weekly_user_via": ["email", "slack_dm"], "weekly_account_via": ["email", "slack_dm"]},
    )  # fmt: skip
    notices = Digests(engine, cfg).due(NOW)
    assert len(notices) == 8  # alice, bob, nlp's and vision's owner; by email and by DM each
    assert outbox.enqueue(engine, notices, NOW) == 8
    assert Worker(engine, cfg, clock=clock).run_once().sent == 8
    mails = {m["To"]: m for m in smtp_server.messages}
    dms = {b["channel"]: b for b in slack_api.posted}

    for to in ("alice@example.edu", "pi@example.edu"):  # the user and the account's owner
        text = body(mails[to], "plain")
        assert ADVICE + " (some of the GPUs stayed idle the whole run)" in text, to
        assert "smaller GPU or MIG slice" not in text  # no job was advised a smaller card
        assert SAVING in text and "idle GPUs: their GPU-hours" in text and "basis" in text
        html = body(mails[to], "html")
        assert ADVICE in html and SAVING in html
    alice = dms["U0ALICE"]
    assert [b["type"] for b in alice["blocks"]] == [
        "header",
        "section",
        "section",
        "divider",
        "section",
        "context",
    ]
    advice = alice["blocks"][2]["text"]["text"]
    assert advice.startswith(ADVICE) and SAVING in advice
    owner = dms["U0PI"]["blocks"]
    assert any(SAVING in (b.get("text") or {}).get("text", "") for b in owner)

    # bob's week and vision's: nothing to advise and no estimate, so neither is said
    for to in ("bob@example.edu", "head@example.edu"):
        for part in ("plain", "html"):
            text = body(mails[to], part)
            assert "Next time" not in text and "Estimated saving" not in text, to
    assert "1.5 GPU-hours wasted" in body(mails["bob@example.edu"], "plain")
    for channel in ("U0BOB", "U0HEAD"):
        shown = json.dumps(dms[channel])
        assert "Next time" not in shown and "Estimated saving" not in shown, channel
    assert [b["type"] for b in dms["U0BOB"]["blocks"]] == [
        "header",
        "section",
        "divider",
        "section",
        "context",
    ]
