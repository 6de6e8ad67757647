"""``algorithm: mf`` through the real service and SQL (SQLite and PostgreSQL), with
simulated agents: a trial climbs rungs as the same trial, PAUSED between them; what the
campaign reports is always K-fold; the waiting trials end when the budget is spent; a
restart of the optimizer cache loses nothing; bad options are refused by field."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument
from hpcopt_server.optimizers.fidelity import ladder
from hpcopt_server.service import Service
from tests.agent.test_docs_blocks import docs_blocks
from tests.helpers.fidelity import EPOCHS, FOLDS, Agents, loss, mf_spec, run_campaign

_spec = mf_spec
_run = run_campaign


def _all(service: Service, cid: int) -> list[d.Trial]:
    trials = service.campaigns.trials(cid, limit=1000)[0]
    return [service.campaigns.trial(t.id) for t in trials]


@pytest.mark.parametrize("forget_at", [None, 7], ids=["one-cache", "restarted"])
def test_trials_climb_as_themselves_and_every_reported_result_is_k_fold(
    service: Service, forget_at: int | None
) -> None:
    campaign = service.campaigns.create(_spec())
    agents = Agents(service, campaign.id)
    _run(service, agents, forget_at=forget_at)
    trials = _all(service, campaign.id)
    assert len(trials) == 24  # max_trials counts configurations: a promotion is no new trial
    assert {t.state for t in trials} <= {d.TrialState.COMPLETED, d.TrialState.PRUNED}
    completed = [t for t in trials if t.state == d.TrialState.COMPLETED]
    assert completed, "the campaign must end with at least one K-fold result"
    for t in trials:
        assert t.fidelity is not None
        rungs = [(r.folds, r.epochs) for r in t.fidelity.history]
        assert rungs == sorted(rungs) and len(set(rungs)) == len(rungs), rungs
        assert all(f <= FOLDS and e <= EPOCHS for f, e in rungs)  # never past K folds or the epochs
        if t.state == d.TrialState.COMPLETED:
            assert rungs[-1] == (FOLDS, EPOCHS)
            assert sorted(f.index for f in t.folds if f.finished) == list(range(FOLDS))
            mean = sum(loss(t.params, k, EPOCHS) for k in range(FOLDS)) / FOLDS
            assert t.value == pytest.approx(mean)
        else:
            assert rungs[-1] != (FOLDS, EPOCHS) and "not promoted past" in t.error
    summary = service.campaigns.get(campaign.id)
    best = min(completed, key=lambda t: t.value or math.inf)
    assert summary.best_trial_id == best.id
    assert summary.campaign.state == d.CampaignState.COMPLETED
    # Promotions happened, to more epochs and to more folds, each as the same trial.
    climbed = [t for t in trials if t.fidelity and len(t.fidelity.history) > 1]
    assert any(r.epochs > t.fidelity.history[0].epochs for t in climbed if t.fidelity for r in t.fidelity.history)
    assert any(r.folds > 1 for t in climbed if t.fidelity for r in t.fidelity.history)
    # Every fold-epoch was trained exactly once: each promotion resumed its folds.
    assert set(agents.trained.values()) == {1}
    seconds = {t.id: t.fidelity.history[-1].seconds for t in trials if t.fidelity}
    assert all(s > 0 for s in seconds.values())


def test_a_promotion_reopens_the_folds_it_extends_and_keeps_their_checkpoints(service: Service) -> None:
    campaign = service.campaigns.create(_spec())
    agents = Agents(service, campaign.id)
    _run(service, agents)
    promoted = [t for t in agents.granted if t.fidelity and t.fidelity.history]
    assert promoted
    for t in promoted:
        assert t.fidelity is not None
        before = t.fidelity.history[-1]
        assert (t.fidelity.folds, t.fidelity.epochs) > (before.folds, before.epochs)
        for f in t.folds:
            if f.index >= before.folds:
                continue
            if t.fidelity.epochs > before.epochs:  # more epochs: the fold resumes from its checkpoint
                assert not f.finished and f.checkpoint_uri.endswith(f"/{t.id}/fold{f.index}.pt")
            else:  # more folds: the folds it has are done
                assert f.finished
        assert t.fidelity.why


def test_a_paused_trial_holds_no_lease_and_counts_as_unfinished(service: Service) -> None:
    campaign = service.campaigns.create(_spec())
    agents = Agents(service, campaign.id)
    held = agents.acquire()
    assert held is not None
    paused = agents.train(*held)
    assert paused.state == d.TrialState.PAUSED and paused.value is not None
    assert paused.fidelity is not None and paused.fidelity.history[0].rung == 0
    assert paused.lease_expires_at is None
    summary = service.campaigns.get(campaign.id)
    assert summary.best_trial_id is None  # a one-fold rung is never the campaign's result
    assert summary.campaign.trials_finished == 0
    # A retried completion (its reply lost) is answered with the paused trial.
    again = service.agents.complete(held[1])
    assert again.state == d.TrialState.PAUSED and again.id == paused.id
    # Cancelling the campaign ends a PAUSED trial too.
    service.campaigns.cancel(campaign.id)
    assert service.campaigns.trial(paused.id).state == d.TrialState.CANCELLED


def test_a_lease_takes_reports_only_for_the_folds_of_its_unit(service: Service) -> None:
    campaign = service.campaigns.create(_spec())
    agents = Agents(service, campaign.id)
    held = agents.acquire()
    assert held is not None
    trial, lease = held
    assert trial.fidelity is not None and trial.fidelity.folds == 1 < FOLDS
    # Fold 1 is in the campaign, but not in this rung-0 lease (fold 0 only): refused by
    # name, for a finished fold and for a learning-curve point alike, and nothing stored.
    for call in (
        lambda: service.agents.report_fold(lease, 1, 0.5),
        lambda: service.agents.report_intermediate(lease, 1, 0, 0.5),
    ):
        unit = rf"fold 1 is not part of this lease.*folds 0\.\.0 of {FOLDS}"
        with pytest.raises(InvalidArgument, match=unit) as info:
            call()
        assert info.value.errors == [("fold", "must be in 0..0 for this lease")]
    with pytest.raises(InvalidArgument, match=rf"fold {FOLDS} does not exist"):
        service.agents.report_fold(lease, FOLDS, 0.5)
    stored = service.campaigns.trial(trial.id)
    assert stored.state == d.TrialState.RUNNING and stored.folds == () and stored.lease_id == lease.lease_id
    assert stored.curves == ()
    # The unit's own fold still reports, and the rung ends PAUSED as it should.
    paused = agents.train(trial, lease)
    assert paused.state == d.TrialState.PAUSED
    assert sorted(f.index for f in paused.folds if f.finished) == [0]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"algorithm": {"name": "mf", "options": {"min_epochs": 12}}}, "algorithm.options.min_epochs"),
        (
            {"algorithm": {"name": "mf", "options": {"fold_promotion": True}}, "folds": 1},
            "algorithm.options.fold_promotion",
        ),
        ({"algorithm": {"name": "mf", "options": {"eta": 1.0}}}, "algorithm.options.eta"),
        ({"algorithm": {"name": "mf", "options": {"rungs": 3}}}, "algorithm.options.rungs"),
        ({"algorithm": {"name": "mf"}, "pruner": {"name": "asha"}}, "pruner"),
        ({"algorithm": {"name": "mf"}, "training": None}, "training"),
        ({"algorithm": {"name": "pbt", "options": {"min_epochs": 2}}}, "algorithm.options.min_epochs"),
    ],
    ids=["min-above-max", "fold-promotion-one-fold", "eta", "unknown", "pruner", "no-training", "pbt-fidelity"],
)
def test_bad_options_are_refused_naming_the_field(service: Service, change: dict[str, Any], field: str) -> None:
    spec = _spec()
    spec.update(change)
    if spec.get("training") is None:
        spec.pop("training")
    with pytest.raises(InvalidArgument) as err:
        service.campaigns.create(spec)
    assert field in str(err.value), str(err.value)


def test_the_guides_campaign_is_accepted_and_its_ladder_is_the_one_the_guide_tabulates(service: Service) -> None:
    import re

    import yaml

    [(lang, text)] = docs_blocks("mf-campaign")
    assert lang == "yaml"
    spec = yaml.safe_load(text)
    campaign = service.campaigns.create(spec)
    assert campaign.algorithm == "mf"
    page = (Path(__file__).resolve().parents[2] / "docs/guides/multifidelity.md").read_text()
    table = re.findall(r"^\| (\d+) \| (\d+) \| (\d+) \|$", page, re.M)
    rungs = ladder(spec["training"]["epochs"], spec["folds"], 1, 3.0)
    assert [(int(r), int(f), int(e)) for r, f, e in table] == [(r.index, r.folds, r.epochs) for r in rungs]


def test_each_rung_is_an_attempt_span_of_its_own_on_the_timeline(service: Service) -> None:
    campaign = service.campaigns.create(_spec())
    agents = Agents(service, campaign.id)
    _run(service, agents)
    climbed = next(t for t in agents.granted if t.fidelity and t.fidelity.history)
    with service.ctx.storage.read() as tx:
        spans = tx.views.spans(campaign.id, [climbed.id])
    # One span per rung trained, each ended ("paused" below the top): none left running.
    assert len(spans) >= 2 and all(s.end is not None for s in spans)
    assert {s.outcome for s in spans[:-1]} == {"paused"}
