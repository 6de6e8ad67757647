"""The allocation planner (``hpcopt.core.planner``) as pure functions: layouts, the model,
the ranking, the deadline rule and the drain simulation."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcopt.core.planner import (
    FEEDBACK,
    TIE,
    Allocation,
    Layout,
    Point,
    Scaling,
    Work,
    candidates,
    fit,
    learns_of,
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


def test_a_search_that_learns_gets_its_results_sooner_at_the_same_finish() -> None:
    # The review's case: dear collectives, no walltime, 500 trials on 1,000 ranks. Every
    # trial at once (500 x 2 x 1: no result for 27 h, a random search for bo) tied with
    # 200 x 5 x 1 (200 results at 9 h) and won on more trials at once.
    alloc, model = Allocation(1000, 4), Scaling(1.0, 1.0, 0.2, points=(Point(1, 1, 1.0), Point(4, 1, 1.0)))
    work = Work(trials=500, folds=5, epochs=10, train_samples=3000)
    blind = plan(alloc, work, model).best
    assert blind.layout == Layout(1000, 500, 1, 5) and blind.active == 500  # random search: all at once
    fed = plan(alloc, replace(work, learns=True), model)
    assert fed.best.layout == Layout(1000, 200, 1, 5)
    assert fed.best.trial_seconds < blind.trial_seconds / 2 and fed.best.makespan <= blind.makespan * (1 + TIE)
    sim = simulate(alloc, replace(work, learns=True), model)
    assert sim.waves == 3 and sim.first_results == pytest.approx(fed.best.trial_seconds)
    assert simulate(alloc, work, model).waves == 1


@settings(max_examples=200, deadline=None)
@given(world=st.sampled_from([4, 8, 12, 16, 24, 32]), k=folds, trials=st.integers(1, 200), comm=st.floats(0, 2e-3))
def test_feedback_costs_at_most_its_price_and_never_trials_by_the_deadline(
    world: int, k: int, trials: int, comm: float
) -> None:
    alloc, model = Allocation(world, 4), Scaling(compute=1e-3, comm=comm, link=comm / 2)
    for deadline in (None, 60.0):
        work = Work(trials=trials, folds=k, epochs=3, train_samples=500, deadline=deadline)
        blind, fed = plan(alloc, work, model).best, plan(alloc, replace(work, learns=True), model).best
        assert fed.by_deadline == blind.by_deadline
        assert fed.makespan <= min(blind.makespan, fed.makespan) * (1 + FEEDBACK) + 1e-9
        assert fed.trial_seconds <= blind.trial_seconds + 1e-9  # its results never come later


def test_the_algorithms_that_learn_from_results_are_named_once() -> None:
    assert [
        n
        for n in ("random", "sobol", "grid", "bo", "ea", "skopt", "pbt", "mf")
        if learns_of({"algorithm": {"name": n}})
    ] == [
        "bo",
        "ea",
        "skopt",
        "mf",
    ]
    assert learns_of({"algorithm": "bo"}) and not learns_of({})


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


@settings(max_examples=200, deadline=None)
@given(
    epochs=st.integers(1, 40),
    k=st.integers(1, 8),
    min_epochs=st.integers(1, 40),
    eta=st.sampled_from([1.5, 2.0, 3.0, 4.0]),
    fold_promotion=st.booleans(),
)
def test_an_mf_trial_s_leases_train_every_fold_epoch_of_its_ladder_once(
    epochs: int, k: int, min_epochs: int, eta: float, fold_promotion: bool
) -> None:
    from hpcopt.core.fidelity import ladder_of
    from hpcopt.core.planner import units_of

    opts = {"min_epochs": min(min_epochs, epochs), "eta": eta, "fold_promotion": fold_promotion}
    spec = {"algorithm": {"name": "mf", "options": opts}, "folds": k, "training": {"epochs": epochs}}
    found = ladder_of(spec)
    assert found is not None
    climbs = found.climbs()
    # Climbing the whole ladder trains K folds x all epochs: each climb adds what is new.
    assert sum(c.folds * c.epochs for c in climbs) == k * epochs
    assert [c.reach for c in climbs] == sorted((c.reach for c in climbs), reverse=True) and climbs[0].reach == 1
    units = units_of(spec)
    assert all(1 <= u.folds <= k and 1 <= u.epochs <= epochs and 0 < u.share <= 1 for u in units)
    assert units_of({**spec, "algorithm": {"name": "bo"}}) == ()  # a bo trial is one lease of everything


def test_mf_work_is_planned_narrow_where_full_trials_are_planned_wide() -> None:
    from hpcopt.core.planner import Unit, trial_work, units_of

    spec = {"algorithm": {"name": "mf"}, "folds": 5, "training": {"epochs": 10}}
    units = units_of(spec)
    assert [(u.folds, u.epochs) for u in units] == [(1, 1), (1, 2), (1, 7), (2, 10), (2, 10)]
    alloc, model = Allocation(8, 8), Scaling(compute=1e-3, comm=2e-4)
    full = Work(trials=10, folds=5, epochs=10, train_samples=1000)
    mf = replace(full, units=units)
    # Ten full 5-fold trials on 8 ranks: 4 trial groups of 2 fold groups beat 8 groups' 2
    # waves of 5 rounds. The same ten configurations climbing the ladder are mostly
    # one-fold leases, on which a second fold group sits idle: 8 narrow groups.
    assert plan(alloc, full, model).best.layout.fold_groups == 2
    best = plan(alloc, mf, model).best
    assert (best.layout.groups, best.layout.fold_groups) == (8, 1)
    # The prediction is the leases' sum: rounds of each lease's folds over the fold groups.
    wide = Layout(8, 4, 1, 5)
    seconds, busy = trial_work(wide, alloc, mf, model)
    per_epoch = 1000 * model.seconds_per_sample(1) * (1 + mf.eval_fraction)
    expect = sum(
        u.share * (-(-u.folds // 2) * (u.epochs * per_epoch + mf.fold_overhead) + mf.trial_overhead) for u in units
    )
    assert seconds == pytest.approx(expect)
    assert busy == pytest.approx(sum(u.share * u.folds * (u.epochs * per_epoch + mf.fold_overhead) for u in units))
    # One lease of everything is the full trial.
    assert trial_work(wide, alloc, replace(full, units=(Unit(5, 10),)), model) == trial_work(wide, alloc, full, model)


@settings(max_examples=100, deadline=None)
@given(trials=st.integers(1, 80), world=st.sampled_from([4, 6, 8, 12]), k=st.integers(2, 6))
def test_an_mf_campaign_s_simulation_keeps_the_ranks_no_more_than_busy(trials: int, world: int, k: int) -> None:
    from hpcopt.core.planner import units_of

    spec = {"algorithm": {"name": "mf"}, "folds": k, "training": {"epochs": 9}}
    work = Work(trials=trials, folds=k, epochs=9, train_samples=500, units=units_of(spec))
    sim = simulate(Allocation(world, 4), work, MODEL)
    assert sim.completed_by_deadline == trials
    assert sim.makespan > 0 and 0 < sim.utilisation(world) <= 1 + 1e-9


def test_the_feedback_benchmark_prints_the_table_the_docs_quote() -> None:
    import subprocess
    import sys

    from tests.helpers.env import ROOT, scaled

    script = ROOT / "benchmarks/training/planner_feedback.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=scaled(300))
    assert out.returncode == 0, out.stderr
    rows = {
        ln.split()[0]: ln.split()
        for ln in out.stdout.splitlines()
        if ln.strip().startswith(("before", "0%", "2%", "5%", "10%", "25%"))
    }
    assert set(rows) == {"before", "0%", "2%", "5%", "10%", "25%"}, out.stdout
    chosen = f"{FEEDBACK:.0%}"
    # The price in use starves fewer campaigns of rounds than the rule before, at the
    # median time of the fastest plan, and finishes as many trials by the walltime.
    assert int(rows[chosen][5].rstrip("%")) < int(rows["before"][5].rstrip("%")), out.stdout
    assert rows[chosen][1] == "1.000x" and rows[chosen][-1] == "1.000x", out.stdout
