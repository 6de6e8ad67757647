"""The planner's measurements on the server: points from the folds' metrics, the model
over REST, the points with an agent's registration, and the Queue call's counts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument, NotFound, PermissionDenied
from hpcopt_server.service import Service
from hpcopt_server.service.agents import AcquireStatus, Lease
from tests.helpers.specs import make_spec


def _fold_metrics(rate: float, ranks: int, nodes: int = 1) -> dict[str, float]:
    return {"loss": 0.5, "samples_per_second": rate, "ranks_per_fold": ranks, "fold_nodes": nodes, "train_samples": 90}


def _run_trials(service: Service, campaign: d.Campaign, agent: str, widths: list[tuple[int, float]]) -> None:
    for ranks, rate in widths:
        got = service.agents.acquire(agent, campaign.id)
        assert got.status == AcquireStatus.GRANTED and got.trial is not None
        lease = Lease(agent, got.trial.id, got.lease_id)
        for k in range(2):
            service.agents.report_fold(lease, k, 0.5, _fold_metrics(rate * (1 + 0.01 * k), ranks))
        service.agents.complete(lease)


def test_points_are_the_median_per_width_and_the_model_fits_them(service: Service) -> None:
    campaign = service.campaigns.create(make_spec(folds=2, budget={"max_trials": 6, "max_parallel": 6}))
    agent = service.agents.register(host="n", ranks=4, gpus=0, campaign_id=campaign.id).agent_id
    _run_trials(service, campaign, agent, [(1, 100.0), (1, 110.0), (2, 180.0), (4, 300.0)])
    doc = service.throughput.document(campaign.id)
    points = {(p["ranks"], p["nodes"]): p for p in doc["points"]}
    assert set(points) == {(1, 1), (2, 1), (4, 1)}
    assert points[(1, 1)]["count"] == 4 and points[(1, 1)]["samples_per_second"] == pytest.approx(105.5, rel=0.01)
    model = doc["models"]["allreduce"]
    assert model["median_relative_error"] < 0.05 and model["seconds_per_sample"]["comm"] > 0
    assert doc["train_samples"] == 90
    # A new agent of the campaign gets the points with its registration.
    reg = service.agents.register(host="m", ranks=8, gpus=0, campaign_id=campaign.id)
    assert {(p["ranks"], p["samples_per_second"]) for p in reg.throughput} == {
        (r, p["samples_per_second"]) for (r, _), p in points.items()
    }


def test_folds_without_a_measured_width_are_not_points(service: Service) -> None:
    campaign = service.campaigns.create(make_spec())
    agent = service.agents.register(host="n", ranks=1, gpus=0).agent_id
    got = service.agents.acquire(agent, campaign.id)
    assert got.trial is not None
    lease = Lease(agent, got.trial.id, got.lease_id)
    service.agents.report_fold(lease, 0, 0.5, {"loss": 0.5, "samples_per_second": 100.0})  # an older agent's fold
    service.agents.report_fold(lease, 1, 0.5, {"samples_per_second": 50.0, "ranks_per_fold": 0, "fold_nodes": 1})
    assert service.throughput.document(campaign.id) == {"points": [], "models": {}, "train_samples": None}
    with pytest.raises(NotFound):
        service.throughput.document(campaign.id + 100)


def test_the_probe_is_stored_and_folds_replace_it_width_by_width(service: Service) -> None:
    campaign = service.campaigns.create(make_spec(folds=2, budget={"max_trials": 4, "max_parallel": 4}))
    agent = service.agents.register(host="n", ranks=8, gpus=0, campaign_id=campaign.id).agent_id
    probe = [("allreduce", 1, 1, 50.0), ("allreduce", 4, 1, 150.0), ("allreduce", 8, 2, 200.0)]
    assert service.agents.report_throughput(agent, campaign.id, probe, 90) == 3
    doc = service.throughput.document(campaign.id)
    assert [(p["ranks"], p["nodes"], p["samples_per_second"], p["source"]) for p in doc["points"]] == [
        (r, n, v, "probe") for _, r, n, v in probe
    ]
    assert doc["train_samples"] == 90 and doc["models"]["allreduce"]["points"]
    # The next job of the campaign plans from it: with its registration and the Queue call.
    reg = service.agents.register(host="m", ranks=8, gpus=0, campaign_id=campaign.id)
    assert [p["source"] for p in reg.throughput] == ["probe"] * 3
    q = service.agents.queue_state(reg.agent_id, campaign.id, with_throughput=True)
    assert [(p["ranks"], p["source"]) for p in q.throughput] == [(1, "probe"), (4, "probe"), (8, "probe")]
    # Folds trained at 1 rank replace the probe's figure there; the other widths stay.
    _run_trials(service, campaign, agent, [(1, 100.0)])
    points = {(p["ranks"], p["nodes"]): p for p in service.throughput.document(campaign.id)["points"]}
    assert points[(1, 1)]["source"] == "fold" and points[(1, 1)]["samples_per_second"] == pytest.approx(100.5)
    assert points[(4, 1)]["source"] == points[(8, 2)]["source"] == "probe"


@pytest.mark.parametrize(
    ("points", "samples", "field"),
    [
        ([], 90, "points"),
        ([("allreduce", 1, 1, 10.0)] * 17, 90, "points"),
        ([("allreduce", 0, 1, 10.0)], 90, "points[0].ranks"),
        ([("allreduce", 2, 3, 10.0)], 90, "points[0].nodes"),
        ([("allreduce", 1, 1, 10.0), ("allreduce", 2, 1, float("nan"))], 90, "points[1].samples_per_second"),
        ([("allreduce", 1, 1, -1.0)], 90, "points[0].samples_per_second"),
        ([("allreduce", 1, 1, 10.0)], 0, "train_samples"),
        ([("horovod", 1, 1, 10.0)], 90, "points[0].scheme"),
        ([("x" * 65, 1, 1, 10.0)], 90, "points[0].scheme"),
    ],
)
def test_a_bad_probe_report_is_refused_by_field_and_stores_nothing(
    service: Service, points: list[tuple[str, int, int, float]], samples: int, field: str
) -> None:
    campaign = service.campaigns.create(make_spec())
    agent = service.agents.register(host="n", ranks=8, gpus=0, campaign_id=campaign.id).agent_id
    with pytest.raises(InvalidArgument, match=rf"^{re.escape(field)}\b"):
        service.agents.report_throughput(agent, campaign.id, points, samples)
    assert service.throughput.document(campaign.id)["points"] == []
    with pytest.raises(NotFound):
        service.agents.report_throughput(agent, campaign.id + 100, [("allreduce", 1, 1, 10.0)], 90)


def test_queue_counts_what_is_left_to_start_and_leases_nothing(service: Service) -> None:
    campaign = service.campaigns.create(make_spec(folds=2, budget={"max_trials": 5, "max_parallel": 3}))
    agent = service.agents.register(host="n", ranks=1, gpus=0).agent_id
    q = service.agents.queue_state(agent, campaign.id)
    assert (q.unstarted, q.running, q.max_parallel, q.done) == (5, 0, 3, False)
    _run_trials(service, campaign, agent, [(1, 100.0), (1, 100.0)])
    held = service.agents.acquire(agent, campaign.id)
    assert held.trial is not None
    q = service.agents.queue_state(agent, campaign.id, with_throughput=True)
    assert (q.unstarted, q.running) == (2, 1) and q.throughput
    assert service.agents.queue_state(agent, campaign.id) == service.agents.queue_state(agent, campaign.id)
    # Preempted: back to the queue, so it counts as unstarted again.
    service.agents.release(Lease(agent, held.trial.id, held.lease_id), d.TrialState.PREEMPTED, "signal")
    assert service.agents.queue_state(agent, campaign.id).unstarted == 3
    service.campaigns.cancel(campaign.id)
    q = service.agents.queue_state(agent, campaign.id)
    assert q.done and q.unstarted == 0


def test_queue_refuses_bad_input_by_name(service: Service) -> None:
    campaign = service.campaigns.create(make_spec())
    agent = service.agents.register(host="n", ranks=1, gpus=0).agent_id
    with pytest.raises(InvalidArgument, match="campaign_id"):
        service.agents.queue_state(agent, -1)
    with pytest.raises(NotFound):
        service.agents.queue_state(agent, campaign.id + 100)
    with pytest.raises((NotFound, PermissionDenied, InvalidArgument)):
        service.agents.queue_state("no-such-agent", campaign.id)


def test_plan_campaign_plans_from_the_points_the_agents_get(live_server: Any, tmp_path: Path, capsys: Any) -> None:
    # The review's case: the campaign's folds ran at one rank only, and its stored probe
    # says a 4-rank fold group is 7.8 times slower. `hpcopt plan --campaign` read the folds
    # alone, assumed collectives cost nothing and ranked 4 ranks per fold first.
    from hpcopt.cli import main

    service = live_server.service
    spec = make_spec(folds=2, budget={"max_trials": 8, "max_parallel": 8})
    campaign = service.campaigns.create(spec)
    agent = service.agents.register(host="n", ranks=4, gpus=0, campaign_id=campaign.id).agent_id
    assert service.agents.report_throughput(agent, campaign.id, [("allreduce", 4, 1, 100.0 / 7.8)], 90) == 1
    _run_trials(service, campaign, agent, [(1, 100.0), (1, 104.0)])
    got = service.agents.register(host="m", ranks=4, gpus=0, campaign_id=campaign.id).throughput
    assert {(p["ranks"], p["source"]) for p in got} == {(1, "fold"), (4, "probe")}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "throughput.json").write_text(json.dumps(service.throughput.document(campaign.id)))
    common = ["plan", str(tmp_path / "spec.json"), "--nodes", "1", "--ranks-per-node", "4", "--json"]

    def planned(*source: str) -> dict[str, Any]:
        assert main(["--server", live_server.grpc_target, *common, *source]) == 0
        out: dict[str, Any] = json.loads(capsys.readouterr().out)
        return out

    by_campaign = planned("--campaign", str(campaign.id))
    by_document = planned("--throughput", str(tmp_path / "throughput.json"))
    # The same points as the agents', so the same model and the same order as the document.
    assert {(p["ranks"], p["source"]) for p in by_campaign["model"]["points"]} == {(1, "fold"), (4, "probe")}
    assert by_campaign["model"]["seconds_per_sample"] == by_document["model"]["seconds_per_sample"]
    assert by_campaign["layouts"] == by_document["layouts"]
    assert by_campaign["layouts"][0]["ranks_per_fold"] == 1
    assert "probes" in by_campaign["model"]["source"]


def test_an_agent_resized_to_its_group_is_listed_with_those_ranks_and_bad_sizes_are_refused(
    service: Service,
) -> None:
    campaign = service.campaigns.create(make_spec())
    agent = service.agents.register(host="n", ranks=8, gpus=8, campaign_id=campaign.id).agent_id
    service.agents.resize(agent, 2, 2)
    [listed] = service.campaigns.agents(campaign.id)
    assert (listed.ranks, listed.gpus) == (2, 2)
    for ranks, gpus, field in ((0, 0, "ranks"), (2, -1, "gpus")):
        with pytest.raises(InvalidArgument) as info:
            service.agents.resize(agent, ranks, gpus)
        assert [f for f, _ in info.value.errors] == [field]
    with pytest.raises(NotFound):
        service.agents.resize("no-such-agent", 1, 0)
    [listed] = service.campaigns.agents(campaign.id)
    assert (listed.ranks, listed.gpus) == (2, 2)  # a refused call changed nothing
