"""Where a job's behaviour changed: change points on each GPU's per-minute utilization and
SM activity.

A job's mean hides a change of phase — four GPUs training for five hours and one of them idle
for the last 45 minutes reads "healthy" over the whole job, and the rolling recent window sees
the idle GPU but not since when. The *segment* window starts where the job's latest phase
began: the latest change point found in any of its GPUs' signals, so its verdicts say "idle since
14:05, 45 min" and charge the GPU-hours of the phase, not of the last ten minutes.

:func:`change_points` is pure: binary segmentation of a series under a squared-error cost (the
mean-shift model). A split is kept when both sides last at least ``min_size`` points, their
means differ by at least ``min_shift`` (a change an admin would call one) and the split lowers
the cost by more than ``2·s²·ln n`` (a BIC-like penalty; s is the noise of the series,
estimated from the median absolute difference of neighbouring points so the steps themselves
do not inflate it).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from gpuwatch.classify.features import JobScope, WindowFeatures, window_features
from gpuwatch.config.thresholds import Thresholds
from gpuwatch.sql.buckets import as_utc, epoch_seconds, floor_hour
from gpuwatch.sql.resolution import MINUTES, Span, span_rows, spans
from gpuwatch.sql.rollups import MINUTE, floor_minute
from gpuwatch.sql.schema import gpu_minutes

#: MAD of first differences -> s.d. of Gaussian noise: MAD/0.6745 is the s.d. of a difference, s.d.·√2
_MAD_TO_SIGMA = 1.0 / (0.6745 * math.sqrt(2.0))


def _noise_variance(values: Sequence[float]) -> float:
    if len(values) < 3:
        return 0.0
    diffs = [abs(b - a) for a, b in itertools.pairwise(values)]
    return (statistics.median(diffs) * _MAD_TO_SIGMA) ** 2


def change_points(values: Sequence[float], *, min_size: int, min_shift: float) -> list[int]:
    """Indices where a new segment of ``values`` begins (sorted; [] for one steady segment)."""
    n = len(values)
    if min_size < 1 or n < 2 * min_size:
        return []
    total = [0.0]
    squares = [0.0]
    for x in values:
        total.append(total[-1] + x)
        squares.append(squares[-1] + x * x)

    def cost(i: int, j: int) -> float:
        s = total[j] - total[i]
        return squares[j] - squares[i] - s * s / (j - i)

    def mean(i: int, j: int) -> float:
        return (total[j] - total[i]) / (j - i)

    penalty = 2.0 * _noise_variance(values) * math.log(n)
    found: list[int] = []
    pending = [(0, n)]
    while pending:
        i, j = pending.pop()
        if j - i < 2 * min_size:
            continue
        whole = cost(i, j)
        best_k, best_gain = None, 0.0
        for k in range(i + min_size, j - min_size + 1):
            gain = whole - cost(i, k) - cost(k, j)
            if gain > best_gain:
                best_k, best_gain = k, gain
        if best_k is None or best_gain <= penalty or abs(mean(i, best_k) - mean(best_k, j)) < min_shift:
            continue
        found.append(best_k)
        pending += [(i, best_k), (best_k, j)]
    return sorted(found)


#: per-minute means a phase change is looked for in: NVML utilization (every card) and, where
#: the card has GPM, SM activity (a job can keep a kernel resident while doing far less work)
SIGNALS = ("util_gpu_ratio", "sm_active_ratio")


#: a series is read in buckets of whole minutes, at most this many per GPU and signal, so the
#: search costs the same for a day-long job as for an hour-long one; the change found is then
#: placed to the minute from the minutes around it
MAX_POINTS = 240
#: buckets this long or longer are whole clock hours instead, read from the hourly rollups
#: where they are folded (``sql/resolution.spans``): a job of five days or more
HOURLY_BUCKETS_FROM_MIN = 30


@dataclass(frozen=True)
class _Series:
    node_id: int
    gpu_index: int
    signal: str
    buckets: list[int]  # bucket numbers from the job's start, ascending
    means: list[float]


def _series(
    conn: sa.Connection, scope: JobScope, pieces: Sequence[Span], origin: datetime, bucket_min: int
) -> list[_Series]:
    """Per GPU of the job and signal: its mean per bucket of ``bucket_min`` minutes from
    ``origin`` over ``pieces`` (buckets without the signal left out), computed in SQL."""
    g = span_rows(
        pieces,
        lambda tier: tier.gpu,
        lambda rows: (rows.c.node_id.in_(scope.node_ids),),
        [f"{name}_{part}" for name in SIGNALS for part in ("sum", "n")],
    ).c
    wanted = {(ref.node_id, ref.gpu_index) for ref in scope.gpus}
    bucket = ((epoch_seconds(conn, g.time) - int(origin.timestamp())) // (60 * bucket_min)).label("bucket")
    means = [
        sa.case(
            (sa.func.sum(g[f"{name}_n"]) > 0, sa.func.sum(g[f"{name}_sum"]) / sa.func.sum(g[f"{name}_n"])),
            else_=None,
        )
        for name in SIGNALS
    ]
    rows = conn.execute(
        sa.select(g.node_id, g.gpu_index, bucket, *means)
        .group_by(g.node_id, g.gpu_index, bucket)
        .order_by(g.node_id, g.gpu_index, bucket)
    )
    out: dict[tuple[int, int, str], _Series] = {}
    for node_id, gpu_index, k, *values in rows:
        if (node_id, gpu_index) not in wanted:
            continue
        for name, value in zip(SIGNALS, values, strict=True):
            if value is not None:
                series = out.setdefault((node_id, gpu_index, name), _Series(node_id, gpu_index, name, [], []))
                series.buckets.append(int(k))
                series.means.append(float(value))
    return list(out.values())


def _to_the_minute(
    conn: sa.Connection, series: _Series, at: datetime, bucket_min: int, before: float, after: float
) -> datetime:
    """The first minute of the new phase, near the bucket ``at`` it was found in: the split of
    the minutes from a bucket before to a bucket after that best fits the two phases' means."""
    g = gpu_minutes.c
    lo, hi = at - bucket_min * MINUTE, at + bucket_min * MINUTE
    rows = conn.execute(
        sa.select(g.minute, g[f"{series.signal}_sum"] / g[f"{series.signal}_n"])
        .where(
            g.node_id == series.node_id,
            g.gpu_index == series.gpu_index,
            g.minute >= lo,
            g.minute < hi,
            g[f"{series.signal}_n"] > 0,
        )
        .order_by(g.minute)
    ).all()
    if not rows:
        return at
    values = [float(v) for _, v in rows]
    misfit = [sum((x - after) ** 2 for x in values)]  # split before the first minute
    for x in values:
        misfit.append(misfit[-1] - (x - after) ** 2 + (x - before) ** 2)
    best = min(range(len(misfit)), key=misfit.__getitem__)
    return hi if best == len(rows) else as_utc(conn, rows[best][0])


