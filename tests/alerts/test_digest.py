"""Daily admin digest and weekly user digest: counting waste once, due once per period."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gpuwatch.alerts import outbox
from gpuwatch.alerts.digest import Digests, admin_digest, daily_period, weekly_period
from tests.alerts.conftest import add_job, add_verdict, make_config

DAY = datetime(2026, 12, 2, 0, 0, tzinfo=timezone.utc)  # a Wednesday


def _cfg(**kw):
    return make_config(
        slack_url="http://127.0.0.1:9/hook",
        smtp_port=2525,
        admin_emails=["hpc@example.edu"],
        digest={"daily_at": "08:00", "weekly_weekday": 2, "weekly_at": "09:00"},
        **kw,
    )


def _fill(engine):
    add_job(engine, "1", user="alice", account="nlp")
    add_job(engine, "2", user="bob", account="vision")
    at = DAY + timedelta(hours=3)
    # overlapping recent windows of job 1: the largest counts, not the sum
    add_verdict(engine, "1", "idle_allocation", evaluated_at=at, wasted=4)
    add_verdict(engine, "1", "idle_allocation", evaluated_at=at + timedelta(minutes=30), wasted=5)
    # job 2: a whole-job verdict supersedes its recent windows; two causes count as the larger
    add_verdict(engine, "2", "input_bound", evaluated_at=at, wasted=9)
    add_verdict(engine, "2", "input_bound", evaluated_at=at + timedelta(hours=1), window_kind="job", wasted=3)
    add_verdict(engine, "2", "no_mixed_precision", evaluated_at=at + timedelta(hours=1), wasted=2)
    add_verdict(engine, "2", "healthy", evaluated_at=at + timedelta(hours=2), wasted=0)


def test_admin_digest_counts(engine):
    _fill(engine)
    d = admin_digest(engine, DAY, DAY + timedelta(days=1), top_n=10)
    assert d.jobs == 2 and d.gpu_hours_wasted == 8
    assert [(r.name, r.gpu_hours_wasted, r.jobs) for r in d.by_user] == [("alice", 5, 1), ("bob", 3, 1)]
    assert [(r.name, r.gpu_hours_wasted) for r in d.by_account] == [("nlp", 5), ("vision", 3)]
    assert [(r.name, r.gpu_hours_wasted) for r in d.by_cause] == [
        ("idle_allocation", 5),
        ("input_bound", 3),
        ("no_mixed_precision", 2),
    ]


def test_periods():
    cfg = _cfg()
    now = DAY + timedelta(hours=7)
    assert daily_period(cfg, now) == (DAY - timedelta(hours=40), DAY - timedelta(hours=16))
    assert daily_period(cfg, DAY + timedelta(hours=8)) == (
        DAY - timedelta(hours=16),
        DAY + timedelta(hours=8),
    )
    start, end = weekly_period(cfg, DAY + timedelta(hours=10))
    assert end == DAY + timedelta(hours=9) and start == end - timedelta(days=7)


def test_digests_are_queued_once_per_period(engine):
    _fill(engine)
    cfg = _cfg()
    now = DAY + timedelta(hours=9, minutes=30)  # Wednesday: the daily and the weekly digest are due
    notices = Digests(engine, cfg).due(now)
    kinds = sorted((n.channel, n.recipient, n.recipient_kind) for n in notices)
    assert kinds == [
        ("email", "alice@example.edu", "user"),
        ("email", "bob@example.edu", "user"),
        ("email", "hpc@example.edu", "admin"),
        ("slack", "#gpu-admins", "admin"),
    ]
    assert outbox.enqueue(engine, notices, now) == 4
    # another daemon, or a restart: nothing new
    assert Digests(engine, cfg).due(now + timedelta(minutes=5)) == []
    slack = next(n for n in notices if n.channel == "slack")
    assert slack.payload["blocks"][0]["text"]["text"] == "GPU waste digest 2026-12-02"
    assert "1. alice: 5.0 GPU-h (1 job(s))" in slack.payload["blocks"][2]["fields"][0]["text"]
    alice = next(n for n in notices if n.recipient == "alice@example.edu")
    assert alice.subject == "[gpuwatch] Your GPU jobs this week: 5.0 GPU-hours wasted"
    assert 'Job 1 "train": GPUs allocated but idle, 5.0 GPU-hours wasted' in alice.payload["text"]
    assert "https://gpuwatch.example.edu/jobs/1" in alice.payload["text"]
    # a week later nobody wasted anything: no digest at all, not one saying "0.0 GPU-h"
    week = DAY + timedelta(days=7, hours=9, minutes=1)
    assert Digests(engine, cfg).due(week) == []
    # more than two days after the weekly digest was due it is not sent late
    later = DAY + timedelta(days=3, hours=10)
    add_job(engine, "3", user="carol", account="nlp")
    add_verdict(engine, "3", "idle_allocation", evaluated_at=later - timedelta(hours=4), wasted=6)
    assert [n.recipient_kind for n in Digests(engine, cfg).due(later)] == ["admin", "admin"]


def test_a_fresh_install_sends_no_digest(engine):
    """Nothing evaluated yet: the daily digest that is due would say 0.0 GPU-h; it is not sent."""
    assert Digests(engine, _cfg()).due(DAY + timedelta(hours=9, minutes=30)) == []


def test_weekly_digests_with_usage_reach_users_and_account_owners_over_smtp(engine, smtp_server, clock):
    """Through the outbox and a real SMTP server: each user gets their week (waste, GPU-hours
    held, the week before) unless they opted out; each account's owner gets the account's week
    with its users by waste (an opted-out user still counts for the account)."""
    import sqlalchemy as sa

    from gpuwatch.alerts.worker import Worker
    from gpuwatch.sql.schema import slurm_jobs
    from tests.alerts.test_email import body

    _fill(engine)
    with engine.begin() as conn:  # both jobs started with the week: 4 GPUs x 168 h each
        conn.execute(slurm_jobs.update().values(start_at=DAY - timedelta(days=7) + timedelta(hours=9)))
    cfg = make_config(
        smtp_port=smtp_server.port,
        admin_emails=["hpc@example.edu"],
        account_owners={"nlp": ["pi@example.edu"], "vision": ["head@example.edu"]},
        digest={"daily_admin": False, "weekly_weekday": 2, "weekly_at": "09:00",
                "weekly_user_opt_out": ["bob"], "min_account_gpu_hours_wasted": 4},
    )  # fmt: skip
    now = DAY + timedelta(hours=9, minutes=30)
    notices = Digests(engine, cfg).due(now)
    assert sorted((n.recipient, n.recipient_kind) for n in notices) == [
        ("alice@example.edu", "user"),  # bob opted out
        ("pi@example.edu", "owner"),  # nlp wasted 5 GPU-h; vision only 3, under the minimum of 4
    ]
    assert outbox.enqueue(engine, notices, now) == 2
    assert Worker(engine, cfg, clock=clock).run_once().sent == 2
    by_to = {m["To"]: m for m in smtp_server.messages}
    alice = body(by_to["alice@example.edu"], "plain")
    assert "Your jobs held 672.0 GPU-hours; 5.0 (0.7%) were wasted." in alice  # no week before
    owner = by_to["pi@example.edu"]
    assert owner["Subject"] == "[gpuwatch] Account nlp this week: 5.0 of 672.0 GPU-hours wasted"
    text = body(owner, "plain")
    assert "Jobs of nlp held 672.0 GPU-hours; 5.0 (0.7%) were wasted." in text
    assert "Users by GPU-hours wasted" in text and "alice" in text
    assert "<b>nlp</b>" in body(owner, "html")
    # the week after, the week before is known: the trend is in the sentence
    with engine.begin() as conn:
        conn.execute(sa.delete(slurm_jobs).where(slurm_jobs.c.job_id == "2"))
    add_verdict(
        engine, "1", "idle_allocation", evaluated_at=DAY + timedelta(days=3), window_kind="job", wasted=67.2
    )
    later = Digests(engine, cfg).due(DAY + timedelta(days=7, hours=9, minutes=30))
    alice_later = next(n for n in later if n.recipient == "alice@example.edu")
    assert "67.2 (10%) were wasted; the week before, 0.7% was wasted." in alice_later.payload["text"]


def test_weekly_digests_by_slack_dm_and_email(engine, smtp_server, slack_api, clock):
    """Through the outbox to a real SMTP server and a Slack Web API stand-in: a user asked both
    ways gets each once (one dedup key per channel); an opted-out user gets neither; an
    account's owner gets the account's week by DM when weekly_account_via says so."""
    from gpuwatch.alerts.worker import Worker
    from gpuwatch.sql.schema import slurm_jobs

    _fill(engine)
    with engine.begin() as conn:  # both jobs started with the week: 4 GPUs x 168 h each
        conn.execute(slurm_jobs.update().values(start_at=DAY - timedelta(days=7) + timedelta(hours=9)))
    slack_api.users |= {"alice@example.edu": "U0ALICE", "pi@example.edu": "U0PI", "bob@example.edu": "U0BOB"}
    cfg = make_config(
        smtp_port=smtp_server.port,
        slack_api_url=slack_api.api_url,
        account_owners={"nlp": ["pi@example.edu"]},
        digest={"daily_admin": False, "weekly_weekday": 2, "weekly_at": "09:00",
                "weekly_user_opt_out": ["bob"], "weekly_user_via": ["email", "slack_dm"],
                "weekly_account_via": ["slack_dm"]},
    )  # fmt: skip
    now = DAY + timedelta(hours=9, minutes=30)
    notices = Digests(engine, cfg).due(now)
    assert sorted((n.channel, n.recipient, n.recipient_kind) for n in notices) == [
        ("email", "alice@example.edu", "user"),
        ("slack_dm", "alice@example.edu", "user"),
        ("slack_dm", "pi@example.edu", "owner"),
    ]
    assert len({n.dedup_key for n in notices}) == 3
    assert outbox.enqueue(engine, notices, now) == 3
    assert Digests(engine, cfg).due(now + timedelta(minutes=5)) == []  # queued once per way
    assert Worker(engine, cfg, clock=clock).run_once().sent == 3

    assert [m["To"] for m in smtp_server.messages] == ["alice@example.edu"]
    assert {r["body"]["email"] for r in slack_api.calls("users.lookupByEmail")} == {
        "alice@example.edu",
        "pi@example.edu",
    }
    dms = {b["channel"]: b for b in slack_api.posted}
    assert set(dms) == {"U0ALICE", "U0PI"}  # not bob
    alice = dms["U0ALICE"]
    assert alice["text"] == "[gpuwatch] Your GPU jobs this week: 5.0 GPU-hours wasted"
    assert [b["type"] for b in alice["blocks"]] == ["header", "section", "divider", "section", "context"]
    summary = alice["blocks"][1]
    assert "your GPU jobs left *5.0 GPU-hours* unused" in summary["text"]["text"]
    fields = [f["text"] for f in summary["fields"]]
    assert fields[:2] == ["*GPU-hours*\n672.0", "*Wasted*\n5.0 (0.7%)"]
    job = alice["blocks"][3]["text"]["text"]
    assert job.startswith('*Job 1* "train": GPUs allocated but idle, 5.0 GPU-hours wasted\n*Fix:* ')
    assert job.endswith("<https://gpuwatch.example.edu/jobs/1|job page>")
    owner = dms["U0PI"]
    assert owner["text"] == "[gpuwatch] Account nlp this week: 5.0 of 672.0 GPU-hours wasted"
    assert "1. alice: 5.0 GPU-h (1 job(s))" in owner["blocks"][2]["text"]["text"]


def test_weekly_digest_by_slack_dm_alone(engine, slack_api):
    """No email configured: the weekly digest still goes by DM when asked; unless asked, it does
    not go at all (email is the default way)."""
    _fill(engine)
    now = DAY + timedelta(hours=9, minutes=30)
    digest = {"daily_admin": False, "weekly_weekday": 2, "weekly_at": "09:00"}
    dm = make_config(slack_api_url=slack_api.api_url, digest=digest | {"weekly_user_via": ["slack_dm"]})
    notices = Digests(engine, dm).due(now)
    assert sorted((n.channel, n.recipient) for n in notices) == [
        ("slack_dm", "alice@example.edu"),
        ("slack_dm", "bob@example.edu"),
    ]
    assert Digests(engine, make_config(slack_api_url=slack_api.api_url, digest=digest)).due(now) == []


def test_account_owners_get_their_week_with_the_users_digest_off(engine):
    """``weekly_user = false`` stops the users' digests only: the owners still get theirs
    (``weekly_account``), and with both off nothing weekly is queued."""
    from gpuwatch.sql.schema import slurm_jobs

    _fill(engine)
    with engine.begin() as conn:  # the jobs ran through the week
        conn.execute(slurm_jobs.update().values(start_at=DAY - timedelta(days=7) + timedelta(hours=9)))
    digest = {"daily_admin": False, "weekly_weekday": 2, "weekly_at": "09:00", "weekly_user": False,
              "min_account_gpu_hours_wasted": 1}  # fmt: skip
    owners = {"nlp": ["pi@example.edu"]}
    now = DAY + timedelta(hours=9, minutes=30)
    notices = Digests(engine, make_config(smtp_port=2525, account_owners=owners, digest=digest)).due(now)
    assert [(n.recipient, n.recipient_kind) for n in notices] == [("pi@example.edu", "owner")]
    off = make_config(smtp_port=2525, account_owners=owners, digest={**digest, "weekly_account": False})
    assert Digests(engine, off).due(now) == []


def test_the_admin_digest_names_the_gpus_that_faulted_and_goes_out_for_them_alone(engine):
    """No job wasted anything, but a GPU fell off the bus: the admins still hear of it, in the
    node list's words, by email (text and HTML) and Slack; a fault outside the period is not theirs."""
    import sqlalchemy as sa

    from gpuwatch.sql.nodes import create_token, get_node
    from gpuwatch.sql.schema import gpu_minutes

    create_token(engine, "n7")
    with engine.begin() as conn:
        node_id = get_node(conn, "n7").id
        conn.execute(
            sa.insert(gpu_minutes),
            [
                {"node_id": node_id, "gpu_index": 2, "minute": DAY + timedelta(hours=3), "samples": 6,
                 "lost_samples": 3, "xid_samples": 1, "xid_codes": "[79]"},
                {"node_id": node_id, "gpu_index": 5, "minute": DAY - timedelta(days=2), "samples": 6,
                 "lost_samples": 6, "xid_samples": 0, "xid_codes": None},
            ],
        )  # fmt: skip
    d = admin_digest(engine, DAY - timedelta(hours=16), DAY + timedelta(hours=8), top_n=10)
    assert d.jobs == 0 and [(f.node, f.gpu_index) for f in d.faults] == [("n7", 2)]
    assert d.faults[0].text == "XID 79 (GPU has fallen off the bus); admin; lost 3 sample(s)"
    notices = Digests(engine, _cfg()).due(DAY + timedelta(hours=9, minutes=30))
    assert sorted(n.channel for n in notices) == ["email", "slack"]
    email = next(n for n in notices if n.channel == "email")
    assert email.subject.endswith("in 0 job(s), 1 GPU(s) faulted")
    assert "  n7 gpu2: XID 79 (GPU has fallen off the bus); admin; lost 3 sample(s)" in email.payload["text"]
    assert (
        "<li>n7 gpu2: XID 79 (GPU has fallen off the bus); admin; lost 3 sample(s)</li>"
        in email.payload["html"]
    )
    slack = next(n for n in notices if n.channel == "slack")
    assert "n7 gpu2: XID 79" in slack.payload["blocks"][-1]["text"]["text"]


