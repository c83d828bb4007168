"""Slurm hostlists: ``node[001-003,007],gpu-a[1-2]`` <-> ``["node001", ..., "gpu-a2"]``.

Slurm writes node sets in this compressed form everywhere (``squeue`` ``nodes``,
``scontrol`` ``NodeList=``/``Nodes=``, ``sacct`` ``NodeList``). Rules followed here (those of
Slurm's ``hostlist.c``): commas outside brackets separate names; inside brackets, a
comma-separated list of numbers or ``lo-hi`` ranges; a range keeps the zero padding of its
lower bound (``[01-10]`` -> ``01 .. 10``); several bracket groups in one name expand as a
cartesian product (``r[1-2]n[1-2]``). The empty words Slurm uses for "no nodes"
(``""``, ``(null)``, ``None assigned``) expand to ``[]``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

from gpuwatch.slurm.errors import SlurmParseError

_NO_NODES = frozenset({"", "(null)", "none", "none assigned", "n/a"})
_MAX_EXPANSION = 1_000_000  # a typo like node[1-999999999] must not eat the daemon's memory


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise SlurmParseError(f"unbalanced ']' in hostlist {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise SlurmParseError(f"unbalanced '[' in hostlist {text!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_range(spec: str, whole: str) -> list[str]:
    out: list[str] = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise SlurmParseError(f"bad range {item!r} in hostlist {whole!r}")
        if not sep:
            out.append(lo)
            continue
        a, b = int(lo), int(hi)
        if b < a:
            raise SlurmParseError(f"descending range {item!r} in hostlist {whole!r}")
        if b - a >= _MAX_EXPANSION:
            raise SlurmParseError(f"range {item!r} in hostlist {whole!r} is too large")
        width = len(lo) if lo.startswith("0") else 0
        out.extend(str(n).zfill(width) for n in range(a, b + 1))
    return out


def _expand_one(name: str, whole: str) -> list[str]:
    pieces = re.split(r"(\[[^\]]*\])", name)
    choices: list[list[str]] = []
    for piece in pieces:
        if piece.startswith("[") and piece.endswith("]"):
            choices.append(_expand_range(piece[1:-1], whole))
        elif "[" in piece or "]" in piece:
            raise SlurmParseError(f"bad brackets in hostlist {whole!r}")
        elif piece:
            choices.append([piece])
    total = 1
    for c in choices:
        total *= max(len(c), 1)
    if total > _MAX_EXPANSION:
        raise SlurmParseError(f"hostlist {whole!r} expands to too many names")
    return ["".join(combo) for combo in itertools.product(*choices)]


def expand(hostlist: str | None) -> list[str]:
    """All host names of a Slurm hostlist, in order, duplicates kept (as Slurm does).

    Raises :class:`SlurmParseError` for malformed lists (unbalanced brackets, bad ranges).
    """
    if hostlist is None or hostlist.strip().lower() in _NO_NODES:
        return []
    out: list[str] = []
    for part in _split_top(hostlist.strip()):
        out.extend(_expand_one(part, hostlist))
    return out


def expand_or_empty(hostlist: str | None) -> list[str]:
    """:func:`expand`, but a malformed list gives ``[]`` (for parsers that must not crash)."""
    try:
        return expand(hostlist)
    except SlurmParseError:
        return []


_NUMBERED = re.compile(r"^(?P<prefix>.*?)(?P<num>\d+)(?P<suffix>[^\d]*)$")


def _ranges(numbers: list[int], width: int) -> str:
    runs: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        lo, hi = str(start).zfill(width), str(prev).zfill(width)
        runs.append(lo if start == prev else f"{lo}-{hi}")
        if n is not None:
            start = prev = n
    return ",".join(runs)


def compress(hosts: Iterable[str]) -> str:
    """The shortest usual Slurm form of a set of host names (sorted, duplicates dropped).

    Names are grouped by the text around their last number and by zero padding, so
    ``node001``/``node010`` share ``node[001,010]`` while ``node9``/``node10`` give
    ``node[9-10]``; ``expand(compress(x))`` returns ``sorted(set(x))`` in Slurm's order.
    """
    groups: dict[tuple[str, str, int], set[int]] = {}
    plain: set[str] = set()
    for host in hosts:
        host = host.strip()
        if not host:
            continue
        m = _NUMBERED.match(host)
        if not m:
            plain.add(host)
            continue
        num = m.group("num")
        width = len(num) if num.startswith("0") and len(num) > 1 else 0
        groups.setdefault((m.group("prefix"), m.group("suffix"), width), set()).add(int(num))
    # an unpadded number as wide as a padded group (node100 next to node099) joins that group
    for (prefix, suffix, width), nums in list(groups.items()):
        if width:
            continue
        for n in list(nums):
            key = (prefix, suffix, len(str(n)))
            if key in groups and key[2] > 0:
                groups[key].add(n)
                nums.discard(n)
        if not nums:
            del groups[(prefix, suffix, width)]
    parts: list[tuple[str, str]] = [(h, h) for h in plain]
    for (prefix, suffix, width), nums in groups.items():
        ordered = sorted(nums)
        if len(ordered) == 1:
            name = f"{prefix}{str(ordered[0]).zfill(width)}{suffix}"
        else:
            name = f"{prefix}[{_ranges(ordered, width)}]{suffix}"
        parts.append((f"{prefix}\0{suffix}\0{ordered[0]:020d}", name))
    return ",".join(name for _, name in sorted(parts))
