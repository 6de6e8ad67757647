"""``serve --port 0 --grpc-port 0 --server-file``: two servers on one host take free ports,
each client finds its own through the connection file, the file is owner-only, a live
server's file is never taken over, and a clean exit removes it."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.env import scaled
from tests.helpers.live import free_port
from tests.helpers.process import wait_healthy

pytestmark = pytest.mark.timeout(240)


def serve(db: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "hpcopt_server.cli", "serve", "--db", f"sqlite:///{db}", "--log-level", "warning"]
    return subprocess.Popen(
        [*cmd, *args], env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def wait_file(path: Path, proc: subprocess.Popen[str], timeout: float = scaled(90)) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited with {proc.returncode}: {proc.stdout.read() if proc.stdout else ''}")
        if path.exists():
            data: dict[str, object] = json.loads(path.read_text())
            wait_healthy(str(data["rest"]).rstrip("/"), proc)
            return data
        time.sleep(0.1)
    raise AssertionError(f"{path} never appeared")


def hpcopt(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("HPCOPT_SERVER", "HPCOPT_TOKEN", "HPCOPT_SERVER_FILE")}
    cmd = [sys.executable, "-m", "hpcopt.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(60), env={**base, **env})


def admin_token_file(db: str, folder: Path) -> tuple[str, Path]:
    """An admin token made with ``hpcopt-server token create``, and the owner-only file
    that holds it (what ``serve --token-file`` names)."""
    cmd = [sys.executable, "-m", "hpcopt_server.cli", "token", "create", "--db", db, "--scope", "admin", "--name", "me"]
    made = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(120))
    assert made.returncode == 0, made.stderr
    path = folder / "token"
    path.write_text(made.stdout.strip() + "\n")
    path.chmod(0o600)
    return made.stdout.strip(), path


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=scaled(30))


@pytest.mark.slow
def test_two_servers_on_free_ports_each_found_through_its_own_file(tmp_path: Path) -> None:
    spec = Path(__file__).resolve().parents[2] / "examples/digits/campaign.yaml"
    a_file, b_file = tmp_path / "a" / "server.json", tmp_path / "b" / "server.json"
    a = serve(tmp_path / "a.db", "--port", "0", "--grpc-port", "0", "--server-file", str(a_file))
    b = serve(tmp_path / "b.db", "--port", "0", "--grpc-port", "0", "--server-file", str(b_file))
    try:
        da, db = wait_file(a_file, a), wait_file(b_file, b)
        assert da["grpc"] != db["grpc"] and da["pid"] == a.pid and db["pid"] == b.pid
        for f in (a_file, b_file):  # owner-only: the file and the folder made for it
            assert stat.S_IMODE(f.stat().st_mode) == 0o600
            assert stat.S_IMODE(f.parent.stat().st_mode) == 0o700
        # A campaign submitted through one file is on that server only.
        sub = hpcopt("submit", "-q", str(spec), HPCOPT_SERVER_FILE=str(a_file))
        assert sub.returncode == 0, sub.stderr
        on_a = hpcopt("--json", "list", HPCOPT_SERVER_FILE=str(a_file))
        on_b = hpcopt("--json", "list", "--server-file", str(b_file))
        assert on_a.returncode == on_b.returncode == 0, on_a.stderr + on_b.stderr
        assert len(json.loads(on_a.stdout)) == 1 and json.loads(on_b.stdout) == []
        # A third server on a live server's file is refused, naming it; nothing changes.
        c = serve(tmp_path / "c.db", "--port", "0", "--grpc-port", "0", "--server-file", str(a_file))
        out, _ = c.communicate(timeout=scaled(60))
        assert c.returncode == 2 and str(a_file) in out and "still answers" in out, out
        assert json.loads(a_file.read_text()) == da
    finally:
        stop(a)
        stop(b)
    assert not a_file.exists() and not b_file.exists()  # a clean exit withdraws the file


@pytest.mark.slow
def test_the_default_file_is_found_and_a_stale_one_is_replaced(tmp_path: Path) -> None:
    home = tmp_path / "home"
    default = home / "server.json"
    home.mkdir(mode=0o700)
    dead = free_port()  # a file left by a server that died: nothing answers at its port
    default.write_text(
        json.dumps(
            {
                "version": 1,
                "grpc": f"127.0.0.1:{dead}",
                "rest": f"http://127.0.0.1:{dead}/",
                "host": "x",
                "pid": 1,
                "database": "sqlite://",
                "auth": False,
                "token_file": None,
                "started_at": "then",
            }
        )
    )
    missing = hpcopt("list", "--server-file", str(tmp_path / "nowhere.json"), HPCOPT_HOME=str(home))
    assert missing.returncode == 2 and "nowhere.json" in missing.stderr and "--server-file" in missing.stderr
    stale = hpcopt("wait", "--timeout", "1", HPCOPT_HOME=str(home))
    assert stale.returncode == 2 and str(default) in stale.stderr, stale.stderr  # says where the address came from
    proc = serve(tmp_path / "d.db", "--port", "0", "--grpc-port", "0", "--server-file", env={"HPCOPT_HOME": str(home)})
    try:
        data = wait_file_replaced(default, proc, f"127.0.0.1:{dead}")
        listed = hpcopt("list", HPCOPT_HOME=str(home))
        assert listed.returncode == 0 and data["pid"] == proc.pid, listed.stderr
    finally:
        stop(proc)
    assert not default.exists()


def wait_file_replaced(path: Path, proc: subprocess.Popen[str], old: str) -> dict[str, object]:
    deadline = time.monotonic() + scaled(90)
    while time.monotonic() < deadline:
        data = json.loads(path.read_text())
        if data["grpc"] != old:
            wait_healthy(str(data["rest"]).rstrip("/"), proc)
            return data  # type: ignore[no-any-return]
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        time.sleep(0.1)
    raise AssertionError("the stale file was not replaced")


def test_a_damaged_file_is_named_and_the_agent_reads_the_file_too(tmp_path: Path) -> None:
    bad = tmp_path / "server.json"
    bad.write_text("{not json")
    got = hpcopt("list", HPCOPT_SERVER_FILE=str(bad))
    assert got.returncode == 2 and "not an hpcopt connection file" in got.stderr and str(bad) in got.stderr
    # The agent resolves the file before it starts MPI: a missing one is a clear refusal.
    agent = subprocess.run(
        [sys.executable, "-m", "hpcopt_agent", "--campaign", "1", "--server-file", str(tmp_path / "none.json")],
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )
    assert agent.returncode == 2 and "none.json" in agent.stderr, agent.stderr


@pytest.mark.slow
def test_with_auth_on_the_file_names_the_token_file_and_clients_use_it(tmp_path: Path) -> None:
    db = tmp_path / "auth.db"
    secret, token_file = admin_token_file(f"sqlite:///{db}", tmp_path)
    conn = tmp_path / "conn" / "server.json"
    proc = serve(db, "--port", "0", "--grpc-port", "0", "--server-file", str(conn), "--token-file", str(token_file))
    try:
        data = wait_file(conn, proc)
        assert data["auth"] is True and data["token_file"] == str(token_file)
        assert secret not in conn.read_text()  # the secret itself is never in it
        ok = hpcopt("list", HPCOPT_SERVER_FILE=str(conn))
        assert ok.returncode == 0, ok.stderr
        wrong = hpcopt("list", "--token", "not-the-token", HPCOPT_SERVER_FILE=str(conn))
        assert wrong.returncode == 2 and "UNAUTHENTICATED" in wrong.stderr + wrong.stdout
    finally:
        stop(proc)
