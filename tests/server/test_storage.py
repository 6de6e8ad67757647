"""The storage conformance suite: the contract of ``storage/repository.py``, a test class
per repository of the unit of work, each test run on every storage mode (SQLite,
SQLite without ``RETURNING`` and the real PostgreSQL). The last tests pin the suite
itself: every public storage method is called here, has a one-line contract, and the
read-only repositories never write."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text, update

from hpcopt_server import domain as d
from hpcopt_server.storage import migrate
from hpcopt_server.storage import models as m
from hpcopt_server.storage.repository import Storage, Tx
from hpcopt_server.storage.store import Store
from tests.helpers.db import migrated_sqlite
from tests.helpers.specs import make_spec

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
LATER = NOW + timedelta(seconds=30)
PARAMS = {"lr": 0.1, "width": 8, "act": "relu"}
MODES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite-without-returning"]


@pytest.fixture(params=MODES)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    if request.param == "postgresql":
        url: str = request.getfixturevalue("pg_url")
    else:
        url = migrated_sqlite(tmp_path / "hpcopt.db")
    s = Storage(url)
    if request.param == "sqlite-without-returning":
        dialect = s.db.engine.dialect
        dialect.update_returning = dialect.insert_returning = dialect.delete_returning = False
    assert s.returning == (request.param != "sqlite-without-returning")
    yield s
    s.close()


def _campaign(storage: Storage, **spec: Any) -> d.Campaign:
    with storage.write() as tx:
        return tx.campaigns.insert("c", make_spec(**spec), NOW, submitted_at=NOW)


def _trial(storage: Storage, campaign_id: int, number: int = 0, state: d.TrialState = d.TrialState.QUEUED) -> d.Trial:
    with storage.write() as tx:
        return tx.trials.insert(campaign_id, number, PARAMS, state, NOW)


def _hold(storage: Storage, trial_id: int, agent_id: str, lease_id: str, expires: datetime) -> None:
    """The trial RUNNING under a lease, as an acquisition leaves it."""
    with storage.write() as tx:
        q = update(m.TrialRow).where(m.TrialRow.id == trial_id)
        values = {"state": "RUNNING", "agent_id": agent_id, "lease_id": lease_id, "lease_expires_at": expires}
        tx.connection().execute(q.values(**values))


def _agent(agent_id: str, campaign_id: int | None, seen: datetime = NOW) -> d.Agent:
    return d.Agent(agent_id, f"host-{agent_id}", 4, 1, "123", campaign_id, 77, "0.1", NOW, seen)


class TestUnitOfWork:
    def test_schema_is_at_head_after_upgrade(self, storage: Storage) -> None:
        assert migrate.current_revision(storage.db.url.render_as_string(hide_password=False)) == (
            migrate.head_revision()
        )

    def test_an_exception_rolls_the_whole_transaction_back(self, storage: Storage) -> None:
        c = _campaign(storage)
        with pytest.raises(RuntimeError), storage.write() as tx:
            tx.trials.insert(c.id, 0, {"lr": 0.1}, d.TrialState.QUEUED, NOW)
            tx.connection().execute(update(m.CampaignRow).values(next_number=5))
            raise RuntimeError("boom")
        with storage.read() as tx:
            assert tx.trials.page(c.id) == ([], 0)
            assert tx.views.plot_revision(c.id) == (0, NOW, 0)

    def test_lookups_of_missing_things_return_none(self, storage: Storage) -> None:
        with storage.read() as tx:
            assert tx.campaigns.get(999) is None and tx.campaigns.lock(999) is None
            assert tx.trials.get(999) is None
            assert tx.agents.get("nope") is None
            assert tx.tokens.by_hash("0" * 64) is None
            assert tx.flags.get("nope") is None
            assert tx.views.trial_id_by_number(999, 0) is None and tx.views.plot_revision(999) is None

    def test_changing_missing_things_raises_key_error(self, storage: Storage) -> None:
        changes: list[Callable[[Tx], object]] = [
            lambda tx: tx.trials.requeue(999, 2),
            lambda tx: tx.trials.finish(999, d.TrialState.FAILED, NOW),
            lambda tx: tx.campaigns.set_state(999, d.CampaignState.CANCELLED, NOW),
            lambda tx: tx.campaigns.set_next_number(999, 3),
            lambda tx: tx.campaigns.set_spec(999, make_spec()),
            lambda tx: tx.tokens.revoke(999, NOW),
            lambda tx: tx.fidelity.pause(999, d.Fidelity(0, 1, 1), 0.5, 0.0, None),
            lambda tx: tx.fidelity.record(999, d.Fidelity(0, 1, 1)),
        ]
        for change in changes:
            with storage.write() as tx, pytest.raises(KeyError):
                change(tx)


class TestFidelity:
    """A multi-fidelity trial's rung: paused between rungs, promoted as itself."""

    def test_a_paused_trial_keeps_its_rung_and_value_and_ends_its_lease(self, storage: Storage) -> None:
        c = _campaign(storage)
        t = _trial(storage, c.id)
        _hold(storage, t.id, "a1", "l1", LATER)
        rung = d.RungResult(0, 1, 2, 0.4, (0.4,), 1.5)
        fidelity = d.Fidelity(0, 1, 2, "at random", (rung,))
        with storage.write() as tx:
            assert tx.trials.get(t.id) is not None  # loaded into the session first
            tx.fidelity.pause(t.id, fidelity, 0.4, 0.0, None)
            got = tx.trials.get(t.id)
        assert got is not None and got.state == d.TrialState.PAUSED and got.value == 0.4
        assert got.fidelity == fidelity and got.lease_expires_at is None and got.lease_id == "l1"
        with storage.read() as tx:
            assert tx.trials.count_active(c.id) == 0 and tx.trials.unfinished_ids(c.id) == [t.id]

    @pytest.mark.parametrize(("folds", "epochs", "reopened"), [(1, 6, True), (3, 2, False)], ids=["epochs", "folds"])
    def test_a_promotion_runs_the_same_trial_and_reopens_only_folds_it_extends(
        self, storage: Storage, folds: int, epochs: int, reopened: bool
    ) -> None:
        c = _campaign(storage)
        t = _trial(storage, c.id)
        rung = d.RungResult(0, 1, 2, 0.4, (0.4,), 1.5)
        uri = "file:///ck/s/1/1/fold0.pt"
        with storage.write() as tx:
            tx.trials.put_folds(t.id, [d.Fold(0, True, 0.4, {"loss": 0.4}, uri, 1)], NOW)
            tx.fidelity.pause(t.id, d.Fidelity(0, 1, 2, "", (rung,)), 0.4, 0.0, None)
        nxt = d.Fidelity(1, folds, epochs, "in the best 1/3", (rung,))
        with storage.write() as tx:
            assert tx.fidelity.promote(t.id, nxt, "a2", "l2", LATER)
            assert not tx.fidelity.promote(t.id, nxt, "a3", "l3", LATER)  # no longer PAUSED
            assert not tx.fidelity.promote(999, nxt, "a3", "l3", LATER)
        with storage.read() as tx:
            got = tx.trials.get(t.id)
        assert got is not None and got.id == t.id and got.state == d.TrialState.RUNNING
        assert (got.agent_id, got.lease_id, got.value, got.fidelity) == ("a2", "l2", None, nxt)
        [fold] = got.folds
        assert fold.finished is not reopened and fold.checkpoint_uri == uri

    def test_recorded_fidelity_replaces_the_stored_one(self, storage: Storage) -> None:
        c = _campaign(storage)
        t = _trial(storage, c.id)
        top = d.Fidelity(2, 3, 2, "why", (d.RungResult(2, 3, 2, 0.3, (0.3, 0.3, 0.3), 4.0),))
        with storage.write() as tx:
            tx.fidelity.record(t.id, top)
        with storage.read() as tx:
            got = tx.trials.get(t.id)
        assert got is not None and got.fidelity == top


