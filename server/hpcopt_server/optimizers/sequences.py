"""Space-filling designs that need no model: scrambled Sobol and a grid.

Both pick the k-th point of a fixed sequence, k = trials made so far (finished +
pending), so a restarted server or another replica continues it instead of repeating.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from hpcopt_server import domain as d
from hpcopt_server.optimizers.base import Optimizer, Problem
from hpcopt_server.optimizers.bo import sobol_point


class SobolSearch(Optimizer):
    """Scrambled Sobol points (scipy.stats.qmc), decoded into the space."""

    def __init__(self, problem: Problem):
        super().__init__(problem)
        self.reject_unknown_options(())
        self._seen = 0

    def observe(self, trials: Sequence[d.Trial]) -> None:
        self._seen += len(trials)

    def suggest(self, n: int, pending: Sequence[d.Params]) -> list[d.Params]:
        k = self._seen + len(pending)
        return [self.space.decode(sobol_point(len(self.space), self.seed, k + i)) for i in range(n)]


#: The most points a grid may have (a campaign's budget is at most 10**6 trials anyway).
MAX_GRID = 1_000_000


class GridSearch(Optimizer):
    """Every combination of ``points`` values per real/int parameter (evenly spaced, on
    the log axis for log scales; ints de-duplicated) and every choice of each
    categorical, in order. Past the end of the grid it starts over, so set
    ``budget.max_trials`` to the grid size. Option: ``points`` (5, at most 10,000); the
    grid may have at most :data:`MAX_GRID` points."""

    def __init__(self, problem: Problem):
        super().__init__(problem)
        self.reject_unknown_options(("points",))
        points = self.option("points", 5, int, low=1, high=10_000)
        # Python ints: 2 points on 64 axes is 2**64, which numpy's product wrapped to 0.
        size = math.prod(points if dim.type != "categorical" else len(dim.choices) for dim in self.space.dims)
        if size > MAX_GRID:
            raise ValueError(f"options.points: the grid would have {size} points; at most {MAX_GRID} are allowed")
        axes: list[list[d.ParamValue]] = []
        for dim in self.space.dims:
            if dim.type == "categorical":
                axes.append(list(dim.choices))
                continue
            values = [dim.decode(u) for u in (np.linspace(0, 1, points) if points > 1 else [0.5])]
            axes.append(list(dict.fromkeys(values)))
        self.size = math.prod(len(a) for a in axes)
        self._axes = axes
        self._seen = 0

    def observe(self, trials: Sequence[d.Trial]) -> None:
        self._seen += len(trials)

    def suggest(self, n: int, pending: Sequence[d.Params]) -> list[d.Params]:
        k = self._seen + len(pending)
        out = []
        for i in range(n):
            # Point index -> one value per axis, the last axis fastest (itertools.product's order).
            index, combo = (k + i) % self.size, []
            for axis in reversed(self._axes):
                index, j = divmod(index, len(axis))
                combo.append(axis[j])
            out.append({dim.name: v for dim, v in zip(self.space.dims, reversed(combo), strict=True)})
        return out
