"""Connections that never read cannot lock agents out of the gRPC port. A client that
advertises a receive window of 0 (or 1 byte, or one that opens once and then closes)
and sends one complete, valid call gets a response the server can never send: the call
never ends and holds a worker. The front used to count such a connection as busy, so
at the cap it shed an honest agent's idle connection instead, and 1,000 of them,
reopened when closed, failed 51 of 53 heartbeats and expired the victim's lease. The
front now tracks the client's flow-control window (``rpc/front.py``): a call whose
response the client will not let through is stalled, counts as idle when connections
are shed (first of all), is bounded server-wide with the calls whose request never
arrives, and its connection is closed after ``--request-timeout``."""

from __future__ import annotations

import math
import socket
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from hpcopt_server.rpc.front import _Client
from tests.helpers.clients import AgentClient, Client
from tests.helpers.env import scaled, timeout_scale
from tests.helpers.process import ServerProcess
from tests.helpers.specs import make_spec
from tests.helpers.swarm import (
    PREFACE,
    SETTINGS,
    health_check_call,
    heartbeating,
    probe_health,
    settings_frame,
    swarming,
    window_update,
)

pytestmark = pytest.mark.slow

LEASE = 10.0  # seconds: a stall longer than this loses the victim's trial


def _p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(0.99 * len(s)) - 1)]


@pytest.mark.parametrize(
    ("window", "source"),
    [
        (["--window", "0"], "127.0.0.1"),
        (["--window", "1"], "127.0.0.1"),
        (["--window", "0", "--open-once", "3"], "127.0.0.1"),
        (["--window", "0"], "127.0.0.2"),
    ],
    ids=["zero", "one-byte", "opens-once", "zero-own-address"],
)
def test_connections_that_never_read_do_not_lock_agents_out(db: str, window: list[str], source: str) -> None:
    with ServerProcess(db, "--lease-seconds", str(LEASE), "--reap-interval", "1") as server:
        with Client(server.grpc_target, timeout=scaled(30)) as c:
            campaign = c.create_campaign(make_spec(name="victim", folds=1)).id
        with AgentClient(server.grpc_target, timeout=scaled(5)) as agent:  # the real agent's deadline
            lease = agent.acquire(agent.register(host="victim").agent_id, campaign).lease
            assert lease is not None
            extra = [*window, "--reconnect", "0.05", "--source", source]
            with (
                heartbeating(agent, lease) as beats,
                swarming("nowindow", server.grpc_port, 1000, *extra) as swarm,
            ):
                health = probe_health(server.grpc_target, LEASE + 2, new_channel=True)
            with Client(server.grpc_target, timeout=scaled(30)) as c:
                trial = c.get_trial(lease.trial_id)
    assert str(trial.state) == "RUNNING" and trial.attempt == 1, (trial.state, trial.attempt)  # the lease held
    assert beats.failed == 0 and beats.ok >= 5, beats
    assert _p99(health) < 1.0 * timeout_scale(), sorted(health)[-5:]
    assert swarm.closed_by_server >= 1  # the attack's connections were the ones closed


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def test_the_front_follows_the_clients_window_as_the_server_sends_against_it() -> None:
    front = SimpleNamespace()
    conn = _Client(front)  # type: ignore[arg-type]
    conn.to_server.feed(PREFACE + SETTINGS + health_check_call(1))
    assert (conn.busy, conn.blocked) == (True, {})  # 65,535 bytes may come: at work
    conn.to_client.feed(_frame(0, 0, 1, b"x" * 65_000))  # the server sends most of the window
    assert (set(conn.blocked), conn.busy, conn.stalled) == ({1}, False, True)
    conn.to_server.feed(window_update(1, 40_000))  # the client lets more through on the call...
    assert (set(conn.blocked), conn.windows, conn.conn_window) == ({1}, {1: 40_535}, 535)  # ...not the connection
    conn.to_server.feed(window_update(0, 40_000))
    assert (conn.blocked, conn.busy) == ({}, True)
    conn.to_client.feed(_frame(1, 0x1 | 0x4, 1, b"\x88"))  # trailers: the call has ended
    assert (conn.streams, conn.windows, conn.busy, conn.stalled) == (set(), {}, False, False)


def test_a_window_too_small_to_answer_stalls_a_call_at_once_and_settings_move_open_windows() -> None:
    front = SimpleNamespace()
    conn = _Client(front)  # type: ignore[arg-type]
    conn.to_server.feed(PREFACE + settings_frame(1) + health_check_call(1))
    assert (set(conn.blocked), conn.stalled) == ({1}, True)
    conn.to_server.feed(settings_frame(70_000))  # RFC 9113 6.9.2: +69,999 on every open stream
    assert (conn.windows, conn.blocked) == ({1: 70_000}, {})
    conn.to_server.feed(health_check_call(3))
    assert conn.windows == {1: 70_000, 3: 70_000} and conn.busy
    conn.to_server.feed(_frame(3, 0, 1, b"\x00\x00\x00\x08") + _frame(3, 0, 3, b"\x00\x00\x00\x08"))  # RST both
    assert (conn.streams, conn.blocked) == (set(), {})


def test_the_front_parks_connections_that_never_read_before_it_sheds_any_other(db: str, tmp_path: Path) -> None:
    """A cap of 20 connections from one address: 30 zero-window connections, then an
    agent that connects and heartbeats. The zero-window ones are parked (still open to
    their client, unread), not closed, so none was reopened; the agent's connection is
    never shed."""
    log = tmp_path / "server.log"
    with ServerProcess(db, "--max-grpc-connections-per-address", "20", log=log) as server:
        with Client(server.grpc_target, timeout=scaled(30)) as c:
            campaign = c.create_campaign(make_spec(name="victim", folds=1)).id
        with AgentClient(server.grpc_target, timeout=scaled(5)) as agent:
            lease = agent.acquire(agent.register(host="victim").agent_id, campaign).lease
            assert lease is not None
            with (
                swarming("nowindow", server.grpc_port, 30, "--window", "0") as swarm,
                heartbeating(agent, lease, period=0.2) as beats,
            ):
                health = probe_health(server.grpc_target, 3, new_channel=True)
    assert beats.failed == 0 and beats.ok >= 5, beats
    assert all(x < float("inf") for x in health), health
    assert swarm.closed_by_server == 0  # parked, not closed: nothing to reopen
    assert "gRPC (one client address) connections reached the cap of 20" in log.read_text()


def test_a_connection_past_its_age_is_asked_to_go_and_honest_clients_carry_on(db: str) -> None:
    with ServerProcess(db, "--connection-age", "1") as server:
        s = socket.create_connection(("127.0.0.1", server.grpc_port), timeout=scaled(30))
        s.sendall(PREFACE + SETTINGS)
        kinds, buf, deadline = [], b"", time.monotonic() + scaled(30) * timeout_scale()
        while 7 not in kinds and time.monotonic() < deadline:  # 7: GOAWAY
            data = s.recv(65536)
            if not data:
                break
            buf += data
            while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                n = int.from_bytes(buf[:3], "big")
                kinds.append(buf[3])
                buf = buf[9 + n :]
        s.close()
        with Client(server.grpc_target, timeout=scaled(30)) as c:
            for _ in range(6):  # across several ages: the channel reconnects for its next call
                assert c.list_campaigns() == []
                time.sleep(0.5)
    assert 7 in kinds, kinds
