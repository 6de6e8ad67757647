"""The operations table (``hpcopt_server.operations``) against both transports: every
RPC of the protos and every REST route is a row exactly once, every row names a method
or a route that exists, a route that changes state needs more than ``read``, and twins
share their row. ``test_auth.py`` then calls every row on a live server with no token,
a wrong one and a right one."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from hpcopt.v1 import agent_pb2, campaign_pb2, identity_pb2
from hpcopt_server.api.app import create_app
from hpcopt_server.metrics import Metrics
from hpcopt_server.operations import BY_REST, BY_RPC, OPERATIONS, rest_scope, rpc_scope
from hpcopt_server.service import Service
from hpcopt_server.storage.repository import Storage
from tests.helpers.db import migrated_sqlite

#: Routes that answer a POST without changing anything: a spec checked, not stored.
READ_ONLY_POSTS = {"validate_campaign"}


def _protos() -> list[str]:
    return [
        f"/{service.full_name}/{m.name}"
        for module in (campaign_pb2, agent_pb2, identity_pb2)
        for service in module.DESCRIPTOR.services_by_name.values()
        for m in service.methods
    ]


def _routes(tmp_path: Path) -> dict[str, set[str]]:
    url = migrated_sqlite(tmp_path / "ops.db")
    storage = Storage(url)
    try:
        service = Service(storage)
        app = create_app(service, Metrics(service))
        routes: dict[str, set[str]] = {}
        for path, ops in app.openapi()["paths"].items():  # the routes as the server documents them
            for method, op in ops.items():
                name = op.get("operationId")
                assert name, f"{method.upper()} {path} has no operation_id: the table keys routes by it"
                assert name not in routes, f"two routes named {name}"
                routes[name] = {method.upper()}
        return routes
    finally:
        storage.close()


def test_each_rpc_is_one_row_and_each_row_an_rpc() -> None:
    rpcs = _protos()
    rows = Counter(op.rpc for op in OPERATIONS if op.rpc is not None)
    assert [r for r, n in rows.items() if n > 1] == [], "an RPC with two rows"
    missing = sorted(set(rpcs) - set(BY_RPC))
    assert not missing, f"RPCs without a row in hpcopt_server.operations: {missing}"
    stale = sorted(set(BY_RPC) - set(rpcs))
    assert not stale, f"rows naming RPCs the protos lack: {stale}"


def test_each_route_is_one_row_and_each_row_a_route(tmp_path: Path) -> None:
    routes = _routes(tmp_path)
    rows = Counter(op.rest for op in OPERATIONS if op.rest is not None)
    assert [r for r, n in rows.items() if n > 1] == [], "a route with two rows"
    missing = sorted(set(routes) - set(BY_REST))
    assert not missing, f"REST routes without a row in hpcopt_server.operations: {missing}"
    stale = sorted(set(BY_REST) - set(routes))
    assert not stale, f"rows naming routes the app lacks: {stale}"
    writes = [op for op, methods in routes.items() if methods - {"GET", "HEAD"} and op not in READ_ONLY_POSTS]
    weak = sorted(op for op in writes if BY_REST[op].scope in (None, "read"))
    assert not weak, f"routes that change state but need only {{None, 'read'}}: {weak}"
    # A twin's gRPC method has the route's scope by construction (one row); a write
    # route's twin is then a write RPC that needs more than read too.
    assert all(BY_REST[op].scope == rpc_scope(BY_REST[op].rpc) for op in writes if BY_REST[op].rpc)


def test_what_the_table_lacks_is_never_open() -> None:
    assert rpc_scope("/hpcopt.v1.CampaignService/NotAMethod") == "admin"
    assert rpc_scope("/hpcopt.v1.Other/Call") == "admin"
    assert rpc_scope("/grpc.health.v1.Health/Check") is None
    assert rest_scope("not_a_route") == "admin" and rest_scope(None) == "admin"
    assert rpc_scope("/hpcopt.v1.IdentityService/Prove") is None
