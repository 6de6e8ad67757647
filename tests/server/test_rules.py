"""The agent calls' rules (``hpcopt_server.rules``), each a pure function."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hpcopt_server import domain as d
from hpcopt_server import rules
from hpcopt_server.rules import Refusal

NOW = datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)


def _trial(state: d.TrialState = d.TrialState.RUNNING, expires: datetime | None = NOW, **kw: object) -> d.Trial:
    base: dict[str, object] = dict(
        id=1,
        campaign_id=1,
        number=0,
        state=state,
        attempt=1,
        params={},
        created_at=NOW,
        agent_id="a",
        lease_id="l",
        lease_expires_at=expires,
    )
    base.update(kw)
    return d.Trial(**base)  # type: ignore[arg-type]


def _fold(i: int, value: float | None = 1.0, finished: bool = True, **metrics: float) -> d.Fold:
    return d.Fold(i, finished, value, dict(metrics), "", 1)


def test_a_lease_holds_until_its_expiry_inclusive() -> None:
    assert rules.lease_refusal(_trial(), "a", "l", NOW) is None
    assert rules.lease_refusal(_trial(expires=None), "a", "l", NOW) is None
    assert rules.lease_refusal(_trial(), "a", "l", NOW + timedelta(microseconds=1)) == Refusal.EXPIRED


@pytest.mark.parametrize(
    ("trial", "agent", "lease", "why"),
    [
        (None, "a", "l", Refusal.NO_TRIAL),
        (_trial(), "b", "l", Refusal.NOT_HOLDER),
        (_trial(), "a", "m", Refusal.NOT_HOLDER),
        (_trial(d.TrialState.QUEUED, lease_id="", agent_id=""), "a", "l", Refusal.NOT_HOLDER),
        (_trial(d.TrialState.CANCELLED, NOW - timedelta(days=1)), "a", "l", Refusal.STOPPED),
        (_trial(d.TrialState.PRUNED), "a", "l", Refusal.STOPPED),
        (_trial(d.TrialState.COMPLETED), "a", "l", Refusal.NOT_RUNNING),
        (_trial(d.TrialState.FAILED, NOW - timedelta(days=1)), "a", "l", Refusal.NOT_RUNNING),
        (_trial(d.TrialState.PRUNED), "b", "l", Refusal.NOT_HOLDER),
    ],
)
def test_the_first_reason_a_lease_does_not_hold_is_named(
    trial: d.Trial | None, agent: str, lease: str, why: Refusal
) -> None:
    assert rules.lease_refusal(trial, agent, lease, NOW) == why


def test_fold_range_then_finished() -> None:
    assert rules.fold_refusal(0, 3, [1]) is None
    assert rules.fold_refusal(2, 3, []) is None
    assert rules.fold_refusal(1, 3, [1]) == Refusal.FOLD_FINISHED
    for fold in (-1, 3, 10**9):
        assert rules.fold_refusal(fold, 3, []) == Refusal.FOLD_RANGE


def test_fold_summary_is_the_mean_and_sample_spread() -> None:
    one = [("loss", "minimize")]
    summary = rules.fold_summary([_fold(0, 1.0), _fold(2, 3.0), _fold(1, 2.0)], 3, one)
    assert summary == rules.FoldSummary(2.0, 1.0, None)
    assert rules.fold_summary([_fold(0, 0.5)], 1, one) == rules.FoldSummary(0.5, 0.0, None)


def test_fold_summary_names_the_folds_it_lacks() -> None:
    one = [("loss", "minimize")]
    folds = [_fold(0), _fold(1, None), _fold(2, finished=False), _fold(7)]
    assert rules.fold_summary(folds, 4, one) == [1, 2, 3]


def test_a_multi_objective_summary_averages_each_objective() -> None:
    two = [("loss", "minimize"), ("latency", "minimize")]
    folds = [_fold(0, 1.0, latency=10.0), _fold(1, 3.0, latency=20.0)]
    assert rules.fold_summary(folds, 2, two) == rules.FoldSummary(2.0, 2**0.5, [2.0, 15.0])
    assert rules.fold_summary([_fold(0, 1.0, latency=1.0), _fold(1, 1.0)], 2, two) == [1]
    assert rules.missing_metrics(two, ["acc"]) == ["latency"] and rules.missing_metrics(two[:1], []) == []


@pytest.mark.parametrize(
    ("asking", "running", "queued", "created", "resume", "new"),
    [
        (5, 0, 0, 0, 0, 3),  # max_parallel 3
        (2, 0, 0, 0, 0, 2),
        (5, 1, 0, 9, 0, 1),  # one left of the budget of 10
        (5, 0, 0, 10, 0, 0),  # budget used
        (5, 3, 0, 0, 0, 0),  # all slots taken
        (5, 0, 2, 10, 2, 0),  # queued first; no new one: the budget is used
        (5, 0, 2, 4, 2, 1),  # queued first, then new ones up to max_parallel
        (1, 0, 2, 4, 1, 0),  # a trial still waits in the queue: nothing new
        (5, 2, 4, 4, 1, 0),
        (0, 0, 0, 0, 0, 0),
        (5, 7, 0, 0, 0, 0),  # more running than max_parallel (lowered by an import)
    ],
)
def test_room_to_acquire(asking: int, running: int, queued: int, created: int, resume: int, new: int) -> None:
    room = rules.room_to_acquire(
        asking=asking, running=running, queued=queued, created=created, max_parallel=3, max_trials=10
    )
    assert (room.resume, room.new) == (resume, new)


def test_a_campaign_is_done_when_its_budget_finished_while_running() -> None:
    assert rules.campaign_done(d.CampaignState.RUNNING, 10, 10)
    assert not rules.campaign_done(d.CampaignState.RUNNING, 9, 10)
    assert not rules.campaign_done(d.CampaignState.CANCELLED, 10, 10)


def test_a_trial_that_lost_its_agent_is_requeued_until_its_last_attempt() -> None:
    assert rules.requeued_or_failed(1, 3) == d.TrialState.QUEUED
    assert rules.requeued_or_failed(3, 3) == d.TrialState.FAILED
