"""The corpus' confusion matrix, precision and recall per cause, and healthy jobs flagged.

``python -m tests.classify.matrix`` runs the whole corpus on a fresh SQLite file and prints,
for the train split, the validation split and both: the confusion matrix (rows: label,
columns: the recent window's leading verdict), precision and recall per cause, and how many
healthy jobs got a cause. docs/classification.md publishes its output; ``.ci/run`` prints it.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from gpuwatch.classify.verdict import Cause

LABELS = [c.value for c in Cause] + ["none"]

#: case name -> (label, predicted, anything)
Results = dict[str, tuple[str, str, list]]


@dataclass(frozen=True)
class Score:
    label: str
    cases: int  # labelled with it
    predicted: int  # predicted as it
    right: int

    @property
    def precision(self) -> float | None:
        return self.right / self.predicted if self.predicted else None

    @property
    def recall(self) -> float | None:
        return self.right / self.cases if self.cases else None


def scores(results: Results) -> list[Score]:
    """Per label seen either as a label or as a prediction, in the cause order."""
    labelled = Counter(label for label, _, _ in results.values())
    predicted = Counter(got for _, got, _ in results.values())
    right = Counter(label for label, got, _ in results.values() if label == got)
    return [
        Score(name, labelled[name], predicted[name], right[name])
        for name in LABELS
        if labelled[name] or predicted[name]
    ]


def accuracy(results: Results) -> float:
    return sum(1 for label, got, _ in results.values() if label == got) / len(results) if results else 0.0


def healthy_flagged(results: Results) -> list[str]:
    """Healthy-labelled cases that got a cause (or no verdict)."""
    return sorted(
        name for name, (label, got, _) in results.items() if label == "healthy" and got != "healthy"
    )


def confusion_matrix(results: Results) -> str:
    counts = Counter((label, got) for label, got, _ in results.values())
    used = [name for name in LABELS if any(name in key for key in counts)]
    short = {name: name[:8] for name in used}
    width = max(len(n) for n in used)
    lines = [" " * (width + 2) + " ".join(f"{short[n]:>8}" for n in used)]
    for label in used:
        cells = " ".join(f"{counts.get((label, got), 0) or '.':>8}" for got in used)
        lines.append(f"{label:<{width}}  {cells}")
    right = sum(1 for label, got, _ in results.values() if label == got)
    lines.append(f"accuracy {right}/{len(results)} = {right / len(results):.1%}")
    wrong = [f"  {name}: {label} -> {got}" for name, (label, got, _) in results.items() if label != got]
    if wrong:
        lines += ["misclassified:", *wrong]
    return "\n".join(lines)


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def score_table(results: Results) -> str:
    rows = scores(results)
    width = max(len(s.label) for s in rows)
    lines = [f"{'cause':<{width}}  cases  predicted  precision  recall"]
    lines += [
        f"{s.label:<{width}}  {s.cases:>5}  {s.predicted:>9}  {_ratio(s.precision):>9}  {_ratio(s.recall):>6}"
        for s in rows
    ]
    healthy = [r for r in results.values() if r[0] == "healthy"]
    flagged = healthy_flagged(results)
    lines.append(
        f"healthy jobs flagged: {len(flagged)}/{len(healthy)}"
        + (f" ({', '.join(flagged)})" if flagged else "")
    )
    return "\n".join(lines)


def report(results: Results, split_of: dict[str, str]) -> str:
    """Every split's matrix and scores, then both together."""
    out = []
    for split in ("train", "validation"):
        part = {name: r for name, r in results.items() if split_of[name] == split}
        out += [f"== {split} split ({len(part)} cases)", confusion_matrix(part), score_table(part), ""]
    out += [f"== all ({len(results)} cases)", confusion_matrix(results), score_table(results)]
    gap = 100 * (
        accuracy({n: r for n, r in results.items() if split_of[n] == "train"})
        - accuracy({n: r for n, r in results.items() if split_of[n] == "validation"})
    )
    out.append(f"train - validation accuracy: {gap:+.1f} points")
    return "\n".join(out)


def main() -> int:
    from gpuwatch.sql import migrate
    from gpuwatch.sql.engine import create_engine
    from tests.classify import corpus
    from tests.classify.test_corpus import run_corpus

    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite:///{Path(tmp) / 'corpus.db'}")
        try:
            migrate.upgrade(engine)
            results = run_corpus(engine)
        finally:
            engine.dispose()
    split_of = {c.name: c.split for c in corpus.cases()}
    print(report(results, split_of))
    return 0


if __name__ == "__main__":
    sys.exit(main())