class TestCampaigns:
    def test_a_campaign_round_trips_with_aware_utc_timestamps(self, storage: Storage) -> None:
        c = _campaign(storage)
        with storage.read() as tx:
            got = tx.campaigns.get(c.id)
        assert got == c
        assert got is not None and got.created_at == NOW and got.created_at.tzinfo is not None
        assert got.spec["budget"]["max_trials"] == 10 and got.state == d.CampaignState.RUNNING

    def test_pages_are_newest_first_with_the_total(self, storage: Storage) -> None:
        ids = [_campaign(storage).id for _ in range(5)]
        with storage.read() as tx:
            page, total = tx.campaigns.page(1, 2)
        assert [c.id for c in page] == ids[::-1][1:3] and total == 5

    def test_state_numbering_and_lock_read_what_was_written(self, storage: Storage) -> None:
        c = _campaign(storage)
        with storage.write() as tx:
            tx.campaigns.set_next_number(c.id, 7)
            tx.campaigns.set_state(c.id, d.CampaignState.CANCELLED, LATER)
            locked = tx.campaigns.lock(c.id)
        assert locked is not None and locked.trials_created == 7
        assert locked.state == d.CampaignState.CANCELLED and locked.finished_at == LATER
        with storage.write() as tx:
            tx.campaigns.set_spec(c.id, {**c.spec, "budget": {"max_trials": 12, "max_parallel": 4}})
        with storage.read() as tx:
            got = tx.campaigns.get(c.id)
        assert got is not None and got.max_trials == 12 and got.spec["space"] == c.spec["space"]

    def test_named_finds_a_names_campaigns_newest_first_under_its_lock(self, storage: Storage) -> None:
        with storage.write() as tx:
            a = tx.campaigns.insert("same", make_spec(), NOW, submitted_at=NOW)
            tx.campaigns.insert("other", make_spec(), NOW, submitted_at=NOW)
            b = tx.campaigns.insert("same", make_spec(), NOW, submitted_at=NOW)
            assert [c.id for c in tx.campaigns.named("same", lock=True)] == [b.id, a.id]
            assert tx.campaigns.named("none") == []

    def test_a_pause_reason_is_kept_and_cleared_and_a_delete_takes_everything(self, storage: Storage) -> None:
        c = _campaign(storage)
        t = _trial(storage, c.id)
        with storage.write() as tx:
            tx.campaigns.set_pause_reason(c.id, "3 trials in a row failed the same way")
        with storage.read() as tx:
            got = tx.campaigns.get(c.id)
            assert got is not None and got.pause_reason == "3 trials in a row failed the same way"
        with storage.write() as tx:
            tx.campaigns.set_pause_reason(c.id, None)
            assert tx.campaigns.get(c.id).pause_reason is None  # type: ignore[union-attr]
            with pytest.raises(KeyError):
                tx.campaigns.set_pause_reason(c.id + 100, "x")
        with storage.write() as tx:
            tx.campaigns.delete(c.id)
        with storage.read() as tx:
            assert tx.campaigns.get(c.id) is None and tx.trials.get(t.id) is None

    def test_submissions_count_the_tokens_own_campaigns_since_a_time(self, storage: Storage) -> None:
        with storage.write() as tx:
            mine = tx.tokens.insert("mine", "a" * 64, ["write"], NOW)
            other = tx.tokens.insert("other", "b" * 64, ["write"], NOW)
            for at, by in ((NOW, mine), (LATER, mine), (LATER, other), (NOW, None)):
                tx.campaigns.insert("c", make_spec(), at, submitted_at=at, created_by=by)
        with storage.write() as tx:
            assert tx.campaigns.submissions_by(mine.id, NOW) == [NOW, LATER]
            assert tx.campaigns.submissions_by(mine.id, NOW + timedelta(seconds=1)) == [LATER]

    def test_trial_counts_are_by_campaign_and_state(self, storage: Storage) -> None:
        a, b = _campaign(storage), _campaign(storage)
        for i in range(7):
            _trial(storage, a.id, i, d.TrialState.COMPLETED if i % 2 else d.TrialState.QUEUED)
        _trial(storage, b.id, 0, d.TrialState.RUNNING)
        with storage.read() as tx:
            assert tx.campaigns.trial_counts([a.id]) == {a.id: {"QUEUED": 4, "COMPLETED": 3}}
            assert tx.campaigns.trial_counts() == {a.id: {"QUEUED": 4, "COMPLETED": 3}, b.id: {"RUNNING": 1}}


