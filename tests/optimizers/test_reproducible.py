"""bo's suggestions are a function of the history: the same seed and history give the
same suggestions whatever the timing of background refits, and a rebuilt optimizer
(a restarted server) suggests what the live one would."""

from __future__ import annotations

import time

import numpy as np
import pytest

from hpcopt_server import domain as d
from hpcopt_server.optimizers import BayesianOptimization, Problem, SearchSpace
from hpcopt_server.optimizers.encoding import Encoder
from tests.optimizers.test_optimizers import MIXED, _trial


def _f(p: d.Params) -> float:
    x = np.array([np.log10(float(p["lr"])) + 2.5, float(p["x"]), float(p["n"]) / 4, np.log2(float(p["width"])) - 7])
    return float((x**2).sum() + (0.5 if p["act"] == "relu" else 0.0) + np.sin(3 * x).sum())


def _campaign(delays: list[float], steps: int, refit_growth: float = 0.1) -> list[d.Params]:
    """Suggest-observe ``steps`` times with bo's background refits; ``delays[i]`` seconds
    pass after step i (refits finish earlier or later relative to the requests)."""
    opt = BayesianOptimization(
        Problem(SearchSpace(MIXED), "minimize", 7, {"n_initial": 6, "refit_growth": refit_growth})
    )
    out = []
    for i in range(steps):
        [p] = opt.suggest(1, [])
        out.append(p)
        opt.observe(
            [_trial(i, p, _f(p) if i % 9 != 4 else None, d.TrialState.COMPLETED if i % 9 != 4 else d.TrialState.FAILED)]
        )
        time.sleep(delays[i])
    return out


@pytest.mark.slow
def test_the_same_seed_and_history_give_the_same_suggestions_whatever_the_refit_timing() -> None:
    steps = 45
    quick = _campaign([0.0] * steps, steps)
    rng = np.random.default_rng(0)
    slow = _campaign(list(rng.uniform(0.0, 0.05, steps)), steps)  # refits finish long before they are used
    assert quick == slow


@pytest.mark.slow
def test_a_rebuilt_optimizer_suggests_what_the_live_one_does() -> None:
    live = BayesianOptimization(Problem(SearchSpace(MIXED), "minimize", 3, {"n_initial": 6}))
    history = []
    for i in range(40):
        [p] = live.suggest(1, [])
        history.append(_trial(i, p, _f(p)))
        live.observe(history[-1:])
    pending = live.suggest(2, [])
    rebuilt = BayesianOptimization(Problem(SearchSpace(MIXED), "minimize", 3, {"n_initial": 6}))
    rebuilt.observe(history)  # one batch, as after a restart
    assert rebuilt._fit_at == live._fit_at
    again = rebuilt.suggest(2, [])
    enc = Encoder(SearchSpace(MIXED))
    # Equal up to the rounding of one block extension against many small ones.
    assert np.allclose([enc.encode(p) for p in again], [enc.encode(p) for p in pending], atol=1e-6)
    assert [p["act"] for p in again] == [p["act"] for p in pending]


def test_past_max_points_the_gp_factors_a_subset_that_keeps_the_best_and_stays_reproducible() -> None:
    space = {f"x{i}": {"type": "real", "low": -2.0, "high": 2.0} for i in range(3)}
    rng = np.random.default_rng(4)
    history = []
    for i in range(700):
        p = {k: float(v) for k, v in zip(space, rng.uniform(-2, 2, 3), strict=True)}
        history.append(_trial(i, p, sum((float(v) - 0.5) ** 2 for v in p.values())))
    history.append(_trial(700, {"x0": 0.5, "x1": 0.5, "x2": 0.52}, 0.0004))  # the incumbent

    def build() -> BayesianOptimization:
        opt = BayesianOptimization(Problem(SearchSpace(space), "minimize", 0, {"max_points": 200}))
        opt.observe(history)
        return opt

    opt = build()
    assert opt._fit_at > 200 and opt.model.n_real <= 200  # 100 chosen + those since the refit
    X = opt.model.X[: opt.model.n_real]
    assert np.abs(X - Encoder(SearchSpace(space)).encode(history[-1].params)).sum(1).min() < 1e-12
    [p] = opt.suggest(1, [])
    assert sum((float(v) - 0.5) ** 2 for v in p.values()) < 0.05  # it still searches where the optimum is
    assert build().suggest(1, []) == [p]


def test_with_pending_trials_the_same_history_gives_the_same_distinct_suggestions() -> None:
    """Two optimizers told the same history and the same pending trials suggest the
    same points, none of them a pending one."""
    runs = []
    for _ in range(2):
        opt = BayesianOptimization(Problem(SearchSpace(MIXED), "minimize", 3, {"n_initial": 6}))
        for i in range(14):
            [p] = opt.suggest(1, [])
            opt.observe([_trial(i, p, _f(p), d.TrialState.COMPLETED)])
        opt.wait_for_refit()
        pending = opt.suggest(4, [])
        runs.append(pending + opt.suggest(2, pending))
    assert runs[0] == runs[1]
    encoded = np.array([Encoder(SearchSpace(MIXED)).encode(p) for p in runs[0]])
    gaps = np.abs(encoded[:, None, :] - encoded[None, :, :]).sum(-1) + np.eye(len(encoded))
    assert gaps.min() > 1e-6, "a pending point was suggested again"
