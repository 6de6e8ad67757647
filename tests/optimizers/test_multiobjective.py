"""Pareto numerics and the multi-objective optimizers: bo (ParEGO) and ea (NSGA-II
selection) must find more of a known front than random search, reproducibly."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import pytest

from hpcopt_server import domain as d
from hpcopt_server.optimizers import REGISTRY, Problem, SearchSpace
from hpcopt_server.optimizers.pareto import chebyshev, crowding, hypervolume, nondominated, nsga_order

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DIM = 4
SPACE = SearchSpace({f"x{i}": {"type": "real", "low": 0.0, "high": 1.0} for i in range(DIM)})


def _brute(L: np.ndarray) -> np.ndarray:
    return np.array([not any(np.all(o <= p) and np.any(o < p) for o in L) for p in L])


@pytest.mark.parametrize("m", [2, 3, 4])
def test_the_front_is_exactly_the_non_dominated_points(m: int) -> None:
    rng = np.random.default_rng(m)
    for decimals in (1, 3):  # rounded: ties, and exact duplicates (of which the first counts)
        R = np.round(rng.random((700, m)), decimals)
        first = np.zeros(len(R), bool)
        first[np.unique(R, axis=0, return_index=True)[1]] = True
        assert (nondominated(R) == (_brute(R) & first)).all()
    T = rng.random((300, m))
    T[:, 1] = 1 - T[:, 0]  # every point on the front
    assert nondominated(T).all()
    L = np.round(rng.random((300, m)), 2)
    L = L[np.unique(L, axis=0, return_index=True)[1]]
    assert (nondominated(L) == _brute(L)).all()
    order = nsga_order(L)
    assert sorted(order) == list(range(len(L)))
    first = int(nondominated(L).sum())
    assert set(order[:first]) == set(np.flatnonzero(nondominated(L)))  # the first front comes first
    rest = np.delete(np.arange(len(L)), order[:first])
    assert set(order[first : first + int(nondominated(L[rest]).sum())]) == set(rest[nondominated(L[rest])])


def test_crowding_puts_the_ends_first_and_hypervolume_is_exact() -> None:
    front = np.array([[0.0, 1.0], [0.1, 0.9], [0.5, 0.5], [1.0, 0.0]])
    dist = crowding(front)
    assert math.isinf(dist[0]) and math.isinf(dist[3]) and dist[2] > dist[1]
    assert hypervolume(np.array([[0.2, 0.8], [0.8, 0.2]]), [1.0, 1.0]) == pytest.approx(0.28)
    assert hypervolume(np.array([[0.5, 0.5, 0.5], [2.0, 0.0, 0.0]]), [1.0, 1.0, 1.0]) == pytest.approx(0.125)
    cube = np.random.default_rng(0).random((40, 3))
    samples = np.random.default_rng(1).random((100_000, 3))
    covered = np.zeros(len(samples), bool)
    for p in cube:
        covered |= np.all(samples >= p, axis=1)
    assert hypervolume(cube, [1.0, 1.0, 1.0]) == pytest.approx(covered.mean(), abs=0.01)


def test_chebyshev_scalarizes_on_the_observed_range_and_keeps_failures_out() -> None:
    L = np.array([[0.0, 10.0], [1.0, 0.0], [np.nan, 5.0]])
    s = chebyshev(L, np.array([0.5, 0.5]))
    assert s[:2] == pytest.approx([0.5 + 0.05 * 0.5, 0.5 + 0.05 * 0.5]) and math.isnan(s[2])


def zdt1(x: np.ndarray) -> list[float]:
    g = 1 + 9 * x[1:].mean()
    return [float(x[0]), float(g * (1 - math.sqrt(x[0] / g)))]


def _run(name: str, seed: int, budget: int = 50, pending: int = 1) -> tuple[float, list[d.Params]]:
    """Hypervolume (ref (1.1, 11)) of what the optimizer found, and its suggestions."""
    if name == "random":
        rng = np.random.default_rng(seed)
        found = [zdt1(rng.random(DIM)) for _ in range(budget)]
        return hypervolume(np.array(found), [1.1, 11.0]), []
    options = {"background_refit": False} if name == "bo" else {}
    problem = Problem(SPACE, "minimize", seed, options, budget=budget, directions=("minimize", "minimize"))
    opt = REGISTRY[name](problem)
    found, asked, in_flight = [], [], []
    while len(found) < budget:
        while len(in_flight) < pending and len(asked) < budget:
            [p] = opt.suggest(1, list(in_flight))
            in_flight.append(p)
            asked.append(p)
        p = in_flight.pop(0)
        values = zdt1(np.array([p[f"x{i}"] for i in range(DIM)]))
        opt.observe(
            [
                d.Trial(
                    id=len(found),
                    campaign_id=1,
                    number=len(found),
                    state=d.TrialState.COMPLETED,
                    attempt=1,
                    params=p,
                    created_at=NOW,
                    value=values[0],
                    values=tuple(values),
                )
            ]
        )
        found.append(values)
    return hypervolume(np.array(found), [1.1, 11.0]), asked


@pytest.mark.parametrize("name", ["bo", "ea"])
@pytest.mark.slow
def test_bo_and_ea_find_more_of_the_front_than_random_search(name: str) -> None:
    seeds = range(8)  # ea is noisy at 50 evaluations: 3 seeds were not enough to tell
    ours = np.median([_run(name, s)[0] for s in seeds])
    rand = np.median([_run("random", s)[0] for s in seeds])
    assert ours > rand + 0.3, (ours, rand)  # the whole front: about 11.4


def test_parego_with_pending_trials_is_reproducible_and_spreads_its_batch() -> None:
    hv_a, asked_a = _run("bo", 5, budget=24, pending=4)
    hv_b, asked_b = _run("bo", 5, budget=24, pending=4)
    assert asked_a == asked_b and hv_a == hv_b
    assert len({tuple(p.values()) for p in asked_a}) == len(asked_a)  # no point suggested twice
