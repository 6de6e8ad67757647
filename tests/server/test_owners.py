"""Campaigns have owners: every call that changes a campaign (stop a trial, pause,
resume, raise the budget, cancel, save a note) with the owner's token, another user's
submit token and an admin token, over REST and gRPC, on SQLite and PostgreSQL. Another
user is refused (403 / PERMISSION_DENIED) and changes nothing; a campaign with no owner
(created before owners) stays open to every submit token."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hpcopt import ApiError
from tests.helpers import web
from tests.helpers.clients import AgentClient, Client
from tests.helpers.env import scaled
from tests.helpers.live import LiveServer, run_live_server
from tests.helpers.specs import make_spec


@pytest.fixture
def secured(service: Any) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    tokens = {
        "alice": service.tokens.create("alice", ["submit"])[1],
        # A second token of alice's (her cluster's, or a rotated one) is alice too.
        "alice-2": service.tokens.create("alice", ["submit"])[1],
        "bob": service.tokens.create("bob", ["submit"])[1],
        "root": service.tokens.create("root", ["admin"])[1],
        "agent": service.tokens.create("cluster", ["agent"])[1],
    }
    yield from ((server, tokens) for server in run_live_server(service))


def _rest(server: LiveServer, token: str) -> httpx.Client:
    return web.http(
        base_url=f"{server.http_url}/api/v1", headers={"authorization": f"Bearer {token}"}, timeout=scaled(60)
    )


def _campaign(server: LiveServer, tokens: dict[str, str], owner: str | None) -> tuple[int, list[int]]:
    """A campaign created over REST by ``owner`` (None: one with no owner, as before
    owners), with two trials RUNNING under an agent."""
    spec = make_spec(folds=1, budget={"max_trials": 4, "max_parallel": 4})
    if owner is None:
        cid = int(server.service.campaigns.create(spec).id)
    else:
        with _rest(server, tokens[owner]) as rest:
            r = rest.post("/campaigns", json=spec)
            assert r.status_code == 201, r.text
            cid = int(r.json()["id"])
            assert r.json()["owner"] == owner.removesuffix("-2")
    with AgentClient(server.grpc_target, token=tokens["agent"]) as a:
        agent = a.register(host="n1", campaign_id=cid).agent_id
        numbers = []
        for _ in range(2):
            got = a.acquire(agent, cid)
            assert got.trial is not None
            numbers.append(got.trial.number)
    return cid, numbers


def _steer(
    server: LiveServer, transport: str, token: str, cid: int, numbers: list[int]
) -> dict[str, Callable[[], Any]]:
    """Each steering call, made as ``token`` over ``transport``; each returns normally
    or raises PermissionError for a refusal by owner."""
    if transport == "rest":

        def call(method: str, path: str, body: Any = None) -> Any:
            with _rest(server, token) as rest:
                r = rest.request(method, path, json=body)
            if r.status_code == 403:
                raise PermissionError(r.json()["detail"])
            assert r.status_code == 200, (path, r.status_code, r.text)
            return r.json()

        def note(path: str) -> Any:
            with _rest(server, token) as rest:
                version = rest.get(path).json()["version"]
            return call("PUT", path, {"body": f"noted by {token[-6:]}", "base_version": version})

        return {
            "stop": lambda: call("POST", f"/campaigns/{cid}/trials/{numbers[0]}/stop", {"reason": "mine"}),
            "pause": lambda: call("POST", f"/campaigns/{cid}/pause"),
            "resume": lambda: call("POST", f"/campaigns/{cid}/resume"),
            "budget": lambda: call("POST", f"/campaigns/{cid}/budget", {"max_trials": 1_000_000}),
            "campaign note": lambda: note(f"/campaigns/{cid}/note"),
            "trial note": lambda: note(f"/campaigns/{cid}/trials/{numbers[1]}/note"),
            "cancel": lambda: call("POST", f"/campaigns/{cid}/cancel"),
        }

    def rpc(method: str, *args: Any) -> Any:
        with Client(server.grpc_target, token=token) as c:
            try:
                return getattr(c, method)(cid, *args)
            except ApiError as exc:
                if exc.code == "PERMISSION_DENIED":
                    raise PermissionError(str(exc)) from None
                raise

    return {
        "stop": lambda: rpc("stop_trial", numbers[0], "mine"),
        "pause": lambda: rpc("pause_campaign"),
        "resume": lambda: rpc("resume_campaign"),
        "budget": lambda: rpc("raise_budget", 1_000_000),
        "cancel": lambda: rpc("cancel_campaign"),
    }  # notes are REST-only


def _state(server: LiveServer, cid: int, numbers: list[int]) -> tuple[Any, ...]:
    svc = server.service
    summary = svc.campaigns.get(cid)
    trials = [svc.campaigns.trial(svc.insights.trial(campaign_id=cid, number=n).trial.id).state for n in numbers]
    notes = (svc.notes.get(cid).body, svc.notes.get(cid, numbers[1]).body)
    return summary.campaign.state, summary.campaign.max_trials, tuple(trials), notes


@pytest.mark.parametrize("transport", ["rest", "grpc"])
def test_another_users_submit_token_changes_nothing_and_the_owner_and_an_admin_change_it(
    secured: tuple[LiveServer, dict[str, str]], transport: str
) -> None:
    server, tokens = secured
    cid, numbers = _campaign(server, tokens, "alice")
    before = _state(server, cid, numbers)
    calls = _steer(server, transport, tokens["bob"], cid, numbers)
    for name, call in calls.items():
        with pytest.raises(PermissionError) as err:
            call()
        said = str(err.value)
        assert "belongs to 'alice'" in said and "'bob'" in said and "admin" in said, (name, said)
        assert _state(server, cid, numbers) == before, name
    # Reads stay open to every token.
    with _rest(server, tokens["bob"]) as rest:
        assert rest.get(f"/campaigns/{cid}").status_code == 200
    for actor in ("alice-2", "root"):  # the owner (by name, from a second token) and an admin
        cid, numbers = _campaign(server, tokens, "alice")
        for call in _steer(server, transport, tokens[actor], cid, numbers).values():
            call()
        state, budget, trials, notes = _state(server, cid, numbers)
        assert state == "CANCELLED" and budget == 1_000_000 and trials == ("CANCELLED", "CANCELLED")
        if transport == "rest":
            assert all(n.startswith("noted by") for n in notes)


@pytest.mark.parametrize("transport", ["rest", "grpc"])
def test_a_campaign_with_no_owner_stays_open_to_every_submit_token(
    secured: tuple[LiveServer, dict[str, str]], transport: str
) -> None:
    server, tokens = secured
    cid, numbers = _campaign(server, tokens, None)
    assert server.service.campaigns.get(cid).campaign.owner is None
    for call in _steer(server, transport, tokens["bob"], cid, numbers).values():
        call()
    assert _state(server, cid, numbers)[0] == "CANCELLED"


def test_a_campaign_from_before_owners_has_none_after_the_upgrade(tmp_path: Path) -> None:
    from sqlalchemy import create_engine, text

    from hpcopt_server.service import Service
    from hpcopt_server.storage.migrate import upgrade
    from hpcopt_server.storage.repository import Storage

    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0011")
    engine = create_engine(url)
    with engine.begin() as c:  # created by token 1 (alice's) before campaigns had owners
        c.execute(
            text(
                "INSERT INTO campaigns (name, state, spec, next_number, finished_count, created_at, created_by) "
                "VALUES ('old', 'RUNNING', :spec, 0, 0, '2026-11-30 10:00:00', 1)"
            ),
            {"spec": __import__("json").dumps(make_spec())},
        )
    engine.dispose()
    upgrade(url)
    storage = Storage(url)
    try:
        service = Service(storage)
        service.tokens.create("alice", ["submit"])
        _, bob = service.tokens.create("bob", ["submit"])
        (campaign,), _ = service.campaigns.page()
        assert campaign.campaign.owner is None
        token = service.tokens.authorize(bob, "submit")
        assert service.steering.pause(campaign.campaign.id, token).state == "PAUSED"
    finally:
        storage.close()
