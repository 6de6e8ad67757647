"""Space-filling designs that need no model: scrambled Sobol and a grid.

Both pick the k-th point of a fixed sequence, k = trials made so far (finished +
pending), so a restarted server or another replica continues it instead of repeating.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from hpcopt.core.options import Option
from hpcopt_server import domain as d
from hpcopt_server.optimizers.base import Optimizer, Problem
from hpcopt_server.optimizers.bo import sobol_point


class SobolSearch(Optimizer):
    """Scrambled Sobol points (scipy.stats.qmc), decoded into the space."""

    def __init__(self, problem: Problem):
        super().__init__(problem)
        self._seen = 0

    def observe(self, trials: Sequence[d.Trial]) -> None:
        self._seen += len(trials)

    def suggest(self, n: int, pending: Sequence[d.Params]) -> list[d.Params]:
        k = self._seen + len(pending)
        return [self.space.decode(sobol_point(len(self.space), self.seed, k + i)) for i in range(n)]


#: The most points a grid may have (a campaign's budget is at most 10**6 trials anyway).
MAX_GRID = 1_000_000
#: The most branches (combinations of the parents' choices) a conditional grid may have.
MAX_BRANCHES = 10_000


class GridSearch(Optimizer):
    """Every combination of ``points`` values per real/int parameter (evenly spaced, on
    the log axis for log scales; ints de-duplicated) and every choice of each
    categorical, in order. Past the end of the grid it starts over, so set
    ``budget.max_trials`` to the grid size. Option: ``points`` (5, at most 10,000); the
    grid may have at most :data:`MAX_GRID` points.

    A conditional space is expanded per branch: for each combination of the parents'
    choices (the categoricals that ``when`` names), the grid of the parameters active
    there, so no two points differ only in an inactive parameter. The branches take
    turns (point r of each, then point r + 1 of each), so a budget smaller than the
    grid still sees every branch."""

    OPTIONS: ClassVar[dict[str, Option]] = {
        "points": Option(5, int, 1, 10_000, doc="points per real or integer parameter"),
    }

    def __init__(self, problem: Problem):
        super().__init__(problem)
        points = self.option("points")
        dims = self.space.dims
        parents = [dim for dim in dims if any(dim.name == p for other in dims for p, _ in other.when)]
        n_branches = math.prod(len(dim.choices) for dim in parents)
        if n_branches > MAX_BRANCHES:
            raise ValueError(f"the conditional grid has {n_branches} branches; at most {MAX_BRANCHES} are allowed")
        axes: dict[str, list[d.ParamValue]] = {}
        for dim in dims:
            if dim.type == "categorical":
                axes[dim.name] = list(dim.choices)
                continue
            values = [dim.decode(u) for u in (np.linspace(0, 1, points) if points > 1 else [0.5])]
            axes[dim.name] = list(dict.fromkeys(values))
        # Per branch: the parents' values and the other active axes (space order), its size.
        self._branches: list[tuple[dict[str, d.ParamValue], list[str]]] = []
        self._sizes: list[int] = []
        for combo in itertools.product(*(dim.choices for dim in parents)):
            fixed = dict(zip((dim.name for dim in parents), combo, strict=True))
            free = [dim.name for dim in dims if dim.name not in fixed and dim.active(fixed)]
            self._branches.append((fixed, free))
            # Python ints: 2 points on 64 axes is 2**64, which numpy's product wrapped to 0.
            self._sizes.append(math.prod(len(axes[name]) for name in free))
            if sum(self._sizes) > MAX_GRID:
                raise ValueError(f"options.points: the grid would have more than {MAX_GRID} points (the most allowed)")
        self.size = sum(self._sizes)
        self._axes = axes
        self._order = [dim.name for dim in dims]
        self._seen = 0

    def observe(self, trials: Sequence[d.Trial]) -> None:
        self._seen += len(trials)

    def _before(self, r: int) -> int:
        """How many points the rounds before round ``r`` hold."""
        return sum(min(size, r) for size in self._sizes)

    def point(self, k: int) -> d.Params:
        """Grid point ``k`` (mod the grid size): in round r, point r of each branch that has one."""
        k %= self.size
        lo, hi = 0, max(self._sizes)  # the round: the last r with _before(r) <= k
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self._before(mid) <= k else (lo, mid - 1)
        r, skip = lo, k - self._before(lo)
        b = [i for i, size in enumerate(self._sizes) if size > r][skip]
        fixed, free = self._branches[b]
        # Index r of the branch -> one value per axis, the last axis fastest (itertools.product's order).
        index, out = r, dict(fixed)
        for name in reversed(free):
            index, j = divmod(index, len(self._axes[name]))
            out[name] = self._axes[name][j]
        return {name: out[name] for name in self._order if name in out}

    def suggest(self, n: int, pending: Sequence[d.Params]) -> list[d.Params]:
        k = self._seen + len(pending)
        return [self.point(k + i) for i in range(n)]