class TestTrials:
    def test_numbers_are_unique_per_campaign(self, storage: Storage) -> None:
        c = _campaign(storage)
        _trial(storage, c.id, 0)
        with pytest.raises(Exception, match=r"(?i)unique|duplicate"), storage.write() as tx:
            tx.trials.insert(c.id, 0, {}, d.TrialState.QUEUED, NOW)

    def test_folds_are_stored_as_given_and_replaced_by_index(self, storage: Storage) -> None:
        c = _campaign(storage)
        t = _trial(storage, c.id)
        with storage.write() as tx:
            tx.trials.put_folds(t.id, [d.Fold(1, False, None, {}, "file:///b", 1)], NOW)
            tx.trials.put_folds(
                t.id, [d.Fold(1, True, 0.5, {"acc": 0.9}, "file:///a", 1), d.Fold(0, False, None, {}, "", 1)], NOW
            )
            tx.trials.put_folds(t.id, [], NOW)
        with storage.read() as tx:
            got = tx.trials.get(t.id)
            bare = tx.trials.get(t.id, folds=False)
        assert got is not None and bare is not None and bare.folds == ()
        assert [f.index for f in got.folds] == [0, 1]
        assert got.folds[1] == d.Fold(1, True, 0.5, {"acc": 0.9}, "file:///a", 1)
        assert not got.folds[0].finished

    def test_curve_points_replace_on_the_same_fold_and_step_and_thin(self, storage: Storage) -> None:
        c = _campaign(storage)
        t = _trial(storage, c.id)
        with storage.write() as tx:
            tx.trials.put_curve(t.id, 0, [(1, 0.7), (0, 1.0)])
            tx.trials.put_curve(t.id, 0, [(1, 0.9), (1, 0.8)])  # a stored step; a repeated one: the last
            tx.trials.add_event(t.id, 1, "acquired", NOW, agent_id="a1")
        with storage.read() as tx:
            got = tx.trials.get(t.id, full=True)
        assert got is not None
        assert got.curves == (d.CurvePoint(0, 0, 1.0), d.CurvePoint(0, 1, 0.8))
        assert [(e.kind, e.agent_id) for e in got.events] == [("acquired", "a1")]
        with storage.write() as tx:
            tx.trials.put_curve(t.id, 0, [(step, 1.0 / step) for step in range(2, 40)])
            gone = tx.trials.thin_curve(t.id, 0, 10)
        with storage.read() as tx:
            kept = tx.results.curves_of([t.id], None)[t.id]
        assert gone == 40 - len(kept) and 0 < len(kept) <= 10
        assert kept[0].step == 0 and kept[-1].step == 39, "thinning keeps a curve's ends"

    def test_pages_filter_sort_and_count(self, storage: Storage) -> None:
        c = _campaign(storage)
        with storage.write() as tx:
            for i, v in enumerate([0.5, 0.1, 0.9, 0.3]):
                tx.trials.insert(c.id, i, {"lr": v}, d.TrialState.COMPLETED, NOW, value=v)
            tx.trials.insert(c.id, 4, {"lr": 0.2}, d.TrialState.QUEUED, NOW)
        with storage.read() as tx:
            page, total = tx.trials.page(c.id, offset=1, limit=2)
            done, n_done = tx.trials.page(c.id, states=[d.TrialState.COMPLETED], sort="value", descending=True)
            ranged, n_ranged = tx.trials.page(c.id, ranges=[("lr", 0.15, 0.6)], sort="param:lr")
            by_id = tx.trials.by_ids([done[0].id, 999, done[-1].id], with_folds=True)
        assert [t.number for t in page] == [1, 2] and total == 5
        assert [t.value for t in done] == [0.9, 0.5, 0.3, 0.1] and n_done == 4
        assert [t.number for t in ranged] == [4, 3, 0] and n_ranged == 3
        assert [t.id for t in by_id] == [done[0].id, done[-1].id]
        with storage.read() as tx, pytest.raises(ValueError, match="sort must be one of"):
            tx.trials.page(c.id, sort="params; DROP TABLE trials")

    def test_active_unfinished_and_expired_trials(self, storage: Storage) -> None:
        c = _campaign(storage)
        old, fresh = _trial(storage, c.id, 0), _trial(storage, c.id, 1)
        queued = _trial(storage, c.id, 2)
        _trial(storage, c.id, 3, d.TrialState.COMPLETED)
        _hold(storage, old.id, "a1", "l1", NOW - timedelta(seconds=1))
        _hold(storage, fresh.id, "a2", "l2", NOW + timedelta(seconds=60))
        with storage.read() as tx:
            assert [t.id for t in tx.trials.expired(NOW)] == [old.id]
            assert tx.trials.unfinished_ids(c.id) == [old.id, fresh.id, queued.id]
            assert tx.trials.count_active(c.id) == 3

    def test_a_requeued_trial_is_queued_as_the_next_attempt_without_its_lease(self, storage: Storage) -> None:
        c = _campaign(storage)
        t = _trial(storage, c.id)
        _hold(storage, t.id, "a1", "l1", LATER)
        with storage.write() as tx:
            assert tx.trials.get(t.id, lock=True) is not None  # loaded into the session first
            tx.trials.requeue(t.id, 2)
            got = tx.trials.get(t.id)
        assert got is not None and (got.state, got.attempt, got.agent_id, got.lease_id) == ("QUEUED", 2, "", "")

    def test_a_replanned_interval_keeps_its_number_and_lease_with_new_params_and_lineage(
        self, storage: Storage
    ) -> None:
        c = _campaign(storage)
        t = _trial(storage, c.id, number=5)
        _hold(storage, t.id, "a1", "l1", NOW)
        lineage = d.Lineage(1, 2, 4, parent=3, previous=1, changed={"x": [0.1, 0.2]}, parent_id=9, unreadable=(0,))
        with storage.write() as tx:
            assert tx.trials.get(t.id, lock=True) is not None  # loaded into the session first
            tx.trials.set_plan(t.id, {"x": 0.2}, lineage, LATER)
            got = tx.trials.get(t.id)
        assert got is not None and (got.number, got.agent_id, got.lease_id, got.attempt) == (5, "a1", "l1", 1)
        assert got.params == {"x": 0.2} and got.lineage == lineage and got.lease_expires_at == LATER

    def test_a_grown_trial_keeps_its_lease_and_state_with_its_new_params(self, storage: Storage) -> None:
        c = _campaign(storage)
        t = _trial(storage, c.id, number=2)
        _hold(storage, t.id, "a1", "l1", NOW)
        with storage.write() as tx:
            assert tx.trials.get(t.id, lock=True) is not None  # loaded into the session first
            tx.trials.set_params(t.id, {"x": 0.5, "y": 3})
            got = tx.trials.get(t.id)
        assert got is not None and (got.number, got.state, got.agent_id, got.lease_id) == (2, "RUNNING", "a1", "l1")
        assert got.params == {"x": 0.5, "y": 3}
        with storage.read() as tx:
            again = tx.trials.get(t.id)
        assert again is not None and again.params == {"x": 0.5, "y": 3}, "committed"


