"""``hpcopt-server serve --processes N``: N processes answer gRPC on one port, share a
campaign through PostgreSQL without a duplicate grant, a dead child is replaced, and
none outlives the first process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import create_engine, text

from tests.helpers.clients import Client
from tests.helpers.env import ROOT, scaled
from tests.helpers.process import ServerProcess
from tests.helpers.specs import make_spec

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]


def wait_until(what: str, ok: Callable[[], bool], timeout: float = scaled(60)) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(0.1)


def children(server: ServerProcess) -> list[psutil.Process]:
    assert server.proc is not None
    try:
        kids = psutil.Process(server.proc.pid).children()
    except psutil.NoSuchProcess:
        return []
    return [k for k in kids if "--grpc-child-socket" in " ".join(_cmdline(k))]


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def owner(server: ServerProcess, client_port: int) -> int | None:
    """The server process holding the accepted end of the client's connection."""
    assert server.proc is not None
    for p in [psutil.Process(server.proc.pid), *children(server)]:
        for c in p.net_connections("tcp"):
            if c.laddr.port == server.grpc_port and c.raddr and c.raddr.port == client_port:
                return p.pid
    return None


def connect(server: ServerProcess) -> tuple[grpc.Channel, int]:
    """A channel on a connection of its own (not shared with this process's others), and
    the connection's local port once a call went through it."""
    before = {c.laddr.port for c in psutil.Process().net_connections("tcp") if c.raddr}
    channel = grpc.insecure_channel(server.grpc_target, options=[("grpc.use_local_subchannel_pool", 1)])
    health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=scaled(30))
    mine = [
        c.laddr.port
        for c in psutil.Process().net_connections("tcp")
        if c.raddr and c.raddr.port == server.grpc_port and c.laddr.port not in before
    ]
    assert len(mine) == 1, mine
    return channel, mine[0]


@pytest.fixture
def three(pg_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(pg_url, "--processes", "3", log=tmp_path / "server.log").start()
    try:
        wait_until("2 gRPC child processes", lambda: len(children(server)) == 2)
        yield server
    finally:
        kids = children(server)
        server.stop()
        for k in kids:  # whatever happened in the test, none is left behind
            if k.is_running():
                k.kill()


AGENT = """
import json, sys, time
from tests.helpers.clients import AgentClient
from tests.helpers.env import scaled
target, cid, k = sys.argv[1], int(sys.argv[2]), sys.argv[3]
done = []
with AgentClient(target, timeout=scaled(60)) as a:
    agent = a.register(host=f"proc-{k}", campaign_id=cid).agent_id
    while True:
        got = a.acquire(agent, cid)
        if got.status == "done":
            break
        if got.status == "wait":
            time.sleep(min(got.retry_after_seconds, 0.2))
            continue
        for fold in range(2):
            a.report_fold(got.lease, fold, 0.5 + fold)
        done.append(a.complete(got.lease).id)
print(json.dumps(done))
"""


def test_every_process_answers_on_the_one_port_and_a_campaign_is_shared_without_duplicates(
    three: ServerProcess, pg_url: str
) -> None:
    assert three.proc is not None
    pids = {three.proc.pid, *(k.pid for k in children(three))}
    served: dict[int, int] = {}
    channels = []
    for _ in range(300):  # new connections until each process has accepted one
        channel, port = connect(three)
        channels.append(channel)
        pid = owner(three, port)
        assert pid in pids, f"connection {port} is held by {pid}, not a server process {pids}"
        served[pid] = served.get(pid, 0) + 1
        if len(served) == 3:
            break
    assert set(served) == pids, f"connections per process {served}"
    for channel in channels:
        channel.close()

    with Client(three.grpc_target) as c:
        cid = c.create_campaign(make_spec(folds=2, budget={"max_trials": 40, "max_parallel": 8})).id
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    agents = [
        subprocess.Popen(
            [sys.executable, "-c", AGENT, three.grpc_target, str(cid), str(k)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for k in range(8)
    ]
    acked: list[int] = []
    for p in agents:
        out, err = p.communicate(timeout=scaled(240))
        assert p.returncode == 0, err
        acked += json.loads(out)
    assert len(acked) == len(set(acked)) == 40, sorted(acked)
    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            states = dict(
                conn.execute(
                    text("SELECT state, count(*) FROM trials WHERE campaign_id = :c GROUP BY state"), {"c": cid}
                ).all()
            )
            twice = conn.execute(
                text(
                    "SELECT count(*) FROM (SELECT e.trial_id FROM trial_events e JOIN trials t ON t.id = e.trial_id "
                    "WHERE t.campaign_id = :c AND e.kind = 'completed' GROUP BY e.trial_id HAVING count(*) > 1) x"
                ),
                {"c": cid},
            ).scalar()
    finally:
        engine.dispose()
    assert states == {"COMPLETED": 40} and twice == 0, (states, twice)


def test_a_child_that_dies_is_replaced_and_the_port_keeps_answering(three: ServerProcess) -> None:
    victim = children(three)[0]
    victim.kill()
    wait_until("a new child", lambda: victim.pid not in {k.pid for k in children(three)} and len(children(three)) == 2)
    for _ in range(6):  # fresh connections, whichever process takes them
        channel, _port = connect(three)
        channel.close()
    assert three.proc is not None and three.proc.poll() is None


def test_no_child_outlives_the_first_process(three: ServerProcess) -> None:
    assert three.proc is not None
    kids = children(three)
    three.proc.send_signal(signal.SIGKILL)  # no chance to stop them: they notice the pipe close
    three.proc.wait(timeout=scaled(30))
    wait_until("the children to exit", lambda: not any(k.is_running() and k.status() != "zombie" for k in kids))


def test_a_stopped_server_stops_its_children(three: ServerProcess) -> None:
    assert three.proc is not None
    kids = children(three)
    three.proc.terminate()
    # It stops its children and itself, then ends by the signal (as with one process:
    # test_shutdown.py).
    assert three.proc.wait(timeout=scaled(60)) == -signal.SIGTERM
    wait_until("the children to exit", lambda: not any(k.is_running() and k.status() != "zombie" for k in kids))


@pytest.mark.parametrize(
    "db,value,says",
    [
        ("sqlite:///{tmp}/one.db", "2", "--processes 2 needs PostgreSQL"),
        ("sqlite:///{tmp}/one.db", "0", "--processes: must be an integer >= 1, got 0"),
    ],
)
def test_processes_that_cannot_work_are_refused_at_start(tmp_path: Path, db: str, value: str, says: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "hpcopt_server.cli", "serve", "--db", db.format(tmp=tmp_path), "--processes", value],
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )
    assert out.returncode == 2 and says in out.stderr, out.stderr
    assert not (tmp_path / "one.db").exists(), "a refused start must not create the database"
