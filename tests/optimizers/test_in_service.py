"""The optimizers behind the real service: suggestions, validation, rebuild from SQL."""

from __future__ import annotations

import pytest

from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument
from hpcopt_server.service import Service
from hpcopt_server.service.agents import Lease
from hpcopt_server.service.suggestions import OptimizerCache
from hpcopt_server.storage.results import ResultStore
from tests.helpers.env import scaled
from tests.helpers.specs import make_spec


@pytest.mark.parametrize("algorithm", ["bo", "ea", "sobol", "grid", "skopt"])
def test_every_algorithm_serves_a_campaign_to_the_end(service: Service, algorithm: str) -> None:
    options = {"n_initial": 3, "background_refit": False} if algorithm == "bo" else {}
    spec = make_spec(
        algorithm={"name": algorithm, "seed": 7, "options": options},
        folds=2,
        budget={"max_trials": 8, "max_parallel": 3},
    )
    campaign = service.campaigns.create(spec)
    agent = service.agents.register(host="h", ranks=1, gpus=0).agent_id
    seen = set()
    for i in range(8):
        if i == 5:
            service.ctx.optimizers = OptimizerCache()  # a restart mid-campaign: rebuilt from SQL
        got = service.agents.acquire(agent, campaign.id)
        assert got.trial is not None
        p = got.trial.params
        assert 1e-4 <= p["lr"] <= 1 and 8 <= p["width"] <= 64 and p["act"] in ("relu", "tanh")
        seen.add(tuple(sorted(p.items())))
        lease = Lease(agent, got.trial.id, got.lease_id)
        loss = (float(p["lr"]) - 0.01) ** 2 + (int(p["width"]) - 32) ** 2 / 1e3
        for k in range(2):
            service.agents.report_fold(lease, k, loss + 0.01 * k)
        service.agents.complete(lease)
    assert len(seen) == 8
    assert service.campaigns.get(campaign.id).campaign.state == d.CampaignState.COMPLETED


def test_bo_suggestions_for_concurrent_agents_are_distinct(service: Service) -> None:
    spec = make_spec(
        algorithm={"name": "bo", "options": {"n_initial": 4, "background_refit": False}},
        folds=1,
        budget={"max_trials": 30, "max_parallel": 8},
    )
    campaign = service.campaigns.create(spec)
    agent = service.agents.register(host="h", ranks=1, gpus=0).agent_id
    for _ in range(6):
        got = service.agents.acquire(agent, campaign.id)
        assert got.trial is not None
        lease = Lease(agent, got.trial.id, got.lease_id)
        service.agents.report_fold(lease, 0, float(got.trial.params["lr"]))
        service.agents.complete(lease)
    running = [service.agents.acquire(agent, campaign.id).trial for _ in range(8)]
    params = {tuple(sorted(t.params.items())) for t in running if t is not None}
    assert len(params) == 8


@pytest.mark.parametrize(
    ("algorithm", "field", "text"),
    [
        (
            {"name": "bo", "options": {"n_initial": 0}},
            "algorithm.options.n_initial",
            "must be an integer >= 1 and <= 100000, got 0",
        ),
        (
            {"name": "ea", "options": {"population": 1.5}},
            "algorithm.options.population",
            "must be an integer (an integer >= 2",
        ),
        ({"name": "bo", "options": {"nope": 1}}, "algorithm.options.nope", "not an option"),
    ],
)
def test_bad_algorithm_options_are_refused_at_creation(
    service: Service, algorithm: dict, field: str, text: str
) -> None:  # type: ignore[type-arg]
    with pytest.raises(InvalidArgument) as err:
        service.campaigns.create(make_spec(algorithm=algorithm))
    assert err.value.errors[0][0] == field and text in err.value.errors[0][1]
    assert service.campaigns.page() == ([], 0)


def test_a_restarted_server_rebuilds_running_optimizers_before_the_first_acquisition(service: Service) -> None:
    """The rebuild at start feeds each running campaign's optimizer its whole history off
    the request path: the first acquisition after it then reads only what finished since."""
    spec = make_spec(
        algorithm={"name": "bo", "seed": 3, "options": {"n_initial": 3, "background_refit": False}},
        folds=1,
        budget={"max_trials": 20, "max_parallel": 2},
    )
    running = service.campaigns.create(spec)
    done = service.campaigns.create(make_spec(budget={"max_trials": 1, "max_parallel": 1}))
    agent = service.agents.register(host="h", ranks=1, gpus=0).agent_id
    for cid, n in ((running.id, 6), (done.id, 1)):
        for _ in range(n):
            got = service.agents.acquire(agent, cid)
            assert got.trial is not None
            lease = Lease(agent, got.trial.id, got.lease_id)
            service.agents.report_fold(lease, 0, float(got.trial.params["lr"]) if cid == running.id else 1.0)
            if cid == done.id:
                for k in (1, 2):
                    service.agents.report_fold(lease, k, 1.0)
            service.agents.complete(lease)
    service.ctx.optimizers = OptimizerCache()  # a restart
    service.warm_optimizers().join(timeout=scaled(120))
    entries = service.ctx.optimizers._entries
    assert set(entries) == {running.id} and entries[running.id].seen_seq == 6  # the finished campaign is left cold
    reads: list[int] = []
    original = ResultStore.finished_after
    ResultStore.finished_after = lambda self, cid, seq: reads.append(seq) or original(self, cid, seq)  # type: ignore[method-assign]
    try:
        got = service.agents.acquire(agent, running.id)
    finally:
        ResultStore.finished_after = original  # type: ignore[method-assign]
    assert reads == [6]  # caught up from the rebuild, not from 0
    assert got.trial is not None and got.trial.number == 6