def test_a_night_of_many_faults_lists_the_first_and_counts_the_rest_on_every_channel():
    """A rack's power event faults dozens of GPUs: the digest lists FAULT_LINES of them and says
    how many more, in the email's text and HTML and in Slack; the subject counts them all."""
    from gpuwatch.alerts.templates import digest as tpl

    extra = 5
    faults = [
        tpl.Fault(f"n{i:03d}", i % 8, "XID 79 (GPU has fallen off the bus); admin")
        for i in range(tpl.FAULT_LINES + extra)
    ]
    d = tpl.AdminDigest(DAY, DAY + timedelta(days=1), 0.0, 0, faults=faults)
    last_shown, first_hidden = faults[tpl.FAULT_LINES - 1], faults[tpl.FAULT_LINES]
    more = f"... and {extra} more: gpuwatch nodes --faulty lists them all"

    assert tpl.admin_subject(d).endswith(f"{len(faults)} GPU(s) faulted")
    email = tpl.admin_email(d)
    listed = [line for line in email["text"].splitlines() if "XID 79" in line]
    assert len(listed) == tpl.FAULT_LINES and listed[-1].startswith(f"  {last_shown.node} ")
    assert f"  {more}" in email["text"].splitlines()
    assert email["html"].count("<li>") == tpl.FAULT_LINES and f"<p>{more}</p>" in email["html"]
    assert first_hidden.node not in email["text"] and first_hidden.node not in email["html"]
    slack = tpl.admin_slack(d)["blocks"][-1]["text"]["text"]
    assert slack.count("XID 79") == tpl.FAULT_LINES and slack.endswith(more)


def test_a_digest_with_few_faults_lists_them_all_without_a_count():
    from gpuwatch.alerts.templates import digest as tpl

    faults = [tpl.Fault(f"n{i}", 0, "XID 48 (double-bit ECC error); admin") for i in range(tpl.FAULT_LINES)]
    d = tpl.AdminDigest(DAY, DAY + timedelta(days=1), 0.0, 0, faults=faults)
    email = tpl.admin_email(d)
    assert email["text"].count("XID 48") == tpl.FAULT_LINES and "more:" not in email["text"]
    assert "more:" not in tpl.admin_slack(d)["blocks"][-1]["text"]["text"]
