"""Steering a running campaign (``service/steering.py``) on SQLite and PostgreSQL: a
stopped trial's agent learns it from its heartbeat, a paused campaign makes agents wait,
a raised budget reopens a COMPLETED campaign, and a second server replica that cached
the campaign's spec and optimizer before the change follows it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hpcopt_server import domain as d
from hpcopt_server.errors import FailedPrecondition, InvalidArgument, NotFound
from hpcopt_server.service import Service
from hpcopt_server.service.agent_messages import AcquireStatus, Action, Lease
from hpcopt_server.storage.repository import Storage
from tests.helpers.specs import make_spec


@pytest.fixture
def replicas(db_url: str) -> Iterator[tuple[Service, Service]]:
    """Two servers on one database, each with its own caches."""
    stores = [Storage(db_url), Storage(db_url)]
    yield Service(stores[0]), Service(stores[1])
    for s in stores:
        s.close()


def _campaign(svc: Service, max_trials: int, max_parallel: int = 4, **spec: Any) -> int:
    return svc.campaigns.create(
        make_spec(budget={"max_trials": max_trials, "max_parallel": max_parallel}, folds=1, **spec)
    ).id


def _agent(svc: Service, host: str = "n0") -> str:
    return svc.agents.register(host=host, ranks=1, gpus=0).agent_id


def _take(svc: Service, agent: str, cid: int) -> Lease:
    got = svc.agents.acquire(agent, cid)
    assert got.status == AcquireStatus.GRANTED and got.trial is not None, got.status
    return Lease(agent, got.trial.id, got.lease_id)


def _finish(svc: Service, lease: Lease, value: float = 0.5) -> d.Trial:
    svc.agents.report_fold(lease, 0, value)
    return svc.agents.complete(lease)


def _state(svc: Service, cid: int) -> d.CampaignState:
    return svc.campaigns.get(cid).campaign.state


def test_a_stopped_trial_is_cancelled_in_sql_and_its_agent_told_at_the_next_heartbeat(
    replicas: tuple[Service, Service],
) -> None:
    a, b = replicas
    cid = _campaign(a, 10)
    agent = _agent(a)
    lease = _take(a, agent, cid)
    number = a.insights.trial(lease.trial_id).trial.number
    stopped = b.steering.stop_trial(cid, number, reason="diverging, I can see it")
    assert stopped.state == d.TrialState.CANCELLED
    assert stopped.error == "diverging, I can see it"
    assert [e.kind for e in stopped.events][-1] == "cancelled"
    # The agent's heartbeat (on the other replica) says stop; its report is refused.
    assert a.agents.heartbeat(lease).action == Action.CANCELLED
    # It goes on with another trial: the campaign runs on.
    again = _take(a, agent, cid)
    assert again.trial_id != lease.trial_id
    with pytest.raises(FailedPrecondition, match="CANCELLED; only a QUEUED, RUNNING or PAUSED"):
        b.steering.stop_trial(cid, number)
    with pytest.raises(NotFound, match="no trial #99"):
        b.steering.stop_trial(cid, 99)
    with pytest.raises(InvalidArgument, match="reason"):
        b.steering.stop_trial(cid, 1, reason="x" * 1001)


def test_stopping_the_budgets_last_trial_completes_the_campaign(replicas: tuple[Service, Service]) -> None:
    a, b = replicas
    cid = _campaign(a, 2)
    agent = _agent(a)
    _finish(a, _take(a, agent, cid))
    last = _take(a, agent, cid)
    b.steering.stop_trial(cid, 1)
    assert _state(a, cid) == d.CampaignState.COMPLETED
    assert a.agents.acquire(agent, cid).status == AcquireStatus.DONE
    assert a.agents.heartbeat(last).action == Action.CANCELLED


def test_a_paused_campaign_makes_agents_wait_while_its_running_trials_finish(
    replicas: tuple[Service, Service],
) -> None:
    a, b = replicas
    cid = _campaign(a, 3)
    agent, other = _agent(a, "n0"), _agent(a, "n1")
    running = _take(a, agent, cid)
    paused = b.steering.pause(cid)
    assert paused.state == d.CampaignState.PAUSED
    waiting = a.agents.acquire(other, cid)
    assert waiting.status == AcquireStatus.WAIT and waiting.retry_after_seconds > 0
    # Not "done": an agent asking what is left is not told to exit.
    assert a.agents.queue_state(other, cid).done is False
    assert a.agents.heartbeat(running).action == Action.CONTINUE
    assert _finish(a, running).state == d.TrialState.COMPLETED
    with pytest.raises(FailedPrecondition, match="PAUSED; only a RUNNING campaign can be paused"):
        b.steering.pause(cid)
    assert b.steering.resume(cid).state == d.CampaignState.RUNNING
    assert a.agents.acquire(other, cid).status == AcquireStatus.GRANTED
    with pytest.raises(FailedPrecondition, match="RUNNING; only a PAUSED campaign can be resumed"):
        b.steering.resume(cid)


def test_a_paused_campaign_whose_budget_finishes_is_completed(replicas: tuple[Service, Service]) -> None:
    a, b = replicas
    cid = _campaign(a, 2)
    agents = [_agent(a, f"n{i}") for i in range(2)]
    leases = [_take(a, x, cid) for x in agents]
    b.steering.pause(cid)
    _finish(a, leases[0])
    assert _state(b, cid) == d.CampaignState.PAUSED
    _finish(a, leases[1])  # the budget's last trial: the one-statement completion on PostgreSQL
    assert _state(b, cid) == d.CampaignState.COMPLETED
    with pytest.raises(FailedPrecondition):
        b.steering.resume(cid)


def test_a_paused_campaign_can_be_cancelled(replicas: tuple[Service, Service]) -> None:
    a, b = replicas
    cid = _campaign(a, 3)
    lease = _take(a, _agent(a), cid)
    b.steering.pause(cid)
    assert b.campaigns.cancel(cid).campaign.state == d.CampaignState.CANCELLED
    assert a.agents.heartbeat(lease).action == Action.CANCELLED


def test_a_raised_budget_reopens_a_completed_campaign_on_a_replica_that_cached_the_old_one(
    replicas: tuple[Service, Service],
) -> None:
    a, b = replicas
    cid = _campaign(a, 2, algorithm={"name": "ea", "seed": 3})
    agent = _agent(a)
    for _ in range(2):
        _finish(a, _take(a, agent, cid))
    assert _state(a, cid) == d.CampaignState.COMPLETED
    assert a.agents.acquire(agent, cid).status == AcquireStatus.DONE  # replica a has cached the spec
    raised = b.steering.raise_budget(cid, 4)
    assert raised.state == d.CampaignState.RUNNING and raised.max_trials == 4
    # Replica a hands out trials #2 and #3 under the new budget, and completes the
    # campaign at 4 finished, not at its cached 2.
    for n in (2, 3):
        lease = _take(a, agent, cid)
        assert a.insights.trial(lease.trial_id).trial.number == n
        assert _state(b, cid) == d.CampaignState.RUNNING
        _finish(a, lease, 0.1 * n)
    assert _state(b, cid) == d.CampaignState.COMPLETED
    assert a.agents.acquire(agent, cid).status == AcquireStatus.DONE
    assert a.campaigns.get(cid).trial_counts == {d.TrialState.COMPLETED: 4}
    # Its optimizer was rebuilt for the new budget (EA derives its generations from it).
    assert a.ctx.optimizers._entries[cid].budget["max_trials"] == 4


def test_a_raised_max_trials_is_used_at_the_next_completion_of_a_running_campaign(
    replicas: tuple[Service, Service],
) -> None:
    a, b = replicas
    cid = _campaign(a, 2)
    agents = [_agent(a, f"n{i}") for i in range(2)]
    leases = [_take(a, x, cid) for x in agents]  # a caches the spec: max_trials 2
    b.steering.raise_budget(cid, 3)
    _finish(a, leases[0])
    _finish(a, leases[1])  # the old budget's last: the campaign stays RUNNING
    assert _state(b, cid) == d.CampaignState.RUNNING
    _finish(a, _take(a, agents[0], cid))
    assert _state(b, cid) == d.CampaignState.COMPLETED


def test_a_budget_change_that_is_not_a_raise_or_breaks_the_spec_is_refused(
    replicas: tuple[Service, Service],
) -> None:
    _, b = replicas
    cid = _campaign(b, 5)
    for bad in (5, 3, 0):
        with pytest.raises(InvalidArgument, match=r"max_trials: .* not above the budget of 5") as e:
            b.steering.raise_budget(cid, bad)
        assert e.value.errors[0][0] == "max_trials"
    with pytest.raises(InvalidArgument, match=r"budget\.max_trials") as e:
        b.steering.raise_budget(cid, 2_000_000)
    with pytest.raises(InvalidArgument, match="max_trials: must be an integer"):
        b.steering.raise_budget(cid, True)
    # PBT's budget is its population times its intervals: more is refused, naming the field.
    pbt = b.campaigns.create(
        make_spec(
            algorithm={"name": "pbt", "seed": 1, "options": {"population": 2, "interval": 1}},
            budget={"max_trials": 4, "max_parallel": 2},
            training={"task": "tests:task", "epochs": 2},
        )
    ).id
    with pytest.raises(InvalidArgument, match=r"budget\.max_trials: must be 4 for pbt") as e:
        b.steering.raise_budget(pbt, 5)
    assert e.value.errors[0][0] == "max_trials"
    b.campaigns.cancel(cid)
    with pytest.raises(FailedPrecondition, match="CANCELLED"):
        b.steering.raise_budget(cid, 10)
    assert b.campaigns.get(cid).campaign.max_trials == 5  # nothing changed


def test_a_paused_campaign_exports_and_imports_as_paused(replicas: tuple[Service, Service]) -> None:
    a, b = replicas
    cid = _campaign(a, 3)
    _finish(a, _take(a, _agent(a), cid))
    a.steering.pause(cid)
    copy = b.import_campaign(a.export_campaign(cid))
    assert (copy.state, copy.finished_at) == (d.CampaignState.PAUSED, None)
    assert b.steering.resume(copy.id).state == d.CampaignState.RUNNING
