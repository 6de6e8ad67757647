"""Uniform random search in the unit-cube encoding of the space."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hpcopt_server import domain as d
from hpcopt_server.optimizers.base import Optimizer, Problem


class RandomSearch(Optimizer):
    """Independent uniform draws.

    The generator is seeded with ``(seed, k)`` where k counts the trials the campaign
    has made so far (finished + pending), so a restarted server, or another replica,
    continues the same sequence instead of repeating it.
    """

    pending_params = False

    def __init__(self, problem: Problem):
        super().__init__(problem)
        self._observed = 0

    def observe(self, trials: Sequence[d.Trial]) -> None:
        self._observed += len(trials)

    def suggest(self, n: int, pending: Sequence[d.Params]) -> list[d.Params]:
        k = self._observed + len(pending)
        out = []
        for i in range(n):
            rng = np.random.default_rng([self.seed, k + i])
            out.append(self.space.decode(rng.random(len(self.space))))
        return out

    def alternative(self, k: int, pending: Sequence[d.Params]) -> d.Params:
        rng = np.random.default_rng([self.seed, 5, self._observed + len(pending), k])
        return self.space.decode(rng.random(len(self.space)))