class TestFinishing:
    """Every transition that takes a finish number: ``trials.finish`` and the writer
    behind it (``storage.finishing``), which completions use too."""

    def test_finishing_hands_out_a_dense_sequence_read_incrementally(self, storage: Storage) -> None:
        c = _campaign(storage)
        trials = [_trial(storage, c.id, i, d.TrialState.RUNNING) for i in range(4)]
        states = [d.TrialState.COMPLETED, d.TrialState.FAILED, d.TrialState.PRUNED]
        for t, state in zip([trials[2], trials[0], trials[3]], states, strict=True):
            with storage.write() as tx:
                tx.campaigns.lock(c.id)
                assert tx.trials.get(t.id) is not None  # a stale copy in the session must not win
                seq = tx.trials.finish(t.id, state, NOW, value=1.0, lease_id="")
                got = tx.trials.get(t.id)
                assert got is not None and got.state == state and got.finish_seq == seq
        with storage.read() as tx:
            after0 = tx.results.finished_after(c.id, 0)
            after2 = tx.results.finished_after(c.id, 2)
            campaign = tx.campaigns.get(c.id)
        assert [(t.id, t.finish_seq) for t in after0] == [(trials[2].id, 1), (trials[0].id, 2), (trials[3].id, 3)]
        assert [t.id for t in after2] == [trials[3].id] and after2[0].state == d.TrialState.PRUNED
        assert campaign is not None and campaign.trials_finished == 3
        assert after0[0].finished_at == NOW and after0[0].value == 1.0

    def test_finish_keeps_the_columns_it_is_not_given(self, storage: Storage) -> None:
        c = _campaign(storage)
        t, u = _trial(storage, c.id), _trial(storage, c.id, 1)
        _hold(storage, t.id, "a1", "l1", LATER)
        with storage.write() as tx:
            tx.trials.finish(t.id, d.TrialState.FAILED, NOW, error="boom")
            got = tx.trials.get(t.id)
            # The writer itself, as trials.finish calls it: the next number, any columns.
            seq = storage.finishing.finish(tx.connection(), c.id, u.id, d.TrialState.CANCELLED, LATER, error="x")
            assert seq == 2
            cancelled = tx.trials.get(u.id)
        assert got is not None and (got.error, got.agent_id, got.lease_id, got.value) == ("boom", "a1", "l1", None)
        assert cancelled is not None and (cancelled.state, cancelled.finish_seq, cancelled.error) == (
            "CANCELLED",
            2,
            "x",
        )

    def test_a_completion_whose_lease_holds_takes_the_next_number(self, storage: Storage) -> None:
        c = _campaign(storage)
        held, lost = _trial(storage, c.id, 0), _trial(storage, c.id, 1)
        _hold(storage, held.id, "a1", "l1", LATER)
        _hold(storage, lost.id, "a2", "l2", LATER)
        p = {"cid": c.id, "aid": "a1", "lid": "l1", "now": NOW, "now2": NOW, "exp": NOW}
        done = {"value": 0.25, "std": 0.0, "values": None}
        with storage.write() as tx:
            assert storage.finishing.take(tx.connection(), c.id) == (1, "RUNNING", 10)
            tx.trials.finish(lost.id, d.TrialState.FAILED, NOW)  # 2
        with pytest.raises(_RolledBack), storage.write() as tx:
            assert storage.finishing.complete(tx.connection(), {**p, **done, "tid": lost.id}) is None
            raise _RolledBack  # as the agents' completion does: the number taken is not spent
        with storage.write() as tx:
            assert storage.finishing.complete(tx.connection(), {**p, **done, "tid": held.id}) == (3, "RUNNING", 10)
        with storage.read() as tx:
            got = tx.trials.get(held.id)
        assert got is not None and (got.state, got.value, got.finish_seq) == ("COMPLETED", 0.25, 3)


@pytest.mark.postgres
def test_postgresql_completes_in_one_statement_that_changes_nothing_when_the_lease_is_gone(pg_url: str) -> None:
    """The finishing writer's PostgreSQL form (the other modes complete in a transaction)."""
    storage = Storage(pg_url)
    c = _campaign(storage, budget={"max_trials": 1, "max_parallel": 1})
    t = _trial(storage, c.id)
    _hold(storage, t.id, "a1", "l1", LATER)
    p = {"cid": c.id, "tid": t.id, "aid": "a1", "now": NOW, "exp": NOW, "value": 0.5, "std": 0.0, "values": None}
    with storage.db.autocommit() as conn:
        assert storage.finishing.complete_alone(conn, {**p, "lid": "someone else's"}) is None
        assert storage.finishing.complete_alone(conn, {**p, "lid": "l1"}) == 1
    with storage.read() as tx:
        got, campaign = tx.trials.get(t.id, full=True), tx.campaigns.get(c.id)
    storage.close()
    assert got is not None and got.state == "COMPLETED" and [e.kind for e in got.events] == ["completed"]
    assert campaign is not None and campaign.state == d.CampaignState.COMPLETED and campaign.trials_finished == 1


