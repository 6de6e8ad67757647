"""The multi-fidelity searcher's ladder and promotion rules (``optimizers/fidelity.py``,
``optimizers/multifidelity.py``): no configuration climbs past K folds or the epoch
budget or skips a rung, what is reported as best has all K folds and all epochs, more
folds go only where they can change the answer, the stop rule holds back confirmations
the ranking has settled, the same seed gives the same campaign, and bad options are
refused by name."""

from __future__ import annotations

import itertools
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcopt_server.optimizers import SearchSpace
from hpcopt_server.optimizers.fidelity import MIN_STEP, Config, Rules, ladder
from hpcopt_server.optimizers.multifidelity import MultiFidelitySearch
from tests.helpers.env import ROOT, scaled

SPACE = SearchSpace(
    {
        "lr": {"type": "real", "low": 1e-4, "high": 1e-1, "scale": "log"},
        "width": {"type": "int", "low": 8, "high": 64},
        "act": {"type": "categorical", "choices": ["relu", "tanh"]},
    }
)


@given(
    epochs=st.integers(1, 200),
    folds=st.integers(1, 10),
    min_share=st.floats(0.0, 1.0),
    eta=st.floats(2.0, 5.0),
    fold_promotion=st.booleans(),
)
def test_the_ladder_climbs_to_all_folds_and_epochs_and_never_past_them(
    epochs: int, folds: int, min_share: float, eta: float, fold_promotion: bool
) -> None:
    min_epochs = max(1, round(min_share * epochs))
    rungs = ladder(epochs, folds, min_epochs, eta, fold_promotion)
    assert (rungs[-1].folds, rungs[-1].epochs) == (folds, epochs)
    assert rungs[0].folds == 1
    assert [r.index for r in rungs] == list(range(len(rungs)))
    for low, high in itertools.pairwise(rungs):
        assert low.folds <= high.folds <= folds and low.epochs <= high.epochs <= epochs
        assert high.resource >= MIN_STEP * low.resource
        # Epochs first on one fold, then folds at all epochs: never both at once.
        assert low.folds == high.folds or low.epochs == high.epochs == epochs


def test_bad_fidelity_options_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"options\.min_epochs: must be at most training\.epochs \(10\); got 11"):
        ladder(10, 5, 11, 3.0)
    with pytest.raises(ValueError, match=r"training\.epochs"):
        ladder(0, 5, 1, 3.0)


def _campaign(seed: int, values: np.ndarray, workers: int, configs: int) -> tuple[MultiFidelitySearch, list]:
    """A campaign over synthetic losses: configuration c's fold k after e epochs is
    ``values[c % len] + noise`` shrinking with e; ``workers`` units in flight, finished in
    a seeded random order. Returns the searcher and every unit it handed out."""
    search = MultiFidelitySearch(SPACE, folds=5, epochs=9, seed=seed, n_initial=4)
    rng = np.random.default_rng(seed)
    running, handed = [], []
    for _ in range(2000):
        while len(running) < workers:
            work = search.next(new=len(search.configs) < configs)
            if work is None:
                break
            running.append(work)
            handed.append(work)
        if not running:
            break
        work = running.pop(int(rng.integers(len(running))))
        base = values[work.config % len(values)]
        folds = [base + 1.0 / work.rung.epochs + 0.05 * rng.standard_normal() for _ in range(work.rung.folds)]
        search.tell(work.config, work.rung.index, folds, seconds=0.1 * work.rung.resource)
    return search, handed


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 10_000), workers=st.integers(1, 6))
def test_every_unit_climbs_one_rung_and_the_reported_best_has_every_fold(seed: int, workers: int) -> None:
    values = np.random.default_rng(seed).random(40)
    search, handed = _campaign(seed, values, workers, configs=40)
    climbed: dict[int, int] = {}
    for work in handed:
        first = search.configs[work.config].start
        assert work.rung.index == climbed.get(work.config, first - 1) + 1, "each unit is its next rung"
        assert work.rung.folds <= 5 and work.rung.epochs <= 9
        climbed[work.config] = work.rung.index
    best = search.incumbent()
    assert best is not None
    assert best.done == len(search.rungs) - 1 and len(best.folds[best.done]) == 5
    top = [c for c in search.configs if c.done == len(search.rungs) - 1]
    assert best.mean(best.done) == min(c.mean(c.done) for c in top)
    # Far less than every configuration at all folds and epochs.
    assert sum(c.fold_epochs for c in search.configs) < 0.5 * 40 * 5 * 9


def test_the_same_seed_gives_the_same_campaign() -> None:
    values = np.random.default_rng(3).random(30)
    first = [(w.config, w.rung.index, w.params) for w in _campaign(7, values, 3, 30)[1]]
    again = [(w.config, w.rung.index, w.params) for w in _campaign(7, values, 3, 30)[1]]
    assert first == again


def _config(index: int, folds: dict[int, list[float]]) -> Config:
    return Config(index, np.zeros(1), {}, folds=folds, done=max(folds))


