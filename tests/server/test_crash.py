"""SIGKILL the server in the middle of a stream of reports and restart it: every report
the server acknowledged is still there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from hpcopt import AgentClient, ApiError, Client, lease_of
from tests.conftest import free_port, make_spec


def wait_healthy(url: str, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"server exited with {proc.returncode}:\n{out}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"server at {url} did not become healthy")


def _serve(db: str, port: int, grpc_port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpcopt_server.cli", "serve", "--db", db, "--port", str(port),
         "--grpc-port", str(grpc_port), "--log-level", "warning"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    wait_healthy(f"http://127.0.0.1:{port}", proc)
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_acknowledged_reports_survive_sigkill(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    db = f"sqlite:///{tmp_path / 'crash.db'}" if backend == "sqlite" else request.getfixturevalue("pg_url")
    port, grpc_port = free_port(), free_port()
    target = f"127.0.0.1:{grpc_port}"
    proc = _serve(db, port, grpc_port)
    acked: list[tuple[int, int, float]] = []  # (fold, step, value) the server answered OK
    folds_acked: list[int] = []
    try:
        with Client(target) as c:
            cid = c.create_campaign(make_spec(folds=100, budget={"max_trials": 1, "max_parallel": 1})).id
        agent = AgentClient(target, timeout=5)
        reg = agent.register(host="crash-test")
        lease = lease_of(agent.acquire(reg.agent_id, cid), reg.agent_id)
        stop = threading.Event()
        unexpected: list[ApiError] = []

        def stream() -> None:
            # Fold k gets curve points at steps 10k..10k+8, then its final value.
            for step in range(1000):
                fold, value = step // 10, step * 0.5
                if stop.is_set():
                    return
                try:
                    if step % 10 == 9:
                        agent.report_fold(lease, fold, value)
                        folds_acked.append(fold)
                    else:
                        agent.report_intermediate(lease, fold, step, value)
                        acked.append((fold, step, value))
                except ApiError as exc:
                    if exc.code not in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "UNKNOWN", "INTERNAL"):
                        unexpected.append(exc)
                    return  # the server is gone: this report was not acknowledged

        t = threading.Thread(target=stream)
        t.start()
        while len(acked) < 200 and t.is_alive():
            time.sleep(0.01)
        assert not unexpected, unexpected
        assert t.is_alive(), "the report stream ended before the kill"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        stop.set()
        t.join(timeout=30)
        agent.close()
        assert len(acked) >= 200

        proc = _serve(db, port, grpc_port)
        with Client(target) as c:
            trial = c.get_trial(lease.trial_id)
        stored = {(p.fold, p.step): p.value for p in trial.curves}
        missing = [a for a in acked if stored.get((a[0], a[1])) != a[2]]
        assert not missing, f"{len(missing)} acknowledged reports lost, e.g. {missing[:3]}"
        finished = {f.index for f in trial.folds if f.finished}
        assert set(folds_acked) <= finished
    finally:
        proc.kill()
        proc.wait()
