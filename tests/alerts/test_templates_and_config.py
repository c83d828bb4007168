"""Every cause has wording; escaping; config validation."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pytest
from pydantic import ValidationError

from gpuwatch.alerts.templates import format as fmt
from gpuwatch.alerts.templates import job as job_tpl
from gpuwatch.alerts.templates.causes import CAUSE_TEXTS
from gpuwatch.alerts.templates.job import JobFacts
from gpuwatch.config import Settings
from gpuwatch.config.alerts import CAUSES, AlertsConfig

EXAMPLE = JobFacts(
    job_id="4182736",
    job_name="llm-finetune",
    user_name="alice",
    account="nlp-lab",
    partition="gpu-h200",
    cause="idle_allocation",
    confidence=0.88,
    window_kind="recent",
    window_start=datetime(2026, 12, 2, 9, 0, tzinfo=timezone.utc),
    window_end=datetime(2026, 12, 2, 9, 10, tzinfo=timezone.utc),
    summary="job 4182736: 4 of 4 GPU(s) idle (0 % in every sample)",
    gpus=4,
    gpu_hours=0.67,
    gpu_hours_wasted=0.67,
    mean_util_ratio=0.0,
    evidence={"signals": {"idle_gpus": ["n1/gpu0", "n1/gpu1", "n1/gpu2", "n1/gpu3"]}},
    verdict_id=1,
)


def test_every_cause_has_a_template():
    assert set(CAUSE_TEXTS) == set(CAUSES)
    for cause in CAUSES:
        f = replace(EXAMPLE, cause=cause)
        text = job_tpl.email(f, "user", None)["text"]
        assert "$" not in job_tpl.meaning(f) + job_tpl.fix(f), cause  # every placeholder filled
        assert CAUSE_TEXTS[cause].title in text
        assert job_tpl.slack(f, None)["blocks"][0]["type"] == "header"


def test_escaping():
    f = replace(EXAMPLE, summary="<script>&", user_name="a<b", fix="use <x>")
    html = job_tpl.email(f, "user", "https://x/?a=1&b=2")["html"]
    assert (
        "<script>" not in html and "&lt;script&gt;&amp;" in html and 'href="https://x/?a=1&amp;b=2"' in html
    )
    slack = job_tpl.slack(f, None)
    assert slack["blocks"][1]["text"]["text"] == "&lt;script&gt;&amp;"
    assert fmt.clip("x" * 10, 5) == "xxxx…"


def test_units():
    assert fmt.value_by_unit("util_gpu_ratio_max", 0.5) == "50%"
    assert fmt.value_by_unit("memory_used_bytes", 2**31) == "2.0 GiB"
    assert fmt.value_by_unit("idle_s", 90) == "1 min"
    assert fmt.duration(3 * 86400 + 7200) == "3 d 2 h"


def test_config_validation():
    with pytest.raises(ValidationError, match="unknown cause"):
        AlertsConfig.model_validate({"rules": [{"causes": ["nope"]}]})
    with pytest.raises(ValidationError, match="must contain \\{user\\}"):
        AlertsConfig(user_email_pattern="admin@example.edu")
    with pytest.raises(ValidationError, match="unknown time zone"):
        AlertsConfig.model_validate({"quiet_hours": {"timezone": "Mars/Olympus"}})
    with pytest.raises(ValidationError, match="cancel_after_s must be greater"):
        AlertsConfig.model_validate({"enforcement": {"warn_after_s": 100, "cancel_after_s": 50}})
    with pytest.raises(ValidationError, match="lease_s must exceed"):
        AlertsConfig.model_validate({"email": {"host": "x", "timeout_s": 60}, "worker": {"lease_s": 30}})
    with pytest.raises(ValidationError, match="Extra inputs"):
        AlertsConfig.model_validate({"emial": {}})
    cfg = AlertsConfig.model_validate({"account_owners": {"ml": "pi@x.edu"}})
    assert cfg.account_owners == {"ml": ["pi@x.edu"]} and not cfg.enabled
    assert Settings().alerts == AlertsConfig()


@pytest.mark.parametrize(
    ("kind", "words"), [("job", "whole job"), ("segment", "latest phase"), ("recent", "recent")]
)
def test_the_window_is_named_in_words(kind, words):
    text = job_tpl.email(replace(EXAMPLE, window_kind=kind), "user", None)["text"]
    assert f"(10 min, {words})" in text
