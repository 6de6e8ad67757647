"""A PBT parent whose checkpoints an agent cannot read (``ReportUnreadableParent``),
through the real service and SQLite: the interval is re-planned in place from the
next-best parent or the member's own previous interval, the unreadable interval is no
member's parent again (on this cache, a rebuilt one and after export/import), and a
call that does not fit the interval is refused by field, changing nothing."""

from __future__ import annotations

import pytest

from hpcopt_server import domain as d
from hpcopt_server.errors import FailedPrecondition, InvalidArgument
from hpcopt_server.service import Service
from hpcopt_server.service.agents import Lease
from tests.server.test_pbt import _acquire, _finish, _pbt

WHY = "checkpoint /ck/x/fold0.pt is gone"


def _first_generation(service: Service, values: dict[int, float]) -> tuple[int, str, dict[int, d.Trial]]:
    """A campaign whose four first intervals finished with ``values`` (by member)."""
    campaign = service.campaigns.create(_pbt(quantile=0.25))
    agent = service.agents.register(host="node", ranks=4, gpus=0).agent_id
    first: dict[int, d.Trial] = {}
    for t, lease in [h for h in (_acquire(service, agent, campaign.id) for _ in range(4)) if h]:
        assert t.lineage is not None
        _finish(service, t, lease, values[t.lineage.member])
        first[t.lineage.member] = t
    return campaign.id, agent, first


def _second_generation(service: Service, cid: int, agent: str) -> dict[int, tuple[d.Trial, Lease]]:
    got = filter(None, (_acquire(service, agent, cid) for _ in range(4)))
    return {t.lineage.member: (t, lease) for t, lease in got if t.lineage}


def test_an_unreadable_best_parent_is_replaced_by_the_next_best_and_never_offered_again(service: Service) -> None:
    cid, agent, first = _first_generation(service, {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.9})
    second = _second_generation(service, cid, agent)
    worst, lease = second[3]
    assert worst.lineage is not None and worst.lineage.parent == first[0].number  # it copies the best
    # Its agent cannot read the best member's files.
    replanned = service.agents.parent_unreadable(lease, first[0].id, 0, WHY)
    lin = replanned.lineage
    assert lin is not None and lin.unreadable == (first[0].number,)
    assert lin.parent == first[1].number and lin.parent_id == first[1].id  # the next best
    assert (lin.member, lin.start_epoch, lin.stop_epoch, lin.previous) == (3, 2, 4, first[3].number)
    for name, (before, after) in lin.changed.items():
        assert before == first[1].params[name] and after == replanned.params[name]
    stored = service.campaigns.trial(worst.id)
    assert (stored.number, stored.lease_id, stored.attempt, stored.params) == (
        worst.number,
        worst.lease_id,
        1,
        replanned.params,
    )
    assert stored.lineage == lin
    # The best member's own continuation cannot read it either: the member copies the
    # best readable interval at its epoch and keeps its schedule.
    own, own_lease = second[0]
    assert own.lineage is not None and own.lineage.parent == first[0].number
    moved = service.agents.parent_unreadable(own_lease, first[0].id, 1, WHY).lineage
    assert moved is not None and moved.parent == first[1].number
    assert (moved.start_epoch, moved.stop_epoch, moved.previous) == (2, 4, first[0].number)
    # Both trials' logs say what happened.
    events = [(e.kind, e.reason) for e in service.campaigns.trial(worst.id).events]
    assert any(k == "parent_unreadable" and f"trial #{first[0].number}'s" in r and WHY in r for k, r in events)
    parent_events = [e.kind for e in service.campaigns.trial(first[0].id).events]
    assert parent_events.count("checkpoint_unreadable") == 2
    doc = service.population.document(cid)
    flags = {i["number"]: i["checkpoints_unreadable"] for i in doc["intervals"]}
    assert flags[first[0].number] and not flags[first[1].number]


def test_no_later_interval_starts_from_it_on_this_cache_or_a_rebuilt_one(service: Service) -> None:
    campaign = service.campaigns.create(_pbt(quantile=0.25))
    agent = service.agents.register(host="node", ranks=4, gpus=0).agent_id
    first = {
        t.lineage.member: (t, h)
        for t, h in filter(None, (_acquire(service, agent, campaign.id) for _ in range(4)))
        if t.lineage
    }
    for m, value in ((0, 0.1), (1, 0.2), (2, 0.3)):
        _finish(service, *first[m], value)
    best, next_best = first[0][0], first[1][0]
    second = {
        t.lineage.member: (t, h)
        for t, h in filter(None, (_acquire(service, agent, campaign.id) for _ in range(3)))
        if t.lineage
    }
    t0, lease0 = second[0]
    assert t0.lineage is not None and t0.lineage.parent == best.number  # the best member goes on
    service.agents.parent_unreadable(lease0, best.id, 0, WHY)
    # Member 3 reports late, the worst: it copies the best readable member, not #best.
    _finish(service, *first[3], 0.9)
    got = _acquire(service, agent, campaign.id)
    assert got is not None and got[0].lineage is not None
    assert got[0].lineage.member == 3 and got[0].lineage.exploited and got[0].lineage.parent == next_best.number
    # Its interval fails; after a restart (the cache rebuilt from SQL) its member starts
    # again from the best readable interval at its epoch, still not #best.
    service.agents.release(Lease(agent, got[0].id, got[0].lease_id), d.TrialState.FAILED, "a bad node")
    service.ctx.optimizers.forget(campaign.id)
    again = _acquire(service, agent, campaign.id)
    assert again is not None and again[0].lineage is not None
    assert again[0].lineage.member == 3 and again[0].lineage.parent == next_best.number


