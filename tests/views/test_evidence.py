"""Evidence as sentences: every signal a rule writes has a label; no raw key reaches a reader."""

from __future__ import annotations

import ast
import re
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
