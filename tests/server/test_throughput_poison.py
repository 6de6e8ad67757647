"""The planner's inputs cannot be poisoned: throughput points only from an agent of the
campaign, each rate plausible (and near what its folds measured), one per agent and
width, a bounded table, and a model that never divides by zero on any stored point;
a model no fold has confirmed says so. Through the service on SQLite and PostgreSQL,
and the REST document on a live server."""

from __future__ import annotations

import math
import re

import pytest

from hpcopt.core.planner import Point, fit
from hpcopt.errors import PlanError
from hpcopt_server import domain as d
from hpcopt_server.errors import FailedPrecondition, InvalidArgument
from hpcopt_server.service import Service
from hpcopt_server.storage import models as m
from tests.helpers import web
from tests.helpers.env import scaled
from tests.helpers.live import LiveServer
from tests.helpers.specs import make_spec
from tests.server.test_throughput import _run_trials


def _campaign(service: Service) -> d.Campaign:
    return service.campaigns.create(make_spec(folds=2, budget={"max_trials": 4, "max_parallel": 4}))


def _agent(service: Service, campaign: d.Campaign | None) -> str:
    return service.agents.register(
        host="n", ranks=16, gpus=0, campaign_id=None if campaign is None else campaign.id
    ).agent_id


def test_only_an_agent_registered_for_the_campaign_stores_its_points(service: Service) -> None:
    a, b = _campaign(service), _campaign(service)
    for agent in (_agent(service, a), _agent(service, None)):
        with pytest.raises(FailedPrecondition) as err:
            service.agents.report_throughput(agent, b.id, [("allreduce", 8, 1, 800.0)], 90)
        assert [f for f, _ in err.value.errors] == ["campaign_id"] and f"not campaign {b.id}" in err.value.message
    assert service.throughput.document(b.id)["points"] == []
    assert service.agents.report_throughput(_agent(service, b), b.id, [("allreduce", 8, 1, 800.0)], 90) == 1


@pytest.mark.parametrize("rate", [1e308, 1e-300, 8e9 + 1e6, 7e-6])
def test_an_implausible_rate_is_refused_naming_the_field(service: Service, rate: float) -> None:
    campaign = _campaign(service)
    agent = _agent(service, campaign)
    with pytest.raises(InvalidArgument, match=rf"^{re.escape('points[1].samples_per_second')}: ") as err:
        service.agents.report_throughput(
            agent, campaign.id, [("allreduce", 1, 1, 100.0), ("allreduce", 8, 1, rate)], 90
        )
    assert "per rank" in err.value.message
    assert service.throughput.document(campaign.id)["points"] == []


def test_a_probe_far_from_what_the_folds_measured_is_refused(service: Service) -> None:
    campaign = _campaign(service)
    agent = _agent(service, campaign)
    _run_trials(service, campaign, agent, [(1, 100.0)])  # the folds: 100 samples/s on one rank
    for rate in (8 * 100.0 * 101, 8 * 100.0 / 101):
        with pytest.raises(InvalidArgument, match=r"^points\[0\]\.samples_per_second: .* not within 100x"):
            service.agents.report_throughput(agent, campaign.id, [("allreduce", 8, 1, rate)], 90)
    assert service.agents.report_throughput(agent, campaign.id, [("allreduce", 8, 1, 700.0)], 90) == 1


def test_one_agent_has_one_point_per_width_so_repeats_cannot_out_vote_a_probe(service: Service) -> None:
    campaign = _campaign(service)
    honest, hostile = _agent(service, campaign), _agent(service, campaign)
    service.agents.report_throughput(honest, campaign.id, [("allreduce", 8, 1, 800.0)], 90)
    for _ in range(20):
        service.agents.report_throughput(hostile, campaign.id, [("allreduce", 8, 1, 0.001)], 90)
    (point,) = service.throughput.document(campaign.id)["points"]
    assert point["count"] == 2  # one each: the median is not the hostile agent's
    with service.ctx.storage.read() as tx:
        assert len(tx.results.probes(campaign.id, 1000)) == 2


def test_the_probe_table_is_capped_per_campaign(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcopt_server.service import agents as agents_module

    monkeypatch.setattr(agents_module, "MAX_PROBE_ROWS", 5)
    campaign = _campaign(service)
    agent = _agent(service, campaign)
    for ranks in range(1, 13):
        service.agents.report_throughput(agent, campaign.id, [("allreduce", ranks, 1, 100.0 * ranks)], 90)
    with service.ctx.storage.read() as tx:
        kept = tx.results.probes(campaign.id, 1000)
    assert sorted(p[1] for p in kept) == [8, 9, 10, 11, 12]  # the newest


def _poison(service: Service, campaign: d.Campaign) -> None:
    """Rows stored before the bounds (written straight to SQL)."""
    with service.ctx.storage.write() as tx:
        for ranks, rate in ((8, 1e308), (4, 1e-300), (2, float("inf"))):
            tx.s.add(
                m.ThroughputProbeRow(
                    campaign_id=campaign.id,
                    agent_id="old",
                    scheme="allreduce",
                    ranks=ranks,
                    nodes=1,
                    samples_per_second=rate,
                    train_samples=90,
                    measured_at=service.ctx.clock(),
                )
            )


def test_stored_poison_never_breaks_the_document_the_registration_or_a_plan(
    service: Service, live_server: LiveServer
) -> None:
    campaign = _campaign(service)
    agent = _agent(service, campaign)
    service.agents.report_throughput(agent, campaign.id, [("allreduce", 1, 1, 100.0)], 90)
    _poison(service, campaign)
    r = web.get(f"{live_server.http_url}/api/v1/campaigns/{campaign.id}/throughput", timeout=scaled(60))
    assert r.status_code == 200, r.text
    doc = r.json()
    assert [(p["ranks"], p["samples_per_second"]) for p in doc["points"]] == [(1, 100.0)]
    model = doc["models"]["allreduce"]
    assert model["seconds_per_sample"]["compute"] > 0 and model["confirmed"] is False
    assert any("no trained fold has confirmed" in a for a in model["assumptions"])
    reg = service.agents.register(host="m", ranks=16, gpus=0, campaign_id=campaign.id)
    planned = fit(Point.from_dict(p) for p in reg.throughput)
    assert all(math.isfinite(planned.samples_per_second(r)) for r in (1, 2, 8, 16))
    # Trained folds confirm it.
    _run_trials(service, campaign, agent, [(1, 100.0)])
    assert service.throughput.document(campaign.id)["models"]["allreduce"]["confirmed"] is True


def test_the_fit_never_divides_by_zero() -> None:
    with pytest.raises(PlanError, match="no plausible throughput"):
        fit([Point(8, 1, 1e308, source="probe")])
    model = fit([Point(8, 1, 1e308, source="probe"), Point(1, 1, 100.0), Point(4, 1, 1e-300, source="probe")])
    assert model.compute > 0 and model.points == (Point(1, 1, 100.0),)
    assert all(math.isfinite(model.samples_per_second(r, n)) for r in (1, 8, 1024) for n in (1, 4))
    assert "2 implausible point(s) left out" in model.assumptions
