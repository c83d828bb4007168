"""The rendered examples in ``docs/alerts.md``, made by the real templates so they stay true.

``python -m gpuwatch.alerts.docs docs/alerts.md`` rewrites the part between the markers; a
test fails when the file and :func:`examples_markdown` differ.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from gpuwatch.alerts.rules import Target, job_notice
from gpuwatch.alerts.templates.job import JobFacts
from gpuwatch.config.alerts import AlertsConfig, RecipientKind

BEGIN = "<!-- BEGIN GENERATED EXAMPLES (python -m gpuwatch.alerts.docs docs/alerts.md) -->"
END = "<!-- END GENERATED EXAMPLES -->"

EXAMPLE_CONFIG = AlertsConfig(
    enabled=True,
    user_email_pattern="{user}@example.edu",
    job_url="https://gpuwatch.example.edu/jobs/{job_id}",
    email={"host": "smtp.example.edu", "from_address": "gpuwatch@example.edu"},  # type: ignore[arg-type]
    slack={"webhook_url": "https://hooks.slack.com/services/T000/B000/XXXX"},  # type: ignore[arg-type]
)

EXAMPLE_FACTS = JobFacts(
    job_id="4182736",
    job_name="llm-finetune",
    user_name="alice",
    account="nlp-lab",
    partition="gpu-h200",
    cause="idle_allocation",
    confidence=0.97,
    window_kind="recent",
    window_start=datetime(2026, 12, 2, 9, 0, tzinfo=timezone.utc),
    window_end=datetime(2026, 12, 2, 11, 30, tzinfo=timezone.utc),
    summary="4 GPUs allocated, 0% utilization and no GPU process for the last 2 h 30 min.",
    fix=None,
    gpus=4,
    gpu_hours=10.0,
    gpu_hours_wasted=10.0,
    mean_util_ratio=0.0,
    evidence={
        "idle_gpus": 4,
        "gpu_processes": 0,
        "util_gpu_ratio_max": 0.0,
        "memory_used_bytes_max": 536870912,
        "idle_s": 9000,
    },
    verdict_id=1,
)


def examples_markdown() -> str:
    now = EXAMPLE_FACTS.window_end
    cfg = EXAMPLE_CONFIG
    mail = job_notice(cfg, EXAMPLE_FACTS, Target(RecipientKind.USER, "email", "alice@example.edu"), now)
    slack = job_notice(cfg, EXAMPLE_FACTS, Target(RecipientKind.ADMIN, "slack", cfg.slack.channel_name), now)
    return "\n".join(
        [
            BEGIN,
            "",
            "### Email to the job's user (text part)",
            "",
            f"Subject: `{mail.subject}`",
            "",
            "```text",
            mail.payload["text"].rstrip("\n"),
            "```",
            "",
            "### Email (HTML part)",
            "",
            "```html",
            mail.payload["html"].rstrip("\n"),
            "```",
            "",
            "### Slack (Block Kit JSON POSTed to the webhook)",
            "",
            "```json",
            json.dumps(slack.payload, indent=2, ensure_ascii=False),
            "```",
            "",
            END,
        ]
    )


def generated_part(doc: str) -> str:
    start, end = doc.index(BEGIN), doc.index(END) + len(END)
    return doc[start:end]


def rewrite(path: Path) -> None:
    doc = path.read_text()
    path.write_text(doc.replace(generated_part(doc), examples_markdown()))


if __name__ == "__main__":
    rewrite(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/alerts.md"))
