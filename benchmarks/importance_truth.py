"""Does importance name the right knob? Our two methods and Optuna's (PED-ANOVA, fANOVA)
on campaigns whose effects are known, one parameter conditional on another:

    python benchmarks/importance_truth.py [--seeds 20] [--trials 300]

The loss is ``tests.helpers.seed.truth_loss``: lr (log) 0.8 u^2, the optimizer's offset (sgd
0.3, adam 0, rmsprop 0.1), sgd's momentum with weight m, dropout nothing, noise sd
0.05. With m = 0.45 the variance of each main effect ranks lr > optimizer > momentum >
dropout (``truth_variance``); with m = 0.03 (the dashboard review's case) momentum
does next to nothing. Trials are drawn at random from the space, as a random search
would; each seed draws its own. Per method it prints how many seeds give the true
ranking (m = 0.45: all four in order; m = 0.03: lr and the optimizer first, momentum
under 5%) and the median share of each parameter. Optuna's evaluators judge the
parameters every trial has (its intersection search space), so they give momentum no
share at all. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hpcopt_server.service.importance import METHODS, compute
from tests.helpers.seed import TRUTH_SPACE, truth_loss, truth_variance

OPTUNA = ("optuna ped-anova", "optuna fanova")


def draw(rng: random.Random) -> dict[str, Any]:
    p: dict[str, Any] = {
        "lr": 10 ** rng.uniform(-4, 0),
        "optimizer": rng.choice(["sgd", "adam", "rmsprop"]),
        "dropout": rng.uniform(0, 0.5),
    }
    if p["optimizer"] == "sgd":
        p["momentum"] = rng.uniform(0, 0.99)
    return p


def optuna_shares(method: str, params: list[dict[str, Any]], values: list[float], seed: int) -> dict[str, float]:
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution
    from optuna.importance import FanovaImportanceEvaluator, PedAnovaImportanceEvaluator, get_param_importances

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = {
        "lr": FloatDistribution(1e-4, 1.0, log=True),
        "optimizer": CategoricalDistribution(["sgd", "adam", "rmsprop"]),
        "momentum": FloatDistribution(0.0, 0.99),
        "dropout": FloatDistribution(0.0, 0.5),
    }
    study = optuna.create_study()
    study.add_trials(
        [
            optuna.trial.create_trial(params=p, distributions={k: dists[k] for k in p}, value=v)
            for p, v in zip(params, values, strict=True)
        ]
    )
    evaluator = PedAnovaImportanceEvaluator() if method == "optuna ped-anova" else FanovaImportanceEvaluator(seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = get_param_importances(study, evaluator=evaluator, normalize=True)
    return {name: float(out.get(name, 0.0)) for name in TRUTH_SPACE}


def shares(method: str, params: list[dict[str, Any]], values: list[float], seed: int) -> dict[str, float]:
    if method in OPTUNA:
        return optuna_shares(method, params, values, seed)
    out, _ = compute(TRUTH_SPACE, params, values, method, seed)
    return {x.name: x.importance for x in out}


def right(m: float, s: dict[str, float]) -> bool:
    ranked = sorted(s, key=lambda name: (-s[name], name))
    if m >= 0.1:
        truth = truth_variance(m)
        return ranked == sorted(truth, key=lambda name: -truth[name])
    return ranked[:2] == ["lr", "optimizer"] and s["momentum"] < 0.05


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--methods", default=",".join([*METHODS, *OPTUNA]))
    args = ap.parse_args()
    if args.seeds < 1 or args.trials < 20:
        ap.error("--seeds must be at least 1 and --trials at least 20")
    methods = args.methods.split(",")
    unknown = [m for m in methods if m not in (*METHODS, *OPTUNA)]
    if unknown:
        ap.error(f"--methods: unknown {unknown}; allowed: {[*METHODS, *OPTUNA]}")
    print(f"{args.trials} random-search trials per campaign, seeds 0-{args.seeds - 1}")
    for m in (0.45, 0.03):
        truth = truth_variance(m)
        order = sorted(truth, key=lambda name: -truth[name])
        what = "the ranking " + " > ".join(order) if m >= 0.1 else "lr, optimizer first and momentum < 5%"
        print(f"\nmomentum weight {m}: main-effect variances " + ", ".join(f"{k} {truth[k]:.4f}" for k in order))
        print(f"{'method':<18} {'seeds right':>12}   median share: " + "  ".join(f"{k:>9}" for k in order))
        for method in methods:
            got = []
            for seed in range(args.seeds):
                rng = random.Random(seed)
                params = [draw(rng) for _ in range(args.trials)]
                values = [truth_loss(p, m, rng) for p in params]
                got.append(shares(method, params, values, seed))
                print(f"  {method}: seed {seed + 1}/{args.seeds}", end="\r", file=sys.stderr)
            ok = sum(right(m, s) for s in got)
            medians = "  ".join(f"{statistics.median(s[k] for s in got):>9.3f}" for k in order)
            print(f"{method:<18} {ok:>5} of {len(got):<4}   {'':>14}{medians}")
        print(f"(right: {what})")


if __name__ == "__main__":
    main()