class _RolledBack(Exception):
    pass


class TestAgents:
    def test_an_agent_round_trips_is_seen_and_says_goodbye(self, storage: Storage) -> None:
        with storage.write() as tx:
            tx.agents.insert(_agent("a1", None))
            tx.agents.seen("a1", NOW + timedelta(seconds=5))
        with storage.read() as tx:
            assert tx.agents.get("a1") == _agent("a1", None, NOW + timedelta(seconds=5))
        with storage.write() as tx:
            tx.agents.end("a1", LATER, "refused the task")
            tx.agents.end("a1", LATER + timedelta(seconds=1))  # a second goodbye keeps the reason
        with storage.read() as tx:
            got = tx.agents.get("a1")
        assert got is not None and got.exited_at == LATER + timedelta(seconds=1)
        assert got.exit_reason == "refused the task"

    def test_a_resized_agent_keeps_its_new_ranks_and_gpus(self, storage: Storage) -> None:
        with storage.write() as tx:
            tx.agents.insert(_agent("a1", None))
            tx.agents.insert(_agent("a2", None))
            tx.agents.resize("a1", 1, 0, LATER)
        with storage.read() as tx:
            got, other = tx.agents.get("a1"), tx.agents.get("a2")
        assert got is not None and (got.ranks, got.gpus, got.last_seen_at) == (1, 0, LATER)
        assert other == _agent("a2", None)  # only the one named

    def test_listings_hosts_and_live_counts(self, storage: Storage) -> None:
        a, b = _campaign(storage), _campaign(storage)
        with storage.write() as tx:
            tx.agents.insert(_agent("a1", a.id))
            tx.agents.insert(_agent("a2", a.id, LATER))
            tx.agents.insert(_agent("b1", b.id, NOW - timedelta(seconds=60)))
            tx.agents.insert(_agent("x", None, LATER))
        with storage.read() as tx:
            assert [x.id for x in tx.agents.registered(a.id)] == ["a1", "a2"]
            assert len(tx.agents.registered()) == 4
            assert tx.agents.hosts(["a1", "b1", "nope", ""]) == {"a1": ("host-a1", "123"), "b1": ("host-b1", "123")}
            assert tx.agents.live_counts(NOW) == {a.id: 2}

    def test_the_trials_an_agent_holds(self, storage: Storage) -> None:
        c = _campaign(storage)
        t0, t1, t2 = (_trial(storage, c.id, i) for i in range(3))
        _hold(storage, t0.id, "a1", "l0", LATER)
        _hold(storage, t2.id, "a1", "l2", NOW)
        _hold(storage, t1.id, "a2", "l1", LATER)
        with storage.write() as tx:
            tx.campaigns.lock(c.id)
            tx.trials.finish(t2.id, d.TrialState.FAILED, NOW)
        with storage.read() as tx:
            assert tx.agents.holding("a1") == [t0.id]
            assert tx.agents.running_in(c.id) == {"a1": (t0.id, LATER), "a2": (t1.id, LATER)}


class TestTokens:
    def test_tokens_round_trip_and_revoke(self, storage: Storage) -> None:
        with storage.write() as tx:
            tok = tx.tokens.insert("ci", "f" * 64, ["read", "agent"], NOW)
            again = tx.tokens.insert("ci again", "f" * 64, ["admin"], LATER)  # the same secret: that one
            other = tx.tokens.insert("b", "e" * 64, ["read"], NOW)
        assert again == tok and tok.scopes == {"read", "agent"}
        with storage.read() as tx:
            assert tx.tokens.by_hash("f" * 64) == tok
            assert tx.tokens.stored() == [tok, other] and tx.tokens.count_active() == 2
        with storage.write() as tx:
            tx.tokens.revoke(tok.id, NOW)
        with storage.read() as tx:
            assert tx.tokens.count_active() == 1
            revoked = tx.tokens.by_hash("f" * 64)
            assert revoked is not None and revoked.revoked_at == NOW

    def test_flags_are_set_and_ensured_once(self, storage: Storage) -> None:
        with storage.write() as tx:
            assert tx.flags.ensure("server_id", "first", NOW) == "first"
            assert tx.flags.ensure("server_id", "second", LATER) == "first"
            tx.flags.set("auth", "on", NOW)
            tx.flags.set("auth", "off", LATER)
        with storage.read() as tx:
            assert tx.flags.get("auth") == "off" and tx.flags.get("server_id") == "first"


class TestNotes:
    def test_a_save_needs_the_version_it_was_edited_from(self, storage: Storage) -> None:
        c = _campaign(storage)
        with storage.write() as tx:
            assert tx.notes.get(c.id, None) == d.Note(c.id, None)
            first = tx.notes.save(c.id, None, "campaign", 0, NOW, "ann")
            assert tx.notes.save(c.id, None, "lost", 0, NOW, "bob") is None  # a second first save
            assert tx.notes.save(c.id, 3, "trial 3", 0, NOW, "ann") is not None
            assert tx.notes.save(c.id, 1, "", 0, NOW, "ann") is not None
        assert first is not None and first.version == 1
        with storage.write() as tx:
            assert tx.notes.save(c.id, None, "stale", 0, LATER, "bob") is None
            second = tx.notes.save(c.id, None, "edited", 1, LATER, "bob")
        assert second is not None and second.version == 2
        with storage.read() as tx:
            assert tx.notes.get(c.id, None).body == "edited"
            assert tx.notes.of_campaign(c.id) == {None: "edited", 3: "trial 3"}
            assert tx.notes.noted_trials(c.id) == [3]
            # Every saved version stays, newest first; refused saves left none.
            assert [(v.version, v.saved_by, v.chars) for v in tx.notes.versions(c.id, None)[0]] == [
                (2, "bob", 6),
                (1, "ann", 8),
            ]
            assert tx.notes.version(c.id, None, 1) == d.Note(c.id, None, "campaign", 1, NOW, "ann")
            assert tx.notes.version(c.id, None, 3) is None
            assert [v.version for v in tx.notes.versions(c.id, 1)[0]] == [1]
            assert tx.notes.versions(c.id, 2) == ([], 0)