def test_an_interval_with_nothing_readable_at_its_epoch_starts_its_member_again(service: Service) -> None:
    cid, agent, first = _first_generation(service, {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.9})
    second = _second_generation(service, cid, agent)
    # Every epoch-2 interval is unreadable to this agent (its --checkpoint-dir is its own).
    t, lease = second[1]
    for _ in range(4):
        lin = t.lineage
        assert lin is not None
        if lin.parent is None:
            break
        t = service.agents.parent_unreadable(lease, lin.parent_id or 0, 0, WHY)
    lin = t.lineage
    assert lin is not None and lin.parent is None and lin.start_epoch == 0  # from a fresh draw
    assert set(lin.unreadable) == {first[m].number for m in range(4)}
    assert lin.previous == first[1].number and lin.member == 1


@pytest.mark.parametrize("case", ["wrong parent", "fold started", "no parent", "not the holder"])
def test_a_report_that_does_not_fit_the_interval_is_refused_and_changes_nothing(service: Service, case: str) -> None:
    cid, agent, first = _first_generation(service, {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.9})
    second = _second_generation(service, cid, agent)
    t, lease = second[3]
    assert t.lineage is not None and t.lineage.parent_id is not None
    parent = t.lineage.parent_id
    error: type[Exception] = FailedPrecondition
    if case == "wrong parent":
        parent, error = first[1].id, InvalidArgument
    elif case == "fold started":
        service.agents.report_intermediate(lease, 0, 3, 0.5)
    elif case == "no parent":
        fresh = service.campaigns.create(_pbt())
        got = _acquire(service, agent, fresh.id)
        assert got is not None
        t, lease = got
        parent = first[0].id
    else:
        lease = Lease(service.agents.register(host="other", ranks=1, gpus=0).agent_id, t.id, t.lease_id)
    before = service.campaigns.trial(t.id)
    with pytest.raises(error) as err:
        service.agents.parent_unreadable(lease, parent, 0, WHY)
    if case == "wrong parent":
        assert [f for f, _ in err.value.errors] == ["parent_trial_id"]  # type: ignore[attr-defined]
    after = service.campaigns.trial(t.id)
    assert (after.params, after.lineage) == (before.params, before.lineage)


def test_the_unreadable_list_survives_export_and_import(service: Service) -> None:
    cid, agent, first = _first_generation(service, {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.9})
    t, lease = _second_generation(service, cid, agent)[3]
    service.agents.parent_unreadable(lease, first[0].id, 0, WHY)
    copy = service.import_campaign(service.export_campaign(cid))
    by_number = {x.number: x for x in service.campaigns.trials(copy.id)[0]}
    lin = by_number[t.number].lineage
    assert lin is not None and lin.unreadable == (first[0].number,)


def test_a_member_whose_own_interval_is_unreadable_waits_for_a_readable_one_at_its_epoch(service: Service) -> None:
    campaign = service.campaigns.create(_pbt())
    agent = service.agents.register(host="node", ranks=4, gpus=0).agent_id
    first = {
        t.lineage.member: (t, h)
        for t, h in filter(None, (_acquire(service, agent, campaign.id) for _ in range(4)))
        if t.lineage
    }
    _finish(service, *first[0], 0.1)
    got = _acquire(service, agent, campaign.id)
    assert got is not None
    t, lease = got
    own = first[0][0]
    assert t.lineage is not None and t.lineage.parent == own.number  # member 0 goes on
    before = service.campaigns.trial(t.id).lease_expires_at
    # Nobody else has reached epoch 2 yet, but members 1-3 are training toward it.
    waits = service.agents.parent_unreadable(lease, own.id, 0, WHY)
    assert (
        waits.lineage is not None and waits.lineage.parent == own.number and waits.lineage.unreadable == (own.number,)
    )
    stored = service.campaigns.trial(t.id)
    assert stored.lease_expires_at is not None and before is not None and stored.lease_expires_at >= before
    again = service.agents.parent_unreadable(lease, own.id, 0, WHY)  # asked again: it still waits
    assert again.lineage == waits.lineage
    _finish(service, *first[2], 0.3)
    moved = service.agents.parent_unreadable(lease, own.id, 0, WHY)
    lin = moved.lineage
    assert lin is not None and lin.parent == first[2][0].number and (lin.start_epoch, lin.stop_epoch) == (2, 4)
    kinds = [e.kind for e in service.campaigns.trial(t.id).events]
    assert kinds.count("parent_unreadable") == 2  # the first report and the re-plan, not the wait
    assert [e.kind for e in service.campaigns.trial(own.id).events].count("checkpoint_unreadable") == 1


def test_a_member_waits_too_when_the_others_have_not_reached_its_epoch_yet(service: Service) -> None:
    campaign = service.campaigns.create(_pbt())
    agent = service.agents.register(host="node", ranks=4, gpus=0).agent_id
    got = _acquire(service, agent, campaign.id)  # member 0's first interval only
    assert got is not None
    _finish(service, *got, 0.1)
    # The members furthest behind go first: 1-3 start (and keep training) before member 0 goes on.
    others = [_acquire(service, agent, campaign.id) for _ in range(3)]
    assert [o[0].lineage.member for o in others if o and o[0].lineage] == [1, 2, 3]
    nxt = _acquire(service, agent, campaign.id)  # its continuation, while 1-3 train toward epoch 2
    assert nxt is not None and nxt[0].lineage is not None and nxt[0].lineage.member == 0
    waits = service.agents.parent_unreadable(nxt[1], got[0].id, 0, WHY)
    assert waits.lineage is not None and waits.lineage.parent == got[0].number  # it waits: no restart
