"""Auth cannot fail open: token operations never turn it off, a server bound beyond
loopback never serves without it, and opening a server is one explicit command. Agent
ids are bound to the token that registered them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from hpcopt import ApiError
from hpcopt_server.errors import Unauthenticated
from hpcopt_server.service import Service
from hpcopt_server.storage.migrate import upgrade
from hpcopt_server.storage.repository import Storage
from tests.helpers import web
from tests.helpers.clients import AgentClient, Client
from tests.helpers.env import scaled
from tests.helpers.live import run_live_server
from tests.helpers.process import ServerProcess
from tests.helpers.specs import make_spec
from tests.server.test_auth import _server_cli


def _unauthenticated_calls_are_refused(server: ServerProcess, secret: str | None = None) -> None:
    who = web.get(server.http_url + "/api/v1/whoami").json()
    assert who["auth"] is True
    assert web.post(server.http_url + "/api/v1/campaigns", json=make_spec()).status_code == 401
    with Client(server.grpc_target, timeout=scaled(10)) as c, pytest.raises(ApiError) as info:
        c.list_campaigns()
    assert info.value.code == "UNAUTHENTICATED"
    if secret is not None:
        headers = {"authorization": f"Bearer {secret}"}
        assert web.get(server.http_url + "/api/v1/campaigns", headers=headers).status_code == 401


@pytest.mark.slow
def test_revoking_the_last_token_never_opens_a_server_bound_beyond_loopback(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'auth.db'}"
    created = _server_cli("token", "create", "--db", db, "--name", "ops", "--scope", "admin")
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    with ServerProcess(db, host="0.0.0.0") as server:
        headers = {"authorization": f"Bearer {secret}"}
        assert web.get(server.http_url + "/api/v1/campaigns", headers=headers).status_code == 200
        revoked = _server_cli("token", "revoke", "--db", db, "1")
        assert revoked.returncode == 0 and "no active admin token is left" in revoked.stderr
        assert "token create --db" in revoked.stderr  # the recovery path is printed
        # (When the server stops honouring the revoked secret, past its cache: the next test.)
        _unauthenticated_calls_are_refused(server)
        # Recovery: whoever can reach the database mints a new admin token.
        again = _server_cli("token", "create", "--db", db, "--name", "ops2", "--scope", "admin")
        fresh = {"authorization": f"Bearer {again.stdout.strip()}"}
        assert web.post(server.http_url + "/api/v1/campaigns", json=make_spec(), headers=fresh).status_code == 201
    assert "auth on; 1 active token(s)" in _server_cli("auth", "status", "--db", db).stdout


@pytest.mark.slow
def test_only_an_explicit_command_opens_a_server(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'auth.db'}"
    _server_cli("token", "create", "--db", db, "--name", "once", "--scope", "read")
    _server_cli("token", "revoke", "--db", db, "1")
    # No active token left, and on loopback: still auth on (it was on once).
    with ServerProcess(db) as server:
        _unauthenticated_calls_are_refused(server)
        refused = _server_cli("auth", "disable", "--db", db)
        assert refused.returncode == 2 and "--yes" in refused.stderr
        assert "auth on" in _server_cli("auth", "status", "--db", db).stdout
        opened = _server_cli("auth", "disable", "--db", db, "--yes")
        assert opened.returncode == 0 and "auth off" in opened.stdout
        _unauthenticated_calls_are_refused(server)  # past the cache too: the next test
    with ServerProcess(db) as server:  # restarted after the explicit opening: open on loopback
        assert web.get(server.http_url + "/api/v1/whoami").json()["auth"] is False
        assert web.post(server.http_url + "/api/v1/campaigns", json=make_spec()).status_code == 201
    # Beyond loopback it refuses to start open.
    out = _server_cli("serve", "--db", db, "--host", "0.0.0.0", "--port", "0", timeout=scaled(60))
    assert out.returncode == 2 and "refusing to serve on 0.0.0.0 without auth" in out.stderr


def test_past_its_cache_a_server_refuses_a_revoked_token_and_keeps_auth_on_when_it_is_disabled(
    tmp_path: Path,
) -> None:
    """What another process (the CLI) changes in the database is seen once the token
    cache's seconds have passed on the server's clock; the auth flag turned off is not."""
    db = f"sqlite:///{tmp_path / 'auth.db'}"
    upgrade(db)
    storage = Storage(db)
    try:
        server, cli = Service(storage), Service(storage)
        seconds = [1000.0]
        server.ctx.monotonic = lambda: seconds[0]
        token, secret = cli.tokens.create("ops", ["admin"])
        assert server.tokens.authorize(secret, "read") == token
        cli.tokens.revoke(token.id)
        cli.tokens.turn_off()
        seconds[0] += server.tokens.cache_seconds - 0.5
        assert server.tokens.authorize(secret, "read") == token  # cached: a revocation takes up to cache_seconds
        seconds[0] += 1.0
        with pytest.raises(Unauthenticated, match="unknown or revoked"):
            server.tokens.authorize(secret, "read")
        assert server.tokens.enabled() and not Service(storage).tokens.enabled()
        with pytest.raises(Unauthenticated, match="requires a token"):
            server.tokens.authorize(None, "read")
    finally:
        storage.close()


def test_serving_with_require_auth_keeps_it_on_for_the_database(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'auth.db'}"
    upgrade(db)
    storage = Storage(db)
    try:
        tokens = Service(storage, require_auth=True).tokens
        tokens.turn_on()  # what `serve --require-auth` does at start
        assert Service(storage).tokens.enabled()  # a later server without the flag: still on
    finally:
        storage.close()


@pytest.mark.parametrize("had_tokens", [True, False])
def test_the_migration_turns_auth_on_where_tokens_ever_existed(tmp_path: Path, had_tokens: bool) -> None:
    db = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(db, "0001")
    if had_tokens:  # 0001's rule: auth was on while this token was active
        engine = create_engine(db)
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO api_tokens (name, token_hash, scopes, created_at, revoked_at) "
                    "VALUES ('old', 'h', 'admin', '2026-01-01 00:00:00', '2026-01-02 00:00:00')"
                )
            )
        engine.dispose()
    upgrade(db)
    storage = Storage(db)
    try:
        assert Service(storage).tokens.enabled() is had_tokens
    finally:
        storage.close()


@pytest.fixture
def two_agent_tokens(service: Any) -> Any:
    secrets = {name: service.tokens.create(name, ["agent"])[1] for name in ("a", "b")}
    secrets["admin"] = service.tokens.create("admin", ["admin"])[1]
    cid = service.campaigns.create(make_spec(folds=1)).id
    for server in run_live_server(service):
        yield server, secrets, cid


def test_an_agent_id_works_only_with_the_token_that_registered_it(two_agent_tokens: Any) -> None:
    server, secrets, cid = two_agent_tokens
    a, b, admin = (AgentClient(server.grpc_target, token=secrets[k], timeout=scaled(10)) for k in ("a", "b", "admin"))
    try:
        agent_id = a.register(host="node-a", campaign_id=cid).agent_id
        lease = (a.acquire(agent_id, cid)).lease
        before = server.service.campaigns.trial(lease.trial_id)
        for other in (b, admin):
            for call in (
                lambda c=other: c.acquire(agent_id, cid),
                lambda c=other: c.heartbeat(lease),
                lambda c=other: c.report_intermediate(lease, 0, 1, 0.5),
                lambda c=other: c.report_fold(lease, 0, 0.5),
                lambda c=other: c.complete(lease),
                lambda c=other: c.release(lease, "FAILED", "hijack"),
            ):
                with pytest.raises(ApiError) as info:
                    call()
                assert info.value.code == "PERMISSION_DENIED" and "registered with another token" in info.value.message
        assert server.service.campaigns.trial(lease.trial_id) == before  # nothing changed
        a.report_fold(lease, 0, 0.5)
        assert a.complete(lease).value == 0.5
    finally:
        for c in (a, b, admin):
            c.close()


def test_an_agent_registered_before_auth_must_register_again(service: Any) -> None:
    cid = service.campaigns.create(make_spec()).id
    open_agent = service.agents.register(host="early", ranks=1, gpus=0, campaign_id=cid)
    token = service.tokens.create("agents", ["agent"])[0]
    with pytest.raises(Exception, match="registered with another token"):
        service.agents.acquire(open_agent.agent_id, cid, caller=token.id)
    fresh = service.agents.register(host="later", ranks=1, gpus=0, campaign_id=cid, caller=token.id)
    assert service.agents.acquire(fresh.agent_id, cid, caller=token.id).status.value == "GRANTED"
