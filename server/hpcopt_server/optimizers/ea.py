"""The evolutionary algorithm (``algorithm: ea``) of the seed slides (NNLO's GA), made
steady-state: a new child whenever an agent asks, bred from the trials known so far.

Genes live in the unit-cube coordinates of ``SearchSpace`` (log scales included; ints
and categoricals decode from their coordinate). For a child:

1. while fewer than ``population`` trials exist, the child is uniformly random;
2. otherwise the elite is the fittest ``elite`` fraction of the finished trials
   (failed and pruned ones count as the worst: a pruned trial lost to the others), at least two;
3. two parents by binary tournament from the elite; A is the fitter;
4. crossover per real/int gene: ``c = r (pA - pB) + pA`` with r ~ U(0, 1), reflected
   back into [0, 1] at its faces (clipping piled children on the faces, where none of
   the benchmark functions has its optimum: Levy-8 at 64 workers ended worse than random
   search, 15.4 against 12.2; reflected, 10.1); a categorical gene comes from A or B
   with equal probability;
5. Michalewicz non-uniform mutation of each real/int gene with probability
   ``mutation_rate``: in generation g of G,
   ``c += (1 - r1^((1 - g/G)^3)) * (1 - c if r2 > 0.5 else 0 - c)``, so steps shrink as
   g -> G; a categorical gene is redrawn with probability ``mutation_rate * (1 - g/G)``.

The generation of a child is g = min(finished // population, G). Fitness is the loss
(the value, negated when maximizing), so negative figures of merit are fine.

With several objectives (``objectives`` in the spec) fitness is NSGA-II's order (Deb et
al. 2002): trials sorted front by front (non-dominated sorting of their loss vectors),
within a front the most isolated first (crowding distance); the elite and the
tournaments use that order, so the elite spreads along the Pareto front instead of
crowding one end of it.

Options: :attr:`Evolutionary.OPTIONS` (listed with their defaults in the docs' options
reference).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from hpcopt.core.options import Option
from hpcopt_server import domain as d
from hpcopt_server.optimizers.base import Optimizer, Problem, loss_vector, to_minimize
from hpcopt_server.optimizers.pareto import nsga_fronts


def crossover(pa: np.ndarray, pb: np.ndarray, r: float) -> np.ndarray:
    """``r (pA - pB) + pA`` reflected back into the unit cube (A is the fitter parent)."""
    return reflect(r * (pa - pb) + pa)


def reflect(c: np.ndarray) -> np.ndarray:
    """Coordinates folded back into [0, 1] at its faces (1.2 -> 0.8, -0.1 -> 0.1)."""
    c = np.mod(c, 2.0)
    return np.where(c > 1.0, 2.0 - c, c)


def mutate(c: float, g: int, G: int, r1: float, r2: float) -> float:
    """Michalewicz non-uniform mutation of one gene in [0, 1]."""
    step = 1.0 - r1 ** ((1.0 - min(g, G) / G) ** 3)
    return float(np.clip(c + step * ((1.0 - c) if r2 > 0.5 else (0.0 - c)), 0.0, 1.0))


class Evolutionary(Optimizer):
    pending_params = False
    OPTIONS: ClassVar[dict[str, Option]] = {
        "population": Option(
            None, int, 2, 100_000, derived="a fifth of max_trials, 8..50", doc="genomes kept and bred from"
        ),
        "generations": Option(
            None,
            int,
            1,
            1_000_000,
            derived="(max_trials - 1) / population",
            doc="G of the non-uniform mutation: its steps shrink to nothing by generation G",
        ),
        "elite": Option(0.2, float, 0.0, 1.0, doc="fraction of the population that parents are drawn from"),
        "mutation_rate": Option(0.3, float, 0.0, 1.0, doc="chance that a gene mutates"),
    }

    def __init__(self, problem: Problem):
        super().__init__(problem)
        budget = problem.budget
        # With the budget known: a population of a fifth of it (8..50), and G generations
        # that end with it, so mutation steps shrink to nothing by the last trials.
        self.population = self.option("population", min(max(budget // 5, 8), 50) if budget else 20)
        self.generations = self.option("generations", max(1, (budget - 1) // self.population) if budget else 10)
        self.elite_fraction = self.option("elite")
        self.mutation_rate = self.option("mutation_rate")
        self.categorical = np.array([dim.type == "categorical" for dim in self.space.dims])
        self._genes: list[np.ndarray] = []
        self._losses: list[float] = []  # NaN for failed and pruned
        self._vectors: list[list[float] | None] = []  # multi-objective: the loss vectors
        self._seen = 0
        self.rng = np.random.default_rng([self.seed, 2, 0])

    def encode(self, params: d.Params) -> np.ndarray:
        u = np.zeros(len(self.space))
        for j, dim in enumerate(self.space.dims):
            v = params.get(dim.name)
            if v is None:  # inactive (a conditional parameter): imputed, like the GP's encoding
                u[j] = dim.IMPUTED
            elif dim.type == "categorical":
                u[j] = (list(dim.choices).index(v) + 0.5) / len(dim.choices)
            else:
                lo, hi, x = dim.low, dim.high, float(v)
                if dim.log:
                    lo, hi, x = np.log(lo), np.log(hi), np.log(x)
                u[j] = (x - lo) / (hi - lo)
        return np.clip(u, 0.0, 1.0)

    def observe(self, trials: Sequence[d.Trial]) -> None:
        for t in trials:
            self._seen += 1
            if t.state == d.TrialState.CANCELLED:
                continue
            loss = to_minimize(t, self.direction)
            self._genes.append(self.encode(t.params))
            self._losses.append(np.nan if loss is None else loss)
            if self.problem.multi_objective:
                self._vectors.append(loss_vector(t, self.problem.directions))

    def suggest(self, n: int, pending: Sequence[d.Params]) -> list[d.Params]:
        out = []
        for i in range(n):
            # Seeded by the child's position, so a restarted server continues the search.
            k = self._seen + len(pending) + i
            self.rng = np.random.default_rng([self.seed, 2, k])
            child = self.rng.random(len(self.space)) if k < self.population or len(self._genes) < 2 else self.child()
            out.append(self.space.decode(child))
        return out

    def alternative(self, k: int, pending: Sequence[d.Params]) -> d.Params:
        index = self._seen + len(pending)
        self.rng = np.random.default_rng([self.seed, 6, index, k])
        gene = self.rng.random(len(self.space)) if index < self.population or len(self._genes) < 2 else self.child()
        return self.space.decode(gene)

    def generation(self) -> int:
        return min(len(self._genes) // self.population, self.generations)

    def fittest(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``count`` fittest finished trials, fittest first, and the rank each has in
        a tournament (lower wins). One objective: by loss, the rank is the place. Several:
        NSGA-II's order; the rank is the front (crowding chose who entered the elite; in
        the tournaments the front's extremes would always win, so one front ties and the
        first drawn wins). Failed and pruned trials last."""
        if self.problem.multi_objective:
            ok = np.array([v is not None for v in self._vectors])
            scored = np.flatnonzero(ok)
            L = np.array([v for v in self._vectors if v is not None]).reshape(len(scored), -1)
            fronts = nsga_fronts(L, count)
            places = [scored[f] for f in fronts] + [np.flatnonzero(~ok)]
            ranks = [np.full(len(f), i) for i, f in enumerate(fronts)] + [np.full(int((~ok).sum()), len(fronts))]
            return np.concatenate(places)[:count].astype(int), np.concatenate(ranks)[:count].astype(float)
        losses = np.array(self._losses)
        worst = np.nanmax(losses) if np.isfinite(losses).any() else 0.0
        order = np.argsort(np.where(np.isfinite(losses), losses, worst + 1.0), kind="stable")[:count]
        return order, np.arange(len(order), dtype=float)

    def child(self) -> np.ndarray:
        elite, rank = self.fittest(max(2, round(self.elite_fraction * len(self._genes))))
        losses = np.full(len(self._genes), np.inf)  # a trial's rank in the tournaments
        losses[elite] = rank

        def tournament() -> int:
            a, b = self.rng.choice(elite, 2, replace=False)
            return int(a if losses[a] <= losses[b] else b)

        ia = tournament()
        ib = tournament()
        while ib == ia:
            ib = int(self.rng.choice(elite))
        if losses[ib] < losses[ia]:
            ia, ib = ib, ia
        pa, pb = self._genes[ia], self._genes[ib]
        c = crossover(pa, pb, float(self.rng.random()))
        pick_b = self.rng.random(len(c)) < 0.5
        c = np.where(self.categorical & pick_b, pb, np.where(self.categorical, pa, c))
        g, G = self.generation(), self.generations
        for j in range(len(c)):
            if self.categorical[j]:
                if self.rng.random() < self.mutation_rate * (1 - g / G):
                    c[j] = self.rng.random()
            elif self.rng.random() < self.mutation_rate:
                c[j] = mutate(c[j], g, G, float(self.rng.random()), float(self.rng.random()))
        return c