def test_more_folds_go_only_where_the_spread_can_change_the_answer() -> None:
    rungs = ladder(9, 5, 1, 3.0)  # (1,1) (1,3) (1,9) (3,9) (5,9)
    rules = Rules(rungs, 3.0, p_more_folds=0.05, stable_rank=0.9, patience=3)
    top, one_fold = len(rungs) - 1, 2
    incumbent = _config(0, {0: [1.0], 1: [0.6], 2: [0.50], 3: [0.50, 0.52, 0.48], 4: [0.50, 0.52, 0.48, 0.51, 0.49]})
    near = _config(1, {0: [1.0], 1: [0.6], 2: [0.51]})  # within its fold spread of the incumbent
    far = _config(2, {0: [1.0], 1: [0.6], 2: [0.80]})  # 15 fold standard deviations behind
    # Six more at all epochs on one fold, behind both: near and far are in the best third.
    others = [_config(3 + i, {0: [2.0], 1: [1.5], 2: [0.9]}) for i in range(6)]
    due = {p.config: p for p in rules.promotable([incumbent, near, far, *others])}
    assert 1 in due and due[1].rung.index == one_fold + 1 and "chance to beat the incumbent #0" in due[1].why
    assert 2 not in due, "no more folds for a configuration that is clearly worse"
    assert not set(due) & {c.index for c in others}, "nor for one outside the best third"
    assert incumbent.done == top


def test_once_the_ranking_is_stable_only_a_possible_leader_is_confirmed() -> None:
    rungs = ladder(3, 3, 1, 3.0)  # (1,1) (1,3) (3,3)
    rules = Rules(rungs, 3.0, p_more_folds=0.0, stable_rank=0.9, patience=3)
    # Four configurations at the top, ranked the same one rung below: the ranking is stable.
    top = [_config(i, {0: [1.0], 1: [0.5 + 0.1 * i], 2: [0.5 + 0.1 * i] * 3}) for i in range(4)]
    for _ in range(3):
        rules.arrived(top)
    assert rules.stable(top)
    behind = _config(10, {0: [1.0], 1: [0.55]})  # behind the incumbent's 0.5 below the top
    ahead = _config(11, {0: [1.0], 1: [0.45]})
    fillers = [_config(20 + i, {0: [3.0], 1: [2.0]}) for i in range(6)]  # both are in the best third
    due = {p.config for p in rules.promotable([*top, behind, ahead, *fillers])}
    assert 11 in due and 10 not in due
    # Without the rule (an unsettled ranking) both would climb: p_more_folds is 0.
    unsettled = Rules(rungs, 3.0, p_more_folds=0.0, stable_rank=0.9, patience=3)
    assert {10, 11} <= {p.config for p in unsettled.promotable([*top, behind, ahead, *fillers])}


def test_new_configurations_start_above_a_rung_that_the_next_one_does_not_confirm() -> None:
    rungs = ladder(9, 3, 1, 3.0)  # (1,1) (1,3) (1,9) (3,9)
    rules = Rules(rungs, 3.0, p_more_folds=0.05, stable_rank=0.9, patience=3)
    # One epoch ranks the six the other way round from three epochs; three agree with nine.
    reversed_ = [_config(i, {0: [1.0 + 0.1 * i], 1: [0.9 - 0.1 * i], 2: [0.5 - 0.05 * i]}) for i in range(6)]
    assert rules.first_rung(reversed_, min_rank=0.5) == 1
    agreeing = [_config(i, {0: [1.0 + 0.1 * i], 1: [0.4 + 0.1 * i], 2: [0.3 + 0.05 * i]}) for i in range(6)]
    assert rules.first_rung(agreeing, min_rank=0.5) == 0
    assert rules.first_rung(reversed_[:5], min_rank=0.5) == 0, "five pairs are too few to judge"
    # A configuration that starts at rung 1 trains to it in its first unit.
    search = MultiFidelitySearch(SPACE, folds=3, epochs=9, seed=0, n_initial=2)
    search.configs.extend(reversed_)
    for c in search.configs:
        c.x, c.running = np.zeros(search.encoder.dim), 3  # all busy: the next unit is a new one
    work = search.next()
    assert work is not None and work.rung.index == 1 and "starts at rung 1" in work.why


def test_a_failed_unit_climbs_no_further_and_is_never_the_best() -> None:
    search = MultiFidelitySearch(SPACE, folds=3, epochs=3, seed=0, n_initial=2)
    works = [search.next() for _ in range(3)]
    assert all(w is not None and w.rung.index == 0 for w in works)
    search.forget(works[0].config)  # type: ignore[union-attr]
    for w in works[1:]:
        assert w is not None
        search.tell(w.config, 0, [0.5], 1.0)
    assert all(p.config != works[0].config for p in search.promotions(drained=True))  # type: ignore[union-attr]
    assert math.isfinite(search.configs[1].mean(0))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_compute_to_target_benchmark_runs_and_prints_its_table() -> None:
    """The benchmark end to end on one seed of a recorded table, a synthetic one and a
    tabular one of one epoch, where the folds are the only fidelity (its numbers are not
    checked beyond being there)."""
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks/multifidelity/compute_to_target.py"),
            "digits",
            "mfh6-bad",
            "fcnet-naval",
            "--seeds",
            "1",
            "--full-configs",
            "8",
            "--limit",
            "1",
            "--methods",
            "mf,top-k after 1 epoch,random",
        ],
        capture_output=True,
        text=True,
        timeout=scaled(280),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for task in ("digits", "mfh6-bad"):
        assert f"## {task}: 300 configurations x 5 folds x" in out.stdout, out.stdout
    assert "## fcnet-naval: 500 configurations x 4 folds x 1 epochs" in out.stdout, out.stdout
    assert len(re.findall(r"^\| mf \| [\d,]+|^\| mf \| never", out.stdout, re.M)) == 3, out.stdout
