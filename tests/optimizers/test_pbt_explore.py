"""PBT's explore steps on the optimizer alone: perturb keeps the bounds and changes only
mutable parameters; pb2 picks, from the improvements observed, settings near those that
improved, and is reproducible."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np

from hpcopt_server import domain as d
from hpcopt_server.optimizers import Problem, SearchSpace
from hpcopt_server.optimizers.pbt import PopulationBasedTraining

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SPACE = {
    "lr": {"type": "real", "low": 1e-4, "high": 1.0, "scale": "log"},
    "dropout": {"type": "real", "low": 0.0, "high": 0.5},
    "width": {"type": "int", "low": 8, "high": 64},
}


def _pbt(**options: Any) -> PopulationBasedTraining:
    opts = {"population": 8, "interval": 2, "mutable": ["lr", "dropout"], **options}
    return PopulationBasedTraining(
        Problem(SearchSpace(SPACE), "minimize", 7, opts, folds=1, budget=8 * 5, epochs=10, max_parallel=8)
    )


def _done(number: int, params: d.Params, value: float, lineage: d.Lineage) -> d.Trial:
    fold = d.Fold(0, True, value, {}, f"file:///ck/{number}/fold0.pt", 1)
    return d.Trial(
        number + 1, 1, number, d.TrialState.COMPLETED, 1, params, NOW, value=value, folds=(fold,), lineage=lineage
    )


def _history(opt: PopulationBasedTraining, improvement: Any) -> list[d.Trial]:
    """Two intervals per member: the first from scratch, the second from the first,
    improving by ``improvement(lr)``; the worst member's next step is asked for."""
    rng = np.random.default_rng(0)
    out, n = [], 0
    for m in range(8):
        lr = float(10 ** rng.uniform(-4, 0))
        p = {"lr": lr, "dropout": float(rng.uniform(0, 0.5)), "width": 16}
        first = _done(n, p, 1.0, d.Lineage(m, 0, 2))
        second = _done(n + 1, p, 1.0 - improvement(lr), d.Lineage(m, 2, 4, n, n, {}, n + 1))
        out += [first, second]
        n += 2
    opt.observe(out)
    return out


def test_perturb_changes_only_mutable_parameters_within_their_bounds() -> None:
    opt = _pbt(resample_probability=0.0)
    rng = np.random.default_rng(1)
    for _ in range(200):
        p = {"lr": float(10 ** rng.uniform(-4, 0)), "dropout": float(rng.uniform(0, 0.5)), "width": 20}
        q = opt._explore(dict(p), rng)
        assert q["width"] == 20
        assert 1e-4 <= q["lr"] <= 1.0 and 0.0 <= q["dropout"] <= 0.5
        assert q["lr"] in (p["lr"] * 0.8, p["lr"] * 1.2, 1e-4, 1.0) or np.isclose(q["lr"], p["lr"] * 0.8)


def test_pb2_picks_a_learning_rate_where_intervals_improved_and_is_reproducible() -> None:
    # Intervals improved most with lr near 1e-2 (a bump in log lr).
    bump = lambda lr: float(np.exp(-((np.log10(lr) + 2) ** 2) / 0.5))  # noqa: E731
    chosen = []
    for _ in range(2):
        opt = _pbt(explore="pb2")
        _history(opt, bump)
        plan = opt.plan(8, [])
        exploited = [s for s in plan if s.lineage and s.lineage.exploited]
        assert exploited, plan
        chosen.append([s.params for s in exploited])
    assert chosen[0] == chosen[1]  # one seed, one history: one choice
    for params in chosen[0]:
        assert 10**-3 <= params["lr"] <= 10**-1, params  # near the bump, not anywhere in [1e-4, 1]
        assert params["width"] == 16  # copied with the weights


def test_pb2_falls_back_to_perturb_with_too_little_data() -> None:
    opt = _pbt(explore="pb2")
    assert opt._pb2({"lr": 0.01, "dropout": 0.1, "width": 16}, 2, 0) is None
