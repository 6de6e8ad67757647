"""Thinning a learning curve to a bounded number of points, keeping its shape.

A fold keeps at most its campaign's ``budget.curve_points_per_fold`` points. When a
report takes it past that, the server thins the fold's curve to about half of it with
:func:`keep_steps`, so thinning runs once per half a cap of reports (amortized O(1)
rows per report), and reads that return curves apply the same rule to their own bound.

The rule (min/max decimation, as plotting libraries thin long series): the first and
the last point stay; the steps between them are cut into equal ranges, and each range
keeps its lowest and its highest point, so the curve's best point (either direction)
stays too. Spikes, plateaus and the trend survive; a range with no point keeps none, so
older, already thinned stretches are not refilled.
"""

from __future__ import annotations

from collections.abc import Sequence

#: A fold's points when the campaign spec names no cap (``budget.curve_points_per_fold``).
DEFAULT_POINTS_PER_FOLD = 1000
#: The most points per fold a read returns (a trial, the dashboard's curves); export
#: returns every stored point.
READ_POINTS_PER_FOLD = 1000


def keep_steps(points: Sequence[tuple[int, float]], target: int) -> set[int]:
    """The steps to keep of ``points`` ((step, value) sorted by step, steps unique) so
    that at most ``target`` (>= 4) remain: all of them when they already fit."""
    if len(points) <= target:
        return {s for s, _ in points}
    first, last = points[0][0], points[-1][0]
    keep = {first, last}
    ranges = max(1, (target - 2) // 2)
    span = last - first + 1
    low: dict[int, tuple[float, int]] = {}
    high: dict[int, tuple[float, int]] = {}
    for step, value in points[1:-1]:
        r = (step - first) * ranges // span
        if r not in low or value < low[r][0]:
            low[r] = (value, step)
        if r not in high or value > high[r][0]:
            high[r] = (value, step)
    keep.update(step for _, step in low.values())
    keep.update(step for _, step in high.values())
    return keep


def thin(points: Sequence[tuple[int, float]], target: int) -> list[tuple[int, float]]:
    """``points`` reduced by :func:`keep_steps`, in step order."""
    if len(points) <= target:
        return list(points)
    keep = keep_steps(points, target)
    return [p for p in points if p[0] in keep]
