"""Half-open gRPC calls (HEADERS without END_STREAM: a request that never arrives) cannot
stall the agents. grpcio's sync server gives such a call a worker thread that waits for
the request, before the auth interceptor runs: 64 of them on one connection, with no
token, used to hold every worker, so that every agent's heartbeat and every health check
timed out and a victim's lease expired. The front (``rpc/front.py``) now closes the
connections holding the calls that have waited longest once more than half the workers
would wait, and any connection whose call has waited ``--request-timeout`` seconds."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from hpcopt_server.rpc.front import _Client
from tests.helpers.clients import AgentClient, Client
from tests.helpers.env import scaled
from tests.helpers.process import ServerProcess
from tests.helpers.specs import make_spec
from tests.helpers.swarm import PREFACE, SETTINGS, half_open_calls, heartbeating, probe_health, swarming

pytestmark = pytest.mark.slow

LEASE = 10.0  # seconds: a stall longer than this loses the victim's trial


def _admin_token(db: str) -> str:
    cmd = [sys.executable, "-m", "hpcopt_server.cli", "token", "create", "--db", db, "--name", "t", "--scope", "admin"]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize(
    ("connections", "calls", "auth", "reconnect"),
    [(1, 64, False, False), (1, 1000, True, False), (16, 63, False, True)],
    ids=["64x1-noauth", "1000x1-auth", "1000x16-noauth-stubborn"],
)
def test_half_open_calls_do_not_stall_heartbeats_or_health_checks(
    db: str, connections: int, calls: int, auth: bool, reconnect: bool
) -> None:
    token = _admin_token(db) if auth else None
    with ServerProcess(db, "--lease-seconds", str(LEASE), "--reap-interval", "1") as server:
        with Client(server.grpc_target, token=token, timeout=scaled(30)) as c:
            campaign = c.create_campaign(make_spec(name="victim", folds=1)).id
        with AgentClient(server.grpc_target, token=token, timeout=scaled(5)) as agent:  # the real agent's deadline
            lease = agent.acquire(agent.register(host="victim").agent_id, campaign).lease
            assert lease is not None
            extra = ["--calls", str(calls), *(["--reconnect", "0.2"] if reconnect else [])]
            with (
                heartbeating(agent, lease) as beats,
                swarming("halfopen", server.grpc_port, connections, *extra) as swarm,
            ):
                health = probe_health(server.grpc_target, LEASE + 2, token)
            with Client(server.grpc_target, token=token, timeout=scaled(30)) as c:
                trial = c.get_trial(lease.trial_id)
    # A stall answers no heartbeat or health check for its duration and loses the
    # victim's lease. A loaded machine fails a beat here and there without one, which the
    # agent retries ("heartbeat failed ...; will retry"): beside two busy loops and a
    # 4-rank agent test, 10 of 244 beats in 26 runs came back CANCELLED (twice two in a row),
    # while the lease held and the front had closed only the attack's connections.
    assert str(trial.state) == "RUNNING" and trial.attempt == 1, (trial.state, trial.attempt, beats)  # the lease held
    failed = [x for x in health if x == float("inf")]
    assert len(failed) <= 1, f"{len(failed)} of {len(health)} health checks failed within 5 s"
    assert beats.ok >= 5 and beats.longest_gap < LEASE, beats
    assert swarm.closed_by_server >= connections  # the attack's connections were the ones closed


def test_a_call_whose_request_does_not_arrive_in_time_has_its_connection_closed(db: str, tmp_path: Path) -> None:
    """Three waiting calls, under the server-wide cap: only the timeout frees them. A
    connection doing honest work meanwhile keeps working."""
    log = tmp_path / "server.log"
    with ServerProcess(db, "--request-timeout", "2", log=log) as server:
        s = socket.create_connection(("127.0.0.1", server.grpc_port), timeout=scaled(60))
        s.sendall(PREFACE + SETTINGS + half_open_calls(3))
        t0 = time.monotonic()
        with Client(server.grpc_target, timeout=scaled(30)) as c:
            while s.recv(65536) != b"":
                c.list_campaigns()
        waited = time.monotonic() - t0
        s.close()
        with Client(server.grpc_target, timeout=scaled(30)) as c:
            assert c.list_campaigns() == []
    assert waited >= 2.0  # not before the timeout
    assert "closed 1 connection(s) holding calls whose request did not arrive (last: 3 call(s)" in log.read_text()


def _frame(kind: int, flags: int, stream: int) -> bytes:
    return (0).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big")


def test_a_connection_whose_calls_all_wait_for_their_request_counts_as_idle_for_shedding() -> None:
    front = SimpleNamespace()
    conn = _Client(front)  # type: ignore[arg-type]
    conn.to_server.feed(PREFACE + half_open_calls(2))
    assert (conn.waiting.keys(), conn.busy) == ({1, 3}, False)
    conn.to_server.feed(_frame(0, 0x1, 1))  # DATA with END_STREAM: call 1's request has arrived
    assert (conn.waiting.keys(), conn.busy) == ({3}, True)
    conn.to_server.feed(_frame(3, 0, 3))  # the client cancels call 3
    assert (conn.waiting.keys(), conn.streams) == (set(), {1})
