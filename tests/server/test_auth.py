"""The auth matrix: every REST endpoint and every RPC with no token, a wrong-scope token
and a right one; token management from the CLI; refusing an open non-loopback bind."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from hpcopt.v1 import agent_pb2, campaign_pb2
from hpcopt_server.operations import BY_REST, BY_RPC
from hpcopt_server.service import Service
from hpcopt_server.storage.repository import Storage
from tests.helpers import web
from tests.helpers.db import migrated_sqlite
from tests.helpers.env import scaled
from tests.helpers.live import LiveServer, free_port, run_live_server
from tests.helpers.specs import make_spec

SCOPES = ("read", "submit", "agent", "admin")

WRONG = {"read": "agent", "submit": "read", "agent": "submit"}


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[LiveServer, dict[str, str], int]]:
    url = migrated_sqlite(tmp_path / "auth.db")
    storage = Storage(url)
    service = Service(storage)
    tokens = {scope: service.tokens.create(f"{scope}-token", [scope])[1] for scope in SCOPES}
    cid = service.campaigns.create(make_spec()).id
    yield from ((server, tokens, cid) for server in run_live_server(service))
    storage.close()


@pytest.mark.slow
def test_every_rest_endpoint_checks_its_scope(secured: tuple[LiveServer, dict[str, str], int]) -> None:
    server, tokens, cid = secured
    export = web.get(
        f"{server.http_url}/api/v1/campaigns/{cid}/export", headers={"authorization": f"Bearer {tokens['read']}"}
    ).json()
    bodies: dict[str, Any] = {
        "create_campaign": make_spec(),
        "import_campaign": export,
        "validate_campaign": make_spec(),
        "raise_budget": {"max_trials": 1000},
    }
    # Every route the server documents, with the scope the operations table gives it:
    # the matrix is the table's, so a route the table lacks (or names wrongly) fails here.
    routes = [
        (method.upper(), path, op["operationId"])
        for path, ops in web.get(f"{server.http_url}/openapi.json").json()["paths"].items()
        for method, op in ops.items()
    ]
    assert len(routes) == len(BY_REST), "a route without a row in hpcopt_server.operations, or a row without a route"
    checked = 0
    for method, path, operation in routes:
        needed = BY_REST[operation].scope
        if needed is None:
            continue
        url = server.http_url + path.format(campaign_id=cid, trial_id=1, number=0, version=1)
        body = bodies.get(operation)

        def call(token: str | None, url: str = url, method: str = method, body: Any = body) -> httpx.Response:
            headers = {"authorization": f"Bearer {token}"} if token else {}
            return web.request(method, url, json=body, headers=headers)

        assert call(None).status_code == 401, path
        assert call("hpc_not-a-token").status_code == 401, path
        denied = call(tokens[WRONG[needed]])
        assert denied.status_code == 403 and needed in denied.json()["detail"], path
        for scope in (needed, "admin"):
            assert call(tokens[scope]).status_code not in (401, 403), (path, scope)
        checked += 1
    assert checked >= 30, checked
    assert web.get(f"{server.http_url}/healthz").status_code == 200  # open for probes
    # /whoami is open: it tells a client whether it needs a token and what its token may do.
    agents = server.grpc_target  # where agents connect: the dashboard's "start an agent" command uses it
    open_ = web.get(f"{server.http_url}/api/v1/whoami").json()
    assert open_ == {"auth": True, "token": None, "scopes": [], "agent_server": agents}
    bad = web.get(f"{server.http_url}/api/v1/whoami", headers={"authorization": "Bearer hpc_nope"}).json()
    assert bad["token"] is None and bad["scopes"] == []
    read = web.get(f"{server.http_url}/api/v1/whoami", headers={"authorization": f"Bearer {tokens['read']}"}).json()
    assert read == {"auth": True, "token": "read-token", "scopes": ["read"], "agent_server": agents}


def _rpcs() -> list[tuple[str, str, Any, str]]:
    """Every method of the protos' guarded services, with the operations table's scope."""
    out = []
    for module, service_name in ((campaign_pb2, "CampaignService"), (agent_pb2, "AgentService")):
        desc = module.DESCRIPTOR.services_by_name[service_name]
        for m in desc.methods:
            path = f"/{desc.full_name}/{m.name}"
            needed = BY_RPC[path].scope
            assert needed is not None, path
            request_cls = getattr(module, m.input_type.name, None) or getattr(agent_pb2, m.input_type.name)
            out.append((path, m.name, request_cls, needed))
    return out


def test_every_rpc_checks_its_scope(secured: tuple[LiveServer, dict[str, str], int]) -> None:
    server, tokens, _ = secured
    rpcs = _rpcs()
    assert len(rpcs) >= 26  # the table's rows are tied to the protos in test_operations.py
    with grpc.insecure_channel(server.grpc_target) as ch:
        for path, name, request_cls, needed in rpcs:
            call = ch.unary_unary(path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=bytes)

            def code(token: str | None, call: Any = call, request_cls: Any = request_cls) -> grpc.StatusCode:
                metadata = (("authorization", f"Bearer {token}"),) if token else ()
                try:
                    call(request_cls(), metadata=metadata, timeout=scaled(10))
                    return grpc.StatusCode.OK
                except grpc.RpcError as exc:
                    return exc.code()  # type: ignore[no-any-return, attr-defined]

            assert code(None) == grpc.StatusCode.UNAUTHENTICATED, name
            assert code(tokens[WRONG[needed]]) == grpc.StatusCode.PERMISSION_DENIED, name
            for scope in (needed, "admin"):
                assert code(tokens[scope]) not in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


def test_revoked_tokens_stop_working(secured: tuple[LiveServer, dict[str, str], int]) -> None:
    server, tokens, _ = secured
    headers = {"authorization": f"Bearer {tokens['read']}"}
    assert web.get(f"{server.http_url}/api/v1/campaigns", headers=headers).status_code == 200
    token = next(t for t in server.service.tokens.list_all() if t.name == "read-token")
    server.service.tokens.revoke(token.id)
    assert web.get(f"{server.http_url}/api/v1/campaigns", headers=headers).status_code == 401


def _server_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = scaled(60)
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hpcopt_server.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.slow
def test_token_cli_creates_lists_and_revokes(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 't.db'}"
    created = _server_cli("token", "create", "--db", db, "--name", "ci", "--scope", "read", "--scope", "agent")
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    assert secret.startswith("hpc_") and "shown only now" in created.stderr
    listing = _server_cli("token", "list", "--db", db).stdout
    assert "ci" in listing and "agent,read" in listing and secret not in listing
    assert secret not in (tmp_path / "t.db").read_bytes().decode("latin-1")  # only its hash is stored
    bad = _server_cli("token", "create", "--db", db, "--name", "x", "--scope", "root")
    assert bad.returncode == 2 and "scope must be one or more of" in bad.stderr
    assert "revoked" in _server_cli("token", "revoke", "--db", db, "1").stdout


def test_serving_beyond_loopback_without_auth_is_refused(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'open.db'}"
    out = _server_cli("serve", "--db", db, "--host", "0.0.0.0", "--port", str(free_port()))
    assert out.returncode == 2
    assert "refusing to serve on 0.0.0.0 without auth" in out.stderr


def test_admin_token_from_the_environment_turns_auth_on(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'env.db'}"
    port, grpc_port = free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hpcopt_server.cli",
            "serve",
            "--db",
            db,
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
            "--grpc-port",
            str(grpc_port),
        ],
        env={**os.environ, "HPCOPT_ADMIN_TOKEN": "hpc_from_env"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        from tests.helpers.process import wait_healthy

        wait_healthy(f"http://127.0.0.1:{port}", proc)
        assert web.get(f"http://127.0.0.1:{port}/api/v1/campaigns").status_code == 401
        ok = web.get(f"http://127.0.0.1:{port}/api/v1/campaigns", headers={"authorization": "Bearer hpc_from_env"})
        assert ok.status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=scaled(30))
