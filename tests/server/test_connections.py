"""Idle and slow clients cannot make the server unreachable: 1,000 idle connections to a
server limited to 1,024 open files (where they used to exhaust it and stop REST, gRPC
and /healthz alike), and a client that trickles its headers is cut off. A busy port is
named, with the flag that changes it, in one line."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hpcopt import Client
from hpcopt_server.storage.migrate import upgrade
from tests.server.process import ServerProcess

pytestmark = pytest.mark.slow


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'conn.db'}"
    upgrade(url)
    return url


def _idle_sockets(port: int, n: int) -> Iterator[socket.socket]:
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        yield s


def test_a_thousand_idle_connections_do_not_make_the_server_unreachable(db: str) -> None:
    # A long header deadline, so that what saves the server here is shedding, not the timer.
    with ServerProcess(db, "--header-timeout", "120", nofile=1024) as server:
        idle = list(_idle_sockets(server.port, 1000))
        try:
            time.sleep(1.0)  # let the server accept them all
            for _ in range(5):
                t0 = time.monotonic()
                r = httpx.get(server.http_url + "/healthz", timeout=1.0)
                assert r.status_code == 200 and time.monotonic() - t0 < 1.0
            assert httpx.get(server.http_url + "/api/v1/campaigns", timeout=1.0).status_code == 200
            with Client(server.grpc_target, timeout=5) as c:
                assert c.list_campaigns() == []
            # The oldest idle connections were the ones closed, the newest kept.
            assert all(_closed(s) for s in idle[:100])
            assert not any(_closed(s) for s in idle[-100:])
        finally:
            for s in idle:
                s.close()


def _closed(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except BlockingIOError:
        return False


def test_a_client_that_trickles_its_headers_is_cut_off(db: str) -> None:
    with ServerProcess(db, "--header-timeout", "1") as server:
        s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        s.sendall(b"GET /healthz HTTP/1.1\r\n")
        t0 = time.monotonic()
        closed = False
        while time.monotonic() - t0 < 10:
            try:
                s.sendall(b"X")  # one byte of a header now and then: uvicorn alone reset its timer
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            s.settimeout(0.3)
            try:
                if s.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                pass
        s.close()
        assert closed and time.monotonic() - t0 < 5
        # A normal client after a response keeps its connection for the keep-alive period.
        with httpx.Client() as h:
            assert h.get(server.http_url + "/healthz").status_code == 200
            assert h.get(server.http_url + "/healthz").status_code == 200


@pytest.mark.parametrize(
    ("flag", "what", "env"), [("--port", "REST", "HPCOPT_PORT"), ("--grpc-port", "gRPC", "HPCOPT_GRPC_PORT")]
)
def test_a_busy_port_is_named_with_the_flag_to_change_it(db: str, flag: str, what: str, env: str) -> None:
    from tests.conftest import free_port
    from tests.server.test_auth import _server_cli

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        ports = {"--port": str(free_port()), "--grpc-port": str(free_port()), flag: str(busy)}
        out = _server_cli("serve", "--db", db, *(x for kv in ports.items() for x in kv))
    assert out.returncode == 2, out.stderr
    assert f"cannot listen for {what} on 127.0.0.1:{busy}" in out.stderr and f"{flag} PORT (env {env})" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) <= 2, out.stderr


def test_the_server_raises_its_soft_open_file_limit_to_the_hard_one(db: str) -> None:
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 1024:
        pytest.skip(f"the hard open-file limit here is {hard}: nothing to raise")
    with ServerProcess(db, soft_nofile=1024) as server:
        assert server.proc is not None
        soft, got_hard = resource.prlimit(server.proc.pid, resource.RLIMIT_NOFILE)
        assert soft == got_hard and soft > 1024, (soft, got_hard)