class TestAnalyses:
    """A fold's curvature and landscape: one per trial and fold, replaced when computed
    again, gone with the trial."""

    def test_an_analysis_is_kept_per_fold_replaced_when_computed_again_and_read_by_campaign(
        self, storage: Storage
    ) -> None:
        c = _campaign(storage)
        t, u = _trial(storage, c.id), _trial(storage, c.id, 1)
        doc = {"hessian": {"eigenvalues": [2.5, 1.0]}, "cost": {"hvps": 20}}
        with storage.write() as tx:
            tx.analyses.save(t.id, 1, 1, doc, NOW)
            tx.analyses.save(t.id, 0, 1, {"landscape": {"line": {"loss": [0.5]}}}, NOW)
            tx.analyses.save(u.id, 0, 1, doc, NOW)
            tx.analyses.save(t.id, 1, 2, {**doc, "cost": {"hvps": 30}}, LATER)  # a later attempt's
        with storage.read() as tx:
            got = tx.analyses.of_trial(t.id)
            assert [(a.fold, a.attempt, a.computed_at) for a in got] == [(0, 1, NOW), (1, 2, LATER)]
            assert got[1].document == {**doc, "cost": {"hvps": 30}}
            assert tx.analyses.of_trial(999) == []
            by_trial = tx.analyses.of_campaign(c.id)
            assert sorted(by_trial) == [t.id, u.id] and [a.fold for a in by_trial[t.id]] == [0, 1]
            assert tx.analyses.of_campaign(999) == {}
        with storage.write() as tx:
            tx.campaigns.delete(c.id)
        with storage.read() as tx:
            assert tx.analyses.of_trial(t.id) == []

    def test_an_analysis_request_is_queued_leased_once_taken_again_after_its_lease_and_ended_by_its_holder(
        self, storage: Storage
    ) -> None:
        c = _campaign(storage)
        t, u = _trial(storage, c.id), _trial(storage, c.id, 1)
        with storage.write() as tx:
            assert tx.analyses.take(c.id, "a1", "l1", NOW, LATER) is None  # nothing asked
            assert tx.analyses.request(t.id, c.id, NOW).state == "QUEUED"
            tx.analyses.request(u.id, c.id, LATER)
            assert tx.analyses.take(c.id, "a1", "l1", NOW, LATER) == t.id  # the oldest first
            assert tx.analyses.take(c.id, "a2", "l2", NOW, LATER) == u.id
            assert tx.analyses.take(c.id, "a3", "l3", NOW, LATER) is None  # both held
            assert tx.analyses.take(999, "a3", "l3", NOW, LATER) is None
        with storage.read() as tx:
            r = tx.analyses.request_of(t.id)
            assert r is not None and (r.state, r.agent_id, r.lease_id, r.lease_expires_at) == (
                "RUNNING",
                "a1",
                "l1",
                LATER,
            )
            assert tx.analyses.holds(t.id, "a1", "l1", NOW)
            assert not tx.analyses.holds(t.id, "a1", "other", NOW) and not tx.analyses.holds(t.id, "a1", "l1", LATER)
            assert tx.analyses.request_of(999) is None
        after = LATER + timedelta(seconds=1)
        with storage.write() as tx:
            assert tx.analyses.take(c.id, "a3", "l3", after, after + timedelta(hours=1)) == t.id  # a1's expired
            assert not tx.analyses.end(t.id, "a1", "l1", after)  # no longer a1's
            assert tx.analyses.end(t.id, "a3", "l3", after)
            assert tx.analyses.end(u.id, "a2", "l2", after, "fold 0: checkpoint gone")
            assert not tx.analyses.end(u.id, "a2", "l2", after)  # ended already
        with storage.read() as tx:
            done, failed = tx.analyses.request_of(t.id), tx.analyses.request_of(u.id)
            assert done is not None and (done.state, done.finished_at, done.reason) == ("DONE", after, "")
            assert failed is not None and (failed.state, failed.reason) == ("FAILED", "fold 0: checkpoint gone")
        with storage.write() as tx:  # asked again: queued afresh
            again = tx.analyses.request(u.id, c.id, after)
            assert (again.state, again.agent_id) == ("QUEUED", "")
        with storage.read() as tx:
            r = tx.analyses.request_of(u.id)
            assert r is not None and (r.state, r.reason, r.finished_at, r.requested_at) == ("QUEUED", "", None, after)


