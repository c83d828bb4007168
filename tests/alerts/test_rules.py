"""Rules → notices: thresholds, recipients, latest evaluation only, dedup, cooldowns, quiet hours."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from gpuwatch.alerts import outbox
from gpuwatch.alerts.rules import RecipientResolver, evaluate, quiet_until
from gpuwatch.config.alerts import QuietHours, RecipientKind
from gpuwatch.views import low_util_jobs
from tests.alerts.conftest import T0, add_job, add_verdict, make_config


def _cfg(**kw):
    return make_config(slack_url="http://127.0.0.1:9/hook", smtp_port=2525, **kw)


def _who(result):
    return sorted((n.channel, n.recipient, n.job_id, n.cause) for n in result.notices)


def test_thresholds_and_recipients(engine):
    cfg = _cfg(
        rules=[
            {"causes": ["idle_allocation"], "notify": ["user", "owner", "admin"], "min_gpu_hours_wasted": 2},
            {"causes": ["*"], "notify": ["admin"], "min_gpu_hours_wasted": 5, "min_duration_s": 3600},
        ],
        account_owners={"nlp-lab": "pi@example.edu"},
        admin_emails=["hpc@example.edu"],
    )
    add_job(engine, "1", user="alice")
    add_verdict(engine, "1", "idle_allocation", wasted=3)
    add_job(engine, "2", user="bob", account="other")
    add_verdict(engine, "2", "input_bound", wasted=6)
    add_job(engine, "3", user="carol")
    add_verdict(engine, "3", "input_bound", wasted=6, window_s=600)  # window too short
    add_job(engine, "4", user="dave")
    add_verdict(engine, "4", "idle_allocation", wasted=1)  # too little waste
    add_job(engine, "5", user="erin")
    add_verdict(engine, "5", "healthy", wasted=0)
    result = evaluate(engine, cfg, T0)
    assert _who(result) == [
        ("email", "alice@example.edu", "1", "idle_allocation"),
        ("email", "hpc@example.edu", "1", "idle_allocation"),
        ("email", "hpc@example.edu", "2", "input_bound"),
        ("email", "pi@example.edu", "1", "idle_allocation"),
        ("slack", "#gpu-admins", "1", "idle_allocation"),
        ("slack", "#gpu-admins", "2", "input_bound"),
    ]
    reasons = {(job, why.split(":")[0]) for job, _, why in result.skipped}
    assert ("3", "input_bound") in reasons and ("4", "idle_allocation") in reasons
    kinds = {n.recipient: n.recipient_kind for n in result.notices}
    assert kinds["pi@example.edu"] == "owner" and kinds["#gpu-admins"] == "admin"


def test_only_the_latest_evaluation_counts_and_the_listed_cause_wins(engine):
    cfg = _cfg(rules=[{"notify": ["user"]}])
    add_job(engine, "7")
    add_verdict(engine, "7", "idle_allocation", evaluated_at=T0 - timedelta(minutes=10), wasted=9)
    add_verdict(engine, "7", "healthy", evaluated_at=T0, wasted=0)
    assert evaluate(engine, cfg, T0).notices == []  # it recovered
    later = T0 + timedelta(minutes=5)
    add_verdict(engine, "7", "input_bound", evaluated_at=later, wasted=4, confidence=0.8)
    add_verdict(engine, "7", "no_mixed_precision", evaluated_at=later, wasted=2, confidence=0.95)
    # the notice names what the listing shows: the leading verdict, not the larger waste
    [listed] = low_util_jobs(engine, now=later)
    [n] = evaluate(engine, cfg, later).notices
    assert (n.job_id, n.cause, n.gpu_hours_wasted) == ("7", listed.cause, listed.gpu_hours_wasted)
    assert n.cause == "no_mixed_precision" and n.subject.startswith("[gpuwatch] Job 7: Tensor cores unused")
    # a cause no rule notifies about is passed over for the next one, in the listing's order
    only_input = _cfg(rules=[{"causes": ["input_bound"], "notify": ["user"]}])
    [n] = evaluate(engine, only_input, later).notices
    assert (n.cause, n.gpu_hours_wasted) == ("input_bound", 4)


def test_the_whole_job_window_is_listed_before_the_recent_one(engine):
    cfg = _cfg(rules=[{"notify": ["admin"]}])
    add_job(engine, "8")
    add_verdict(engine, "8", "idle_allocation", window_kind="recent", wasted=1, confidence=0.99)
    add_verdict(engine, "8", "input_bound", window_kind="job", window_s=4 * 3600, wasted=6, confidence=0.7)
    [n] = evaluate(engine, cfg, T0).notices  # the admin channel on Slack
    assert (n.cause, n.gpu_hours_wasted) == ("input_bound", 6)


def test_dedup_and_cooldowns(engine):
    cfg = _cfg(rules=[{"notify": ["user", "admin"]}], user_cooldown_s=6 * 3600, job_cooldown_s=24 * 3600)
    add_job(engine, "10", user="alice")
    add_job(engine, "11", user="alice")
    add_verdict(engine, "10", wasted=9)
    add_verdict(engine, "11", wasted=3)
    first = evaluate(engine, cfg, T0)
    # alice hears about her worst job only (person cooldown); the admin channel hears of both
    assert _who(first) == [
        ("email", "alice@example.edu", "10", "idle_allocation"),
        ("slack", "#gpu-admins", "10", "idle_allocation"),
        ("slack", "#gpu-admins", "11", "idle_allocation"),
    ]
    assert outbox.enqueue(engine, first.notices, T0) == 3
    assert outbox.enqueue(engine, first.notices, T0) == 0  # dedup key
    assert evaluate(engine, cfg, T0).notices == []
    # a new rolling window an hour later: new keys, but cooldowns hold
    later = T0 + timedelta(hours=1)
    add_verdict(engine, "10", evaluated_at=later, wasted=10)
    add_verdict(engine, "11", evaluated_at=later, wasted=4)
    assert evaluate(engine, cfg, later).notices == []
    # past the person cooldown, alice hears about job 11 (job 10 is still in its job cooldown)
    much_later = T0 + timedelta(hours=7)
    add_verdict(engine, "10", evaluated_at=much_later, wasted=11)
    add_verdict(engine, "11", evaluated_at=much_later, wasted=5)
    assert _who(evaluate(engine, cfg, much_later)) == [
        ("email", "alice@example.edu", "11", "idle_allocation")
    ]


def test_quiet_hours_defer_not_drop(engine):
    q = {"start": "22:00", "end": "07:00", "timezone": "America/New_York", "applies_to": ["user"]}
    cfg = _cfg(rules=[{"notify": ["user", "admin"]}], quiet_hours=q)
    night = datetime(2026, 12, 3, 4, 0, tzinfo=timezone.utc)  # 23:00 in New York
    add_job(engine, "20")
    add_verdict(engine, "20", evaluated_at=night)
    by = {n.channel: n for n in evaluate(engine, cfg, night).notices}
    assert by["slack"].not_before == night
    assert by["email"].not_before == datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)  # 07:00 EST


def test_quiet_until_edges():
    q = QuietHours(start="09:00", end="17:00", timezone="UTC")  # type: ignore[arg-type]
    at = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    assert quiet_until(q, RecipientKind.USER, at) == datetime(2026, 1, 1, 17, 0, tzinfo=timezone.utc)
    assert quiet_until(q, RecipientKind.ADMIN, at) is None
    assert quiet_until(q, RecipientKind.USER, at.replace(hour=17)) is None
    assert quiet_until(None, RecipientKind.USER, at) is None


def test_email_lookup_command(tmp_path):
    script = tmp_path / "lookup"
    script.write_text('#!/bin/sh\n[ "$1" = nobody ] && exit 1\necho "$1.x@dept.example.edu"\n')
    script.chmod(0o755)
    cfg = _cfg(user_email_command=[str(script), "{user}"], user_email_pattern="{user}@ignored")
    r = RecipientResolver(cfg)
    assert r.user_email("alice") == "alice.x@dept.example.edu"
    assert r.user_email("nobody") is None
    assert r.user_email(None) is None


def _idle(n: int) -> dict:
    return {"signals": {"idle_gpus": [f"n1/gpu{i}" for i in range(n)]}}


def test_cooldown_is_per_job_and_cause(engine):
    """Another cause of the same job is news and goes; the same cause waits out the cooldown."""
    cfg = _cfg(rules=[{"notify": ["admin"]}], job_cooldown_s=24 * 3600)
    add_job(engine, "30")
    add_verdict(engine, "30", "input_bound", wasted=2)
    outbox.enqueue(engine, evaluate(engine, cfg, T0).notices, T0)
    later = T0 + timedelta(hours=1)
    add_verdict(engine, "30", "input_bound", evaluated_at=later, wasted=2.5)
    result = evaluate(engine, cfg, later)
    assert result.notices == [] and any("job cooldown (input_bound" in why for _, _, why in result.skipped)
    much_later = T0 + timedelta(hours=2)
    add_verdict(engine, "30", "gpu_memory_pressure", evaluated_at=much_later, wasted=2.5)
    assert _who(evaluate(engine, cfg, much_later)) == [("slack", "#gpu-admins", "30", "gpu_memory_pressure")]


def test_a_cause_replacing_unknown_goes_at_once_and_says_so(engine):
    """unknown_low first (no cause yet), then the specific cause: it goes despite both cooldowns
    and tells the reader it replaces the earlier notice; unknown_low after a cause adds nothing."""
    cfg = _cfg(rules=[{"notify": ["user", "admin"]}], user_cooldown_s=6 * 3600, job_cooldown_s=24 * 3600)
    add_job(engine, "31", user="alice")
    add_verdict(engine, "31", "unknown_low", wasted=2, evidence={})
    first = evaluate(engine, cfg, T0).notices
    assert {n.cause for n in first} == {"unknown_low"}
    outbox.enqueue(engine, first, T0)
    later = T0 + timedelta(minutes=10)
    add_verdict(engine, "31", "idle_allocation", evaluated_at=later, wasted=2, evidence=_idle(4))
    second = evaluate(engine, cfg, later).notices
    assert _who(evaluate(engine, cfg, later)) == [
        ("email", "alice@example.edu", "31", "idle_allocation"),
        ("slack", "#gpu-admins", "31", "idle_allocation"),
    ]
    mail = next(n for n in second if n.channel == "email")
    assert mail.subject.startswith("[gpuwatch] Update: Job 31: ")
    assert "This replaces our notice of 2026-12-02 12:00 UTC" in mail.payload["text"]
    slack = next(n for n in second if n.channel == "slack")
    assert "replaces our notice" in json.dumps(slack.payload["blocks"])
    outbox.enqueue(engine, second, later)
    again = T0 + timedelta(minutes=20)
    add_verdict(engine, "31", "unknown_low", evaluated_at=again, wasted=9, evidence={})
    assert evaluate(engine, cfg, again).notices == []


def test_one_escalation_is_allowed(engine):
    """1 of 4 GPUs idle is notified; 4 of 4 idle later goes once more, saying what changed;
    after that the job and cause are quiet for the cooldown."""
    cfg = _cfg(rules=[{"notify": ["admin"]}], job_cooldown_s=24 * 3600)
    add_job(engine, "32")
    add_verdict(engine, "32", "idle_allocation", wasted=0.5, evidence=_idle(1))
    outbox.enqueue(engine, evaluate(engine, cfg, T0).notices, T0)
    t1 = T0 + timedelta(minutes=30)
    add_verdict(engine, "32", "idle_allocation", evaluated_at=t1, wasted=0.6, evidence=_idle(1))
    assert evaluate(engine, cfg, t1).notices == []  # the same: no news
    t2 = T0 + timedelta(minutes=40)
    add_verdict(engine, "32", "idle_allocation", evaluated_at=t2, wasted=0.7, evidence=_idle(4))
    [n] = evaluate(engine, cfg, t2).notices
    assert "More GPUs are idle now: 4, against 1 when we wrote at 2026-12-02 12:00 UTC." in json.dumps(
        n.payload
    )
    outbox.enqueue(engine, [n], t2)
    t3 = T0 + timedelta(hours=3)
    add_verdict(engine, "32", "idle_allocation", evaluated_at=t3, wasted=40, evidence=_idle(4))
    result = evaluate(engine, cfg, t3)
    assert result.notices == [] and any("escalated already" in why for _, _, why in result.skipped)


def test_waste_growing_threefold_and_by_four_gpu_hours_is_an_escalation(engine):
    """A whole-job window's waste grows by itself; three times the notified waste is news only
    once it is also 4 GPU-hours more (an idle 4-GPU job: about an hour after the first notice)."""
    cfg = _cfg(rules=[{"notify": ["admin"]}], job_cooldown_s=24 * 3600)
    add_job(engine, "33")
    add_verdict(engine, "33", "input_bound", wasted=0.7, evidence={})
    outbox.enqueue(engine, evaluate(engine, cfg, T0).notices, T0)
    t1 = T0 + timedelta(minutes=30)
    add_verdict(engine, "33", "input_bound", evaluated_at=t1, wasted=2.2, evidence={})
    assert evaluate(engine, cfg, t1).notices == []  # three times, but 1.5 GPU-h more
    t2 = T0 + timedelta(hours=1)
    add_verdict(engine, "33", "input_bound", evaluated_at=t2, wasted=4.7, evidence={})
    [n] = evaluate(engine, cfg, t2).notices
    assert "Still wasting: 4.7 GPU-hours now, against 0.7 when we wrote" in json.dumps(n.payload)


def test_default_rules_fire_on_a_recent_window(engine):
    """The code's defaults: one idle GPU of four over the 10-minute recent window is told;
    unknown_low over the same window is not (it waits for half an hour and a GPU-hour)."""
    cfg = _cfg()
    add_job(engine, "34")
    add_verdict(engine, "34", "idle_allocation", window_s=600, wasted=0.17, evidence=_idle(1))
    add_job(engine, "35")
    add_verdict(engine, "35", "unknown_low", window_s=600, wasted=0.6, evidence={})
    assert {n.job_id for n in evaluate(engine, cfg, T0).notices} == {"34"}
