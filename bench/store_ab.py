"""A/B of the store path: this checkout's ``BatchStore`` against the one at a git revision.

    .venv/bin/python bench/store_ab.py --rev REV [--nodes 32] [--cycles 10] [--per-batch 1]
                                       [--group 1] [--rounds 3] [--old-bulk M] [--new-bulk M]

Loads ``gpuwatch/daemon/store/batch_store.py`` as it was at ``REV`` beside the current one and, in
interleaved rounds (old, new, old, new, ...; each on a fresh PostgreSQL database), stores
the same batches (``bench/ingest.py``'s realistic ones) with ``store_many`` in groups of
``--group`` batches. Prints samples/s and the median time per ``store_many`` call for each
side. Interleaving keeps this noisy 2-core VM's drift out of the ratio. ``--rev HEAD
--old-bulk insert --new-bulk unnest`` compares two bulk modes of the same code.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gpuwatch.daemon.store.batch_store as current  # noqa: E402
from bench.ingest import drop_db, fresh_db, make_batches, register  # noqa: E402


def load_at(rev: str, folder: Path):  # type: ignore[no-untyped-def]
    """``gpuwatch.daemon.store.batch_store`` as of ``rev``, as a module of its own."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:gpuwatch/daemon/store/batch_store.py"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    path = folder / "ingest_at_rev.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("ingest_at_rev", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ingest_at_rev"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def one_side(module, args: argparse.Namespace, bulk: str | None) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(samples/s, median ms per store_many call) of one fresh database."""
    batches = make_batches(args.nodes, args.cycles, 8, timedelta(0), args.per_batch)
    name, _, engine = fresh_db()
    try:
        store = module.BatchStore(engine, bulk=bulk)
        ids = register(engine, store, batches)
        calls = []
        t0 = time.perf_counter()
        for i in range(0, len(batches), args.group):
            t = time.perf_counter()
            store.store_many([(ids[b.node], b) for b in batches[i : i + args.group]])
            calls.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - t0
        return sum(len(b.samples) for b in batches) / elapsed, 1000 * statistics.median(calls)
    finally:
        engine.dispose()
        drop_db(name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", required=True, help="git revision of the old side")
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--per-batch", type=int, default=1, help="cycles per batch")
    ap.add_argument("--group", type=int, default=1, help="batches per store_many call")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--old-bulk", default=None, help="bulk mode of the old side (default: its default)")
    ap.add_argument("--new-bulk", default=None, help="bulk mode of the new side (default: its default)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = load_at(args.rev, Path(tmp))
        results: dict[str, list[tuple[float, float]]] = {"old": [], "new": []}
        for _ in range(args.rounds):
            results["old"].append(one_side(old, args, args.old_bulk))
            results["new"].append(one_side(current, args, args.new_bulk))
    for side, runs in results.items():
        rates = [r for r, _ in runs]
        print(
            f"{side} ({args.rev if side == 'old' else 'checkout'}): samples/s {[round(r) for r in rates]} "
            f"median {statistics.median(rates):,.0f}; ms per store_many {[round(m, 2) for _, m in runs]}"
        )
    medians = {side: statistics.median(r for r, _ in runs) for side, runs in results.items()}
    print(f"ratio new / old (median samples/s): {medians['new'] / medians['old']:.2f}")


if __name__ == "__main__":
    main()