class TestViews:
    def test_listed_trials_carry_the_asked_parameters(self, storage: Storage) -> None:
        c = _campaign(storage)
        with storage.write() as tx:
            tx.trials.insert(c.id, 0, PARAMS, d.TrialState.COMPLETED, NOW, value=0.5, values=[0.5, 2.0])
            tx.trials.insert(c.id, 1, {"lr": 0.3}, d.TrialState.QUEUED, NOW)
        with storage.read() as tx:
            rows = tx.views.listed_trials(c.id, names=["lr", "act"], with_values=True, numeric=["lr"])
            done = tx.views.listed_trials(c.id, [d.TrialState.COMPLETED])
            number = tx.views.trial_id_by_number(c.id, 1)
        assert [(r.number, r.params) for r in rows] == [(0, {"lr": 0.1, "act": "relu"}), (1, {"lr": 0.3})]
        assert rows[0].values == [0.5, 2.0] and [r.number for r in done] == [0] and done[0].params == {}
        assert number == rows[1].id

    def test_spans_running_detail_and_plot_revision(self, storage: Storage) -> None:
        c = _campaign(storage)
        t0, t1 = _trial(storage, c.id, 0), _trial(storage, c.id, 1)
        _hold(storage, t0.id, "a1", "l0", LATER)
        _hold(storage, t1.id, "a2", "l1", LATER)
        with storage.write() as tx:
            tx.campaigns.set_next_number(c.id, 2)
            tx.trials.add_event(t0.id, 1, "acquired", NOW, agent_id="a1")
            tx.trials.add_event(t1.id, 1, "acquired", NOW + timedelta(seconds=1), agent_id="a2")
            tx.trials.add_event(t1.id, 1, "failed", LATER, agent_id="a2")
            tx.trials.put_curve(t0.id, 0, [(1, 0.9), (2, 0.7)])
            tx.trials.put_folds(t0.id, [d.Fold(0, True, 0.7, {}, "", 1)], NOW)
            tx.campaigns.lock(c.id)
            tx.trials.finish(t1.id, d.TrialState.FAILED, LATER)
        with storage.read() as tx:
            spans = tx.views.spans(c.id)
            only = tx.views.spans(c.id, [t1.id])
            running = tx.views.running_detail(c.id)
            revision = tx.views.plot_revision(c.id)
        assert [(s.trial_id, s.agent_id, s.end, s.outcome) for s in spans] == [
            (t0.id, "a1", None, "running"),
            (t1.id, "a2", LATER, "failed"),
        ]
        assert [s.trial_id for s in only] == [t1.id]
        assert [(r.trial.id, r.folds_finished, r.latest, r.steps) for r in running] == [
            (t0.id, 1, d.CurvePoint(0, 2, 0.7), {0: 2})
        ]
        assert revision == (1, NOW, 2)


class TestResults:
    def _history(self, storage: Storage, **spec: Any) -> tuple[d.Campaign, list[d.Trial]]:
        c = _campaign(storage, **spec)
        out = []
        with storage.write() as tx:
            for i, v in enumerate([0.5, 0.1, 0.9]):
                t = tx.trials.insert(c.id, i, {"lr": v}, d.TrialState.RUNNING, NOW)
                folds = [
                    d.Fold(0, True, v, {"samples_per_second": 10.0 * (i + 1)}, "", 1),
                    d.Fold(1, True, v + 1, {}, "", 1),
                ]
                tx.trials.put_folds(t.id, folds, NOW)
                tx.trials.put_curve(t.id, 0, [(3, v)])
                out.append(t)
            tx.campaigns.lock(c.id)
            for t, v in zip(out[:2], [0.5, 0.1], strict=True):
                tx.trials.finish(t.id, d.TrialState.COMPLETED, NOW + timedelta(seconds=t.number), value=v)
            tx.connection().execute(update(m.TrialRow).where(m.TrialRow.id == out[0].id).values(values=[0.5, 1.0]))
        return c, out

    def test_the_last_finished_trials_come_last_first_with_their_failure(self, storage: Storage) -> None:
        c, (_, _, t2) = self._history(storage)
        with storage.write() as tx:
            tx.campaigns.lock(c.id)
            tx.trials.finish(t2.id, d.TrialState.FAILED, LATER, error="x", failure="ValueError at t.py:3 in f")
        with storage.read() as tx:
            assert tx.results.last_finished(c.id, 2) == [("FAILED", "ValueError at t.py:3 in f"), ("COMPLETED", None)]
            assert len(tx.results.last_finished(c.id, 10)) == 3 and tx.results.last_finished(c.id + 1, 5) == []

    def test_completed_trials_folds_and_values(self, storage: Storage) -> None:
        c, (t0, t1, _) = self._history(storage)
        with storage.read() as tx:
            assert tx.results.completed_folds(c.id) == {t0.id: (0, [0.5, 1.5]), t1.id: (1, [0.1, 1.1])}
            assert tx.results.completed_points(c.id) == [
                (t0.id, 0, 0.5, None, {"lr": 0.5}),
                (t1.id, 1, 0.1, None, {"lr": 0.1}),
            ]
            assert [p[5] for p in tx.results.completed_points_at(c.id)] == [NOW, NOW + timedelta(seconds=1)]
            assert tx.results.completed_values(c.id) == [(t0.id, [0.5, 1.0])]
            assert tx.results.best_trial_ids(c.id, "minimize", 5) == [t1.id, t0.id]
            assert tx.results.best_trial_ids(c.id, "maximize", 1) == [t0.id]
            assert [t.id for t in tx.results.finished_after(c.id, 1)] == [t1.id]

    def test_values_at_a_step_and_the_planners_fold_metrics(self, storage: Storage) -> None:
        c, (t0, t1, t2) = self._history(storage)
        with storage.read() as tx:
            assert tx.results.values_at(c.id, 0, 3, [d.TrialState.COMPLETED]) == {t0.id: 0.5, t1.id: 0.1}
            assert tx.results.values_at(c.id, 0, 3, [d.TrialState.RUNNING]) == {t2.id: 0.9}
            metrics = tx.results.fold_metrics(c.id, 10)
            assert len(metrics) == 6 and ({"lr": 0.9}, {"samples_per_second": 30.0}) in metrics
            assert len(tx.results.fold_metrics(c.id, 2)) == 2
            assert tx.results.probes(c.id, 10) == []
        with storage.write() as tx:
            probe = [("allreduce", 1, 1, 50.0), ("allreduce", 8, 2, 200.0)]
            assert tx.campaigns.add_probes(c.id, "a1", probe, 90, NOW, keep=10) == 2
            assert tx.campaigns.add_probes(c.id, "a2", [("allreduce", 1, 1, 60.0)], 80, NOW, keep=10) == 1
        with storage.read() as tx:
            # Newest first, at most the limit, this campaign's only.
            assert tx.results.probes(c.id, 2) == [("allreduce", 1, 1, 60.0, 80), ("allreduce", 8, 2, 200.0, 90)]
            assert len(tx.results.probes(c.id, 10)) == 3 and tx.results.probes(c.id + 1, 10) == []
        with storage.write() as tx:  # one row per agent and width: a1's width 1 again replaces its first
            assert tx.campaigns.add_probes(c.id, "a1", [("allreduce", 1, 1, 55.0)], 90, NOW, keep=10) == 1
        with storage.read() as tx:
            assert sorted(p[3] for p in tx.results.probes(c.id, 10)) == [55.0, 60.0, 200.0]
        with storage.write() as tx:  # past ``keep`` rows the oldest go
            assert tx.campaigns.add_probes(c.id, "a3", [("allreduce", 2, 1, 70.0)], 90, NOW, keep=2) == 1
        with storage.read() as tx:
            assert [p[3] for p in tx.results.probes(c.id, 10)] == [70.0, 55.0]
            assert tx.results.curves_of([t2.id, 999]) == {t2.id: [d.CurvePoint(0, 3, 0.9)], 999: []}

    def test_the_best_trial_follows_the_direction(self, storage: Storage) -> None:
        with storage.write() as tx:
            lo = tx.campaigns.insert("min", make_spec(), NOW, submitted_at=NOW)
            spec = make_spec(objective={"metric": "acc", "direction": "maximize"})
            hi = tx.campaigns.insert("max", spec, NOW, submitted_at=NOW)
            empty = tx.campaigns.insert("none", make_spec(), NOW, submitted_at=NOW)
            for c in (lo, hi):
                for i, v in enumerate([0.3, 0.1, 0.7]):
                    tx.trials.insert(c.id, i, {}, d.TrialState.COMPLETED, NOW, value=v)
                tx.trials.insert(c.id, 3, {}, d.TrialState.FAILED, NOW, value=-5.0)
            best = tx.results.best_trials([lo, hi, empty])
        assert best[lo.id].value == 0.1 and best[hi.id].value == 0.7 and empty.id not in best


