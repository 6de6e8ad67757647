"""Conditional spaces (``when``): inactive parameters never reach a trial, for every
algorithm, in the optimizer and through the service; the grid expands per branch; BO
scores a candidate exactly as it stores it (imputed inactive coordinates)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from hpcopt_server import domain as d
from hpcopt_server.optimizers import REGISTRY, Problem, SearchSpace
from hpcopt_server.optimizers.encoding import Encoder
from hpcopt_server.optimizers.sequences import GridSearch
from hpcopt_server.service import Service
from hpcopt_server.service.agents import Lease
from tests.helpers.specs import make_spec

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SPACE: dict[str, Any] = {
    "lr": {"type": "real", "low": 1e-4, "high": 1.0, "scale": "log"},
    "optimizer": {"type": "categorical", "choices": ["sgd", "adam", "lbfgs"]},
    "momentum": {"type": "real", "low": 0.0, "high": 0.99, "when": {"optimizer": ["sgd"]}},
    "nesterov": {"type": "categorical", "choices": [True, False], "when": {"optimizer": ["sgd"]}},
    "beta2": {"type": "real", "low": 0.9, "high": 0.9999, "when": {"optimizer": ["adam"]}},
    "history": {"type": "int", "low": 2, "high": 20, "when": {"optimizer": ["lbfgs", "sgd"]}},
}
OPTIONS: dict[str, dict[str, Any]] = {
    "random": {},
    "sobol": {},
    "grid": {"points": 3},
    "bo": {"n_initial": 5, "background_refit": False},
    "ea": {"population": 6},
    # skopt refits its GP at every ask: a cheap acquisition keeps the test at a few seconds.
    "skopt": {"n_initial_points": 6, "acq_optimizer": "sampling", "acq_optimizer_kwargs": {"n_points": 200}},
}
ACTIVE = {"sgd": {"momentum", "nesterov", "history"}, "adam": {"beta2"}, "lbfgs": {"history"}}


def loss(p: d.Params) -> float:
    """A conditional objective: each optimizer branch has its own best setting."""
    base = (math.log10(float(p["lr"])) + 2) ** 2
    if p["optimizer"] == "sgd":
        return base + (float(p["momentum"]) - 0.9) ** 2 + 0.1 * (p["nesterov"] is False) + 0.01 * int(p["history"])
    if p["optimizer"] == "adam":
        return base + 1e3 * (float(p["beta2"]) - 0.999) ** 2 + 0.05
    return base + 0.02 * abs(int(p["history"]) - 10) + 0.2


def check_active(space: SearchSpace, p: d.Params) -> None:
    assert set(p) == {"lr", "optimizer"} | ACTIVE[str(p["optimizer"])], p
    assert space.problems(p) == [], (p, space.problems(p))


@pytest.mark.parametrize("name", list(OPTIONS))
def test_inactive_parameters_never_leave_the_optimizer(name: str) -> None:
    space = SearchSpace(SPACE)
    opt = REGISTRY[name](Problem(space, "minimize", 3, OPTIONS[name]))
    seen, branches, number = set(), set(), 0
    for _ in range(5 if name == "skopt" else 8):
        batch = opt.suggest(3, pending=[])
        trials = []
        for p in batch:
            check_active(space, p)
            seen.add(tuple(sorted(p.items())))
            branches.add(p["optimizer"])
            trials.append(
                d.Trial(
                    id=number,
                    campaign_id=1,
                    number=number,
                    state=d.TrialState.COMPLETED,
                    attempt=1,
                    params=p,
                    created_at=NOW,
                    value=loss(p),
                )
            )
            number += 1
        opt.observe(trials)
    assert branches == {"sgd", "adam", "lbfgs"}
    assert len(seen) == number, "a suggestion was repeated"


def test_grid_expands_each_branch_once() -> None:
    grid = GridSearch(Problem(SearchSpace(SPACE), "minimize", 0, {"points": 3}))
    # lr: 3 points; sgd: momentum 3 x nesterov 2 x history 3; adam: beta2 3; lbfgs: history 3.
    assert grid.size == 3 * (3 * 2 * 3 + 3 + 3)
    points = [grid.point(k) for k in range(grid.size)]
    assert len({tuple(sorted(p.items())) for p in points}) == grid.size
    assert grid.point(grid.size) == points[0]
    for p in points:
        check_active(grid.space, p)


def test_bo_imputes_inactive_coordinates_so_stored_and_scored_points_agree() -> None:
    space = SearchSpace(SPACE)
    enc = Encoder(space)
    adam = {"lr": 0.01, "optimizer": "adam", "beta2": 0.99}
    # A point that carries stray inactive coordinates projects onto the stored encoding.
    noisy = enc.encode({**adam, "momentum": 0.3, "nesterov": True, "history": 7})
    assert not np.array_equal(noisy, enc.encode(adam))
    assert np.array_equal(enc.project(noisy[None, :])[0], enc.encode(adam))
    assert enc.decode(enc.project(noisy[None, :])[0]) == {**adam, "lr": pytest.approx(0.01)}
    rng = np.random.default_rng(0)
    for x in enc.random(200, rng):
        np.testing.assert_allclose(enc.encode(enc.decode(x)), x, atol=1e-12)


@pytest.mark.slow
def test_bo_finds_the_best_branch_and_its_setting() -> None:
    # Over five seeds BO's median regret on the conditional objective beats random search's.
    def run(name: str, seed: int) -> float:
        opt = REGISTRY[name](Problem(SearchSpace(SPACE), "minimize", seed, OPTIONS.get(name, {})))
        best = math.inf
        for i in range(30):
            [p] = opt.suggest(1, pending=[])
            best = min(best, loss(p))
            opt.observe(
                [
                    d.Trial(
                        id=i,
                        campaign_id=1,
                        number=i,
                        state=d.TrialState.COMPLETED,
                        attempt=1,
                        params=p,
                        created_at=NOW,
                        value=loss(p),
                    )
                ]
            )
        return best - 0.02  # the optimum: sgd, lr 0.01, momentum 0.9, nesterov, history 2

    bo = [run("bo", s) for s in range(5)]
    rnd = [run("random", s) for s in range(5)]
    assert np.median(bo) < 0.1 < np.median(rnd), (bo, rnd)


@pytest.mark.parametrize(
    ("db_url", "algorithm"),
    [("sqlite", "random"), ("sqlite", "grid"), ("sqlite", "bo"), ("sqlite", "ea"), ("postgresql", "random")],
    indirect=["db_url"],
)
def test_a_scheme_search_reaches_agents_with_only_its_schemes_knobs(service: Service, algorithm: str) -> None:
    options = OPTIONS[algorithm]
    spec = make_spec(
        space={"lr": {"type": "real", "low": 1e-3, "high": 0.1, "scale": "log"}},
        algorithm={"name": algorithm, "seed": 1, "options": options},
        budget={"max_trials": 12, "max_parallel": 4},
        folds=1,
        training={
            "task": "tests:task",
            "epochs": 2,
            "ranks_per_fold": 4,
            "scheme": {
                "search": {
                    "allreduce": {},
                    "easgd": {
                        "beta": {"type": "real", "low": 0.3, "high": 0.99},
                        "tau": {"type": "int", "low": 1, "high": 16, "scale": "log"},
                    },
                    "daso": {"max_global_skips": {"type": "categorical", "choices": [4, 8]}},
                }
            },
        },
    )
    campaign = service.campaigns.create(spec)
    stored = service.campaigns.get(campaign.id).campaign.spec
    assert stored["training"]["scheme"] == "search"
    assert stored["space"]["easgd.tau"]["when"] == {"scheme": ["easgd"]}
    agent = service.agents.register(host="h", ranks=4, gpus=0).agent_id
    knobs = {"allreduce": set(), "easgd": {"easgd.beta", "easgd.tau"}, "daso": {"daso.max_global_skips"}}
    schemes = set()
    for _ in range(12):
        got = service.agents.acquire(agent, campaign.id)
        assert got.trial is not None
        p = got.trial.params
        schemes.add(p["scheme"])
        assert set(p) == {"lr", "scheme"} | knobs[str(p["scheme"])], p
        assert list(p)[:2] == ["lr", "scheme"]  # the spec's order
        lease = Lease(agent, got.trial.id, got.lease_id)
        service.agents.report_fold(lease, 0, float(p["lr"]) + {"easgd": 0.1}.get(str(p["scheme"]), 0.0))
        service.agents.complete(lease)
    assert schemes == {"allreduce", "easgd", "daso"}
