"""The allocation planner (``hpcopt.core.planner``) as pure functions: layouts, the model,
the ranking, the deadline rule and the drain simulation."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcopt.core.planner import (
    TIE,
    Allocation,
    Layout,
    Point,
    Scaling,
    Work,
    candidates,
    fit,
    may_start,
    nodes_spanned,
    plan,
    predict,
    simulate,
)
from hpcopt.errors import PlanError

MODEL = Scaling(compute=1e-3, comm=2e-4, link=5e-4)

worlds = st.integers(1, 48)
folds = st.integers(1, 8)
per_node = st.sampled_from([1, 2, 4, 8])


@settings(max_examples=300, deadline=None)
@given(world=worlds, k=folds, rpn=per_node, pinned=st.one_of(st.none(), st.integers(1, 8)), trials=st.integers(1, 60))
def test_every_plan_divides_the_world_and_gives_every_fold_group_a_fold(
    world: int, k: int, rpn: int, pinned: int | None, trials: int
) -> None:
    work = Work(trials=trials, folds=k, epochs=2, train_samples=500)
    try:
        p = plan(Allocation(world, rpn), work, MODEL, pinned_ranks=pinned)
    except PlanError as exc:
        assert pinned is not None and "training.ranks_per_fold" in str(exc)
        assert not candidates(world, k, pinned_ranks=pinned)
        return
    for pred in p.table:
        lay = pred.layout
        assert lay.world == world
        assert world % lay.groups == 0 and (world // lay.groups) % lay.ranks_per_fold == 0
        assert 1 <= lay.fold_groups <= k  # no fold group without a fold in a trial's first round
        if pinned is not None:
            assert lay.ranks_per_fold == pinned
    # The best is first: nothing finishes more trials by the deadline, or (beyond a tie) sooner.
    best = p.best
    assert all(best.by_deadline >= q.by_deadline for q in p.table)
    assert all(best.makespan <= q.makespan * (1 + TIE) + 1e-9 for q in p.table if q.by_deadline == best.by_deadline)


def test_a_pinned_width_that_does_not_divide_names_the_field_and_what_fits() -> None:
    with pytest.raises(PlanError) as err:
        plan(Allocation(8, 4), Work(trials=4, folds=4, epochs=1, train_samples=100), MODEL, pinned_ranks=3)
    assert "training.ranks_per_fold=3" in str(err.value) and "1, 2, 4, 8" in str(err.value)
    with pytest.raises(PlanError, match="--groups 3"):
        plan(Allocation(8, 4), Work(trials=4, folds=4, epochs=1, train_samples=100), MODEL, groups=3)


def test_a_deadline_in_the_past_is_refused_by_name() -> None:
    with pytest.raises(PlanError, match="in the past: check --deadline"):
        Work(trials=4, folds=4, epochs=1, train_samples=100, deadline=-30)
    with pytest.raises(PlanError, match="max_parallel"):
        Work(trials=4, folds=4, epochs=1, train_samples=100, max_parallel=0)


@settings(max_examples=300, deadline=None)
@given(
    remaining=st.one_of(st.none(), st.floats(-100, 1e5)),
    to_checkpoint=st.floats(0, 1e4),
    reserve=st.floats(0, 600),
)
def test_the_deadline_rule_never_starts_a_trial_predicted_to_miss_its_checkpoint(
    remaining: float | None, to_checkpoint: float, reserve: float
) -> None:
    ok = may_start(remaining, to_checkpoint, reserve)
    if remaining is None:
        assert ok
    elif ok:
        assert remaining - reserve >= to_checkpoint  # it reaches a checkpoint before the reserve starts
    else:
        assert remaining - reserve < to_checkpoint


@settings(max_examples=200, deadline=None)
@given(trials=st.integers(1, 40), deadline=st.floats(10, 5000), world=st.sampled_from([4, 8, 12, 16]))
def test_simulated_trials_counted_by_the_deadline_finish_before_it(trials: int, deadline: float, world: int) -> None:
    alloc = Allocation(world, 4)
    work = Work(trials=trials, folds=4, epochs=1, train_samples=2000, deadline=deadline)
    sim = simulate(alloc, work, MODEL)
    # A trial counts only if its wave ends by the deadline: at most the waves that fit.
    p = predict(sim.layouts[0], alloc, work, MODEL)
    assert sim.completed_by_deadline <= trials
    if p.trial_seconds > deadline and len(sim.layouts) == 1:
        assert sim.completed_by_deadline == 0


def test_the_fit_recovers_a_known_curve_and_says_what_it_assumed() -> None:
    truth = Scaling(compute=4e-3, comm=3e-4, link=1e-3)
    pts = [Point(r, n, truth.samples_per_second(r, n)) for r, n in [(1, 1), (2, 1), (4, 1), (8, 2), (16, 4)]]
    got = fit(pts)
    assert got.compute == pytest.approx(4e-3, rel=1e-6)
    assert got.comm == pytest.approx(3e-4, rel=1e-6)
    assert got.link == pytest.approx(1e-3, rel=1e-6)
    assert got.error() < 1e-9 and got.assumptions == ()
    one = fit([Point(1, 1, 100.0)])
    assert one.comm == 0 and one.link == 0 and len(one.assumptions) == 2
    assert one.samples_per_second(1) == pytest.approx(100.0)
    with pytest.raises(PlanError, match="no throughput measured"):
        fit([])


def test_coefficients_stay_non_negative_when_wider_is_faster_than_linear() -> None:
    # Superlinear speed-up (caches): the comm term would go negative; it is dropped.
    got = fit([Point(1, 1, 100.0), Point(4, 1, 450.0)])
    assert got.compute > 0 and got.comm >= 0 and got.link >= 0
    assert all(math.isfinite(got.samples_per_second(r)) for r in (1, 2, 4, 8))


def test_ties_go_to_more_trials_in_parallel() -> None:
    # No communication cost: every layout of 8 ranks trains the same samples a second.
    flat = Scaling(compute=1e-3)
    work = Work(trials=64, folds=4, epochs=1, train_samples=1000, fold_overhead=0, trial_overhead=0)
    p = plan(Allocation(8, 8), work, flat)
    assert p.best.layout == Layout(8, 8, 1, 4)
    assert p.runner_up is not None and p.runner_up.layout.groups < 8


def test_a_costly_link_keeps_fold_groups_on_one_node() -> None:
    slow_link = Scaling(compute=1e-2, comm=1e-4, link=5e-2)
    work = Work(trials=2, folds=2, epochs=1, train_samples=1000, max_parallel=2)
    best = plan(Allocation(16, 4), work, slow_link).best.layout
    assert best.ranks_per_fold <= 4
    assert nodes_spanned(best.ranks_per_fold, 4, 16) == 1


def test_max_parallel_caps_the_trials_at_once() -> None:
    work = Work(trials=8, folds=4, epochs=1, train_samples=1000, max_parallel=2)
    for pred in plan(Allocation(8, 8), work, MODEL).table:
        assert pred.active <= 2


def test_nodes_spanned_counts_fold_groups_that_straddle_nodes() -> None:
    assert nodes_spanned(4, 4, 16) == 1
    assert nodes_spanned(8, 4, 16) == 2
    assert nodes_spanned(3, 4, 12) == 2  # ranks 3..5 sit on two nodes
    assert nodes_spanned(1, 4, 8) == 1


def test_re_planning_the_drain_beats_every_static_layout_when_the_last_wave_is_partial() -> None:
    # Wider fold groups pay a collective cost, so 9 trials start on 2 groups of 4 single-rank
    # fold groups; the ninth would leave half the ranks idle, so the drain re-plans it wider.
    model = fit([Point(1, 1, 20.0), Point(2, 1, 34.0), Point(4, 1, 50.0), Point(8, 1, 60.0)])
    alloc = Allocation(8, 8)
    work = Work(trials=9, folds=4, epochs=2, train_samples=180)
    replanned = simulate(alloc, work, model)
    assert replanned.layouts == (Layout(8, 2, 1, 4), Layout(8, 1, 2, 4))
    statics = [simulate(alloc, work, model, fixed=lay) for lay in candidates(8, 4)]
    best = min(statics, key=lambda s: s.makespan)
    assert replanned.makespan < best.makespan
    assert replanned.idle_tail <= 0.5 * best.idle_tail
    # A campaign that fills its waves is never re-planned.
    full = simulate(alloc, replace(work, trials=10), model)
    assert full.layouts == (Layout(8, 2, 1, 4),)


@settings(max_examples=100, deadline=None)
@given(trials=st.integers(1, 50), world=st.sampled_from([4, 6, 8, 12]), k=st.integers(2, 6))
def test_the_drain_simulation_trains_every_trial_once(trials: int, world: int, k: int) -> None:
    alloc = Allocation(world, 4)
    work = Work(trials=trials, folds=k, epochs=1, train_samples=500)
    sim = simulate(alloc, work, MODEL)
    assert sim.completed_by_deadline == trials
    assert sim.makespan > 0 and 0 < sim.utilisation(world) <= 1 + 1e-9


def test_a_pbt_trial_is_one_interval_for_the_planner() -> None:
    from hpcopt.core.planner import epochs_per_trial

    spec = {"training": {"epochs": 24}, "algorithm": {"name": "pbt", "options": {"interval": 3}}}
    assert epochs_per_trial(spec) == 3
    assert epochs_per_trial({**spec, "algorithm": {"name": "pbt"}}) == 4  # the default interval, epochs / 5
    assert epochs_per_trial({**spec, "algorithm": {"name": "bo"}}) == 24
