"""The steering endpoints over HTTP, with the agent on the real gRPC agent API: what a
user does in the dashboard reaches the agent, and hostile bodies get a 4xx that names
the field and change nothing."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import web
from tests.helpers.env import scaled
from tests.helpers.live import LiveServer
from tests.helpers.specs import make_spec


def _agent(server: LiveServer, cid: int) -> tuple[Any, str]:
    from tests.helpers.clients import AgentClient

    client = AgentClient(server.grpc_target)
    return client, client.register(host="n1", campaign_id=cid).agent_id


def _post(server: LiveServer, path: str, **kwargs: Any) -> httpx.Response:
    return web.post(f"{server.http_url}/api/v1{path}", timeout=scaled(60), **kwargs)


def _campaign(service: Any, **budget: int) -> int:
    return int(service.campaigns.create(make_spec(folds=1, budget={"max_trials": 3, "max_parallel": 4, **budget})).id)


def test_a_trial_stopped_over_rest_stops_its_agent_which_goes_on_with_the_next(
    live_server: LiveServer, service: Any
) -> None:
    cid = _campaign(service)
    client, agent = _agent(live_server, cid)
    with client:
        got = client.acquire(agent, cid)
        assert got.lease is not None and got.trial is not None
        assert client.report_intermediate(got.lease, 0, 1, 0.9) == "continue"
        r = _post(live_server, f"/campaigns/{cid}/trials/{got.trial.number}/stop", json={"reason": "looks stuck"})
        assert r.status_code == 200, r.text
        trial = r.json()
        assert trial["state"] == "CANCELLED" and trial["error"] == "looks stuck"
        assert trial["events"][-1]["kind"] == "cancelled" and trial["events"][-1]["reason"] == "looks stuck"
        assert client.heartbeat(got.lease) == "cancelled"
        assert client.report_intermediate(got.lease, 0, 2, 0.8) == "cancelled"
        nxt = client.acquire(agent, cid)
        assert nxt.lease is not None and nxt.trial is not None and nxt.trial.number == got.trial.number + 1
        # No body at all is a stop without a reason.
        r = _post(live_server, f"/campaigns/{cid}/trials/{nxt.trial.number}/stop")
        assert r.status_code == 200 and r.json()["error"] == "stopped by a user"
        again = _post(live_server, f"/campaigns/{cid}/trials/{nxt.trial.number}/stop")
        assert again.status_code == 409 and "CANCELLED" in again.json()["detail"]


def test_pause_resume_and_a_raised_budget_over_rest_reach_a_waiting_agent(
    live_server: LiveServer, service: Any
) -> None:
    cid = _campaign(service, max_trials=1)
    client, agent = _agent(live_server, cid)
    with client:
        r = _post(live_server, f"/campaigns/{cid}/pause")
        assert r.status_code == 200 and r.json()["state"] == "PAUSED"
        waiting = client.acquire(agent, cid)
        assert waiting.status == "wait" and waiting.lease is None
        assert client.queue(agent, cid).done is False
        assert _post(live_server, f"/campaigns/{cid}/pause").status_code == 409
        assert _post(live_server, f"/campaigns/{cid}/resume").json()["state"] == "RUNNING"
        got = client.acquire(agent, cid)
        assert got.lease is not None
        client.report_fold(got.lease, 0, 0.5)
        client.complete(got.lease)
        assert client.acquire(agent, cid).status == "done"
        assert web.get(f"{live_server.http_url}/api/v1/campaigns/{cid}").json()["state"] == "COMPLETED"
        r = _post(live_server, f"/campaigns/{cid}/budget", json={"max_trials": 2})
        assert r.status_code == 200, r.text
        assert (r.json()["state"], r.json()["max_trials"], r.json()["spec"]["budget"]["max_trials"]) == (
            "RUNNING",
            2,
            2,
        )
        more = client.acquire(agent, cid)
        assert more.lease is not None and more.trial is not None and more.trial.number == 1


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("budget", {"max_trials": "9"}, 422, "max_trials"),
        ("budget", {"max_trials": 9.5}, 422, "max_trials"),
        ("budget", {"max_trials": True}, 422, "max_trials"),
        ("budget", {"max_trials": 9, "max_parallel": 100}, 422, "max_parallel"),
        ("budget", {}, 422, "max_trials"),
        ("budget", [9], 422, "body"),
        ("budget", {"max_trials": 2}, 422, "max_trials"),
        ("budget", {"max_trials": 10**7}, 422, "max_trials"),
        ("budget", {"max_trials": 10**30}, 422, "max_trials"),
        ("trials/0/stop", {"reason": 7}, 422, "reason"),
        ("trials/0/stop", {"reason": "x" * 1001}, 422, "reason"),
        ("trials/0/stop", {"why": "x"}, 422, "why"),
        ("trials/-1/stop", {}, 422, "number"),
        ("trials/99/stop", {}, 404, ""),
    ],
)
def test_hostile_steering_requests_get_a_4xx_naming_the_field_and_change_nothing(
    live_server: LiveServer, service: Any, path: str, body: Any, status: int, field: str
) -> None:
    cid = _campaign(service)
    client, agent = _agent(live_server, cid)
    with client:
        client.acquire(agent, cid)
    before = web.get(f"{live_server.http_url}/api/v1/campaigns/{cid}").json()
    r = _post(live_server, f"/campaigns/{cid}/{path}", json=body)
    assert r.status_code == status, r.text
    if field:
        assert field in [e["field"] for e in r.json()["errors"]], r.json()
    after = web.get(f"{live_server.http_url}/api/v1/campaigns/{cid}").json()
    assert after == before


def test_a_huge_or_broken_body_is_refused_unread(live_server: LiveServer, service: Any) -> None:
    cid = _campaign(service)
    huge = _post(live_server, f"/campaigns/{cid}/budget", content=b'{"max_trials": ' + b"9" * 10_000_000 + b"}")
    assert huge.status_code == 413
    broken = _post(live_server, f"/campaigns/{cid}/budget", content=b"{max_trials: 9")
    assert broken.status_code == 422 and "max_trials" in broken.json()["detail"]
    assert _post(live_server, "/campaigns/999999/pause").status_code == 404
    assert _post(live_server, "/campaigns/999999/budget", json={"max_trials": 9}).status_code == 404
    assert service.campaigns.get(cid).campaign.max_trials == 3


def test_the_cli_steers_over_grpc_with_exit_codes_and_json(live_server: LiveServer, service: Any) -> None:
    import json
    import subprocess
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "hpcopt.cli", "--server", live_server.grpc_target, *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(120))

    cid = _campaign(service, max_trials=1)
    client, agent = _agent(live_server, cid)
    with client:
        got = client.acquire(agent, cid)
        assert got.lease is not None and got.trial is not None
        out = cli("stop", str(cid), "0", "--reason", "wrong data path")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"trial #0 of campaign {cid} CANCELLED: wrong data path"
        assert client.heartbeat(got.lease) == "cancelled"
        again = cli("stop", str(cid), "0")
        assert again.returncode != 0 and "only a QUEUED, RUNNING or PAUSED trial" in again.stderr
        assert cli("pause", str(cid)).returncode != 0  # the stop spent the budget: COMPLETED
        raised = cli("--json", "budget", str(cid), "3")
        assert raised.returncode == 0, raised.stderr
        doc = json.loads(raised.stdout)
        assert (doc["state"], doc["max_trials"]) == ("RUNNING", 3)
        assert cli("pause", str(cid)).stdout.strip() == f"campaign {cid} PAUSED"
        assert client.acquire(agent, cid).status == "wait"
        assert cli("resume", str(cid)).stdout.strip() == f"campaign {cid} RUNNING"
        assert client.acquire(agent, cid).status == "granted"
        low = cli("budget", str(cid), "2")
        assert low.returncode != 0 and "max_trials" in low.stderr and "only be raised" in low.stderr
        # `hpcopt watch` follows a paused campaign (it may resume) until it ends.
        assert cli("pause", str(cid)).returncode == 0
        cmd = [sys.executable, "-m", "hpcopt.cli", "--server", live_server.grpc_target, "watch", str(cid)]
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as watching:
            assert watching.stdout is not None
            assert "PAUSED" in watching.stdout.readline()
            assert cli("cancel", str(cid)).returncode == 0
            rest = watching.communicate(timeout=scaled(120))[0].splitlines()
        assert watching.returncode == 0 and rest[-1].startswith(f"campaign {cid} CANCELLED"), rest
