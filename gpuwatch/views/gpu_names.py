"""How a job's GPUs are written for people: each node once, its GPU indexes as ranges.

``node07 gpu0-7; node08 gpu0,1`` is what the CLI's tables and the web view's job pages print
for a job's GPUs (JSON and CSV keep ``node:index`` pairs). Three or more consecutive indexes
read as a range, as Slurm writes ``gpu:[0-7]``; two stay a pair.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


def index_ranges(indexes: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 6]`` -> ``0-3,6``: sorted, repeats once, runs of three or more as ranges."""
    runs: list[list[int]] = []
    for index in sorted(set(indexes)):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ",".join(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)) for run in runs)


def gpus_per_node(gpus: Iterable[tuple[str, int]], node_text: Callable[[str], str] = str) -> str:
    """``[("n07", 0), ("n07", 1), ("n08", 0)]`` -> ``n07 gpu0,1; n08 gpu0``, nodes in the order
    first seen; ``node_text`` writes a node (the web view links it). Empty: ``-``."""
    by_node: dict[str, list[int]] = {}
    for node, index in gpus:
        by_node.setdefault(node, []).append(index)
    return "; ".join(f"{node_text(node)} gpu{index_ranges(ix)}" for node, ix in by_node.items()) or "-"