# -- the suite itself ---------------------------------------------------------------------

REPOSITORIES = ("campaigns", "trials", "fidelity", "agents", "tokens", "flags", "notes", "analyses", "views", "results")
READ_ONLY = ("views", "results")


def _public(cls: type) -> list[str]:
    return [n for n, f in vars(cls).items() if callable(f) and not n.startswith("_")]


def _stores(storage: Storage) -> dict[str, Store]:
    with storage.read() as tx:
        return {name: getattr(tx, name) for name in REPOSITORIES}


def test_every_storage_method_is_called_by_this_suite_and_has_a_contract(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    migrate.upgrade(url)
    storage = Storage(url)
    tree = ast.parse(Path(__file__).read_text())
    called = {
        (n.func.value.attr, n.func.attr)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Attribute)
    }
    missing, silent, big = [], [], []
    stores = {**_stores(storage), "finishing": storage.finishing}
    for name, store in stores.items():
        methods = _public(type(store))
        if len(methods) > 15:
            big.append(f"{name} ({len(methods)})")
        for method in methods:
            if (name, method) not in called:
                missing.append(f"{name}.{method}")
            if not (inspect.getdoc(getattr(type(store), method)) or "").strip():
                silent.append(f"{name}.{method}")
    storage.close()
    assert not missing, f"storage methods no conformance test calls: {missing}"
    assert not silent, f"storage methods without a one-line contract: {silent}"
    assert not big, f"repositories past 15 public methods: {big}"


#: One call of every read-only method, on a campaign with a little of everything.
READS: dict[str, Callable[[Tx, d.Campaign, d.Trial], object]] = {
    "views.listed_trials": lambda tx, c, t: tx.views.listed_trials(c.id, names=["lr"]),
    "views.trial_id_by_number": lambda tx, c, t: tx.views.trial_id_by_number(c.id, 0),
    "views.spans": lambda tx, c, t: tx.views.spans(c.id),
    "views.running_detail": lambda tx, c, t: tx.views.running_detail(c.id),
    "views.plot_revision": lambda tx, c, t: tx.views.plot_revision(c.id),
    "results.finished_after": lambda tx, c, t: tx.results.finished_after(c.id, 0),
    "results.values_at": lambda tx, c, t: tx.results.values_at(c.id, 0, 3, [d.TrialState.COMPLETED]),
    "results.completed_folds": lambda tx, c, t: tx.results.completed_folds(c.id),
    "results.fold_metrics": lambda tx, c, t: tx.results.fold_metrics(c.id, 5),
    "results.probes": lambda tx, c, t: tx.results.probes(c.id, 5),
    "results.completed_points": lambda tx, c, t: tx.results.completed_points(c.id),
    "results.completed_points_at": lambda tx, c, t: tx.results.completed_points_at(c.id),
    "results.completed_values": lambda tx, c, t: tx.results.completed_values(c.id),
    "results.best_trial_ids": lambda tx, c, t: tx.results.best_trial_ids(c.id, "minimize", 3),
    "results.best_trials": lambda tx, c, t: tx.results.best_trials([c]),
    "results.curves_of": lambda tx, c, t: tx.results.curves_of([t.id]),
    "results.last_finished": lambda tx, c, t: tx.results.last_finished(c.id, 3),
}


def test_the_read_only_repositories_never_write(storage: Storage) -> None:
    """Each read-only method runs in a transaction the database itself keeps read-only
    (PostgreSQL ``SET TRANSACTION READ ONLY``, SQLite ``PRAGMA query_only``): a write
    there is an error, not a silent change."""
    c, (t, *_) = TestResults()._history(storage)
    stores = _stores(storage)
    declared = {f"{name}.{method}" for name in READ_ONLY for method in _public(type(stores[name]))}
    assert declared == set(READS), "READS must call every read-only method"
    postgres = storage.dialect == "postgresql"
    for name, read in READS.items():
        with storage.read() as tx:
            tx.connection().execute(text("SET TRANSACTION READ ONLY" if postgres else "PRAGMA query_only = ON"))
            try:
                read(tx, c, t)
            except Exception as exc:
                raise AssertionError(f"{name} failed in a read-only transaction: {exc}") from exc
            finally:
                if not postgres:
                    tx.connection().execute(text("PRAGMA query_only = OFF"))
    # The check can fail: a write under it is refused.
    with pytest.raises(Exception, match=r"(?i)read-only|readonly"), storage.read() as tx:
        tx.connection().execute(text("SET TRANSACTION READ ONLY" if postgres else "PRAGMA query_only = ON"))
        tx.agents.seen("nobody", NOW)
