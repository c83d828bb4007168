"""Alerts within minutes, with the right cause, through the whole pipeline (bench/alert_latency.py).

Real agents on simulated GPUs push over HTTP into the daemon; the daemon's scheduler jobs run
at the virtual times their triggers give (default config: rules, thresholds, schedules), with
a restart of the scheduler in the middle; notices go to local webhook and SMTP servers. Time
is virtual, so the figures do not depend on how busy the machine is.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench import alert_latency
from gpuwatch.alerts import docs

DOC = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"


def test_every_scenario_is_alerted_in_time_with_its_cause_and_once():
    result = alert_latency.run(minutes=80, restart_at_min=37)
    failed = [o.as_dict() for o in result.outcomes if not o.ok]
    assert not failed, failed
    healthy = next(o for o in result.outcomes if o.expected is None)
    assert healthy.notices == []
    # every notice was delivered: one webhook post per Slack row, one mail per email row
    channels = Counter(row[3] for row in result.sent)
    assert (channels["slack"], channels["email"]) == (result.webhook_posts, result.emails)
    # once per job, cause and recipient across the restart; a second only as an "Update"
    firsts = Counter(
        (job, cause, recipient)
        for _, job, cause, _, recipient, subject in result.sent
        if "Update:" not in subject
    )
    assert set(firsts.values()) == {1}
    updates = Counter(
        (job, cause, recipient)
        for _, job, cause, _, recipient, subject in result.sent
        if "Update:" in subject
    )
    assert set(updates) <= set(firsts) and set(updates.values()) <= {1}
    # the words match the numbers: one idle GPU of four is not "GPUs that did almost nothing",
    # and only when every GPU is idle (enforcement off) does the fix say scancel
    one_idle = result.first_emails["1 of 4 idle from start"]
    assert "1 of the job's 4 GPU(s) read 0 % utilization in every sample" in one_idle
    assert "almost nothing" not in one_idle and "scancel" not in one_idle
    all_idle = result.first_emails["4 GPUs idle from start"]
    assert "4 of the job's 4 GPU(s) read 0 %" in all_idle and "end the job now: scancel 880001" in all_idle
    later = result.first_emails["4 GPUs idle after 60 min busy"]
    # the segment window: the idle phase, dated, not only the last ten minutes
    assert "4 of the job's 4 GPU(s) read 0 %" in later and ", latest phase)" in later
    assert " UTC (" in later and "since " in later
    assert not [line for line in all_idle.splitlines() if line.startswith("  - ") and "_" in line]
    # docs/alerts.md shows exactly what was sent about the first job
    assert docs.generated_part(DOC.read_text()) == result.docs_section(), (
        "docs/alerts.md is stale: run .venv/bin/python bench/alert_latency.py --write-docs docs/alerts.md"
    )
