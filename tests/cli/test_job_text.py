"""``gpuwatch job``'s text folds to the terminal and says a repeated window's evidence once."""

from __future__ import annotations

from gpuwatch.cli.job_detail import verdict_lines, wrapped

FIX = ("The GPU waits for data: raise DataLoader num_workers (and request more CPUs with --cpus-per-task), "
       "use pin_memory and persistent_workers, pre-process the data once.")  # fmt: skip
EVIDENCE = {"thresholds": {"cpu_saturated_ratio": 0.9}, "signals": {"cpu_saturated": 0.99}}


def _verdict(window: str, summary: str, fix: str | None = FIX, wasted: float = 0.5) -> dict:
    return {
        "window_kind": window, "cause": "input_bound", "confidence": 0.79, "gpu_hours_wasted": wasted,
        "gpu_hours": 1.0, "mean_util_ratio": 0.38, "summary": summary, "evidence": EVIDENCE, "fix": fix,
    }  # fmt: skip


def test_wrapped_folds_under_the_text_and_keeps_every_word() -> None:
    text = wrapped("    fix: ", FIX, 60)
    lines = text.splitlines()
    assert len(lines) > 2 and all(len(line) <= 60 for line in lines)
    assert lines[0].startswith("    fix: The GPU") and all(line.startswith(" " * 9) for line in lines[1:])
    assert " ".join(part.strip() for part in text.split()) == " ".join(("fix: " + FIX).split())
    assert "--cpus-per-task)," in text  # no break inside an option's hyphens


def test_a_word_longer_than_the_room_stays_whole() -> None:
    path = "/scratch/" + "x" * 80
    assert path in wrapped("  Fix          ", f"stage {path} first", 50).splitlines()[1]


def test_a_window_that_repeats_an_earlier_one_says_so_once() -> None:
    lines = verdict_lines(
        [_verdict("job", "job 7: GPUs starved"), _verdict("recent", "job 7: GPUs starved", wasted=0.2)], 200
    )
    assert sum(line.startswith("    fix: ") for line in lines) == 1
    assert lines[-1] == "    evidence and fix: as [whole job] above"
    assert "GPU-h wasted 0.20 of 1.00" in lines[-2]  # the repeated window keeps its own figures


def test_windows_with_other_evidence_each_print_theirs() -> None:
    lines = verdict_lines(
        [_verdict("job", "job 7: GPUs starved"), _verdict("recent", "job 7: GPUs starved, CPUs 80%")], 200
    )
    assert sum(line.startswith("    evidence: ") for line in lines) == 2
    assert not any("as [" in line for line in lines)
