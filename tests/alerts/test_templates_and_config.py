"""Every cause has wording; escaping; config validation; docs/alerts.md shows the current rendering."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gpuwatch.alerts import docs
from gpuwatch.alerts.templates import format as fmt
from gpuwatch.alerts.templates import job as job_tpl
from gpuwatch.alerts.templates.causes import CAUSE_TEXTS
from gpuwatch.config import Settings
from gpuwatch.config.alerts import CAUSES, AlertsConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"


def test_every_cause_has_a_template():
    assert set(CAUSE_TEXTS) == set(CAUSES)
    for cause in CAUSES:
        f = docs.EXAMPLE_FACTS.__class__(**{**docs.EXAMPLE_FACTS.__dict__, "cause": cause})
        text = job_tpl.email(f, "user", None)["text"]
        assert "$" not in job_tpl.meaning(f) + job_tpl.fix(f), cause  # every placeholder filled
        assert CAUSE_TEXTS[cause].title in text
        assert job_tpl.slack(f, None)["blocks"][0]["type"] == "header"


def test_escaping():
    f = docs.EXAMPLE_FACTS.__class__(
        **{**docs.EXAMPLE_FACTS.__dict__, "summary": "<script>&", "user_name": "a<b", "fix": "use <x>"}
    )
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


def test_docs_examples_are_the_current_rendering():
    assert docs.generated_part(DOC.read_text()) == docs.examples_markdown(), (
        "docs/alerts.md is stale: run python -m gpuwatch.alerts.docs docs/alerts.md"
    )
