"""Idle and slow clients cannot make the server unreachable: 1,000 idle connections to a
server limited to 1,024 open files (where they used to exhaust it and stop REST, gRPC
and /healthz alike), 1,100 idle gRPC channels or slow-header clients, and a client that
trickles its headers is cut off. A busy port is
named, with the flag that changes it, in one line."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import web
from tests.helpers.clients import AgentClient, Client
from tests.helpers.env import scaled, timeout_scale
from tests.helpers.live import free_port
from tests.helpers.process import ServerProcess
from tests.helpers.specs import make_spec
from tests.helpers.swarm import finish_one_trial, swarming

pytestmark = pytest.mark.slow


def _idle_sockets(port: int, n: int) -> Iterator[socket.socket]:
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=scaled(5))
        yield s


def test_a_thousand_idle_connections_do_not_make_the_server_unreachable(db: str) -> None:
    # A long header deadline, so that what saves the server here is shedding, not the timer.
    with ServerProcess(db, "--header-timeout", "120", nofile=1024) as server:
        idle = list(_idle_sockets(server.port, 1000))
        patience = 10 * timeout_scale()  # bounds on a hang, stretched on a loaded machine
        try:
            for _ in range(5):
                assert web.get(server.http_url + "/healthz", timeout=patience).status_code == 200
            assert web.get(server.http_url + "/api/v1/campaigns", timeout=patience).status_code == 200
            with Client(server.grpc_target, timeout=patience) as c:
                assert c.list_campaigns() == []
            # The oldest idle connections were the ones closed (once the server has
            # accepted them all and shed), the newest kept.
            deadline = time.monotonic() + scaled(6) * patience
            while not all(_closed(s) for s in idle[:100]) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert all(_closed(s) for s in idle[:100])
            assert not any(_closed(s) for s in idle[-100:])
        finally:
            for s in idle:
                s.close()


def _one_trial(agent: AgentClient, agent_id: str, campaign: int) -> None:
    assert finish_one_trial(agent, agent_id, campaign) == "COMPLETED"


@pytest.mark.parametrize("kind", ["grpc", "slow"])
def test_a_swarm_of_idle_clients_does_not_starve_health_or_agents(db: str, tmp_path: Path, kind: str) -> None:
    """1,100 clients under ``ulimit -n 1024``: gRPC channels that finish the HTTP/2
    handshake and sit idle (they used to take every descriptor: /healthz failed as long
    as they stayed), or HTTP clients sending their headers a byte every 2 s. /healthz
    answers, an agent registered before the swarm and one that arrives during it each
    finish a trial, the swarm's connections are the ones shed, and the log says so."""
    log = tmp_path / "server.log"
    with ServerProcess(db, "--header-timeout", "120", nofile=1024, log=log) as server:
        with Client(server.grpc_target, timeout=scaled(60)) as c:
            campaign = c.create_campaign(make_spec(name="swarmed", folds=1)).id
        with AgentClient(server.grpc_target, timeout=scaled(60)) as old:
            old_id = old.register(host="old").agent_id
            with swarming(kind, server.grpc_port if kind == "grpc" else server.port, 1100) as swarm:
                for _ in range(10):
                    assert web.get(server.http_url + "/healthz", timeout=scaled(10)).status_code == 200
                _one_trial(old, old_id, campaign)
                with AgentClient(server.grpc_target, timeout=scaled(60)) as new:
                    _one_trial(new, new.register(host="new").agent_id, campaign)
                assert web.get(server.http_url + "/api/v1/campaigns", timeout=scaled(10)).status_code == 200
    assert swarm.closed_by_server >= 1100 - 500, swarm.closed_by_server  # caps under 1,024 descriptors
    # The swarm is one client address: over HTTP its share (256 of 307 here) is reached first.
    what = "gRPC" if kind == "grpc" else "HTTP (one client address)"
    assert f"{what} connections reached the cap of" in log.read_text() and "shedding started" in log.read_text()


def test_a_body_over_the_limit_gets_a_readable_413_while_it_is_still_being_sent(db: str) -> None:
    """A client that sends its whole body before reading (no ``Expect: 100-continue``),
    slower than the header deadline: the server answers 413 at once, then reads and
    drops the rest, and the client reads the answer. (The server used to close under the
    client once the deadline passed: a broken pipe, the answer never read.)"""
    size, rate = 12 * 1024 * 1024, 3 * 1024 * 1024
    with ServerProcess(db, "--header-timeout", "2", "--idle-timeout", "1") as server:
        s = socket.create_connection(("127.0.0.1", server.port), timeout=scaled(60))
        head = f"POST /api/v1/campaigns HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {size}"
        s.sendall(head.encode() + b"\r\n\r\n")
        chunk, sent, t0 = b" " * 65536, 0, time.monotonic()
        while sent < size:  # about 4 s: past the header deadline, and the keep-alive one
            sent += s.send(chunk[: size - sent])
            time.sleep(max(0.0, sent / rate - (time.monotonic() - t0)))
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            data = s.recv(65536)
            if not data:
                break
            answer += data
        s.close()
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b"at most 1048576 are accepted" in answer


