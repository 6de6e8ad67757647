"""The storage conformance suite: the contract of ``storage/repository.py`` on SQLite
and on the real PostgreSQL (the ``db_url`` fixture runs every test on both)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from hpcopt_server import domain as d
from hpcopt_server.storage import migrate
from hpcopt_server.storage import models as m
from hpcopt_server.storage.repository import Storage
from tests.conftest import make_spec

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture
def storage(db_url: str) -> Iterator[Storage]:
    s = Storage(db_url)
    yield s
    s.close()


def _campaign(storage: Storage) -> d.Campaign:
    with storage.write() as tx:
        return tx.insert_campaign("c", make_spec(), NOW, submitted_at=NOW)


def _trial(storage: Storage, campaign_id: int, number: int = 0, state: d.TrialState = d.TrialState.QUEUED) -> d.Trial:
    with storage.write() as tx:
        return tx.insert_trial(campaign_id, number, {"lr": 0.1, "width": 8, "act": "relu"}, state, NOW)


def test_schema_is_at_head_after_upgrade(db_url: str) -> None:
    assert migrate.current_revision(db_url) == migrate.head_revision()


def test_campaign_round_trips_with_aware_utc_timestamps(storage: Storage) -> None:
    c = _campaign(storage)
    with storage.read() as tx:
        got = tx.get_campaign(c.id)
    assert got == c
    assert got is not None and got.created_at == NOW and got.created_at.tzinfo is not None
    assert got.spec["budget"]["max_trials"] == 10


def test_lookups_of_missing_things_return_none(storage: Storage) -> None:
    with storage.read() as tx:
        assert tx.get_campaign(999) is None
        assert tx.get_trial(999) is None
        assert tx.get_agent("nope") is None
        assert tx.token_by_hash("0" * 64) is None


def test_changing_missing_things_raises_key_error(storage: Storage) -> None:
    with storage.write() as tx, pytest.raises(KeyError):
        tx.requeue_trial(999, 2)
    with storage.write() as tx, pytest.raises(KeyError):
        tx.set_campaign_state(999, d.CampaignState.CANCELLED, NOW)


def test_an_exception_rolls_the_whole_transaction_back(storage: Storage) -> None:
    c = _campaign(storage)
    with pytest.raises(RuntimeError), storage.write() as tx:
        tx.insert_trial(c.id, 0, {"lr": 0.1}, d.TrialState.QUEUED, NOW)
        raise RuntimeError("boom")
    with storage.read() as tx:
        assert tx.list_trials(c.id) == ([], 0)


def test_trial_numbers_are_unique_per_campaign(storage: Storage) -> None:
    c = _campaign(storage)
    _trial(storage, c.id, 0)
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"), storage.write() as tx:
        tx.insert_trial(c.id, 0, {}, d.TrialState.QUEUED, NOW)


def test_folds_are_stored_as_given_and_replaced_by_index(storage: Storage) -> None:
    c = _campaign(storage)
    t = _trial(storage, c.id)
    with storage.write() as tx:
        tx.put_fold(t.id, d.Fold(1, False, None, {}, "file:///b", 1), NOW)
        tx.put_fold(t.id, d.Fold(1, True, 0.5, {"acc": 0.9}, "file:///a", 1), NOW)
        tx.put_fold(t.id, d.Fold(0, False, None, {}, "", 1), NOW)
    with storage.read() as tx:
        got = tx.get_trial(t.id)
    assert got is not None
    assert [f.index for f in got.folds] == [0, 1]
    assert got.folds[1] == d.Fold(1, True, 0.5, {"acc": 0.9}, "file:///a", 1)
    assert not got.folds[0].finished


def test_curve_points_replace_on_the_same_fold_and_step(storage: Storage) -> None:
    c = _campaign(storage)
    t = _trial(storage, c.id)
    with storage.write() as tx:
        tx.put_curve_point(t.id, 0, 1, 0.9)
        tx.put_curve_point(t.id, 0, 0, 1.0)
        tx.put_curve_point(t.id, 0, 1, 0.8)
    with storage.read() as tx:
        got = tx.get_trial(t.id, full=True)
    assert got is not None
    assert got.curves == (d.CurvePoint(0, 0, 1.0), d.CurvePoint(0, 1, 0.8))


def test_list_trials_pages_filters_and_counts(storage: Storage) -> None:
    c = _campaign(storage)
    for i in range(7):
        _trial(storage, c.id, i, d.TrialState.COMPLETED if i % 2 else d.TrialState.QUEUED)
    with storage.read() as tx:
        page, total = tx.list_trials(c.id, offset=2, limit=3)
        done, n_done = tx.list_trials(c.id, states=[d.TrialState.COMPLETED])
        counts = tx.trial_counts([c.id])
    assert [t.number for t in page] == [2, 3, 4] and total == 7
    assert [t.number for t in done] == [1, 3, 5] and n_done == 3
    assert counts == {c.id: {"QUEUED": 4, "COMPLETED": 3}}


def test_best_trial_follows_the_direction(storage: Storage) -> None:
    with storage.write() as tx:
        lo = tx.insert_campaign("min", make_spec(), NOW, submitted_at=NOW)
        hi = tx.insert_campaign(
            "max", make_spec(objective={"metric": "acc", "direction": "maximize"}), NOW, submitted_at=NOW
        )
        for c in (lo, hi):
            for i, v in enumerate([0.3, 0.1, 0.7]):
                tx.insert_trial(c.id, i, {}, d.TrialState.COMPLETED, NOW, value=v)
            tx.insert_trial(c.id, 3, {}, d.TrialState.FAILED, NOW, value=-5.0)
        best = tx.best_trials([lo, hi])
    assert best[lo.id].value == 0.1 and best[hi.id].value == 0.7


def test_expired_trials_are_running_ones_past_their_lease(storage: Storage) -> None:
    c = _campaign(storage)
    old = _trial(storage, c.id, 0, d.TrialState.RUNNING)
    fresh = _trial(storage, c.id, 1, d.TrialState.RUNNING)
    queued = _trial(storage, c.id, 2)
    with storage.write() as tx:
        for t, delta in ((old, -1), (fresh, 60), (queued, -60)):
            expiry = NOW + timedelta(seconds=delta)
            tx.s.execute(update(m.TrialRow).where(m.TrialRow.id == t.id).values(lease_expires_at=expiry))
    with storage.read() as tx:
        assert [t.id for t in tx.expired_trials(NOW)] == [old.id]


def test_unfinished_ids_are_the_queued_and_running_trials(storage: Storage) -> None:
    c = _campaign(storage)
    a = _trial(storage, c.id, 0, d.TrialState.QUEUED)
    b = _trial(storage, c.id, 1, d.TrialState.RUNNING)
    _trial(storage, c.id, 2, d.TrialState.COMPLETED)
    with storage.read() as tx:
        assert tx.unfinished_trial_ids(c.id) == [a.id, b.id]


def test_finishing_hands_out_a_dense_sequence_read_incrementally(storage: Storage) -> None:
    c = _campaign(storage)
    trials = [_trial(storage, c.id, i, d.TrialState.RUNNING) for i in range(4)]
    for t, state in zip(
        [trials[2], trials[0], trials[3]],
        [d.TrialState.COMPLETED, d.TrialState.FAILED, d.TrialState.PRUNED],
        strict=True,
    ):
        with storage.write() as tx:
            tx.lock_campaign(c.id)
            tx.finish_trial(t.id, state, NOW, value=1.0)
    with storage.read() as tx:
        after0 = tx.finished_after(c.id, 0)
        after2 = tx.finished_after(c.id, 2)
        campaign = tx.get_campaign(c.id)
    assert [(t.id, t.finish_seq) for t in after0] == [(trials[2].id, 1), (trials[0].id, 2), (trials[3].id, 3)]
    assert [t.id for t in after2] == [trials[3].id] and after2[0].state == d.TrialState.PRUNED
    assert campaign is not None and campaign.trials_finished == 3
    assert after0[0].finished_at == NOW and after0[0].value == 1.0


def test_agents_and_tokens_round_trip(storage: Storage) -> None:
    agent = d.Agent("a1", "node1", 4, 1, "123", None, 77, "0.1", NOW, NOW)
    with storage.write() as tx:
        tx.insert_agent(agent)
        tok = tx.insert_token("ci", "f" * 64, ["read", "agent"], NOW)
        tx.seen_agent("a1", NOW + timedelta(seconds=5))
    with storage.read() as tx:
        assert tx.get_agent("a1") == d.Agent(
            "a1", "node1", 4, 1, "123", None, 77, "0.1", NOW, NOW + timedelta(seconds=5)
        )
        assert tx.token_by_hash("f" * 64) == tok and tok.scopes == {"read", "agent"}
        assert tx.count_active_tokens() == 1
    with storage.write() as tx:
        tx.revoke_token(tok.id, NOW)
    with storage.read() as tx:
        assert tx.count_active_tokens() == 0
