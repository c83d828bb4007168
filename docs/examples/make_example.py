"""Write the import example (``docs/examples/idle-and-input.{jsonl,jobs.json}``) from the corpus.

Run from the repository root: ``.venv/bin/python docs/examples/make_example.py``. Two short
jobs from the classifier's labelled corpus generator (``tests/classify/corpus.py``), shrunk
to 1 GPU and 10 minutes (the grace period) so the JSONL stays small: job 9034 has an idle GPU
(``idle_allocation``), job 9042 has its GPUs starved by a CPU-bound input pipeline
(``input_bound``). Output is a pure function of the corpus (fixed seeds; batch ids and
creation times are derived too), so re-running reproduces the files byte for byte.
"""

from __future__ import annotations

import json
import sys
import uuid
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.classify import corpus

HERE = Path(__file__).parent
CASES = {"idle-all-4-h200": {"gpus": 1, "minutes": 10}, "input-cpu-saturated": {"gpus": 1, "minutes": 10}}


def main() -> None:
    index = {c.name: i for i, c in enumerate(corpus.cases())}
    lines, jobs = [], []
    for name, change in CASES.items():
        case = replace(corpus.cases()[index[name]], **change)
        built = corpus.build(case, index[name])
        for node, batches in built.batches.items():
            for n, batch in enumerate(batches):
                batch = batch.model_copy(
                    update={
                        "batch_id": uuid.uuid5(uuid.NAMESPACE_URL, f"gpuwatch-example/{node}/{n}"),
                        "created_at": batch.samples[-1].ts,
                    }
                )
                lines.append(batch.model_dump_json(exclude_none=True))
        row = built.slurm_row
        jobs.append(
            {
                "job_id": built.job_id,
                "name": row["name"],
                "user": row["user_name"],
                "account": row["account"],
                "partition": row["partition"],
                "state": row["state"],
                "submit": row["submit_at"].isoformat(),
                "start": row["start_at"].isoformat(),
                "end": None if row["end_at"] is None else row["end_at"].isoformat(),
                "nodes": row["nodes"],
                "gpus": {
                    node: [r["gpu_index"] for r in built.job_gpu_rows if r["node"] == node]
                    for node in row["nodes"]
                },
                "cpus": row["cpus"],
                "memory_bytes": row["memory_bytes"],
            }
        )
    (HERE / "idle-and-input.jsonl").write_text("\n".join(lines) + "\n")
    (HERE / "idle-and-input.jobs.json").write_text(json.dumps(jobs, indent=2) + "\n")


if __name__ == "__main__":
    main()