def test_a_body_over_the_limit_on_a_connection_to_close_gets_a_readable_413_not_a_reset(db: str) -> None:
    """``Connection: close`` and a 24 MB body sent as fast as the socket takes it: uvicorn
    closed the connection right after the 413, while the body was still coming, and the
    client got a reset instead of the answer. The rest of the body is now read and
    dropped first."""
    size = 24 * 1024 * 1024
    with ServerProcess(db) as server:
        s = socket.create_connection(("127.0.0.1", server.port), timeout=scaled(60))
        head = (
            f"POST /api/v1/campaigns HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {size}"
        )
        s.sendall(head.encode() + b"\r\n\r\n")
        chunk, sent = b" " * 1048576, 0
        while sent < size:
            s.sendall(chunk)  # a reset here is the failure
            sent += len(chunk)
        answer = b""
        while data := s.recv(65536):
            answer += data
        s.close()
        assert web.get(server.http_url + "/healthz", timeout=scaled(10)).status_code == 200
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b"at most 1048576 are accepted" in answer


def test_a_connection_cap_above_the_open_file_limit_is_lowered_and_logged(db: str, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with ServerProcess(db, "--max-grpc-connections", "5000", nofile=1024, log=log):
        pass
    text = log.read_text()
    assert "max gRPC connections lowered from 5000 to" in text and "(open-file limit 1024)" in text


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
        s = socket.create_connection(("127.0.0.1", server.port), timeout=scaled(5))
        s.sendall(b"GET /healthz HTTP/1.1\r\n")
        t0 = time.monotonic()
        closed = False
        while time.monotonic() - t0 < 60:
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
        assert closed
        # A normal client after a response keeps its connection for the keep-alive period.
        with web.http() as h:
            assert h.get(server.http_url + "/healthz").status_code == 200
            assert h.get(server.http_url + "/healthz").status_code == 200


@pytest.mark.parametrize(
    ("flag", "what", "env"), [("--port", "REST", "HPCOPT_PORT"), ("--grpc-port", "gRPC", "HPCOPT_GRPC_PORT")]
)
def test_a_busy_port_is_named_with_the_flag_to_change_it(db: str, flag: str, what: str, env: str) -> None:
    from tests.helpers.live import free_port
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


def test_the_health_port_answers_while_1100_slow_header_clients_reopen_every_connection(db: str) -> None:
    """The shape of the probe: 1,100 HTTP clients under ``ulimit -n 1024`` sending
    their headers a byte every 2 s and reopening whatever the server closes. They keep
    the REST port's loop busy shedding them; ``--health-port`` answers ``/healthz`` from a
    listener of its own, every probe within a second (stretched on a loaded machine)."""
    health = free_port()
    with ServerProcess(db, "--header-timeout", "120", "--health-port", str(health), nofile=1024) as server:
        url = f"http://127.0.0.1:{health}/healthz"
        assert web.get(url, timeout=scaled(10)).json()["status"] == "ok"
        with swarming("slow", server.port, 1100, "--reconnect", "0.05"):
            for _ in range(20):
                r = web.get(url, timeout=scaled(1.0) * timeout_scale())
                assert r.status_code == 200 and r.json()["status"] == "ok"
            assert web.get(server.http_url + "/healthz", timeout=scaled(30)).status_code == 200  # slowed, not stopped
        # It answers /healthz only, and closes a client that sends nothing.
        assert web.get(f"http://127.0.0.1:{health}/api/v1/campaigns", timeout=scaled(10)).status_code == 404
        quiet = socket.create_connection(("127.0.0.1", health), timeout=scaled(10))
        quiet.settimeout(10 * timeout_scale())
        assert quiet.recv(1) == b""  # closed after REQUEST_TIMEOUT
        quiet.close()
        held = [socket.create_connection(("127.0.0.1", health), timeout=scaled(10)) for _ in range(100)]
        try:  # past 64 open, the oldest go: a probe still gets through
            assert web.get(url, timeout=scaled(10)).status_code == 200
        finally:
            for s in held:
                s.close()


def test_one_address_holds_at_most_its_share_of_http_connections(db: str) -> None:
    """``--max-connections-per-address``: 300 idle connections from 127.0.0.2 keep at
    most 50 open (its oldest are closed first), and those of 127.0.0.1 stay."""
    with ServerProcess(db, "--header-timeout", "120", "--max-connections-per-address", "50") as server:
        mine = list(_idle_sockets(server.port, 20))
        theirs = [
            socket.create_connection(("127.0.0.1", server.port), timeout=scaled(5), source_address=("127.0.0.2", 0))
            for _ in range(300)
        ]
        try:
            deadline = time.monotonic() + scaled(60) * timeout_scale()
            while sum(not _closed(s) for s in theirs) > 50 and time.monotonic() < deadline:
                time.sleep(0.2)
            open_ = [not _closed(s) for s in theirs]
            assert sum(open_) <= 50 and all(open_[-40:]), sum(open_)  # the newest kept
            assert not any(_closed(s) for s in mine)
            assert web.get(server.http_url + "/healthz", timeout=scaled(30)).status_code == 200
        finally:
            for s in mine + theirs:
                s.close()
