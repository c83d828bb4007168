"""Evidence as sentences: every signal a rule writes has a label; no raw key reaches a reader."""

from __future__ import annotations

import ast
import re
from datetime import datetime, timezone
from pathlib import Path

from gpuwatch.classify.rules import idle_allocation, input_bound
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS as T
from gpuwatch.views.evidence import LABELS, evidence_sentences, value_text
from tests.classify.rules.window import window

RULES = Path(__file__).resolve().parents[2] / "gpuwatch" / "classify"
RAW_KEY = re.compile(r"\b[a-z]+_[a-z_]+\b")


def _names_the_rules_write() -> set[str]:
    names = set()
    for path in RULES.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                first = node.args[0]
                if node.func.attr in {"check", "signal", "lacks"} and isinstance(first, ast.Constant):
                    names.add(first.value)
    return names


def test_every_signal_a_rule_writes_has_a_label():
    missing = sorted(_names_the_rules_write() - set(LABELS))
    assert not missing, f"add these to views/evidence.LABELS: {missing}"


def test_a_check_reads_as_value_against_its_limit():
    v = input_bound.rule(window(util_mean=0.4, idle_fraction_mean=0.55, burst_util=0.9, cpu_ratio=0.95), T)
    sentences = evidence_sentences(v.evidence)
    assert "Share of idle polls between bursts 55% is at or above 30%." in sentences
    assert "CPU use against the physical cores allocated 95% is at or above 90%." in sentences
    assert "CPU cores allocated: 8 cores." in sentences
    assert not [s for s in sentences if RAW_KEY.search(s)], sentences


def test_idle_gpus_by_name_and_per_gpu_values():
    gpus = ("n1/gpu0", "n1/gpu1")
    f = window(idle_gpus=gpus, util_mean=0.0, zero_share=1.0)
    v = idle_allocation.rule(f, T)
    sentences = evidence_sentences(v.evidence)
    assert "Idle GPUs (0 % in every sample): n1/gpu0, n1/gpu1." in sentences
    assert not [s for s in sentences if RAW_KEY.search(s.replace("n1/gpu", ""))], sentences


def test_missing_and_notes():
    evidence = {
        "signals": {"sm_active": None},
        "missing": ["sm_active", "sm_active"],
        "notes": ["steps are short"],
    }
    assert evidence_sentences(evidence) == ["Not measured: SM activity.", "Steps are short."]
    assert evidence_sentences(None) == []


def test_cores_read_to_a_tenth():
    assert value_text("cpu_used_cores", 7.93478) == "7.9 cores"
    assert value_text("cpu_allocated_cores", 8.0) == "8 cores"
    assert value_text("cpu_allocated_cores", 1024) == "1,024 cores"


def test_a_window_older_than_the_minutes_kept_says_what_it_was_read_from():
    gpus = ("n1/gpu0",)
    cgroup_start = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
    older = idle_allocation.rule(
        window(idle_gpus=gpus, util_mean=0.0, zero_share=1.0, hourly=True, cgroup_start=cgroup_start), T
    )
    assert older.evidence["window"]["rollups"] == "hourly"
    assert evidence_sentences(older.evidence)[-1] == (
        "Read in whole hours from the hourly rollups: the window began before the minutes kept; "
        "the job's CPU and memory from 2026-03-02 09:00 UTC on."
    )
    recent = idle_allocation.rule(window(idle_gpus=gpus, util_mean=0.0, zero_share=1.0), T)
    assert "rollups" not in recent.evidence["window"]
    assert not [s for s in evidence_sentences(recent.evidence) if "hourly" in s]


def test_a_long_evidence_is_cut_but_never_its_window_sentence():
    """Past MAX_SENTENCES the other measurements give way to a count; what the window was read
    from qualifies every figure, so it stays, last."""
    from gpuwatch.views.evidence import MAX_SENTENCES

    names = sorted(LABELS)[: MAX_SENTENCES + 5]
    evidence = {
        "signals": {name: 0.5 for name in names},
        "window": {"rollups": "hourly", "cgroup_start": None},
    }
    sentences = evidence_sentences(evidence)
    assert len(sentences) == MAX_SENTENCES
    assert sentences[-1].startswith("Read in whole hours from the hourly rollups")
    cut = len(names) - (MAX_SENTENCES - 2)
    assert sentences[-2] == f"... and {cut} more on the job page."
    short = evidence_sentences({"signals": {names[0]: 0.5}, "window": evidence["window"]})
    assert len(short) == 2 and short[-1].startswith("Read in whole hours")
