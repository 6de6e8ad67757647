"""The connection file is trusted only when it should be: a file or folder others may
write, another user's file or a symbolic link is refused (named, with the reason) and
nothing is dialled; a token file must be owner-only and hold one token; ``serve``
refuses a folder others may write; and a file left by a server killed with -9 never
sends the token to the process that took its port (it cannot prove the file's start
secret), for the CLI and the agent alike."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.helpers.env import scaled
from tests.helpers.live import free_port
from tests.server.test_server_file import admin_token_file, hpcopt, serve, stop, wait_file

pytestmark = pytest.mark.timeout(240)

NOBODY = 65534


class Listener:
    """A TCP port that counts the connections made to it (and closes them)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=scaled(5))
        self.sock.close()


def _file(folder: Path, port: int, **extra: Any) -> Path:
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / "server.json"
    info = {
        "version": 1,
        "grpc": f"127.0.0.1:{port}",
        "rest": f"http://127.0.0.1:{port}/",
        "host": "h",
        "pid": 1,
        "database": "sqlite://",
        "auth": True,
        "token_file": None,
        "started_at": "2026-12-01T00:00:00+00:00",
        "secret": "ab" * 32,
        **extra,
    }
    path.write_text(json.dumps(info))
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("shape", ["file 0666", "folder 0777", "another user's file", "a symbolic link"])
def test_an_untrusted_connection_file_is_refused_by_name_and_nothing_is_dialled(tmp_path: Path, shape: str) -> None:
    listener = Listener()
    try:
        path = _file(tmp_path / "conf", listener.port)
        reason = {
            "file 0666": "others may write it",
            "folder 0777": "others may write its folder",
            "another user's file": f"belongs to uid {NOBODY}",
            "a symbolic link": "symbolic link",
        }[shape]
        if shape == "file 0666":
            path.chmod(0o666)
        elif shape == "folder 0777":
            path.parent.chmod(0o777)
        elif shape == "another user's file":
            os.chown(path, NOBODY, NOBODY)
        else:
            link = tmp_path / "conf" / "link.json"
            link.symlink_to(path)
            path = link
        got = hpcopt("list", HPCOPT_SERVER_FILE=str(path), HPCOPT_TOKEN="hpc_secret-token")
        assert got.returncode == 2, got.stdout + got.stderr
        assert f"refusing the connection file {path}" in got.stderr and reason in got.stderr, got.stderr
        agent = subprocess.run(
            [sys.executable, "-m", "hpcopt_agent", "--campaign", "1", "--server-file", str(path)],
            capture_output=True,
            text=True,
            timeout=scaled(60),
            env={**os.environ, "HPCOPT_TOKEN": "hpc_secret-token"},
        )
        assert agent.returncode == 2 and reason in agent.stderr, agent.stderr
        assert listener.accepted == 0  # nothing was dialled, so no token went anywhere
    finally:
        listener.close()


@pytest.mark.parametrize("shape", ["readable by others", "two lines", "a symbolic link"])
def test_a_token_file_must_be_owner_only_and_hold_one_token(tmp_path: Path, shape: str) -> None:
    listener = Listener()
    try:
        token = tmp_path / "conf" / "token"
        path = _file(tmp_path / "conf", listener.port, token_file=str(token))
        token.write_text("hpc_abc\n" if shape != "two lines" else "-----BEGIN KEY-----\nsecret\n")
        token.chmod(0o644 if shape == "readable by others" else 0o600)
        if shape == "a symbolic link":
            real = tmp_path / "conf" / "real-token"
            token.rename(real)
            token.symlink_to(real)
        got = hpcopt("list", HPCOPT_SERVER_FILE=str(path))
        assert got.returncode == 2 and f"refusing the token file {token}" in got.stderr, got.stderr
        assert listener.accepted == 0
    finally:
        listener.close()


def test_serve_refuses_a_folder_others_may_write(tmp_path: Path) -> None:
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    proc = serve(tmp_path / "s.db", "--port", "0", "--grpc-port", "0", "--server-file", str(folder / "server.json"))
    out, _ = proc.communicate(timeout=scaled(120))
    assert proc.returncode == 2 and f"refusing to write the connection file into {folder}" in out, out
    assert not (folder / "server.json").exists()


class Impostor(grpc.GenericRpcHandler):
    """A gRPC server on the dead server's port that records every call it gets."""

    def __init__(self, port: int) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[self])
        assert self.server.add_insecure_port(f"127.0.0.1:{port}") == port
        self.server.start()

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> None:
        self.calls.append((handler_call_details.method, dict(handler_call_details.invocation_metadata)))
        return None  # UNIMPLEMENTED, as an unrelated service answers


@pytest.mark.slow
def test_a_file_left_by_a_killed_server_never_sends_the_token_to_the_next_process_on_its_port(tmp_path: Path) -> None:
    db = tmp_path / "auth.db"
    secret, token_file = admin_token_file(f"sqlite:///{db}", tmp_path)
    conn = tmp_path / "conn" / "server.json"
    grpc_port = free_port()
    proc = serve(
        db, "--port", "0", "--grpc-port", str(grpc_port), "--server-file", str(conn), "--token-file", str(token_file)
    )
    try:
        wait_file(conn, proc)
        assert hpcopt("list", HPCOPT_SERVER_FILE=str(conn)).returncode == 0  # the real server proves it
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=scaled(30))
    finally:
        stop(proc)
    assert conn.exists()  # a kill -9 leaves the file behind
    impostor = Impostor(grpc_port)
    try:
        got = hpcopt("list", HPCOPT_SERVER_FILE=str(conn))
        assert got.returncode != 0 and "is not the server that wrote" in got.stderr, got.stdout + got.stderr
        agent = subprocess.run(
            [sys.executable, "-m", "hpcopt_agent", "--campaign", "1", "--server-file", str(conn)],
            capture_output=True,
            text=True,
            timeout=scaled(60),
        )
        assert agent.returncode == 2 and "is not the server that wrote" in agent.stderr, agent.stderr
    finally:
        impostor.server.stop(grace=None)
    assert impostor.calls, "the client never asked the impostor to prove itself"
    for method, metadata in impostor.calls:
        assert method == "/hpcopt.v1.IdentityService/Prove", method
        assert "authorization" not in metadata and all(secret not in str(v) for v in metadata.values())


@pytest.mark.postgres
@pytest.mark.slow
def test_every_process_of_a_multi_process_server_proves_the_file(tmp_path: Path, pg_url: str) -> None:
    _, token_file = admin_token_file(pg_url, tmp_path)
    conn = tmp_path / "conn" / "server.json"
    cmd = [
        sys.executable,
        "-m",
        "hpcopt_server.cli",
        "serve",
        "--db",
        pg_url,
        "--log-level",
        "warning",
        "--processes",
        "2",
    ]
    proc = subprocess.Popen(
        [*cmd, "--port", "0", "--grpc-port", "0", "--server-file", str(conn), "--token-file", str(token_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_file(conn, proc)
        for _ in range(8):  # new connections land on either process
            got = hpcopt("list", HPCOPT_SERVER_FILE=str(conn))
            assert got.returncode == 0, got.stdout + got.stderr
    finally:
        stop(proc)
