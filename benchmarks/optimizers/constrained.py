"""Constrained optimization: the regret of the best *feasible* point on problems with
known feasible optima, for our ``bo`` (constrained EI: a GP per constraint, Gardner et
al. 2014) and ``random`` (screened by the same constraint models) next to Optuna 5's
``GPSampler`` with ``trial.set_constraint`` (its 5.0 API) and BoTorch's constrained qLogNoisyEI (a
``ModelListGP`` of the objective and each constraint, as BoTorch's "closed-loop
constrained BO" tutorial builds it), one evaluation at a time, in the same run.

    python benchmarks/optimizers/constrained.py [--seeds 20] [--procs 2] [--only bo,optuna-gp]

The problems (minimize f subject to every g <= 0):

- ``gardner``: Gardner et al. 2014's simulated problem: cos(2 x1) cos(x2) + sin(x1),
  cos(x1 + x2) <= 0.5 on [0, 6]^2 (f* = -2); 30 evaluations.
- ``new-branin``: Parr et al. 2012's constrained Branin: -(x1 - 10)^2 - (x2 - 15)^2 with
  Branin(x) <= 5 (f* = -268.7879); 30 evaluations.
- ``g24``: G24 of the CEC 2006 suite: -x1 - x2, two quartic constraints, 79 % of the box
  feasible (f* = -5.508013); 30 evaluations.
- ``g8``: G8: -sin^3(2 pi x1) sin(2 pi x2) / (x1^3 (x1 + x2)), two constraints, 0.9 % of
  the box feasible (f* = -0.0958250); 40 evaluations.
- ``g4``: G4 (Himmelblau's), 5-d, 6 constraints, 27 % feasible (f* = -30665.539); 40.

A run's regret is its best feasible value minus f*; a run that found no feasible point
has none (``inf``), and the table gives how many runs found one. Runs are paired by seed
with ours: in how many the peer ended lower, higher or the same. Each run uses one
thread (``OMP_NUM_THREADS=1``); ``--procs`` runs that many at once. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from functions import branin

NOW = datetime(2026, 1, 1, tzinfo=UTC)
METHODS = ("bo", "random", "optuna-gp", "botorch")


@dataclass(frozen=True)
class Problem:
    name: str
    bounds: list[tuple[float, float]]
    f: Callable[[np.ndarray], float]
    g: Callable[[np.ndarray], list[float]]
    optimum: float
    budget: int

    @property
    def dim(self) -> int:
        return len(self.bounds)


def _g4_f(x: np.ndarray) -> float:
    return float(5.3578547 * x[2] ** 2 + 0.8356891 * x[0] * x[4] + 37.293239 * x[0] - 40792.141)


def _g4_g(x: np.ndarray) -> list[float]:
    u = 85.334407 + 0.0056858 * x[1] * x[4] + 0.0006262 * x[0] * x[3] - 0.0022053 * x[2] * x[4]
    v = 80.51249 + 0.0071317 * x[1] * x[4] + 0.0029955 * x[0] * x[1] + 0.0021813 * x[2] ** 2
    w = 9.300961 + 0.0047026 * x[2] * x[4] + 0.0012547 * x[0] * x[2] + 0.0019085 * x[2] * x[3]
    return [u - 92, -u, v - 110, 90 - v, w - 25, 20 - w]


def _g8_f(x: np.ndarray) -> float:
    return float(-(math.sin(2 * math.pi * x[0]) ** 3) * math.sin(2 * math.pi * x[1]) / (x[0] ** 3 * (x[0] + x[1])))


PROBLEMS = {
    p.name: p
    for p in (
        Problem(
            "gardner",
            [(0.0, 6.0), (0.0, 6.0)],
            lambda x: float(math.cos(2 * x[0]) * math.cos(x[1]) + math.sin(x[0])),
            lambda x: [math.cos(x[0] + x[1]) - 0.5],
            -2.0,
            30,
        ),
        Problem(
            "new-branin",
            [(-5.0, 10.0), (0.0, 15.0)],
            lambda x: float(-((x[0] - 10) ** 2) - (x[1] - 15) ** 2),
            lambda x: [branin(x) - 5.0],
            -268.78791,
            30,
        ),
        Problem(
            "g24",
            [(0.0, 3.0), (0.0, 4.0)],
            lambda x: float(-x[0] - x[1]),
            lambda x: [
                -2 * x[0] ** 4 + 8 * x[0] ** 3 - 8 * x[0] ** 2 + x[1] - 2,
                -4 * x[0] ** 4 + 32 * x[0] ** 3 - 88 * x[0] ** 2 + 96 * x[0] + x[1] - 36,
            ],
            -5.508013,
            30,
        ),
        Problem(
            "g8",
            [(0.01, 10.0), (0.01, 10.0)],
            _g8_f,
            lambda x: [x[0] ** 2 - x[1] + 1, 1 - x[0] + (x[1] - 4) ** 2],
            -0.0958250,
            40,
        ),
        Problem(
            "g4",
            [(78.0, 102.0), (33.0, 45.0), (27.0, 45.0), (27.0, 45.0), (27.0, 45.0)],
            _g4_f,
            _g4_g,
            -30665.539,
            40,
        ),
    )
}


def _space(p: Problem) -> dict[str, Any]:
    return {f"x{i}": {"type": "real", "low": lo, "high": hi} for i, (lo, hi) in enumerate(p.bounds)}


def _x(p: Problem, params: dict[str, Any]) -> np.ndarray:
    return np.array([float(params[f"x{i}"]) for i in range(p.dim)])


def run_ours(name: str, p: Problem, seed: int) -> list[tuple[float, bool]]:
    """Our optimizer through the server's suggestion path (screening and the hard limits
    included: ``OptimizerCache._screened``), each result told with its constraint outcome."""
    from hpcopt.core import constraints as C
    from hpcopt.core.spec import parse_spec, spec_to_json_dict
    from hpcopt_server import domain as d
    from hpcopt_server.service.suggestions import OptimizerCache, make_optimizer

    bounds = [{"metric": f"g{k}", "max": 0.0} for k in range(len(p.g(np.array([lo for lo, _ in p.bounds]))))]
    spec = {
        "name": p.name,
        "objective": {"metric": "f", "direction": "minimize"},
        "space": _space(p),
        "algorithm": {"name": name, "seed": seed},
        "budget": {"max_trials": p.budget, "max_parallel": 1},
        "constraints": bounds,
    }
    opt = make_optimizer(spec_to_json_dict(parse_spec(spec)))
    out = []
    for i in range(p.budget):
        [params] = OptimizerCache._screened(opt, 1, [])
        x = _x(p, params)
        y, g = p.f(x), p.g(x)
        o = C.from_folds(bounds, [{f"g{k}": v for k, v in enumerate(g)}])
        t = d.Trial(
            id=i,
            campaign_id=1,
            number=i,
            state=d.TrialState.COMPLETED,
            attempt=1,
            params=params,
            created_at=NOW,
            value=y,
            finished_at=NOW,
            constraint_values=o.values,
            violation=o.violation,
            broken=o.broken,
        )
        opt.feed([t])
        out.append((y, o.feasible))
    opt.settle()
    return out


def run_optuna(p: Problem, seed: int) -> list[tuple[float, bool]]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=optuna.samplers.GPSampler(seed=seed))
    dists: dict[str, optuna.distributions.BaseDistribution] = {
        f"x{i}": optuna.distributions.FloatDistribution(lo, hi) for i, (lo, hi) in enumerate(p.bounds)
    }
    out = []
    for _ in range(p.budget):
        trial = study.ask(dists)
        x = _x(p, trial.params)
        y, g = p.f(x), p.g(x)
        for k, v in enumerate(g):  # Optuna 5's way (constraints_func is deprecated)
            trial.set_constraint(f"g{k}", v)
        study.tell(trial, y)
        out.append((y, all(v <= 0 for v in g)))
    return out


def run_botorch(p: Problem, seed: int) -> list[tuple[float, bool]]:
    """BoTorch as its constrained-BO tutorial sets it up: 10 scrambled Sobol points, then
    a ``ModelListGP`` of ``SingleTaskGP``s (inputs normalized, outputs standardized) for
    the objective and each constraint, fitted by ``fit_gpytorch_mll``, and
    ``qLogNoisyExpectedImprovement`` with the constraints (``optimize_acqf``, 10 restarts
    from 512 raw samples)."""
    import torch
    from botorch.acquisition.logei import qLogNoisyExpectedImprovement
    from botorch.acquisition.objective import GenericMCObjective
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.model_list_gp_regression import ModelListGP
    from botorch.models.transforms import Normalize, Standardize
    from botorch.optim.optimize import optimize_acqf
    from gpytorch.mlls import SumMarginalLogLikelihood
    from scipy.stats import qmc

    lo = np.array([b[0] for b in p.bounds])
    hi = np.array([b[1] for b in p.bounds])
    X: list[np.ndarray] = []
    Y: list[list[float]] = []
    out = []
    sobol = qmc.Sobol(p.dim, scramble=True, seed=seed)
    for i in range(p.budget):
        if i < 10:
            u = sobol.random(1)[0]
        else:
            torch.manual_seed(seed * 100_003 + i)
            tX = torch.tensor(np.array(X), dtype=torch.float64)
            tY = torch.tensor(np.array(Y), dtype=torch.float64)
            models = [
                SingleTaskGP(tX, tY[:, k : k + 1], input_transform=Normalize(p.dim), outcome_transform=Standardize(1))
                for k in range(tY.shape[1])
            ]
            model = ModelListGP(*models)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit_gpytorch_mll(SumMarginalLogLikelihood(model.likelihood, model))
                m = tY.shape[1] - 1

                def loss(Z: Any, X: Any = None) -> Any:
                    return -Z[..., 0]  # BoTorch maximizes

                def column(k: int) -> Callable[[Any], Any]:
                    return lambda Z: Z[..., k]

                acqf = qLogNoisyExpectedImprovement(
                    model, tX, objective=GenericMCObjective(loss), constraints=[column(k) for k in range(1, m + 1)]
                )
                bounds = torch.stack([torch.zeros(p.dim, dtype=torch.float64), torch.ones(p.dim, dtype=torch.float64)])
                cand, _ = optimize_acqf(acqf, bounds, q=1, num_restarts=10, raw_samples=512)
            u = cand.detach().numpy()[0]
        x = lo + u * (hi - lo)
        y, g = p.f(x), p.g(x)
        X.append(u)
        Y.append([y, *g])
        out.append((y, all(v <= 0 for v in g)))
    return out


def one(args: tuple[str, str, int]) -> dict[str, Any]:
    method, problem, seed = args
    p = PROBLEMS[problem]
    t0 = time.perf_counter()
    if method in ("bo", "random"):
        history = run_ours(method, p, seed)
    elif method == "optuna-gp":
        history = run_optuna(p, seed)
    else:
        history = run_botorch(p, seed)
    feasible = [y for y, ok in history if ok]
    regret = min(feasible) - p.optimum if feasible else math.inf
    first = next((i + 1 for i, (_, ok) in enumerate(history) if ok), None)
    return {
        "method": method,
        "problem": problem,
        "seed": seed,
        "regret": regret,
        "feasible_evals": len(feasible),
        "first_feasible": first,
        "seconds": time.perf_counter() - t0,
    }


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else math.nan


def table(rows: list[dict[str, Any]], methods: list[str], problems: list[str]) -> str:
    lines = [
        "| problem | method | median regret (IQR) | runs with a feasible point | wins / losses / ties vs bo | s/run |",
        "|---|---|---|---|---|---|",
    ]
    for prob in problems:
        ours = {r["seed"]: r["regret"] for r in rows if r["problem"] == prob and r["method"] == "bo"}
        for method in methods:
            rs = [r for r in rows if r["problem"] == prob and r["method"] == method]
            if not rs:
                continue
            reg = [r["regret"] for r in rs]
            q1, q2, q3 = (float(np.quantile(reg, q)) for q in (0.25, 0.5, 0.75))
            found = sum(math.isfinite(v) for v in reg)
            pair = ""
            if method != "bo" and ours:
                lower = sum(r["regret"] < ours[r["seed"]] for r in rs if r["seed"] in ours)
                higher = sum(r["regret"] > ours[r["seed"]] for r in rs if r["seed"] in ours)
                pair = f"{lower} / {higher} / {len(rs) - lower - higher}"
            lines.append(
                f"| {prob} | {method} | {q2:.3g} ({q1:.3g}-{q3:.3g}) | {found}/{len(rs)} | {pair} | "
                f"{_median([r['seconds'] for r in rs]):.1f} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--only", default=",".join(METHODS), help=f"methods, of {', '.join(METHODS)}")
    ap.add_argument("--problems", default=",".join(PROBLEMS), help=f"of {', '.join(PROBLEMS)}")
    ap.add_argument("--out", type=Path, default=None, help="also write every run as JSON here")
    args = ap.parse_args()
    methods = [m for m in args.only.split(",") if m]
    problems = [p for p in args.problems.split(",") if p]
    for m in methods:
        if m not in METHODS:
            ap.error(f"--only: {m!r} is not one of {', '.join(METHODS)}")
    for p in problems:
        if p not in PROBLEMS:
            ap.error(f"--problems: {p!r} is not one of {', '.join(PROBLEMS)}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # Interleaved: every method's seed s before any method's seed s + 1.
    jobs = [(m, p, s) for s in range(args.seeds) for p in problems for m in methods]
    rows = []
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(args.procs) as pool:
        for i, row in enumerate(pool.imap_unordered(one, jobs), 1):
            rows.append(row)
            print(
                f"[{i}/{len(jobs)} {time.perf_counter() - t0:.0f}s] {row['problem']} {row['method']} seed "
                f"{row['seed']}: regret {row['regret']:.4g}",
                file=sys.stderr,
                flush=True,
            )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    print(table(rows, methods, problems))


if __name__ == "__main__":
    main()
