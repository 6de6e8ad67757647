"""Agent tests run the real thing: a server process on SQLite with short leases, and
agents started with the real ``mpiexec`` (MPICH's hydra from the ``mpich`` wheel; it
runs more ranks than cores without a flag, and as root)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.agents import PORT_TAKEN, AgentServer
from tests.helpers.env import scaled
from tests.helpers.live import free_port


@pytest.fixture(scope="module")
def _module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentServer]:
    """A real ``hpcopt-server serve`` on SQLite: 4 s leases, reaped every 0.5 s, shared by
    a test module's tests (each on its own campaigns; starting a server costs seconds of
    CPU). A port taken between picking and binding it is picked again (3 tries)."""
    tmp_path = tmp_path_factory.mktemp("agent-server")
    for attempt in range(3):
        rest, grpc_port = free_port(), free_port()
        log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - the server process writes it until the end
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hpcopt_server.cli",
                "serve",
                "--db",
                f"sqlite:///{tmp_path / 'hpcopt.db'}",
                "--port",
                str(rest),
                "--grpc-port",
                str(grpc_port),
                "--lease-seconds",
                "4",
                "--reap-interval",
                "0.5",
                "--log-level",
                "warning",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{rest}"
        deadline = time.monotonic() + scaled(60)
        healthy = False
        while not healthy:
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=scaled(2)):
                    healthy = True
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        if healthy:
            break
        if proc.poll() is None:  # alive but never answered
            proc.kill()
            proc.wait(timeout=scaled(30))
        log.close()
        said = (tmp_path / "server.log").read_bytes()
        if PORT_TAKEN not in said or attempt == 2:
            raise RuntimeError(said.decode(errors="replace"))
    try:
        yield AgentServer(f"127.0.0.1:{grpc_port}", url, proc, tmp_path)
    finally:
        proc.terminate()
        proc.wait(timeout=scaled(30))
        log.close()


@pytest.fixture
def agent_server(_module_server: AgentServer, tmp_path: Path) -> AgentServer:
    """The module's server, with this test's own directory for checkpoints and logs. A
    test after one that stopped the server fails here, naming it, rather than on a
    refused connection."""
    proc = _module_server.proc
    if proc.poll() is not None:
        said = (_module_server.workdir / "server.log").read_text(errors="replace")
        pytest.fail(f"the module's agent server exited ({proc.returncode}) before this test:\n{said[-4000:]}")
    return dataclasses.replace(_module_server, workdir=tmp_path)
