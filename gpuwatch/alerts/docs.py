"""The message examples in ``docs/alerts.md``: what the pipeline really sent, so they stay true.

``bench/alert_latency.py --write-docs docs/alerts.md`` runs the whole pipeline on a virtual
clock (agents, daemon, scheduler, local sinks) and writes the first notices about its
"4 GPUs idle from start" job between the markers; ``tests/alerts/test_alert_latency.py`` runs
the same and fails when the file and :func:`examples_markdown` of its notices differ.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BEGIN = "<!-- BEGIN GENERATED EXAMPLES (bench/alert_latency.py --write-docs docs/alerts.md) -->"
END = "<!-- END GENERATED EXAMPLES -->"


def examples_markdown(mail_subject: str, mail: dict[str, Any], slack: dict[str, Any]) -> str:
    """The generated section: one email notice (``mail``: its text and HTML parts) and one
    Slack notice (the Block Kit payload POSTed to the webhook)."""
    return "\n".join(
        [
            BEGIN,
            "",
            "### Email to the job's user (text part)",
            "",
            f"Subject: `{mail_subject}`",
            "",
            "```text",
            mail["text"].rstrip("\n"),
            "```",
            "",
            "### Email (HTML part)",
            "",
            "```html",
            mail["html"].rstrip("\n"),
            "```",
            "",
            "### Slack (Block Kit JSON POSTed to the webhook)",
            "",
            "```json",
            json.dumps(slack, indent=2, ensure_ascii=False),
            "```",
            "",
            END,
        ]
    )


def generated_part(doc: str) -> str:
    start, end = doc.index(BEGIN), doc.index(END) + len(END)
    return doc[start:end]


def rewrite(path: Path, section: str) -> None:
    doc = path.read_text()
    path.write_text(doc.replace(generated_part(doc), section))
