"""Space-filling designs that need no model: scrambled Sobol and a grid.

Both pick the k-th point of a fixed sequence, k = trials made so far (finished +
pending), so a restarted server or another replica continues it instead of repeating.
"""

from __future__ import annotations

import itertools
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


class GridSearch(Optimizer):
    """Every combination of ``points`` values per real/int parameter (evenly spaced, on
    the log axis for log scales; ints de-duplicated) and every choice of each
    categorical, in order. Past the end of the grid it starts over, so set
    ``budget.max_trials`` to the grid size. Option: ``points`` (5)."""

    def __init__(self, problem: Problem):
        super().__init__(problem)
        self.reject_unknown_options(("points",))
        points = self.option("points", 5, int, low=1)
        axes: list[list[d.ParamValue]] = []
        for dim in self.space.dims:
            if dim.type == "categorical":
                axes.append(list(dim.choices))
                continue
            values = [dim.decode(u) for u in (np.linspace(0, 1, points) if points > 1 else [0.5])]
            axes.append(list(dict.fromkeys(values)))
        self.size = int(np.prod([len(a) for a in axes]))
        self._axes = axes
        self._seen = 0

    def observe(self, trials: Sequence[d.Trial]) -> None:
        self._seen += len(trials)

    def suggest(self, n: int, pending: Sequence[d.Params]) -> list[d.Params]:
        k = self._seen + len(pending)
        out = []
        for i in range(n):
            combo = next(itertools.islice(itertools.product(*self._axes), (k + i) % self.size, None))
            out.append({dim.name: v for dim, v in zip(self.space.dims, combo, strict=True)})
        return out
