"""Real gRPC and HTTP servers on free ports, driven by the real client, the CLI and httpx."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from hpcopt import ApiError
from tests.helpers import web
from tests.helpers.clients import AgentClient, Client
from tests.helpers.env import ROOT, scaled
from tests.helpers.live import LiveServer
from tests.helpers.seed import checkpoint_uri
from tests.helpers.specs import make_spec


def _run_one_trial(server: LiveServer, campaign_id: int, values: list[float]) -> int:
    with AgentClient(server.grpc_target) as agent:
        reg = agent.register(host="node1", ranks=2, gpus=1, slurm_job_id="42", campaign_id=campaign_id)
        got = agent.acquire(reg.agent_id, campaign_id)
        assert got.status == "granted"
        assert got.campaign_spec["folds"] == len(values)
        lease = got.lease
        assert agent.heartbeat(lease) == "continue"
        for k, v in enumerate(values):
            agent.report_intermediate(lease, k, 0, v + 1)
            agent.report_fold(lease, k, v, {"loss": v}, checkpoint_uri(reg.server_id, campaign_id, got.trial.id, k))
        return agent.complete(lease).id


def test_grpc_client_runs_a_campaign_end_to_end(live_server: LiveServer) -> None:
    with Client(live_server.grpc_target) as c:
        campaign = c.create_campaign(make_spec(folds=2, budget={"max_trials": 2, "max_parallel": 1}))
        assert campaign.state == "RUNNING" and campaign.max_trials == 2
        tid = _run_one_trial(live_server, campaign.id, [0.2, 0.4])
        trial = c.get_trial(tid)
        assert trial.state == "COMPLETED" and trial.value == pytest.approx(0.3)
        assert [p.value for p in trial.curves] == [1.2, 1.4]
        assert [e.kind for e in trial.events] == ["acquired", "completed"]
        assert c.get_best_trial(campaign.id).id == tid
        assert c.trial_page(campaign.id, ["COMPLETED"]).total == 1
        assert [x.id for x in c.list_campaigns()] == [campaign.id]
        doc = c.export_campaign(campaign.id)
        copy = c.import_campaign(doc)
        assert copy.trial_counts["COMPLETED"] == 1 and copy.id != campaign.id
        assert c.cancel_campaign(campaign.id).state == "CANCELLED"


def test_grpc_errors_carry_codes_and_field_names(live_server: LiveServer) -> None:
    with Client(live_server.grpc_target) as c:
        bad = make_spec(space={"lr": {"type": "real", "low": 1, "high": 0}})
        with pytest.raises(ApiError) as err:
            c.create_campaign(bad)
        assert err.value.code == "INVALID_ARGUMENT"
        assert err.value.field_errors == [{"field": "space.lr", "message": "low (1.0) must be smaller than high (0.0)"}]
        with pytest.raises(ApiError, match="NOT_FOUND"):
            c.get_campaign(999)
        with pytest.raises(ApiError, match="NOT_FOUND: campaign 1 has no completed trial yet"):
            campaign = c.create_campaign(make_spec())
            c.get_best_trial(campaign.id)
    with AgentClient(live_server.grpc_target) as agent:
        reg = agent.register(host="h")
        got = agent.acquire(reg.agent_id, campaign.id)
        lease = got.lease
        with pytest.raises(ApiError) as err:
            agent.report_fold(lease, 0, float("nan"))
        assert err.value.code == "INVALID_ARGUMENT" and "finite" in err.value.message
        with pytest.raises(ApiError, match="FAILED_PRECONDITION"):
            agent.complete(lease)
        with pytest.raises(ApiError, match="INVALID_ARGUMENT: state must be"):
            agent.release(lease, "COMPLETED")


def test_rest_api_serves_campaigns_trials_and_errors(live_server: LiveServer) -> None:
    base = live_server.http_url
    r = web.post(f"{base}/api/v1/campaigns", json=make_spec(folds=2))
    assert r.status_code == 201, r.text
    cid = r.json()["id"]
    r = web.post(
        f"{base}/api/v1/campaigns",
        content=yaml.safe_dump(make_spec(name="from-yaml")),
        headers={"content-type": "application/yaml"},
    )
    assert r.status_code == 201 and r.json()["name"] == "from-yaml"
    tid = _run_one_trial(live_server, cid, [1.0, 3.0])

    listed = web.get(f"{base}/api/v1/campaigns").json()
    assert listed["total"] == 2 and listed["campaigns"][-1]["id"] == cid  # newest first
    got = web.get(f"{base}/api/v1/campaigns/{cid}").json()
    assert got["best_value"] == 2.0 and got["trial_counts"] == {"COMPLETED": 1}
    page = web.get(f"{base}/api/v1/campaigns/{cid}/trials", params={"state": "COMPLETED", "limit": 5}).json()
    assert page["total"] == 1 and page["trials"][0]["value"] == 2.0 and page["trials"][0]["curves"] is None
    trial = web.get(f"{base}/api/v1/trials/{tid}").json()
    assert trial["value_std"] == pytest.approx(2**0.5) and len(trial["curves"]) == 2
    assert web.get(f"{base}/api/v1/campaigns/{cid}/best").json()["id"] == tid
    agents = web.get(f"{base}/api/v1/campaigns/{cid}/agents").json()
    assert agents[0]["host"] == "node1" and agents[0]["slurm_job_id"] == "42"
    export = web.get(f"{base}/api/v1/campaigns/{cid}/export")
    assert "attachment" in export.headers["content-disposition"]
    imported = web.post(f"{base}/api/v1/campaigns/import", json=export.json())
    assert imported.status_code == 201 and imported.json()["trial_counts"] == {"COMPLETED": 1}
    assert web.post(f"{base}/api/v1/campaigns/{cid}/cancel").json()["state"] == "CANCELLED"
    assert web.post(f"{base}/api/v1/campaigns/{cid}/cancel").status_code == 409

    bad = web.post(f"{base}/api/v1/campaigns", json=make_spec(budget={"max_trials": 0}))
    assert bad.status_code == 422
    assert bad.json()["errors"] == [
        {"field": "budget.max_trials", "message": "Input should be greater than or equal to 1"}
    ]
    assert web.post(f"{base}/api/v1/campaigns", content=b"{not json").status_code == 422
    assert web.get(f"{base}/api/v1/campaigns/999").status_code == 404
    assert web.get(f"{base}/api/v1/campaigns/{cid}/trials", params={"limit": 0}).status_code == 422
    assert web.get(f"{base}/api/v1/campaigns/{cid}/trials", params={"state": "NOPE"}).status_code == 422


def test_health_docs_metrics_and_dashboard(live_server: LiveServer) -> None:
    base = live_server.http_url
    assert web.get(f"{base}/healthz").json()["status"] == "ok"
    spec = web.get(f"{base}/openapi.json").json()
    ops = {op["operationId"] for path in spec["paths"].values() for op in path.values()}
    assert {"create_campaign", "list_trials", "get_trial", "cancel_campaign", "import_campaign"} <= ops
    # Every answer a route gives is in the document (schemathesis checks them against it).
    paths = spec["paths"]
    assert "409" in paths["/api/v1/campaigns/{campaign_id}/cancel"]["post"]["responses"]
    exported = paths["/api/v1/campaigns/{campaign_id}/export"]["get"]["responses"]["200"]["content"]
    assert {"application/json", "text/csv"} <= set(exported)
    for path in ("/api/v1/campaigns", "/api/v1/campaigns/validate", "/api/v1/campaigns/import"):
        assert "413" in paths[path]["post"]["responses"], path
    assert web.get(f"{base}/docs").status_code == 200
    cid = web.post(f"{base}/api/v1/campaigns", json=make_spec(folds=1)).json()["id"]
    _run_one_trial(live_server, cid, [0.5])
    metrics = web.get(f"{base}/metrics").text
    assert 'hpcopt_trials{state="COMPLETED"} 1.0' in metrics
    assert "hpcopt_acquire_seconds_count 1.0" in metrics
    assert 'hpcopt_grpc_requests_total{code="OK",method="ReportFold"} 1.0' in metrics
    assert 'hpcopt_http_requests_total{method="POST",route="/api/v1/campaigns",status="201"}' in metrics
    assert "<title>hpcopt</title>" in web.get(f"{base}/").text


def test_grpc_health_and_reflection_are_on(live_server: LiveServer) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with grpc.insecure_channel(live_server.grpc_target) as ch:
        status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="hpcopt.v1.AgentService"))
        assert status.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        [resp] = list(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
        names = {s.name for s in resp.list_services_response.service}
        assert {"hpcopt.v1.CampaignService", "hpcopt.v1.AgentService", "grpc.health.v1.Health"} <= names


# The CLI is a client of the gRPC API, whose storage backends the tests above cover:
# on SQLite only, to keep the suite within its time budget.
SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


def _cli(server: LiveServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hpcopt.cli", "--server", server.grpc_target, *args],
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )


@SQLITE_ONLY
def test_cli_submits_watches_and_exports(live_server: LiveServer, tmp_path: Path) -> None:
    spec_file = tmp_path / "c.yaml"
    spec_file.write_text(yaml.safe_dump(make_spec(folds=1, name="cli-campaign"), sort_keys=False))
    out = _cli(live_server, "submit", str(spec_file))
    assert out.returncode == 0 and "campaign 1 'cli-campaign' submitted" in out.stdout, out.stderr
    _run_one_trial(live_server, 1, [0.25])
    listing = _cli(live_server, "list").stdout
    assert "cli-campaign" in listing and "1/10" in listing
    assert "best       0.25" in _cli(live_server, "show", "1").stdout
    assert "COMPLETED" in _cli(live_server, "trials", "1").stdout
    assert json.loads(_cli(live_server, "--json", "best", "1").stdout)["value"] == 0.25
    exported = tmp_path / "export.json"
    assert _cli(live_server, "export", "1", "-o", str(exported)).returncode == 0
    assert "imported as campaign 2" in _cli(live_server, "import", str(exported)).stdout
    assert "CANCELLED" in _cli(live_server, "cancel", "1").stdout
    missing = _cli(live_server, "show", "99")
    assert missing.returncode == 1 and "NOT_FOUND: campaign 99 does not exist" in missing.stderr


def _cli_after(server: LiveServer, *args: str) -> subprocess.CompletedProcess[str]:
    """The options after the command, as users type them."""
    return subprocess.run(
        [sys.executable, "-m", "hpcopt.cli", *args, "--server", server.grpc_target, "--json"],
        capture_output=True,
        text=True,
        timeout=scaled(60),
        env={**os.environ, "COLUMNS": "200"},
    )


@SQLITE_ONLY
@pytest.mark.slow
def test_cli_options_go_anywhere_and_json_is_typed_and_matches_the_text(live_server: LiveServer) -> None:
    with Client(live_server.grpc_target) as c:
        c.create_campaign(make_spec(folds=2, name="typed"))
    tid = _run_one_trial(live_server, 1, [0.2, 0.4])
    listing = json.loads(_cli_after(live_server, "list").stdout)
    assert listing[0]["id"] == 1 and listing[0]["state"] == "RUNNING" and listing[0]["spec"] is None
    assert listing[0]["trial_counts"] == {"COMPLETED": 1} and listing[0]["finished"] == 1
    shown = json.loads(_cli_after(live_server, "show", "1").stdout)
    assert shown["max_trials"] == 10 and shown["best_trial_id"] == tid and shown["spec"]["folds"] == 2
    trial = json.loads(_cli_after(live_server, "trial", "1", "0").stdout)  # campaign 1, trial #0
    assert trial["id"] == tid and trial["number"] == 0
    assert trial["state"] == "COMPLETED" and trial["value"] == pytest.approx(0.3) and trial["attempt"] == 1
    assert [f["value"] for f in trial["folds"]] == [0.2, 0.4] and trial["folds"][0]["metrics"] == {"loss": 0.2}
    assert [e["kind"] for e in trial["events"]] == ["acquired", "completed"] and trial["finished_at"].endswith("+00:00")
    # Parameters in the spec's order (lr, width, act: not alphabetical) in every view.
    assert list(trial["params"]) == ["lr", "width", "act"]
    with urllib.request.urlopen(f"{live_server.http_url}/api/v1/trials/{tid}", timeout=scaled(10)) as r:
        assert list(json.loads(r.read())["params"]) == ["lr", "width", "act"]  # stored in that order
    assert list(json.loads(_cli_after(live_server, "best", "1").stdout)["params"]) == ["lr", "width", "act"]
    assert list(json.loads(_cli_after(live_server, "trials", "1").stdout)[0]["params"]) == ["lr", "width", "act"]
    # The text shows what the JSON holds: folds, learning curves and the attempt history.
    text = _cli(live_server, "trial", "--id", str(tid)).stdout
    assert text.startswith("trial #0 of campaign 1: COMPLETED"), text
    assert "(trial #0)" in _cli(live_server, "show", "1").stdout, "the best trial by its number"
    assert _cli(live_server, "trial", "1").returncode == 2, "a number is needed"
    for word in ("COMPLETED", "folds", "learning curves", "history", "acquired", "/fold1.pt", "fold metrics"):
        assert word in text, text
    assert text.index("  lr ") < text.index("  width ") < text.index("  act "), text
    header = _cli(live_server, "trials", "1").stdout.splitlines()[0].split()
    assert header[-3:] == ["lr", "width", "act"], header
    # A campaign that ends: watch (into a pipe: line by line) follows it and returns; with
    # --json one document per refresh.
    with Client(live_server.grpc_target) as c:
        c.cancel_campaign(1)
    watched = _cli(live_server, "watch", "1", "--interval", "0.2")
    assert watched.returncode == 0 and "campaign 1 'typed': CANCELLED" in watched.stdout, watched
    assert "trial #0 COMPLETED 0.3 ± 0.141421  lr=" in watched.stdout, watched.stdout
    assert "best: trial #0 0.3" in watched.stdout and "\x1b" not in watched.stdout, watched.stdout
    lines = _cli_after(live_server, "watch", "1").stdout.splitlines()
    assert json.loads(lines[-1])["campaign"]["state"] == "CANCELLED"


@SQLITE_ONLY
def test_cli_points_at_the_bad_field_in_the_file(live_server: LiveServer, tmp_path: Path) -> None:
    spec_file = tmp_path / "bad.yaml"
    text = (ROOT / "examples/digits/campaign.yaml").read_text().replace("low: 16, high: 256", "low: 600, high: 256")
    spec_file.write_text(text)
    out = _cli(live_server, "submit", str(spec_file))
    line = next(i + 1 for i, s in enumerate(text.splitlines()) if s.strip().startswith("width:"))
    assert out.returncode == 2
    assert f"space.width: low (600) must be smaller than high (256) ({spec_file}:{line}:" in out.stderr
    assert json.loads(_cli(live_server, "list", "--json").stdout) == []  # nothing was submitted
