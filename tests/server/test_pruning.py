"""Pruners decided by the server where reports arrive, on SQLite and PostgreSQL: the
trial becomes PRUNED in the same transaction, with the value it reached and the reason,
and the agent hears STOP_PRUNED."""

from __future__ import annotations

from typing import Any

import pytest

from hpcopt_server import domain as d
from hpcopt_server.errors import FailedPrecondition, InvalidArgument
from hpcopt_server.service import Service
from hpcopt_server.service.agents import Action, Lease
from tests.server.test_service import _acquire, _finish, _start

FOLDS = [1.0, 1.2, 0.9, 1.1, 1.0]  # the incumbent's fold values


def _completed(service: Service, campaign: d.Campaign, agent: str, folds: list[float]) -> d.Trial:
    _, lease = _acquire(service, agent, campaign)
    return _finish(service, lease, folds)


def _fold_campaign(service: Service, **options: Any) -> tuple[d.Campaign, str]:
    campaign, agent = _start(
        service, folds=5, pruner={"name": "fold", "options": options}, budget={"max_trials": 20, "max_parallel": 4}
    )
    _completed(service, campaign, agent, FOLDS)
    _completed(service, campaign, agent, [v + 0.5 + 0.05 * (-1) ** k for k, v in enumerate(FOLDS)])
    _completed(service, campaign, agent, [v + 1.0 - 0.05 * (-1) ** k for k, v in enumerate(FOLDS)])
    return campaign, agent


def test_the_fold_pruner_stops_a_hopeless_trial_after_its_first_fold(service: Service) -> None:
    campaign, agent = _fold_campaign(service)
    trial, lease = _acquire(service, agent, campaign)
    service.agents.report_fold(lease, 0, 2.0, {"loss": 2.0})  # 1.0 worse than the incumbent's fold 0
    pruned = service.campaigns.trial(trial.id)
    assert pruned.state == d.TrialState.PRUNED
    assert pruned.value == 2.0  # the mean of its finished folds
    assert pruned.error.startswith("fold: after 1 of 5 folds") and "#0" in pruned.error
    assert [e.kind for e in pruned.events][-1] == "pruned"
    assert service.agents.heartbeat(lease).action == Action.PRUNED
    assert service.agents.report_intermediate(lease, 1, 1, 2.0).action == Action.PRUNED
    with pytest.raises(FailedPrecondition):
        service.agents.report_fold(lease, 1, 2.0, {"loss": 2.0})
    assert service.campaigns.get(campaign.id).campaign.trials_finished == 4


def test_the_fold_pruner_lets_a_close_trial_train_all_folds(service: Service) -> None:
    campaign, agent = _fold_campaign(service)
    _, lease = _acquire(service, agent, campaign)
    for k in range(4):
        service.agents.report_fold(lease, k, FOLDS[k] + 0.02, {"loss": FOLDS[k] + 0.02})
        assert service.agents.heartbeat(lease).action == Action.CONTINUE
    service.agents.report_fold(lease, 4, FOLDS[4] - 0.2, {"loss": 0.8})
    assert service.agents.complete(lease).state == d.TrialState.COMPLETED


def test_the_fold_pruner_waits_for_min_trials_and_a_fold_spread(service: Service) -> None:
    campaign, agent = _start(service, folds=5, pruner={"name": "fold"})
    _completed(service, campaign, agent, FOLDS)
    _completed(service, campaign, agent, [v + 0.5 for v in FOLDS])  # 2 < min_trials (3)
    trial, lease = _acquire(service, agent, campaign)
    service.agents.report_fold(lease, 0, 50.0, {"loss": 50.0})
    assert service.campaigns.trial(trial.id).state == d.TrialState.RUNNING


def test_the_fold_pruner_reads_maximize_the_other_way(service: Service) -> None:
    maximize = {"metric": "acc", "direction": "maximize"}
    maxi, agent = _start(service, folds=5, pruner={"name": "fold"}, objective=maximize)
    for shift in (0.0, -0.5, -1.0):
        _completed(service, maxi, agent, [v + shift + 0.01 * k for k, v in enumerate(FOLDS)])
    low, lease = _acquire(service, agent, maxi)
    service.agents.report_fold(lease, 0, 0.1, {"acc": 0.1})
    assert service.campaigns.trial(low.id).state == d.TrialState.PRUNED
    high, lease = _acquire(service, agent, maxi)
    service.agents.report_fold(lease, 0, 1.5, {"acc": 1.5})
    assert service.campaigns.trial(high.id).state == d.TrialState.RUNNING


def _curves(service: Service, campaign: d.Campaign, agent: str, points: list[float], fold: int = 0) -> Lease:
    _, lease = _acquire(service, agent, campaign)
    for step, v in enumerate(points, start=1):
        service.agents.report_intermediate(lease, fold, step, v)
    return lease


