"""``LocalServer`` is the one composition root: it opens the storage at this release's
schema and builds the service and its transports, and nothing else in the server or
the agent builds them (``serve``, its gRPC children, the embedded ``Study``, ``try`` and
the tests' live servers all go through it)."""

from __future__ import annotations

import ast
from pathlib import Path

import httpx
import pytest

from hpcopt_server.local import LocalServer, StorageUnready
from hpcopt_server.storage import migrate
from tests.helpers import web
from tests.helpers.clients import Client
from tests.helpers.env import ROOT, scaled
from tests.helpers.live import free_port
from tests.helpers.specs import make_spec

#: What only ``local.py`` may call to assemble a server (``LocalServer.serve_grpc``, a
#: method, is how the others get an endpoint).
_ASSEMBLY = {"Storage", "Service", "Metrics", "serve_grpc", "create_app"}


def test_nothing_but_local_assembles_the_server() -> None:
    found = []
    for package in ("server/hpcopt_server", "agent/hpcopt_agent", "client/hpcopt"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel == "server/hpcopt_server/local.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call):
                    f = node.func
                    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                    if name in _ASSEMBLY and not (isinstance(f, ast.Attribute) and name == "serve_grpc"):
                        found.append(f"{rel}:{node.lineno}: {name}(...)")
    assert not found, "assembled outside hpcopt_server.local.LocalServer:\n" + "\n".join(found)


def test_an_empty_database_is_migrated_and_every_transport_answers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    with LocalServer.open(url) as server:
        assert migrate.current_revision(url) == migrate.head_revision()
        grpc = server.serve_grpc("127.0.0.1", 0)
        grpc.start()
        port = free_port()
        server.serve_http_thread(server.rest_app(f"127.0.0.1:{grpc.port}"), "127.0.0.1", port, timeout=scaled(20))
        with Client(f"127.0.0.1:{grpc.port}") as c:
            cid = c.create_campaign(make_spec()).id
        got = web.get(f"http://127.0.0.1:{port}/api/v1/campaigns/{cid}").json()
        assert got["name"] == "test-campaign" and got["state"] == "RUNNING"
        assert "hpcopt_grpc_requests" in web.get(f"http://127.0.0.1:{port}/metrics").text
    assert server.grpc is None
    with pytest.raises(httpx.ConnectError):  # closed: nothing listens any more
        web.get(f"http://127.0.0.1:{port}/healthz")


def test_a_database_at_another_revision_is_refused_saying_how_to_upgrade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate.upgrade(url, "0001")
    with pytest.raises(StorageUnready, match=r"hpcopt-server db upgrade --db"):
        LocalServer.open(url)
