"""One ask/tell loop per optimizer, ours and the peers, behind the same small interface.

``make(name, space, seed)`` returns an object with ``ask(k) -> [params]`` and
``tell([(params, value)])``; everything minimizes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np

from hpcopt_server import domain as d
from hpcopt_server.optimizers import REGISTRY, Problem, SearchSpace

NOW = datetime(2026, 1, 1, tzinfo=UTC)
OURS = ("bo", "ea", "random")
PEERS = ("skopt", "optuna-gp", "optuna-tpe")
ALL = ("bo", "ea", "skopt", "optuna-gp", "optuna-tpe", "random")


class Ours:
    def __init__(
        self, name: str, space: dict[str, Any], seed: int, options: dict[str, Any] | None = None, budget: int = 0
    ):
        self.opt = REGISTRY[name](Problem(SearchSpace(space), "minimize", seed, options or {}, budget=budget))
        self.n = 0

    def ask(self, k: int, pending: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        return self.opt.suggest(k, pending or [])

    def tell(self, results: list[tuple[dict[str, Any], float]]) -> None:
        trials = []
        for params, value in results:
            trials.append(d.Trial(id=self.n, campaign_id=1, number=self.n, state=d.TrialState.COMPLETED, attempt=1,
                                  params=params, created_at=NOW, value=value, finished_at=NOW))  # fmt: skip
            self.n += 1
        self.opt.observe(trials)


class Skopt:
    def __init__(self, space: dict[str, Any], seed: int):
        import skopt

        self.names = list(space)
        dims = [skopt.space.Real(p["low"], p["high"], name=n) for n, p in space.items()]
        self.opt = skopt.Optimizer(dims, base_estimator="GP", acq_func="EI", random_state=seed)

    def ask(self, k: int) -> list[dict[str, Any]]:
        points = self.opt.ask(n_points=k) if k > 1 else [self.opt.ask()]
        return [dict(zip(self.names, map(float, p), strict=True)) for p in points]

    def tell(self, results: list[tuple[dict[str, Any], float]]) -> None:
        self.opt.tell([[p[n] for n in self.names] for p, _ in results], [v for _, v in results])


class Optuna:
    def __init__(self, kind: str, space: dict[str, Any], seed: int):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        sampler = optuna.samplers.GPSampler(seed=seed) if kind == "gp" else optuna.samplers.TPESampler(seed=seed)
        self.study = optuna.create_study(sampler=sampler)
        self.space = space
        self.dists: dict[str, Any] = {
            n: optuna.distributions.FloatDistribution(p["low"], p["high"]) for n, p in space.items()
        }
        self.pending: list[Any] = []

    def ask(self, k: int) -> list[dict[str, Any]]:
        out = []
        for _ in range(k):
            trial = self.study.ask(self.dists)
            self.pending.append(trial)
            out.append(dict(trial.params))
        return out

    def tell(self, results: list[tuple[dict[str, Any], float]]) -> None:
        for (_, value), trial in zip(results, self.pending, strict=True):
            self.study.tell(trial, value)
        self.pending = []


def make(name: str, space: dict[str, Any], seed: int, budget: int = 0) -> Any:
    if name in OURS:
        return Ours(name, space, seed, None, budget)
    if name == "skopt":
        return Skopt(space, seed)
    return Optuna(name.split("-")[1], space, seed)


def run(name: str, fn: Any, seed: int, workers: int = 1) -> float:
    """Final simple regret of one run of ``fn.budget`` evaluations with ``workers``
    evaluations in flight: after the first ``workers`` suggestions, the oldest pending
    one finishes and one new suggestion is made while ``workers - 1`` are pending (an
    agent that finishes asks again at once; ours are told what is pending, Optuna sees
    its RUNNING trials, skopt is asked as a user would, without them)."""
    opt = make(name, fn.space(), seed, fn.budget)
    if workers == 1:
        best = np.inf
        for _ in range(fn.budget):
            [p] = opt.ask(1)
            value = fn(p)
            opt.tell([(p, value)])
            best = min(best, value)
        return float(best - fn.minimum)
    if isinstance(opt, Optuna):
        return _run_optuna_async(opt, fn, workers)
    pending = opt.ask(min(workers, fn.budget))
    best, asked = np.inf, workers
    while pending:
        p = pending.pop(0)
        value = fn(p)
        opt.tell([(p, value)])
        best = min(best, value)
        if asked < fn.budget:
            pending += opt.ask(1, list(pending)) if isinstance(opt, Ours) else opt.ask(1)
            asked += 1
    return float(best - fn.minimum)


def _run_optuna_async(opt: Optuna, fn: Any, workers: int) -> float:
    trials = [opt.study.ask(opt.dists) for _ in range(min(workers, fn.budget))]
    best, asked = np.inf, workers
    while trials:
        trial = trials.pop(0)
        value = fn(dict(trial.params))
        opt.study.tell(trial, value)
        best = min(best, value)
        if asked < fn.budget:
            trials.append(opt.study.ask(opt.dists))
            asked += 1
    return float(best - fn.minimum)
