"""One ask/tell loop per optimizer, ours and the peers, behind the same small interface.

``make(name, space, seed)`` returns an object with ``ask(k) -> [params]`` and
``tell([(params, value)])``; everything minimizes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np

from hpcopt_server import domain as d
from hpcopt_server.optimizers import REGISTRY, Problem, SearchSpace

NOW = datetime(2026, 1, 1, tzinfo=UTC)
OURS = ("bo", "ea", "random")
PEERS = ("botorch", "skopt", "optuna-gp", "optuna-tpe")
ALL = ("bo", "ea", "botorch", "skopt", "optuna-gp", "optuna-tpe", "random")


class Ours:
    takes_pending = True

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
            trials.append(
                d.Trial(
                    id=self.n,
                    campaign_id=1,
                    number=self.n,
                    state=d.TrialState.COMPLETED,
                    attempt=1,
                    params=params,
                    created_at=NOW,
                    value=value,
                    finished_at=NOW,
                )
            )
            self.n += 1
        self.opt.observe(trials)


class Skopt:
    """scikit-optimize's GP with EI. Its batch mode is the constant liar
    (``ask(n_points, strategy="cl_min")``: each point of a batch is told with the lowest
    value seen before the next is asked); asked with points pending, a copy of the
    optimizer is told them with that lie and asked, what ``ask(n_points)`` does within a
    batch."""

    takes_pending = True

    def __init__(self, space: dict[str, Any], seed: int):
        import skopt

        self.names = list(space)
        self.seed = seed
        dims = [skopt.space.Real(p["low"], p["high"], name=n) for n, p in space.items()]
        self.opt = skopt.Optimizer(dims, base_estimator="GP", acq_func="EI", random_state=seed)

    def ask(self, k: int, pending: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        opt = self.opt
        if pending and opt.yi:
            opt = opt.copy(random_state=self.seed * 100_003 + len(opt.yi))
            opt.tell([[p[n] for n in self.names] for p in pending], [min(self.opt.yi)] * len(pending))
        points = opt.ask(n_points=k) if k > 1 else [opt.ask()]
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


class BoTorch:
    """BoTorch as its documentation sets it up: 10 scrambled Sobol points (more while
    fewer than 2 results are in), then a ``SingleTaskGP`` with its default priors
    (dimension-scaled lengthscales, Hvarfner et al. 2024) on inputs normalized to the
    unit cube and standardized outputs, fitted by ``fit_gpytorch_mll``, and
    ``qLogNoisyExpectedImprovement`` maximized by ``optimize_acqf`` (10 restarts from
    512 raw samples). Pending points are its ``X_pending``: the acquisition integrates
    over their joint posterior by Monte Carlo (BoTorch's fantasies for asynchronous
    batches). Seeded: torch's generator per ask."""

    takes_pending = True
    n_initial = 10

    def __init__(self, space: dict[str, Any], seed: int):
        import torch

        self.torch = torch
        self.names = list(space)
        self.low = np.array([space[n]["low"] for n in self.names], float)
        self.high = np.array([space[n]["high"] for n in self.names], float)
        self.seed = seed
        self.X: list[np.ndarray] = []
        self.y: list[float] = []
        self.asked = 0

    def _params(self, u: np.ndarray) -> dict[str, Any]:
        return {n: float(v) for n, v in zip(self.names, self.low + u * (self.high - self.low), strict=True)}

    def _unit(self, p: dict[str, Any]) -> np.ndarray:
        u: np.ndarray = (np.array([p[n] for n in self.names], float) - self.low) / (self.high - self.low)
        return u

    def ask(self, k: int, pending: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        from scipy.stats import qmc

        out: list[dict[str, Any]] = []
        # Sobol until 10 points are asked and 2 results are in (a GP needs data: with 16
        # workers the first ask wants 16 points before any result), as bo does.
        while len(out) < k and (self.asked < self.n_initial or len(self.y) < 2):
            sobol = qmc.Sobol(len(self.names), scramble=True, seed=self.seed)
            if self.asked:
                sobol.fast_forward(self.asked)
            out.append(self._params(sobol.random(1)[0]))
            self.asked += 1
        if len(out) < k:
            out += self._suggest(k - len(out), [self._unit(p) for p in (pending or [])] + [self._unit(p) for p in out])
        return out

    def _suggest(self, k: int, pending: list[np.ndarray]) -> list[dict[str, Any]]:
        import warnings

        from botorch.acquisition.logei import qLogNoisyExpectedImprovement
        from botorch.fit import fit_gpytorch_mll
        from botorch.models import SingleTaskGP
        from botorch.models.transforms import Normalize, Standardize
        from botorch.optim.optimize import optimize_acqf
        from gpytorch.mlls import ExactMarginalLogLikelihood

        torch = self.torch
        torch.manual_seed(self.seed * 100_003 + len(self.y))
        dim = len(self.names)
        X = torch.tensor(np.array(self.X), dtype=torch.float64)
        Y = -torch.tensor(self.y, dtype=torch.float64).unsqueeze(-1)  # BoTorch maximizes
        model = SingleTaskGP(X, Y, input_transform=Normalize(dim), outcome_transform=Standardize(1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
            X_pending = torch.tensor(np.array(pending), dtype=torch.float64) if pending else None
            acqf = qLogNoisyExpectedImprovement(model, X, X_pending=X_pending)
            bounds = torch.stack([torch.zeros(dim, dtype=torch.float64), torch.ones(dim, dtype=torch.float64)])
            cand, _ = optimize_acqf(acqf, bounds, q=k, num_restarts=10, raw_samples=512)
        return [self._params(c) for c in cand.detach().numpy()]

    def tell(self, results: list[tuple[dict[str, Any], float]]) -> None:
        for p, value in results:
            self.X.append(self._unit(p))
            self.y.append(float(value))


def split_names(text: str) -> list[str]:
    """``"bo,bo[acquisition=ucb,polish=4],skopt"`` -> the three names (commas inside
    brackets are the options')."""
    return re.findall(r"[^,\[]+(?:\[[^\]]*\])?", text)


def options_of(name: str) -> tuple[str, dict[str, Any]]:
    """``bo[acquisition=ucb,candidates=1024]`` -> ("bo", {"acquisition": "ucb", "candidates": 1024}):
    one of ours with algorithm options, for ablations."""
    if "[" not in name:
        return name, {}
    base, rest = name.rstrip("]").split("[", 1)
    opts: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, value = item.split("=", 1)
        opts[key] = int(value) if value.lstrip("-").isdigit() else float(value) if "." in value else value
    return base, opts


def make(name: str, space: dict[str, Any], seed: int, budget: int = 0) -> Any:
    base, opts = options_of(name)
    if base in OURS:
        return Ours(base, space, seed, opts, budget)
    if name == "skopt":
        return Skopt(space, seed)
    if name == "botorch":
        return BoTorch(space, seed)
    return Optuna(name.split("-")[1], space, seed)


def run(name: str, fn: Any, seed: int, workers: int = 1, evaluations: int | None = None) -> float:
    """Final simple regret of one run of ``fn.budget`` evaluations with ``workers``
    evaluations in flight (``trace``). ``evaluations``: the regret after that many
    results instead, the optimizer still told the whole budget (what a run stopped early
    has found, not a shorter run)."""
    stop = fn.budget if evaluations is None else min(evaluations, fn.budget)
    return trace(name, fn, seed, workers, stop)[-1]


def trace(
    name: str, fn: Any, seed: int, workers: int = 1, stop: int | None = None, until: float | None = None
) -> list[float]:
    """The simple regret after each of the first ``stop`` results (default: the budget)
    of one run with ``workers`` evaluations in flight: after the first ``workers``
    suggestions, the oldest pending one finishes and one new suggestion is made while
    ``workers - 1`` are pending (an agent that finishes asks again at once). Each is
    asked in its own batch mode: ours and BoTorch are told what is pending (BoTorch's
    ``X_pending``), Optuna sees its RUNNING trials (the GP's qLogEI over them, TPE's
    constant liar), skopt lies about them (its ``cl_min``). ``until``: the run ends at
    the first result whose regret is at most this."""
    opt = make(name, fn.space(), seed, fn.budget)
    stop = fn.budget if stop is None else stop
    best, out = np.inf, []

    def record(value: float) -> bool:
        """Keeps the regret after this result; True when the run is over."""
        nonlocal best
        best = min(best, value)
        out.append(float(best - fn.minimum))
        return len(out) >= stop or (until is not None and out[-1] <= until)

    if workers == 1:
        for _ in range(stop):
            [p] = opt.ask(1)
            value = fn(p)
            opt.tell([(p, value)])
            if record(value):
                break
        return out
    if isinstance(opt, Optuna):
        _run_optuna_async(opt, fn, workers, record)
        return out
    pending = opt.ask(min(workers, fn.budget))
    asked = workers
    while pending:
        p = pending.pop(0)
        value = fn(p)
        opt.tell([(p, value)])
        if record(value):
            break
        if asked < fn.budget:
            pending += opt.ask(1, list(pending)) if getattr(opt, "takes_pending", False) else opt.ask(1)
            asked += 1
    return out


def _run_optuna_async(opt: Optuna, fn: Any, workers: int, record: Callable[[float], bool]) -> None:
    trials = [opt.study.ask(opt.dists) for _ in range(min(workers, fn.budget))]
    asked = workers
    while trials:
        trial = trials.pop(0)
        value = fn(dict(trial.params))
        opt.study.tell(trial, value)
        if record(value):
            return
        if asked < fn.budget:
            trials.append(opt.study.ask(opt.dists))
            asked += 1