def latest_change(
    conn: sa.Connection, scope: JobScope, start: datetime, end: datetime, thresholds: Thresholds
) -> datetime | None:
    """The first whole minute of the job's latest phase: after the latest change point of any
    of its GPUs within ``[start, end)``; None when every GPU kept one behaviour.

    Long jobs are searched in buckets (:data:`MAX_POINTS`), from :data:`HOURLY_BUCKETS_FROM_MIN`
    on in clock hours read where folded from the hourly rollups, and the change is then placed
    to the minute (where the minutes around it are still kept). The minute a change falls in
    holds samples of both phases (a GPU that went idle at 14:04:40 has a busy sample in 14:04),
    so the phase is taken to begin the minute after it: a segment of an idle GPU then reads
    0 % in every sample, as the idle rule requires.
    """
    start = floor_minute(start)
    span = int((end - start) // MINUTE)
    bucket_min = max(1, math.ceil(span / MAX_POINTS))
    origin, pieces = start, (Span(MINUTES, start, end),)
    if bucket_min >= HOURLY_BUCKETS_FROM_MIN:
        bucket_min = 60 * math.ceil(bucket_min / 60)
        origin, pieces = floor_hour(start), spans(conn, start, end)
    size = max(1, math.ceil(thresholds.segment_min_minutes / bucket_min))
    shift = thresholds.segment_min_shift_ratio
    found: list[tuple[int, _Series, float, float]] = []
    for series in _series(conn, scope, pieces, origin, bucket_min):
        points = change_points(series.means, min_size=size, min_shift=shift)
        if points:
            cut = points[-1]
            before = series.means[points[-2] if len(points) > 1 else 0 : cut]
            after = series.means[cut:]
            found.append((series.buckets[cut], series, sum(before) / len(before), sum(after) / len(after)))
    if not found:
        return None
    last = max(k for k, *_ in found)
    at = origin + last * bucket_min * MINUTE
    if bucket_min == 1:
        return at + MINUTE
    placed = [_to_the_minute(conn, s, at, bucket_min, mb, ma) for k, s, mb, ma in found if k == last]
    return max(placed) + MINUTE


def segment_window(
    conn: sa.Connection, scope: JobScope, thresholds: Thresholds, whole: WindowFeatures
) -> WindowFeatures | None:
    """Features of the job's latest phase (kind ``segment``), from its latest change point to
    the edge of the whole-job window ``whole`` (whose span it searches); None when the job kept
    one behaviour throughout."""
    start, edge = whole.start, whole.end
    if edge - start < 2 * thresholds.segment_min_minutes * MINUTE:
        return None
    since = latest_change(conn, scope, start, edge, thresholds)
    if since is None or since <= start or edge - since < timedelta(minutes=thresholds.segment_min_minutes):
        return None
    return window_features(conn, scope, "segment", since, edge, thresholds, context=whole)
