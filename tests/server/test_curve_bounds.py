"""Learning curves are bounded: a fold keeps at most its campaign's
``budget.curve_points_per_fold`` points (thinned, keeping first, last, best and shape),
and every read that returns curves returns a bounded number of points."""

from __future__ import annotations

import random
from typing import Any

import pytest

from hpcopt_server.curves import READ_POINTS_PER_FOLD, keep_steps, thin
from hpcopt_server.service.agents import Lease
from tests.helpers.specs import make_spec


@pytest.mark.parametrize("seed", range(20))
def test_thinning_keeps_first_last_lowest_highest_and_fits(seed: int) -> None:
    rng = random.Random(seed)
    steps = sorted(rng.sample(range(100_000), rng.randint(1, 3000)))
    points = [(s, rng.gauss(0, 1) + (5.0 if rng.random() < 0.01 else 0.0)) for s in steps]
    target = rng.randint(4, 500)
    kept = thin(points, target)
    assert len(kept) <= target and kept == sorted(kept)
    assert set(kept) <= set(points)
    if len(points) > target:
        steps_kept = {s for s, _ in kept}
        assert points[0][0] in steps_kept and points[-1][0] in steps_kept
        assert min(points, key=lambda p: p[1]) in kept and max(points, key=lambda p: p[1]) in kept
        # Shape: every one of the rule's step ranges that held a point still holds one.
        first, span, ranges = points[0][0], points[-1][0] - points[0][0] + 1, (target - 2) // 2
        bucket = lambda s: (s - first) * ranges // span  # noqa: E731
        assert {bucket(s) for s, _ in points[1:-1]} <= {bucket(s) for s, _ in kept}
    else:
        assert kept == points
    assert keep_steps(points, target) == {s for s, _ in kept}


def _running(service: Any, cap: int) -> tuple[Lease, int]:
    spec = make_spec(folds=2, budget={"max_trials": 1, "max_parallel": 1, "curve_points_per_fold": cap})
    cid = service.campaigns.create(spec).id
    reg = service.agents.register(host="h", ranks=1, gpus=0, campaign_id=cid)
    got = service.agents.acquire(reg.agent_id, cid)
    return Lease(reg.agent_id, got.trial.id, got.lease_id), cid


def test_an_agent_reporting_every_step_leaves_a_bounded_curve_with_its_best_point(service: Any) -> None:
    lease, cid = _running(service, 40)
    values = {step: 1.0 / (1 + step) + (0.5 if step % 97 == 0 else 0.0) for step in range(1500)}
    values[733] = -3.0  # the best point, mid-curve
    for step, value in values.items():
        service.agents.report_intermediate(lease, 0, step, value)
    service.agents.report_intermediate(lease, 1, 0, 0.25)
    trial = service.campaigns.trial(lease.trial_id)
    fold0 = [(p.step, p.value) for p in trial.curves if p.fold == 0]
    assert 3 <= len(fold0) <= 40, len(fold0)
    steps = [s for s, _ in fold0]
    assert steps[0] == 0 and steps[-1] == 1499 and 733 in steps
    assert all(values[s] == v for s, v in fold0)
    # Spread over the whole run, not bunched at its end.
    assert sum(s < 750 for s in steps) >= 5 and sum(s >= 750 for s in steps) >= 5
    assert [(p.step, p.value) for p in trial.curves if p.fold == 1] == [(0, 0.25)]
    # The pruning history, the export and the dashboard's curves see the same bounded curve.
    [curves] = service.insights.curves(cid, [lease.trial_id])
    assert len(curves["points"]) == len(fold0) + 1
    exported = service.export_campaign(cid)["trials"][0]["curves"]
    assert len(exported) == len(fold0) + 1


def test_reads_return_at_most_the_read_bound_per_fold_whatever_is_stored(service: Any) -> None:
    lease, cid = _running(service, 10_000)
    with service.ctx.storage.write() as tx:  # stored before the cap existed, say
        tx.trials.put_curve(lease.trial_id, 0, [(step, float(step % 17)) for step in range(READ_POINTS_PER_FOLD * 3)])
    trial = service.campaigns.trial(lease.trial_id)
    assert len(trial.curves) <= READ_POINTS_PER_FOLD
    assert {trial.curves[0].step, trial.curves[-1].step} == {0, READ_POINTS_PER_FOLD * 3 - 1}
    [curves] = service.insights.curves(cid, [lease.trial_id])
    assert len(curves["points"]) <= READ_POINTS_PER_FOLD


def test_the_cap_is_a_validated_spec_field() -> None:
    from hpcopt import SpecError, parse_spec

    assert parse_spec(make_spec()).budget.curve_points_per_fold == 1000
    for bad in (0, 15, 10_001, "many"):
        with pytest.raises(SpecError, match="curve_points_per_fold"):
            parse_spec(make_spec(budget={"max_trials": 2, "curve_points_per_fold": bad}))
