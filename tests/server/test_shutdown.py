"""``hpcopt-server serve`` stopped by a signal, as Slurm, systemd or Ctrl-C stop it: it
finishes its clean-up (gRPC's graceful stop, the storage, the private directory of its
gRPC socket) before it ends, and ends the way the signal asks."""

from __future__ import annotations

import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from tests.helpers.clients import Client
from tests.helpers.env import scaled
from tests.helpers.process import ServerProcess
from tests.helpers.specs import make_spec


@pytest.mark.parametrize(
    "sig,status",
    [
        (signal.SIGTERM, -signal.SIGTERM),  # ended by the signal, as its sender expects
        (signal.SIGINT, 128 + signal.SIGINT),  # Ctrl-C: the shell's 130, without a traceback
    ],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_signal_stops_the_server_after_its_clean_up(tmp_path: Path, sig: int, status: int) -> None:
    # A short private TMPDIR (a long one moves the socket's directory to /tmp).
    tmp = Path(tempfile.mkdtemp(prefix="hpcopt-t-", dir="/tmp"))
    log = tmp_path / "server.log"
    server = ServerProcess(f"sqlite:///{tmp_path / 's.db'}", env={"TMPDIR": str(tmp)}, log=log)
    try:
        server.start()
        assert server.proc is not None
        with Client(server.grpc_target) as c:  # a gRPC connection before the stop
            c.create_campaign(make_spec(name="kept"))
        assert [p.name[:12] for p in tmp.iterdir()] == ["hpcopt-grpc-"]  # the socket's directory, while serving
        server.proc.send_signal(sig)
        assert server.proc.wait(timeout=scaled(60)) == status, log.read_text()
        said = log.read_text()
        assert list(tmp.iterdir()) == [], said
        assert "Traceback" not in said, said
    finally:
        server.kill()  # a failed assertion leaves no server behind
        shutil.rmtree(tmp, ignore_errors=True)