def test_the_median_pruner_compares_with_completed_trials_at_the_same_fold_and_epoch(service: Service) -> None:
    options = {"n_startup_trials": 2, "n_warmup_steps": 1}
    campaign, agent = _start(service, folds=2, pruner={"name": "median", "options": options})
    for curve in ([2.0, 1.0, 0.5], [2.0, 2.0, 1.5]):
        lease = _curves(service, campaign, agent, curve)
        _finish(service, lease, [curve[-1], curve[-1]])
    _, lease = _acquire(service, agent, campaign)
    assert service.agents.report_intermediate(lease, 0, 1, 9.0).action == Action.CONTINUE  # warm-up
    assert service.agents.report_intermediate(lease, 0, 2, 1.4).action == Action.CONTINUE  # median 1.5
    assert service.agents.report_intermediate(lease, 1, 2, 1.4).action == Action.CONTINUE  # fold 1: no history
    assert service.agents.report_intermediate(lease, 0, 3, 1.2).action == Action.PRUNED  # best 1.2 > 1.0
    trial = service.campaigns.trial(lease.trial_id)
    assert trial.state == d.TrialState.PRUNED and trial.value == 1.2
    assert trial.error.startswith("median: its best loss in fold 0 up to epoch 3 (1.2)")


def test_asha_keeps_the_best_third_of_each_rung_without_waiting(service: Service) -> None:
    campaign, agent = _start(
        service,
        folds=1,
        pruner={"name": "asha", "options": {"reduction_factor": 2}},
        budget={"max_trials": 20, "max_parallel": 10},
    )
    first = _curves(service, campaign, agent, [1.0])  # alone in rung 0: the best, goes on
    assert service.agents.heartbeat(first).action == Action.CONTINUE
    _, worse = _acquire(service, agent, campaign)
    assert service.agents.report_intermediate(worse, 0, 1, 2.0).action == Action.PRUNED
    _, better = _acquire(service, agent, campaign)
    assert service.agents.report_intermediate(better, 0, 1, 0.5).action == Action.CONTINUE
    assert service.agents.report_intermediate(better, 0, 3, 9.0).action == Action.CONTINUE  # epoch 3: no rung
    assert service.agents.report_intermediate(better, 0, 2, 0.4).action == Action.CONTINUE  # rung 1, alone
    assert service.agents.report_intermediate(first, 0, 2, 0.6).action == Action.PRUNED
    pruned = service.campaigns.trial(first.trial_id)
    assert "rung 1 (fold 0, epoch 2)" in pruned.error and "best 1 of the 2" in pruned.error


def test_the_fold_pruner_runs_a_pruner_within_folds(service: Service) -> None:
    campaign, agent = _start(service, folds=3, pruner={"name": "fold", "options": {"within": {"name": "asha"}}})
    _curves(service, campaign, agent, [1.0])
    _, lease = _acquire(service, agent, campaign)
    assert service.agents.report_intermediate(lease, 0, 1, 2.0).action == Action.PRUNED


@pytest.mark.parametrize(
    ("pruner", "field"),
    [
        ({"name": "asha", "options": {"reduction_factor": 1}}, "pruner.options.reduction_factor"),
        ({"name": "median", "options": {"n_startup": 3}}, "pruner.options.n_startup"),
        ({"name": "fold", "options": {"confidence": 1.5}}, "pruner.options.confidence"),
        ({"name": "fold", "options": {"within": {"name": "fold"}}}, "pruner.options.within.name"),
        (
            {"name": "fold", "options": {"within": {"name": "asha", "options": {"min_epochs": 0}}}},
            "pruner.options.within.options.min_epochs",
        ),
        ({"name": "hyperband"}, "pruner.name"),
    ],
)
def test_bad_pruner_options_are_refused_by_name(service: Service, pruner: dict[str, Any], field: str) -> None:
    from tests.helpers.specs import make_spec

    with pytest.raises(InvalidArgument) as err:
        service.campaigns.create(make_spec(pruner=pruner))
    assert [f for f, _ in err.value.errors] == [field]


def test_asha_rungs_count_epochs_over_all_folds_so_later_folds_are_not_cut_again(service: Service) -> None:
    # 3 epochs per fold, min_epochs 1, eta 3: rungs at resources 1, 3 and 9 (fold 2, epoch 3).
    options = {"min_epochs": 1}
    campaign, agent = _start(
        service, folds=3, pruner={"name": "asha", "options": options}, training={"task": "t.py:task", "epochs": 3}
    )
    good = _curves(service, campaign, agent, [1.0, 0.9, 0.8])
    assert service.agents.report_intermediate(good, 1, 1, 0.8).action == Action.CONTINUE
    _, lease = _acquire(service, agent, campaign)
    for step, v in enumerate([0.5, 0.4, 0.3], start=1):
        assert service.agents.report_intermediate(lease, 0, step, v).action == Action.CONTINUE
    # fold 1, epoch 1 is resource 4: no rung, however bad
    assert service.agents.report_intermediate(lease, 1, 1, 99.0).action == Action.CONTINUE
    assert service.agents.report_intermediate(good, 1, 2, 0.7).action == Action.CONTINUE
    assert service.agents.report_intermediate(good, 2, 3, 0.7).action == Action.CONTINUE  # rung 2, alone
    assert service.agents.report_intermediate(lease, 2, 3, 0.9).action == Action.PRUNED
