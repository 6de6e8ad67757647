"""A fold's analysis on the server: the agent stores it under its lease over gRPC
(``ReportAnalysis``), REST serves it, export and import carry it; a document that is
not the schema's plain numbers is refused naming the field, and costs little."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest

from hpcopt import ApiError
from hpcopt.core.checkpoints import relative
from hpcopt.core.records import Lease as ClientLease
from hpcopt.v1 import agent_pb2
from hpcopt_server.service.agents import Lease
from tests.helpers import web
from tests.helpers.analysis import analysis_document
from tests.helpers.clients import AgentClient
from tests.helpers.env import scaled
from tests.helpers.live import LiveServer
from tests.helpers.specs import make_spec


def _leased(live: LiveServer, agent: AgentClient) -> tuple[int, Any]:
    c = live.service.campaigns.create(make_spec(folds=2, analysis={"hessian": {}}))
    aid = agent.register(host="n1", campaign_id=c.id).agent_id
    got = agent.acquire(aid, c.id)
    assert got.lease is not None
    return c.id, got.lease


def test_an_analysis_is_stored_under_the_lease_served_over_rest_and_carried_by_export(live_server: LiveServer) -> None:
    with AgentClient(live_server.grpc_target) as agent:
        campaign, lease = _leased(live_server, agent)
        agent.report_analysis(lease, 1, json.dumps(analysis_document(3.0)))
        agent.report_analysis(lease, 0, json.dumps(analysis_document()))
        agent.report_analysis(lease, 1, json.dumps(analysis_document(4.0)))  # computed again: replaces
        _, without = _leased(live_server, agent)
    got = web.get(f"{live_server.http_url}/api/v1/trials/{lease.trial_id}/analysis").json()
    assert got["trial_id"] == lease.trial_id and [f["fold"] for f in got["folds"]] == [0, 1]
    assert got["folds"][1]["document"]["hessian"]["eigenvalues"] == [4.0, 3.0]
    assert got["folds"][0]["document"]["landscape"]["line"]["loss"] == [2.0, 0.5, None]
    assert got["folds"][0]["attempt"] == 1
    # Export, then import: the analyses come along with their trial.
    doc = live_server.service.export_campaign(campaign)
    assert [a["fold"] for a in doc["trials"][0]["analyses"]] == [0, 1]
    doc["campaign"]["name"] = "imported"
    imported = live_server.service.import_campaign(doc)
    [t] = live_server.service.campaigns.trials(imported.id, limit=10)[0]
    again = live_server.service.insights.fold_analyses(t.id)
    assert [(a.fold, a.document["hessian"]["eigenvalues"][0]) for a in again] == [(0, 30.0), (1, 4.0)]
    # None for a trial with none; 404 for one that does not exist.
    none = web.get(f"{live_server.http_url}/api/v1/trials/{without.trial_id}/analysis").json()
    assert none == {"trial_id": without.trial_id, "folds": [], "request": None}
    other = web.get(f"{live_server.http_url}/api/v1/trials/999999/analysis")
    assert other.status_code == 404 and "does not exist" in other.text


def _bad(doc: Any) -> str:
    return doc if isinstance(doc, str) else json.dumps(doc)


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ("{not json", "document"),
        (
            {**analysis_document(), "hessian": {**analysis_document()["hessian"], "eigenvalues": ["30.0"]}},
            "document.hessian.eigenvalues.0",
        ),
        ({**analysis_document(), "pickle": "gANdcQAu"}, "document.pickle"),
        ({**analysis_document(), "cost": {**analysis_document()["cost"], "hvps": -1}}, "document.cost.hvps"),
        (
            {**analysis_document(), "landscape": {**analysis_document()["landscape"], "directions": "pca"}},
            "document.landscape.directions",
        ),
        (
            {**analysis_document(), "hessian": {**analysis_document()["hessian"], "trace": [1e400]}},
            "document.hessian.trace.0",
        ),
        ([1, 2], "document"),
    ],
)
def test_a_document_that_is_not_plain_numbers_is_refused_naming_the_field(
    live_server: LiveServer, document: Any, field: str
) -> None:
    with AgentClient(live_server.grpc_target) as agent:
        _, lease = _leased(live_server, agent)
        with pytest.raises(grpc.RpcError) as err:
            request = agent_pb2.ReportAnalysisRequest(lease=lease.to_proto(), fold=0, document=_bad(document))
            agent._stub.ReportAnalysis(request, timeout=scaled(60))  # the raw call: its status code
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (err.value.details() or ""), err.value.details()
    assert live_server.service.insights.fold_analyses(lease.trial_id) == []


def test_an_oversized_document_is_refused_before_it_is_parsed(service: Any) -> None:
    from hpcopt_server.errors import InvalidArgument

    c = service.campaigns.create(make_spec(folds=2))
    agent = service.agents.register(host="n", ranks=1, gpus=0).agent_id
    got = service.agents.acquire(agent, c.id)
    lease = Lease(agent, got.trial.id, got.lease_id)
    huge = '{"x": [' + ",".join(["1"] * 3_000_000) + "]}"
    with pytest.raises(InvalidArgument) as err:
        service.agents.report_analysis(lease, 0, huge)
    assert "at most 4,194,304" in str(err.value)  # the length's refusal: it was not parsed
    # A fold the campaign does not have, and a lease that is not the holder's.
    with pytest.raises(InvalidArgument):
        service.agents.report_analysis(lease, 5, json.dumps(analysis_document()))
    from hpcopt_server.errors import FailedPrecondition

    with pytest.raises(FailedPrecondition):
        service.agents.report_analysis(Lease(agent, got.trial.id, "another"), 0, json.dumps(analysis_document()))


def _finish(service: Any, agent: str, campaign: int, values: list[float], **metrics: float) -> None:
    got = service.agents.acquire(agent, campaign)
    lease = Lease(agent, got.trial.id, got.lease_id)
    for k, v in enumerate(values):
        service.agents.report_fold(lease, k, v, {"loss": v, **metrics})
    service.agents.complete(lease)


def test_on_best_a_fold_is_analysed_when_it_would_make_its_trial_the_best_so_far(live_server: LiveServer) -> None:
    service = live_server.service
    c = service.campaigns.create(make_spec(folds=2, analysis={"hessian": {}}))
    aid = service.agents.register(host="n", ranks=1, gpus=0).agent_id
    with AgentClient(live_server.grpc_target) as agent:
        got = service.agents.acquire(aid, c.id)
        first = ClientLease(agent_id=aid, trial_id=got.trial.id, lease_id=got.lease_id)
        assert agent.should_analyse(first, 0, {"loss": 9.0}) == (True, "no trial has completed yet")
        _finish(service, aid, c.id, [0.5, 0.7])  # the best: 0.6
        assert agent.should_analyse(first, 1, {"loss": 0.6})[0]  # as good as the best: analysed
        worse, reason = agent.should_analyse(first, 1, {"loss": 0.61})
        assert not worse and reason == "loss 0.61 is not as good as the best trial's 0.6"
        assert agent.should_analyse(first, 0, {"loss": 0.2})[0]
        # An objective the metrics lack: not analysed, saying so (the fold's report will fail).
        assert agent.should_analyse(first, 0, {"acc": 0.2}) == (False, "the fold's metrics have no finite loss")
        with pytest.raises(grpc.RpcError) as err:  # a fold the campaign does not have
            agent._stub.ShouldAnalyse(agent_pb2.ShouldAnalyseRequest(lease=first.to_proto(), fold=2))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "fold" in str(err.value.details())
        with pytest.raises(ApiError, match=r"FAILED_PRECONDITION: trial .* is not held"):  # not the lease's
            agent.should_analyse(ClientLease(agent_id=aid, trial_id=first.trial_id, lease_id="x"), 0, {"loss": 0.1})


def test_on_best_with_several_objectives_a_fold_is_analysed_when_no_completed_trial_dominates_it(
    service: Any,
) -> None:
    objectives = [{"metric": "loss", "direction": "minimize"}, {"metric": "acc", "direction": "maximize"}]
    c = service.campaigns.create(
        make_spec(folds=1, objective=objectives[0], objectives=objectives, analysis={"hessian": {}})
    )
    aid = service.agents.register(host="n", ranks=1, gpus=0).agent_id
    _finish(service, aid, c.id, [0.5], acc=0.8)
    got = service.agents.acquire(aid, c.id)
    lease = Lease(aid, got.trial.id, got.lease_id)
    assert not service.agents.should_analyse(lease, 0, {"loss": 0.6, "acc": 0.7})[0]  # worse in both
    assert not service.agents.should_analyse(lease, 0, {"loss": 0.6, "acc": 0.8})[0]  # worse in one
    assert service.agents.should_analyse(lease, 0, {"loss": 0.6, "acc": 0.9})[0]  # a trade-off: on the front
    assert service.agents.should_analyse(lease, 0, {"loss": 0.5, "acc": 0.8})[0]  # a tie is not dominated
    # analysis.on: all never asks the history.
    c = service.campaigns.create(make_spec(folds=1, analysis={"on": "all", "hessian": {}}))
    _finish(service, aid, c.id, [0.1])
    got = service.agents.acquire(aid, c.id)
    assert service.agents.should_analyse(Lease(aid, got.trial.id, got.lease_id), 0, {"loss": 5.0}) == (
        True,
        "analysis.on: all",
    )


def test_an_analysis_asked_of_a_finished_trial_is_queued_leased_to_one_agent_and_ended_by_it(
    live_server: LiveServer,
) -> None:
    """REST asks (202, then the same answer again), an agent takes it under its own lease
    and stores documents under it, a second agent finds nothing, FinishAnalysis ends it
    and says so in the trial's events; what cannot be analysed gets 409 or 404."""
    service, url = live_server.service, live_server.http_url
    c = service.campaigns.create(make_spec(folds=2, analysis={"hessian": {}}))
    bare = service.campaigns.create(make_spec(folds=1))
    aid = service.agents.register(host="n", ranks=1, gpus=0).agent_id
    _finish(service, aid, bare.id, [0.3])
    got = service.agents.acquire(aid, c.id)
    running = Lease(aid, got.trial.id, got.lease_id)
    uris = [f"file:///ckpt/{relative(service.agents.server_id(), c.id, running.trial_id, k)}" for k in (0, 1)]
    service.agents.report_fold(running, 0, 0.5, {"loss": 0.5}, uris[0])
    # Not yet COMPLETED, then a campaign without analysis, then no such trial.
    r = web.post(f"{url}/api/v1/trials/{running.trial_id}/analysis")
    assert r.status_code == 409 and "is RUNNING: an analysis is asked of a COMPLETED trial" in r.text
    [plain] = service.campaigns.trials(bare.id, limit=5)[0]
    r = web.post(f"{url}/api/v1/trials/{plain.id}/analysis")
    assert r.status_code == 409 and "has no analysis section" in r.text
    assert web.post(f"{url}/api/v1/trials/999999/analysis").status_code == 404
    service.agents.report_fold(running, 1, 0.7, {"loss": 0.7})  # no checkpoint kept
    service.agents.complete(running)
    r = web.post(f"{url}/api/v1/trials/{running.trial_id}/analysis")
    assert r.status_code == 409 and "fold(s) [1] kept no checkpoint" in r.text
    with live_server.service.ctx.storage.write() as tx:  # give fold 1 a checkpoint URI
        tx.connection().exec_driver_sql(
            f"UPDATE folds SET checkpoint_uri = '{uris[1]}' WHERE trial_id = {running.trial_id} AND fold = 1"
        )
    first = web.post(f"{url}/api/v1/trials/{running.trial_id}/analysis")
    assert first.status_code == 202 and first.json()["state"] == "QUEUED"
    again = web.post(f"{url}/api/v1/trials/{running.trial_id}/analysis").json()
    assert again == first.json()  # queued already: answered, not queued twice
    with AgentClient(live_server.grpc_target) as agent:
        a, b = (agent.register(host=h, campaign_id=c.id).agent_id for h in ("n1", "n2"))
        taken = agent.acquire_analysis(a, c.id)
        assert taken is not None
        trial, lease = taken
        assert trial.id == running.trial_id and [f.checkpoint_uri for f in trial.folds] == uris
        assert agent.acquire_analysis(b, c.id) is None  # one agent holds it
        agent.report_analysis(lease, 0, json.dumps(analysis_document()))  # under the analysis's lease
        with pytest.raises(ApiError, match="FAILED_PRECONDITION"):  # another agent's lease: refused
            agent.finish_analysis(ClientLease(agent_id=b, trial_id=trial.id, lease_id=lease.lease_id))
        agent.finish_analysis(lease, summary="2 fold(s) analysed from their checkpoints")
        with pytest.raises(ApiError, match="FAILED_PRECONDITION"):  # ended: the lease holds nothing
            agent.report_analysis(lease, 1, json.dumps(analysis_document()))
    got_doc = web.get(f"{url}/api/v1/trials/{running.trial_id}/analysis").json()
    assert [f["fold"] for f in got_doc["folds"]] == [0]
    assert got_doc["request"]["state"] == "DONE" and got_doc["request"]["finished_at"]
    said = [e.reason for e in service.campaigns.trial(running.trial_id).events if e.kind == "analysis"]
    assert said == ["requested analysis: 2 fold(s) analysed from their checkpoints"]
    # Asked again once done: queued afresh.
    assert web.post(f"{url}/api/v1/trials/{running.trial_id}/analysis").json()["state"] == "QUEUED"
