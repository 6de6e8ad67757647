"""The trial life cycle and the service's rules, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from typing import Any

import pytest

from hpcopt_server import domain as d
from hpcopt_server.errors import FailedPrecondition, InvalidArgument, NotFound
from hpcopt_server.service import Service
from hpcopt_server.service.agents import AcquireStatus, Action, Lease
from tests.helpers.env import scaled
from tests.helpers.seed import checkpoint_uri
from tests.helpers.specs import make_spec


def _start(service: Service, **spec: Any) -> tuple[d.Campaign, str]:
    campaign = service.campaigns.create(make_spec(**spec))
    agent = service.agents.register(host="node", ranks=2, gpus=0).agent_id
    return campaign, agent


def _acquire(service: Service, agent: str, campaign: d.Campaign) -> tuple[d.Trial, Lease]:
    got = service.agents.acquire(agent, campaign.id)
    assert got.status == AcquireStatus.GRANTED and got.trial is not None
    return got.trial, Lease(agent, got.trial.id, got.lease_id)


def _finish(service: Service, lease: Lease, values: list[float]) -> d.Trial:
    for k, v in enumerate(values):
        service.agents.report_fold(lease, k, v, {"loss": v})
    return service.agents.complete(lease)


def test_value_is_the_mean_over_folds_with_the_sample_std(service: Service) -> None:
    campaign, agent = _start(service)
    trial, lease = _acquire(service, agent, campaign)
    assert trial.state == d.TrialState.RUNNING and trial.attempt == 1
    done = _finish(service, lease, [1.0, 2.0, 4.0])
    assert done.state == d.TrialState.COMPLETED
    assert done.value == pytest.approx(7 / 3)
    assert done.value_std == pytest.approx(math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2))


def test_complete_refuses_until_every_fold_is_reported(service: Service) -> None:
    campaign, agent = _start(service)
    _, lease = _acquire(service, agent, campaign)
    service.agents.report_fold(lease, 0, 1.0)
    with pytest.raises(FailedPrecondition, match=r"folds \[1, 2\] of 3"):
        service.agents.complete(lease)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_are_rejected_and_nothing_is_stored(service: Service, bad: float) -> None:
    campaign, agent = _start(service)
    trial, lease = _acquire(service, agent, campaign)
    with pytest.raises(InvalidArgument, match="value must be a finite number"):
        service.agents.report_fold(lease, 0, bad)
    with pytest.raises(InvalidArgument, match=r"metrics\.acc"):
        service.agents.report_fold(lease, 0, 1.0, {"acc": bad})
    with pytest.raises(InvalidArgument):
        service.agents.report_intermediate(lease, 0, 1, bad)
    assert service.campaigns.trial(trial.id).folds == ()


def test_unknown_folds_and_repeated_folds_are_rejected(service: Service) -> None:
    campaign, agent = _start(service)
    trial, lease = _acquire(service, agent, campaign)
    with pytest.raises(InvalidArgument, match=r"fold 3 does not exist.*3 folds \(0..2\)"):
        service.agents.report_fold(lease, 3, 1.0)
    with pytest.raises(InvalidArgument, match="fold -1 does not exist"):
        service.agents.report_intermediate(lease, -1, 0, 1.0)
    service.agents.report_fold(lease, 0, 1.0)
    with pytest.raises(FailedPrecondition, match="already finished"):
        service.agents.report_fold(lease, 0, 9.0)
    assert service.campaigns.trial(trial.id).folds[0].value == 1.0


def test_reports_under_a_wrong_lease_are_refused(service: Service) -> None:
    campaign, agent = _start(service)
    trial, lease = _acquire(service, agent, campaign)
    other = service.agents.register(host="other", ranks=1, gpus=0).agent_id
    for bad in (Lease(agent, trial.id, "not-the-lease"), Lease(other, trial.id, lease.lease_id)):
        with pytest.raises(FailedPrecondition, match="is not held by agent"):
            service.agents.report_fold(bad, 0, 1.0)
        with pytest.raises(FailedPrecondition):
            service.agents.heartbeat(bad)
    with pytest.raises(NotFound):
        service.agents.heartbeat(Lease(agent, 10_000, lease.lease_id))


def test_unregistered_agents_cannot_acquire(service: Service) -> None:
    campaign, _ = _start(service)
    with pytest.raises(NotFound, match="not registered"):
        service.agents.acquire("ghost", campaign.id)


def test_acquiring_from_campaigns_that_do_not_exist_is_refused_and_keeps_nothing(service: Service) -> None:
    campaign, agent = _start(service)
    _acquire(service, agent, campaign)
    for cid in range(10_000, 10_200):
        with pytest.raises(NotFound, match=f"campaign {cid} does not exist"):
            service.agents.acquire(agent, cid)
    assert set(service.agents.queue._gates) == {campaign.id}  # no gate kept for a campaign that does not exist


def test_preempted_trial_returns_as_the_same_id_with_its_folds(service: Service) -> None:
    campaign, agent = _start(service, budget={"max_trials": 1, "max_parallel": 1}, max_attempts=3)
    trial, lease = _acquire(service, agent, campaign)
    sid = service.agents.server_id()
    ck0, ck1 = (checkpoint_uri(sid, campaign.id, trial.id, k) for k in (0, 1))
    service.agents.report_fold(lease, 0, 0.5, checkpoint_uri=ck0)
    service.agents.report_intermediate(lease, 1, 3, 0.7, checkpoint_uri=ck1)
    back = service.agents.release(lease, d.TrialState.PREEMPTED, "SIGTERM from Slurm")
    assert back.state == d.TrialState.QUEUED and back.attempt == 2

    again, lease2 = _acquire(service, agent, campaign)
    assert again.id == trial.id and again.attempt == 2
    assert [(f.index, f.finished, f.checkpoint_uri) for f in again.folds] == [
        (0, True, ck0),
        (1, False, ck1),
    ]
    with pytest.raises(FailedPrecondition):  # the old lease is dead
        service.agents.report_fold(lease, 1, 1.0)
    service.agents.report_fold(lease2, 1, 0.6)
    service.agents.report_fold(lease2, 2, 0.7)
    done = service.agents.complete(lease2)
    assert done.value == pytest.approx(0.6)
    kinds = [e.kind for e in service.campaigns.trial(trial.id).events]
    assert kinds == ["acquired", "preempted", "acquired", "completed"]
    assert service.campaigns.get(campaign.id).campaign.state == d.CampaignState.COMPLETED


def test_a_trial_preempted_max_attempts_times_fails(service: Service) -> None:
    campaign, agent = _start(service, budget={"max_trials": 1, "max_parallel": 1}, max_attempts=2)
    _, lease = _acquire(service, agent, campaign)
    service.agents.release(lease, d.TrialState.PREEMPTED)
    _, lease = _acquire(service, agent, campaign)
    last = service.agents.release(lease, d.TrialState.PREEMPTED, "walltime")
    assert last.state == d.TrialState.FAILED and "attempt 2 of 2" in last.error
    assert service.agents.acquire(agent, campaign.id).status == AcquireStatus.DONE


def test_failed_release_is_final_and_keeps_the_error(service: Service) -> None:
    campaign, agent = _start(service)
    _, lease = _acquire(service, agent, campaign)
    out = service.agents.release(lease, d.TrialState.FAILED, "ValueError: bad width")
    assert out.state == d.TrialState.FAILED and out.error == "ValueError: bad width"
    with pytest.raises(FailedPrecondition, match=r"is FAILED, not RUNNING"):
        service.agents.complete(lease)
    with pytest.raises(InvalidArgument, match="state must be one of"):
        service.agents.release(lease, d.TrialState.COMPLETED)


def test_expired_lease_is_requeued_by_the_reaper(service: Service) -> None:
    campaign, agent = _start(service)
    trial, lease = _acquire(service, agent, campaign)
    service.agents.report_fold(lease, 0, 0.1)
    assert service.reaper.reap() == 0
    real_clock = service.ctx.clock
    service.ctx.clock = lambda: real_clock() + timedelta(seconds=service.ctx.settings.lease_seconds + 1)
    with pytest.raises(FailedPrecondition, match="expired"):
        service.agents.heartbeat(lease)
    assert service.reaper.reap() == 1
    assert service.reaper.reap() == 0
    back = service.campaigns.trial(trial.id)
    assert back.state == d.TrialState.QUEUED and back.attempt == 2 and back.folds[0].finished
    assert [e.kind for e in back.events] == ["acquired", "lease_expired"]


def test_budget_limits_parallel_and_total_trials(service: Service) -> None:
    campaign, agent = _start(service, budget={"max_trials": 3, "max_parallel": 2})
    _, l1 = _acquire(service, agent, campaign)
    _, l2 = _acquire(service, agent, campaign)
    assert service.agents.acquire(agent, campaign.id).status == AcquireStatus.WAIT
    _finish(service, l1, [1, 1, 1])
    _, l3 = _acquire(service, agent, campaign)
    assert service.agents.acquire(agent, campaign.id).status == AcquireStatus.WAIT  # 3 made, 2 running
    _finish(service, l2, [1, 1, 1])
    _finish(service, l3, [1, 1, 1])
    assert service.agents.acquire(agent, campaign.id).status == AcquireStatus.DONE
    summary = service.campaigns.get(campaign.id)
    assert summary.campaign.state == d.CampaignState.COMPLETED and summary.trial_counts == {"COMPLETED": 3}


def test_cancel_stops_running_trials_at_their_next_heartbeat(service: Service) -> None:
    campaign, agent = _start(service)
    trial, lease = _acquire(service, agent, campaign)
    assert service.agents.heartbeat(lease).action == Action.CONTINUE
    summary = service.campaigns.cancel(campaign.id)
    assert summary.campaign.state == d.CampaignState.CANCELLED
    assert service.agents.heartbeat(lease).action == Action.CANCELLED
    assert service.agents.report_intermediate(lease, 0, 1, 0.5).action == Action.CANCELLED
    with pytest.raises(FailedPrecondition):
        service.agents.report_fold(lease, 0, 0.5)
    assert service.agents.acquire(agent, campaign.id).status == AcquireStatus.DONE
    with pytest.raises(FailedPrecondition, match="only a RUNNING or PAUSED campaign"):
        service.campaigns.cancel(campaign.id)
    assert service.campaigns.trial(trial.id).state == d.TrialState.CANCELLED


def test_suggestions_decode_into_the_space(service: Service) -> None:
    campaign, agent = _start(service, budget={"max_trials": 20, "max_parallel": 20})
    seen = []
    for _ in range(20):
        trial, _lease = _acquire(service, agent, campaign)
        p = trial.params
        assert 1e-4 <= p["lr"] <= 1.0 and isinstance(p["lr"], float)
        assert 8 <= p["width"] <= 64 and isinstance(p["width"], int)
        assert p["act"] in ("relu", "tanh")
        seen.append(tuple(sorted(p.items())))
    assert len(set(seen)) == 20
    assert sorted(t.number for t in service.campaigns.trials(campaign.id, limit=100)[0]) == list(range(20))


def test_export_then_import_reproduces_the_campaign(service: Service) -> None:
    campaign, agent = _start(service, budget={"max_trials": 3, "max_parallel": 3})
    _, l1 = _acquire(service, agent, campaign)
    service.agents.report_intermediate(l1, 0, 0, 2.0)
    _finish(service, l1, [1.0, 2.0, 3.0])
    t2, l2 = _acquire(service, agent, campaign)
    service.agents.report_fold(
        l2, 0, 5.0, checkpoint_uri=checkpoint_uri(service.agents.server_id(), campaign.id, t2.id, 0)
    )
    doc = service.export_campaign(campaign.id)
    assert doc["format"] == "hpcopt-campaign" and len(doc["trials"]) == 2

    copy = service.import_campaign(doc)
    assert copy.id != campaign.id
    trials = service.campaigns.trials(copy.id)[0]
    assert [t.state for t in trials] == [d.TrialState.COMPLETED, d.TrialState.QUEUED]
    first = service.campaigns.trial(trials[0].id)
    assert first.value == pytest.approx(2.0) and first.curves == (d.CurvePoint(0, 0, 2.0),)
    # Checkpoint URIs name the exporting server's files: the copy keeps the fold, not the URI.
    assert trials[1].folds[0].finished and trials[1].folds[0].checkpoint_uri == ""
    # The copy goes on where the original stood: one queued trial, then one new one.
    t, _ = _acquire(service, agent, copy)
    assert t.number == 1
    t2, _ = _acquire(service, agent, copy)
    assert t2.number == 2


def test_an_import_carries_no_value_that_is_not_a_result(service: Service) -> None:
    """A document from an older SQLite server holds values on failed and running trials
    and on open folds (migration 0011): the copy keeps the results and the value a pruned
    trial reached, and drops the rest."""
    campaign, agent = _start(service, budget={"max_trials": 3, "max_parallel": 3})
    _, l1 = _acquire(service, agent, campaign)
    _finish(service, l1, [1.0, 2.0, 3.0])
    for _ in range(2):
        _, lease = _acquire(service, agent, campaign)
        service.agents.report_intermediate(lease, 0, 1, 0.5)
    doc = service.export_campaign(campaign.id)
    doc["trials"][1].update(state="FAILED", value=0.25, value_std=0.1)
    doc["trials"][2].update(state="PRUNED", value=0.5)
    for t in doc["trials"][1:]:
        t["folds"] = [{"index": 0, "finished": False, "value": 2.28, "metrics": {}, "attempt": 1}]
    copy = service.import_campaign(doc)
    trials = service.campaigns.trials(copy.id)[0]
    assert [(t.state, t.value, t.value_std) for t in trials] == [
        (d.TrialState.COMPLETED, pytest.approx(2.0), pytest.approx(1.0)),
        (d.TrialState.FAILED, None, None),
        (d.TrialState.PRUNED, 0.5, None),
    ]
    assert [f.value for t in trials[1:] for f in t.folds] == [None, None]


def test_import_rejects_a_damaged_document_and_stores_nothing(service: Service) -> None:
    campaign, _ = _start(service)
    doc = service.export_campaign(campaign.id)
    before = service.campaigns.page()[1]
    with pytest.raises(InvalidArgument, match="format"):
        service.import_campaign({**doc, "format": "other"})
    bad_trial = {"number": 0, "state": "BOGUS", "params": {}, "created_at": "2026-01-01T00:00:00Z"}
    with pytest.raises(InvalidArgument, match=r"trials\.0\.state"):
        service.import_campaign({**doc, "trials": [bad_trial]})
    assert service.campaigns.page()[1] == before


def test_the_optimizer_sees_each_finished_trial_once_and_a_new_cache_rebuilds(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpcopt_server.optimizers import REGISTRY, RandomSearch
    from hpcopt_server.service.suggestions import OptimizerCache

    observed: list[list[int]] = []

    class Recording(RandomSearch):
        def observe(self, trials: Any) -> None:
            observed.append([t.id for t in trials])
            super().observe(trials)

    monkeypatch.setitem(REGISTRY, "random", Recording)
    campaign, agent = _start(service, folds=1, budget={"max_trials": 6, "max_parallel": 2})
    t1, l1 = _acquire(service, agent, campaign)
    t2, l2 = _acquire(service, agent, campaign)
    _finish(service, l2, [0.5])
    service.agents.release(l1, d.TrialState.FAILED, "boom")
    _acquire(service, agent, campaign)
    assert observed == [[], [], [t2.id, t1.id]]  # in the order they finished, each once
    observed.clear()
    service.ctx.optimizers = OptimizerCache()  # as after a restart, or on another replica
    _acquire(service, agent, campaign)
    assert observed == [[t2.id, t1.id]]


def test_a_span_that_overflows_is_refused_and_the_widest_allowed_one_gives_finite_trials(service: Service) -> None:
    """``{low: -1e308, high: 1e308}`` used to pass: grid, ea and skopt then suggested NaN,
    stored on SQLite, after which the campaign's export answered 500 and the NaN trial
    was requeued forever. Now the span is refused naming the field, and what is allowed
    keeps every stored suggestion finite."""
    from hpcopt_server.errors import InvalidArgument

    wide = {"x": {"type": "real", "low": -1e308, "high": 1e308}}
    with pytest.raises(InvalidArgument) as err:
        service.campaigns.create(make_spec(space=wide))
    assert any(f == "space.x" and "overflows" in m for f, m in err.value.errors), err.value.errors
    widest = {"x": {"type": "real", "low": -8e307, "high": 8e307}, "k": {"type": "categorical", "choices": [1, 2]}}
    for algorithm in ("grid", "ea", "random", "sobol"):
        campaign, agent = _start(
            service,
            space=widest,
            algorithm={"name": algorithm, "seed": 3},
            folds=1,
            budget={"max_trials": 12, "max_parallel": 2},
        )
        for i in range(12):
            trial, lease = _acquire(service, agent, campaign)
            assert math.isfinite(trial.params["x"]), (algorithm, trial.params)
            _finish(service, lease, [float(i % 5)])
        doc = service.export_campaign(campaign.id)
        assert len(doc["trials"]) == 12


@pytest.mark.slow
def test_permutation_importance_is_bounded_in_work_and_memory() -> None:
    """100 parameters x 2,000 trials took 404 s and 3.4 GB (every parameter's n x n
    distance matrix kept at once). The surrogate now judges a sample sized to a work
    budget, keeps a few n x n matrices at a time, and says how many trials it judged."""
    import tracemalloc

    import numpy as np

    from hpcopt_server.service.importance import _permutation, _ranks, surrogate_size

    assert surrogate_size(2000, 100) == 1000 and surrogate_size(10_000, 20) == 2000 and surrogate_size(50, 100) == 50
    rng = np.random.default_rng(0)
    space = {f"x{i}": {"type": "real", "low": 0.0, "high": 1.0} for i in range(60)}
    params = [{name: float(rng.random()) for name in space} for _ in range(2000)]
    y = np.array([p["x0"] + 0.3 * p["x1"] for p in params])
    tracemalloc.start()
    raw, judged = _permutation(space, params, _ranks(y), 7)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert judged == surrogate_size(2000, 60) < 2000
    assert sorted(raw, key=lambda k: raw[k])[-2:] == ["x1", "x0"]
    assert peak < 8 * judged * judged * 8, peak  # a few n x n float64 matrices, not one per parameter
    assert _permutation(space, params, _ranks(y), 7) == (raw, judged)  # the same trials, the same answer


@pytest.mark.slow
def test_costly_reads_beyond_the_server_wide_slots_get_retry_after_and_agent_calls_do_not_wait(
    service: Service,
) -> None:
    """Importance, plot data and the CSV and JSON exports take one of a few slots; with
    every slot taken they are refused with a time to retry, while agent calls go on."""
    from hpcopt_server.errors import QuotaExceeded
    from hpcopt_server.service.heavy import SLOTS

    campaign, agent = _start(service, folds=1, budget={"max_trials": 14, "max_parallel": 1})
    for i in range(12):
        _finish(service, _acquire(service, agent, campaign)[1], [float(i)])
    heavy = service.ctx.heavy
    for _ in range(SLOTS):
        assert heavy._free.acquire(timeout=scaled(0))
    try:
        for read in (
            lambda: service.analysis.importance(campaign.id, 0, "permutation"),
            lambda: service.insights.plot(campaign.id),
            lambda: service.insights.trials_csv(campaign.id),
            lambda: service.export_json(campaign.id),
        ):
            with pytest.raises(QuotaExceeded) as err:
                read()
            assert err.value.retry_after > 0 and "costly reads" in err.value.message
        _finish(service, _acquire(service, agent, campaign)[1], [0.5])  # agents are not held up
    finally:
        for _ in range(SLOTS):
            heavy._free.release()
    params, completed = service.analysis.importance(campaign.id, 0, "permutation")
    assert completed == 13 and len(params) == 3
    assert json.loads(service.export_json(campaign.id))["trials"][12]["state"] == "COMPLETED"


@pytest.mark.parametrize("bad", ["\x1b[2J", "a\r\nb", "\u202eevil", "\x85"])
def test_control_characters_are_refused_in_metric_names_choices_and_notes(service: Service, bad: str) -> None:
    """ANSI escapes, CR/LF and bidirectional overrides forge log lines and terminal
    output; they were accepted in metric names, categorical choices and notes."""
    from hpcopt_server.errors import InvalidArgument

    spec_cases = [
        ("space.act.choices", {"space": {"act": {"type": "categorical", "choices": ["relu", f"x{bad}"]}}}),
        ("objective.metric", {"objective": {"metric": f"loss{bad}"}}),
    ]
    for field, change in spec_cases:
        with pytest.raises(InvalidArgument) as err:
            service.campaigns.create(make_spec(**change))
        assert any(f == field and "control characters" in m for f, m in err.value.errors), err.value.errors
    campaign, agent = _start(service, folds=1)
    _, lease = _acquire(service, agent, campaign)
    with pytest.raises(InvalidArgument, match="must not contain control characters"):
        service.agents.report_fold(lease, 0, 0.5, {f"acc{bad}": 1.0})
    service.agents.report_fold(lease, 0, 0.5, {"acc": 1.0})  # the refusal lost nothing
    if bad == "a\r\nb":  # a Windows line end in prose is a newline
        assert service.notes.save(campaign.id, None, f"line{bad}\tend", 0).body == "linea\nb\tend"
    else:
        with pytest.raises(InvalidArgument, match="must not contain control characters"):
            service.notes.save(campaign.id, None, f"note{bad}", 0)
    assert service.notes.save(campaign.id, None, "two\nlines\tand a tab", 0 if bad != "a\r\nb" else 1).version >= 1


def test_a_range_filter_keeps_full_precision_when_another_filter_forces_the_python_path(service: Service) -> None:
    """A range on a real parameter as narrow as one trial's value finds that trial,
    whether it is filtered in SQL alone or beside a range on a categorical (which is
    filtered in Python): SQLite quoted the JSON number with 15 significant digits there,
    and the second filter lost trials the first alone found."""
    space = {"x": {"type": "real", "low": 0.0, "high": 1.0}, "c": {"type": "categorical", "choices": ["a", "b"]}}
    campaign, agent = _start(service, space=space, folds=1, budget={"max_trials": 20, "max_parallel": 1})
    trials = []
    for i in range(20):
        trial, lease = _acquire(service, agent, campaign)
        _finish(service, lease, [float(i)])
        trials.append(trial)
    for t in trials:
        x = float(t.params["x"])
        position = ["a", "b"].index(str(t.params["c"]))
        alone = service.insights.table(campaign.id, ranges=[("x", x, x)])
        beside = service.insights.table(campaign.id, ranges=[("x", x, x), ("c", position, position)])
        assert [r.id for r in alone.trials] == [t.id], (x, alone.total)
        assert [r.id for r in beside.trials] == [t.id], (x, beside.total)
