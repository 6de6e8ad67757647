"""The agent calls' conformance suite: every call of ``storage/agent_calls/``, its
answers and its refusals, on SQLite, on the real PostgreSQL (one-statement calls) and on
an SQLite without ``RETURNING`` (before 3.35: it reads back what it changed).

A refused call must change nothing, and the SQL guards must agree with the rules they
encode (``hpcopt_server.rules``): both are checked here, on every backend.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import MetaData, create_engine, insert, update

from hpcopt_server import domain as d
from hpcopt_server import rules
from hpcopt_server.rules import Refusal
from hpcopt_server.service import Service
from hpcopt_server.storage import models as m
from hpcopt_server.storage.agent_calls import DONE, PAUSED, WAIT, AgentCalls, FoldDone, Refused, Reported
from hpcopt_server.storage.migrate import upgrade
from hpcopt_server.storage.repository import Storage
from tests.helpers.db import migrated_sqlite
from tests.helpers.env import scaled
from tests.helpers.specs import make_spec

NOW = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
LATER = NOW + timedelta(seconds=60)


@dataclass(frozen=True)
class L:
    agent_id: str
    trial_id: int
    lease_id: str


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite-without-returning"])
def svc(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Service]:
    if request.param == "postgresql":
        url: str = request.getfixturevalue("pg_url")
    else:
        url = migrated_sqlite(tmp_path / "calls.db")
    storage = Storage(url)
    if request.param == "sqlite-without-returning":
        dialect = storage.db.engine.dialect
        dialect.update_returning = dialect.insert_returning = dialect.delete_returning = (
            False  # as SQLAlchemy sets them
        )
    service = Service(storage)
    service.ctx.clock = lambda: NOW
    assert service.ctx.agent_calls.returning == (request.param != "sqlite-without-returning")
    yield service
    storage.close()


def _calls(svc: Service) -> AgentCalls:
    return svc.ctx.agent_calls


def _suggest(svc: Service) -> Any:
    return lambda tx, c, n, active: svc.ctx.optimizers.suggest(tx, c, n, active=active)


def _campaign(svc: Service, **budget: Any) -> d.Campaign:
    spec = make_spec(budget={"max_trials": 10, "max_parallel": 4, **budget})
    return svc.campaigns.create(spec)


def _agents(svc: Service, n: int) -> list[str]:
    return [svc.agents.register(host=f"n{i}", ranks=1, gpus=0).agent_id for i in range(n)]


def _acquire(svc: Service, cid: int, agents: list[str], now: datetime = NOW) -> list[Any]:
    got = _calls(svc).acquire(cid, agents, now, now + timedelta(seconds=30), _suggest(svc))
    assert got is not None
    return got


def _leased(svc: Service, **budget: Any) -> tuple[d.Campaign, L]:
    c = _campaign(svc, **budget)
    [agent] = _agents(svc, 1)
    [t] = _acquire(svc, c.id, [agent])
    assert isinstance(t, d.Trial)
    return c, L(agent, t.id, t.lease_id)


def _row(svc: Service, trial_id: int) -> d.Trial:
    with svc.ctx.storage.read() as tx:
        t = tx.trials.get(trial_id, full=True)
    assert t is not None
    return t


def _set(svc: Service, trial_id: int, **columns: Any) -> None:
    with svc.ctx.storage.write() as tx:
        tx.s.execute(update(m.TrialRow).where(m.TrialRow.id == trial_id).values(**columns))


# -- acquire -----------------------------------------------------------------------------


def test_acquire_grants_up_to_max_parallel_with_dense_numbers_and_the_rest_wait(svc: Service) -> None:
    c = _campaign(svc, max_parallel=3)
    agents = _agents(svc, 5)
    got = _acquire(svc, c.id, agents)
    granted = [g for g in got if isinstance(g, d.Trial)]
    assert [g.number for g in granted] == [0, 1, 2] and got[3:] == [WAIT, WAIT]
    for g, agent in zip(granted, agents, strict=False):
        stored = _row(svc, g.id)
        assert (stored.state, stored.agent_id, stored.lease_id, stored.params) == (
            d.TrialState.RUNNING,
            agent,
            g.lease_id,
            g.params,
        )
        assert stored.lease_expires_at == NOW + timedelta(seconds=30)
        assert [e.kind for e in stored.events] == ["acquired"]
    with svc.ctx.storage.read() as tx:
        campaign = tx.campaigns.get(c.id)
        seen = {a.id: a.last_seen_at for a in tx.agents.registered()}
    assert campaign is not None and campaign.trials_created == 3
    assert all(seen[a] == NOW for a in agents)


def test_acquire_stops_at_the_budget_and_says_done_when_the_campaign_is_over(svc: Service) -> None:
    c = _campaign(svc, max_trials=2, max_parallel=10)
    agents = _agents(svc, 3)
    assert [isinstance(g, d.Trial) for g in _acquire(svc, c.id, agents)] == [True, True, False]
    assert _acquire(svc, c.id, agents[2:]) == [WAIT]
    svc.campaigns.cancel(c.id)
    assert _acquire(svc, c.id, agents) == [DONE] * 3
    with svc.ctx.storage.read() as tx:
        assert tx.trials.page(c.id)[1] == 2  # nothing created by the refused ones
    assert _calls(svc).acquire(999_999, agents, NOW, LATER, _suggest(svc)) is None


def test_acquire_and_completion_read_the_budget_under_the_lock_not_the_cached_spec(svc: Service) -> None:
    c = _campaign(svc, max_trials=1, max_parallel=10)
    agents = _agents(svc, 3)
    got = _acquire(svc, c.id, agents)  # caches the spec: max_trials 1
    assert [isinstance(g, d.Trial) for g in got] == [True, False, False]
    svc.steering.raise_budget(c.id, 3)  # the spec changes in SQL only
    more = _acquire(svc, c.id, agents[1:])
    assert [g.number for g in more if isinstance(g, d.Trial)] == [1, 2]
    for g, agent in zip([got[0], *more], agents, strict=True):
        assert isinstance(g, d.Trial)
        lease = L(agent, g.id, g.lease_id)
        for fold in range(c.folds):
            assert isinstance(_calls(svc).finish_fold(lease, fold, 0.5, {}, "", NOW, LATER), FoldDone)
        _calls(svc).complete(lease, NOW)
        done = svc.campaigns.get(c.id).campaign.state == d.CampaignState.COMPLETED
        assert done == (g.number == 2), g.number  # not at the cached budget's end
    assert _acquire(svc, c.id, agents[:1]) == [DONE]


def test_a_paused_campaign_answers_wait_and_takes_no_number(svc: Service) -> None:
    c = _campaign(svc, max_trials=5)
    agents = _agents(svc, 2)
    svc.steering.pause(c.id)
    assert _acquire(svc, c.id, agents) == [PAUSED, PAUSED]  # a WAIT that says why
    svc.steering.resume(c.id)
    assert [g.number for g in _acquire(svc, c.id, agents) if isinstance(g, d.Trial)] == [0, 1]


def test_a_queued_trial_resumes_first_with_its_folds_and_attempt(svc: Service) -> None:
    c, lease = _leased(svc, max_parallel=1)
    calls = _calls(svc)
    assert isinstance(calls.finish_fold(lease, 0, 0.5, {}, "", NOW, LATER), FoldDone)
    assert isinstance(calls.release(lease, d.TrialState.PREEMPTED, "walltime", NOW), d.Trial)
    [agent] = _agents(svc, 1)
    [again] = _acquire(svc, c.id, [agent])
    assert isinstance(again, d.Trial)
    assert (again.id, again.attempt, again.agent_id, again.number) == (lease.trial_id, 2, agent, 0)
    assert [f.index for f in again.folds if f.finished] == [0] and again.lease_id != lease.lease_id
    assert _row(svc, again.id).state == d.TrialState.RUNNING


# -- heartbeat, report, fold -------------------------------------------------------------


def test_a_heartbeat_extends_the_lease_and_marks_the_agent_seen(svc: Service) -> None:
    _, lease = _leased(svc)
    later = NOW + timedelta(seconds=5)
    assert _calls(svc).heartbeat(lease, later, later + timedelta(seconds=99)) is None
    assert _row(svc, lease.trial_id).lease_expires_at == later + timedelta(seconds=99)
    with svc.ctx.storage.read() as tx:
        agent = tx.agents.get(lease.agent_id)
    assert agent is not None and agent.last_seen_at == later


def test_reports_store_points_replace_a_repeated_step_and_keep_the_checkpoint(svc: Service) -> None:
    _, lease = _leased(svc)
    calls = _calls(svc)
    first = calls.report(lease, 1, 1, 0.9, "", NOW, LATER)
    assert isinstance(first, Reported) and first.points == 1
    assert isinstance(calls.report(lease, 1, 2, 0.8, "", NOW, LATER), Reported)
    again = calls.report(lease, 1, 2, 0.7, "", NOW, LATER)
    assert isinstance(again, Reported) and again.points == 2
    t = _row(svc, lease.trial_id)
    assert [(p.fold, p.step, p.value) for p in t.curves] == [(1, 1, 0.9), (1, 2, 0.7)]
    assert [(f.index, f.finished, f.attempt) for f in t.folds] == [(1, False, 1)]


def test_a_finished_fold_stores_its_value_and_a_retry_answers_as_the_first(svc: Service) -> None:
    _, lease = _leased(svc)
    calls = _calls(svc)
    done = calls.finish_fold(lease, 2, 0.25, {"acc": 0.9}, "", NOW, LATER)
    assert isinstance(done, FoldDone) and not done.replayed
    assert done.fold == d.Fold(2, True, 0.25, {"acc": 0.9}, "", 1)
    replay = calls.finish_fold(lease, 2, 0.25, {"acc": 0.9}, "", NOW, LATER)
    assert isinstance(replay, FoldDone) and replay.replayed and replay.fold == done.fold
    other = calls.finish_fold(lease, 2, 0.3, {"acc": 0.9}, "", NOW, LATER)
    assert isinstance(other, Refused) and other.why == Refusal.FOLD_FINISHED
    report = calls.report(lease, 2, 5, 0.1, "", NOW, LATER)
    assert isinstance(report, Refused) and report.why == Refusal.FOLD_FINISHED


def test_a_trial_has_no_value_until_it_completes_and_an_open_fold_none_until_it_finishes(svc: Service) -> None:
    """Reports and finished folds renew the lease: that must write neither a point nor a
    fold's value into the trial's value, nor the first point into its open fold (SQLite
    once did both), so a trial that fails or goes back to the queue carries no value."""
    c, lease = _leased(svc, max_parallel=1)
    calls = _calls(svc)
    assert isinstance(calls.report(lease, 0, 1, 2.28, "", NOW, LATER), Reported)
    assert isinstance(calls.report(lease, 0, 2, 0.64, "", NOW, LATER), Reported)
    assert isinstance(calls.finish_fold(lease, 1, 0.5, {}, "", NOW, LATER), FoldDone)
    assert calls.heartbeat(lease, NOW, LATER) is None
    running = _row(svc, lease.trial_id)
    assert (running.value, running.value_std, running.values) == (None, None, None)
    assert [(f.index, f.finished, f.value) for f in running.folds] == [(0, False, None), (1, True, 0.5)]
    requeued = calls.release(lease, d.TrialState.PREEMPTED, "", NOW)
    assert isinstance(requeued, d.Trial) and requeued.value is None and _row(svc, lease.trial_id).value is None
    [agent] = _agents(svc, 1)
    [t] = _acquire(svc, c.id, [agent])
    again = L(agent, t.id, t.lease_id)
    assert isinstance(calls.report(again, 2, 1, 0.9, "", NOW, LATER), Reported)
    failed = calls.release(again, d.TrialState.FAILED, "boom", NOW)
    assert isinstance(failed, d.Trial) and failed.state == d.TrialState.FAILED
    assert _row(svc, t.id).value is None


@pytest.mark.parametrize("fold", [-1, 3, 99])
def test_a_fold_outside_the_campaign_is_refused(svc: Service, fold: int) -> None:
    _, lease = _leased(svc)
    for got in (
        _calls(svc).report(lease, fold, 1, 0.5, "", NOW, LATER),
        _calls(svc).finish_fold(lease, fold, 0.5, {}, "", NOW, LATER),
    ):
        assert isinstance(got, Refused) and got.why == Refusal.FOLD_RANGE
    assert _row(svc, lease.trial_id).folds == ()


def test_a_multi_objective_fold_needs_every_objective_metric(svc: Service) -> None:
    spec = make_spec(
        objectives=[{"metric": "loss", "direction": "minimize"}, {"metric": "latency", "direction": "minimize"}]
    )
    spec.pop("objective")
    c = svc.campaigns.create(spec)
    [agent] = _agents(svc, 1)
    [t] = _acquire(svc, c.id, [agent])
    lease = L(agent, t.id, t.lease_id)
    missing = _calls(svc).finish_fold(lease, 0, 0.5, {"acc": 1.0}, "", NOW, LATER)
    assert isinstance(missing, Refused) and missing.why == Refusal.METRICS_MISSING
    assert missing.missing == ("latency",) and _row(svc, t.id).folds == ()
    assert isinstance(_calls(svc).finish_fold(lease, 0, 0.5, {"latency": 3.0}, "", NOW, LATER), FoldDone)


# -- complete, release, prune, expire, deregister ----------------------------------------


def test_complete_needs_every_fold_then_stores_mean_and_spread_once(svc: Service) -> None:
    c, lease = _leased(svc, max_trials=1)
    calls = _calls(svc)
    calls.finish_fold(lease, 0, 1.0, {}, "", NOW, LATER)
    early = calls.complete(lease, NOW)
    assert isinstance(early, Refused) and early.why == Refusal.FOLDS_MISSING and early.missing == (1, 2)
    calls.finish_fold(lease, 1, 2.0, {}, "", NOW, LATER)
    calls.finish_fold(lease, 2, 3.0, {}, "", NOW, LATER)
    done = calls.complete(lease, NOW)
    assert isinstance(done, d.Trial) and (done.state, done.value, done.value_std) == (d.TrialState.COMPLETED, 2.0, 1.0)
    stored = _row(svc, lease.trial_id)
    assert (stored.state, stored.value, stored.finish_seq) == (d.TrialState.COMPLETED, 2.0, 1)
    again = calls.complete(lease, NOW)
    assert isinstance(again, d.Trial) and again.finish_seq == 1 and again.value == 2.0
    with svc.ctx.storage.read() as tx:
        campaign = tx.campaigns.get(c.id)
    assert campaign is not None and campaign.state == d.CampaignState.COMPLETED and campaign.trials_finished == 1


def test_release_fails_prunes_or_requeues_until_the_last_attempt(svc: Service) -> None:
    _, lease = _leased(svc)
    calls = _calls(svc)
    failed = calls.release(lease, d.TrialState.FAILED, "boom", NOW)
    assert isinstance(failed, d.Trial) and (failed.state, failed.error) == (d.TrialState.FAILED, "boom")
    c, lease = _leased(svc, max_parallel=1)  # max_attempts: 2
    first = calls.release(lease, d.TrialState.PREEMPTED, "", NOW)
    assert isinstance(first, d.Trial) and (first.state, first.attempt, first.lease_id) == (d.TrialState.QUEUED, 2, "")
    [agent] = _agents(svc, 1)
    [t] = _acquire(svc, c.id, [agent])
    last = calls.release(L(agent, t.id, t.lease_id), d.TrialState.PREEMPTED, "", NOW)
    assert isinstance(last, d.Trial) and last.state == d.TrialState.FAILED and "attempt 2 of 2" in last.error
    stale = calls.release(lease, d.TrialState.FAILED, "", NOW)
    assert isinstance(stale, Refused) and stale.why == Refusal.NOT_HOLDER


def test_a_trial_its_agent_prunes_keeps_the_value_it_reached_and_says_where(svc: Service) -> None:
    """A PRUNED release (an agent's own early stopping) stores the latest learning-curve
    point as the value, as the server's pruners do: the trial page showed "Value when
    pruned -" although intermediate values existed (issue 31, item 6)."""
    _, lease = _leased(svc)
    for fold, step, value in ((0, 1, 3.0), (0, 2, 2.5), (1, 1, 2.8)):
        svc.agents.report_intermediate(lease, fold, step, value)
    done = _calls(svc).release(lease, d.TrialState.PRUNED, "", NOW)
    assert isinstance(done, d.Trial)
    t = _row(svc, lease.trial_id)
    assert (t.state, t.value) == (d.TrialState.PRUNED, 2.8)
    assert t.error == "pruned by its agent (no reason given) (at fold 1, epoch 1: 2.8)"
    _, bare = _leased(svc)
    _calls(svc).release(bare, d.TrialState.PRUNED, "plateau", NOW)
    assert (_row(svc, bare.trial_id).value, _row(svc, bare.trial_id).error) == (None, "plateau")


def test_a_trial_its_agent_prunes_is_set_against_the_median_of_the_completed_trials_there(svc: Service) -> None:
    """The reference the trial page gives an agent-pruned trial: the median of the
    completed trials' values at the (fold, epoch) it stopped at, its own not counted."""
    from hpcopt_server.service.agents import Lease

    c = _campaign(svc, max_trials=10, max_parallel=10)
    agent = svc.agents.register(host="h", ranks=1, gpus=0).agent_id
    for value in (1.0, 2.0, 4.0):
        got = svc.agents.acquire(agent, c.id)
        lease = Lease(agent, got.trial.id, got.lease_id)
        svc.agents.report_intermediate(lease, 0, 3, value)
        svc.agents.report_intermediate(lease, 0, 4, value / 2)  # another epoch: not the reference
        for fold in range(c.folds):
            svc.agents.report_fold(lease, fold, value)
        svc.agents.complete(lease)
    got = svc.agents.acquire(agent, c.id)
    lease = Lease(agent, got.trial.id, got.lease_id)
    svc.agents.report_intermediate(lease, 0, 3, 9.0)
    svc.agents.release(lease, d.TrialState.PRUNED, "loss above 5 at epoch 3")
    t = _row(svc, got.trial.id)
    assert t.value == 9.0
    assert t.error == "loss above 5 at epoch 3 (at fold 0, epoch 3: 9; the median of the 3 completed trials there: 2)"


def test_prune_needs_the_lease_and_stops_the_next_heartbeat(svc: Service) -> None:
    _, lease = _leased(svc)
    calls = _calls(svc)
    assert not calls.prune(L(lease.agent_id, lease.trial_id, "other"), 1.0, "worse", NOW)
    assert calls.prune(lease, 1.5, "worse than the median", NOW)
    t = _row(svc, lease.trial_id)
    assert (t.state, t.value, t.error) == (d.TrialState.PRUNED, 1.5, "worse than the median")
    beat = calls.heartbeat(lease, NOW, LATER)
    assert beat is not None and beat.why == Refusal.STOPPED and beat.trial is not None
    assert not calls.prune(lease, 1.0, "again", NOW)


def test_expire_requeues_only_a_lease_that_ran_out(svc: Service) -> None:
    _, lease = _leased(svc)
    calls = _calls(svc)
    assert calls.expire(lease.trial_id, NOW) is None  # it runs until NOW + 30 s
    gone = calls.expire(lease.trial_id, NOW + timedelta(seconds=31))
    assert gone is not None and gone.id == lease.trial_id
    t = _row(svc, lease.trial_id)
    assert (t.state, t.attempt, t.agent_id) == (d.TrialState.QUEUED, 2, "")
    assert [e.kind for e in t.events] == ["acquired", "lease_expired"]


def test_deregister_requeues_what_the_agent_held(svc: Service) -> None:
    c = _campaign(svc)
    agents = _agents(svc, 2)
    got = _acquire(svc, c.id, [*agents, agents[0]])
    assert _calls(svc).deregister(agents[0], NOW) == sorted([got[0].id, got[2].id])
    assert _row(svc, got[1].id).state == d.TrialState.RUNNING
    assert _row(svc, got[0].id).state == d.TrialState.QUEUED


def test_events_are_bounded_per_attempt_and_kind(svc: Service) -> None:
    _, lease = _leased(svc)
    calls = _calls(svc)
    for _ in range(3):
        assert calls.add_event(lease, "checkpoint_refused", "no space", NOW, limit=3) is None
    over = calls.add_event(lease, "checkpoint_refused", "no space", NOW, limit=3)
    assert isinstance(over, Refused) and over.why == Refusal.TOO_MANY_EVENTS


# -- refusals change nothing; the guards are the rules ----------------------------------


def _every_call(svc: Service, lease: L, now: datetime) -> dict[str, Any]:
    calls = _calls(svc)
    return {
        "heartbeat": calls.heartbeat(lease, now, now + timedelta(seconds=600)),
        "report": calls.report(lease, 0, 1, 0.5, "", now, now + timedelta(seconds=600)),
        "fold": calls.finish_fold(lease, 0, 0.5, {}, "", now, now + timedelta(seconds=600)),
        "complete": calls.complete(lease, now),
        "release": calls.release(lease, d.TrialState.FAILED, "", now),
    }


STATES = [
    d.TrialState.RUNNING,
    d.TrialState.QUEUED,
    d.TrialState.COMPLETED,
    d.TrialState.CANCELLED,
    d.TrialState.PRUNED,
    d.TrialState.FAILED,
]


def test_the_guards_agree_with_the_lease_rule_and_a_refusal_changes_nothing(svc: Service) -> None:
    """Every (trial state, lease, agent, time) of the grid: a call goes through exactly
    when rules.lease_refusal says the lease holds, and a refused call leaves the trial,
    its folds, curves and events, and the campaign as they were."""
    c = _campaign(svc, max_trials=1000, max_parallel=1000)
    agents = _agents(svc, 1)
    cases = list(itertools.product(STATES, ["right", "other lease", "other agent"], [NOW, NOW + timedelta(hours=1)]))
    trials = _acquire(svc, c.id, agents * len(cases))
    for (state, who, now), t in zip(cases, trials, strict=True):
        _set(svc, t.id, state=state.value)
        lease = L(agents[0] if who != "other agent" else "someone", t.id, t.lease_id if who != "other lease" else "x")
        expected = rules.lease_refusal(_row(svc, t.id), lease.agent_id, lease.lease_id, now)
        with svc.ctx.storage.read() as tx:
            before = (_row(svc, t.id), tx.campaigns.get(c.id))
        got = _every_call(svc, lease, now)
        for call, answer in got.items():
            if expected is None:
                assert not isinstance(answer, Refused) or answer.why == Refusal.FOLDS_MISSING, (state, who, now, call)
                continue
            if (call, state, who) == ("complete", d.TrialState.COMPLETED, "right"):
                assert isinstance(answer, d.Trial) and answer.id == t.id  # a retry of a completion
                continue
            assert isinstance(answer, Refused) and answer.why == expected, (state, who, now, call, answer)
        if expected is not None:
            with svc.ctx.storage.read() as tx:
                assert (_row(svc, t.id), tx.campaigns.get(c.id)) == before, (state, who, now)


def test_a_missing_trial_is_named(svc: Service) -> None:
    _campaign(svc)
    for call, answer in _every_call(svc, L("a", 987_654, "x"), NOW).items():
        assert isinstance(answer, Refused) and answer.why == Refusal.NO_TRIAL, call


@pytest.mark.postgres
def test_a_heartbeat_skips_the_flush_for_itself_only(pg_url: str) -> None:
    """The heartbeat turns synchronous_commit off for its own transaction: the pooled
    connection it ran on is durable again for the report that uses it next."""
    storage = Storage(pg_url)
    try:
        svc = Service(storage)
        svc.ctx.clock = lambda: NOW
        _, lease = _leased(svc)
        with storage.db.autocommit() as c:
            before = c.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        assert _calls(svc).heartbeat(lease, NOW, LATER) is None
        with storage.db.autocommit() as c:
            assert c.exec_driver_sql("SELECT pg_backend_pid()").scalar() == before  # the same pooled connection
            assert c.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"
    finally:
        storage.close()


@pytest.mark.postgres
def test_a_completion_that_loses_its_trial_under_the_lock_takes_no_count(pg_url: str) -> None:
    """PostgreSQL completes in one statement: the campaign's counter first, then the
    trial under its row lock. If the reaper requeues the trial while the completion
    waits for the campaign's lock, the trial's guard fails under the lock and the whole
    statement must roll back: no finish_seq taken, nothing completed."""
    import threading

    import psycopg

    storage = Storage(pg_url)
    try:
        svc = Service(storage)
        svc.ctx.clock = lambda: NOW
        c, lease = _leased(svc)
        for k in range(3):
            assert isinstance(_calls(svc).finish_fold(lease, k, 1.0, {}, "", NOW, LATER), FoldDone)
        other = psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"))
        other.execute("SELECT 1 FROM campaigns WHERE id = %s FOR UPDATE", (c.id,))  # as the reaper: campaign first
        other.execute(
            "UPDATE trials SET state = 'QUEUED', lease_id = '', agent_id = '' WHERE id = %s", (lease.trial_id,)
        )
        got: list[Any] = []
        t = threading.Thread(target=lambda: got.append(_calls(svc).complete(lease, NOW)))
        t.start()
        waiting = (
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as probe:
            for _ in range(600):  # until the completion waits for the campaign's lock
                if probe.execute(waiting).fetchone()[0]:  # type: ignore[index]
                    break
                threading.Event().wait(0.05)
            else:
                raise AssertionError("the completion never waited for the campaign's lock")
        other.commit()
        other.close()
        t.join(timeout=scaled(60))
        assert len(got) == 1 and isinstance(got[0], Refused) and got[0].why == Refusal.NOT_HOLDER
        trial = _row(svc, lease.trial_id)
        with svc.ctx.storage.read() as tx:
            campaign = tx.campaigns.get(c.id)
        assert campaign is not None and campaign.trials_finished == 0
        assert (trial.state, trial.finish_seq) == (d.TrialState.QUEUED, None)
        assert "completed" not in [e.kind for e in trial.events]
    finally:
        storage.close()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_the_migration_clears_the_values_that_were_never_results(
    backend: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    """Migration 0011: the values the old SQLite path wrote into running, queued and
    failed trials and into open folds go; a COMPLETED trial's result, a PRUNED one's
    value reached and a finished fold's value stay."""
    from tests.helpers.pg import fresh_pg_database

    fresh = fresh_pg_database(request.getfixturevalue("pg_admin")) if backend == "postgresql" else None
    url = next(fresh) if fresh is not None else f"sqlite:///{tmp_path / 'old.db'}"
    try:
        upgrade(url, "0010")
        # Rows as the schema of 0010 holds them (its own tables, reflected: this release's
        # models have columns that schema lacks).
        engine = create_engine(url)
        tables = MetaData()
        tables.reflect(engine)
        campaigns, trial_rows, folds = (tables.tables[t] for t in ("campaigns", "trials", "folds"))
        states = ["RUNNING", "QUEUED", "FAILED", "COMPLETED", "PRUNED"]
        with engine.begin() as c:
            cid = c.execute(
                insert(campaigns).values(
                    name="old", state="RUNNING", spec=make_spec(), next_number=5, finished_count=0, created_at=NOW
                )
            ).inserted_primary_key[0]
            ids = []
            for k, state in enumerate(states):
                tid = c.execute(
                    insert(trial_rows).values(
                        campaign_id=cid,
                        number=k,
                        state=state,
                        attempt=1,
                        params={},
                        value=k + 0.5,
                        value_std=0.1,
                        agent_id="",
                        lease_id="",
                        error="",
                        created_at=NOW,
                    )
                ).inserted_primary_key[0]
                ids.append(tid)
                for fold, finished, value in ((0, False, 2.28), (1, True, 0.5)):
                    c.execute(
                        insert(folds).values(
                            trial_id=tid,
                            fold=fold,
                            finished=finished,
                            value=value,
                            metrics={},
                            attempt=1,
                            checkpoint_uri="",
                            updated_at=NOW,
                        )
                    )
        engine.dispose()
        trials = [
            d.Trial(
                id=tid, campaign_id=cid, number=k, state=d.TrialState(states[k]), attempt=1, params={}, created_at=NOW
            )
            for k, tid in enumerate(ids)
        ]
        upgrade(url)
        storage = Storage(url)
        with storage.read() as tx:
            got = {t.id: tx.trials.get(t.id) for t in trials}
        storage.close()
        values = {states[k]: (got[t.id].value, got[t.id].value_std) for k, t in enumerate(trials)}  # type: ignore[union-attr]
        assert values == {
            "RUNNING": (None, None),
            "QUEUED": (None, None),
            "FAILED": (None, None),
            "COMPLETED": (3.5, 0.1),
            "PRUNED": (4.5, 0.1),
        }
        for t in got.values():
            assert t is not None and [(f.index, f.value) for f in t.folds] == [(0, None), (1, 0.5)]
    finally:
        if fresh is not None:
            fresh.close()
