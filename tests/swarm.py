"""A swarm of hostile idle clients, run as its own process so that it does not share an
interpreter (or its GIL) with whoever measures the server meanwhile:

    python -m tests.swarm grpc PORT N      # N connections that finish the HTTP/2
                                          # handshake of a gRPC channel, then sit idle
    python -m tests.swarm slow PORT N      # N HTTP clients sending their request
                                          # headers one byte every 2 s

A connection the server closes stays closed, as an idle gRPC channel does; with
``--reconnect S`` it is opened again after S seconds, as a stubborn attacker would. It
prints ``ready`` once all N have been opened and each is either closed or (for gRPC)
has received the server's SETTINGS, then once a second ``open=K closed=C`` (C: closed
by the server so far). It stops when stdin closes.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
SETTINGS_ACK = b"\x00\x00\x00\x04\x01\x00\x00\x00\x00"
SLOW_HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "


class Swarm:
    def __init__(self, kind: str, port: int, n: int, reconnect: float | None):
        self.kind, self.port, self.n, self.reconnect = kind, port, n, reconnect
        self.sel = selectors.DefaultSelector()
        self.ready: dict[socket.socket, bool] = {}
        self.closed = 0
        self.pending_reopen: list[float] = []

    def open_one(self) -> None:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.setblocking(False)
        s.sendall(PREFACE + SETTINGS if self.kind == "grpc" else SLOW_HEAD)
        self.ready[s] = self.kind != "grpc"
        self.sel.register(s, selectors.EVENT_READ)

    def drop(self, s: socket.socket) -> None:
        self.sel.unregister(s)
        self.ready.pop(s, None)
        s.close()
        self.closed += 1
        if self.reconnect is not None:
            self.pending_reopen.append(time.monotonic() + self.reconnect)

    def step(self, timeout: float) -> None:
        for key, _ in self.sel.select(timeout):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:
                self.drop(s)
                continue
            if self.kind == "grpc" and not self.ready[s]:
                try:
                    s.sendall(SETTINGS_ACK)
                except OSError:
                    self.drop(s)
                    continue
                self.ready[s] = True
        now = time.monotonic()
        due = [t for t in self.pending_reopen if t <= now]
        self.pending_reopen = [t for t in self.pending_reopen if t > now]
        for _ in due:
            try:
                self.open_one()
            except OSError:
                self.pending_reopen.append(now + max(self.reconnect or 0.0, 0.05))

    def trickle(self) -> None:
        for s in list(self.ready):
            with contextlib.suppress(OSError):
                s.send(b"a")


def finish_one_trial(agent: Any, agent_id: str, campaign_id: int) -> str:
    """An agent (``hpcopt.AgentClient``) runs one trial of a one-fold campaign: Acquire,
    ReportFold, Complete; returns the trial's final state."""

    got = agent.acquire(agent_id, campaign_id)
    lease = got.lease
    agent.report_fold(lease, 0, 0.5)
    return str(agent.complete(lease).state)


@dataclass
class Outcome:
    closed_by_server: int = 0


@contextlib.contextmanager
def swarming(kind: str, port: int, n: int, *extra: str, ready_timeout: float = 180) -> Iterator[Outcome]:
    """Runs ``python -m tests.swarm KIND PORT N EXTRA...`` until the block ends, once
    it is ready; the outcome holds how many connections the server closed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.swarm", kind, str(port), str(n), *extra],
        cwd=Path(__file__).resolve().parents[1], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    outcome = Outcome()
    try:
        assert proc.stdout is not None
        timer = threading.Timer(ready_timeout, proc.kill)
        timer.start()
        line = proc.stdout.readline().strip()
        timer.cancel()
        assert line == "ready", f"the swarm did not get ready: {line!r}"
        yield outcome
    finally:
        try:
            out = proc.communicate(input="", timeout=60)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0]
        last = out.strip().splitlines()[-1:] or ["closed=0"]
        outcome.closed_by_server = int(last[0].split("closed=")[-1]) if "closed=" in last[0] else 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["grpc", "slow"])
    ap.add_argument("port", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("--reconnect", type=float, default=None)
    args = ap.parse_args()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    swarm = Swarm(args.kind, args.port, args.n, args.reconnect)
    stop = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    for _ in range(args.n):
        swarm.open_one()
        swarm.step(0)
    deadline = time.monotonic() + 60
    while not all(swarm.ready.values()) and time.monotonic() < deadline and not stop.is_set():
        swarm.step(0.05)
    print("ready", flush=True)
    last_report = last_trickle = time.monotonic()
    while not stop.is_set():
        swarm.step(0.1)
        now = time.monotonic()
        if args.kind == "slow" and now - last_trickle >= 2:
            swarm.trickle()
            last_trickle = now
        if now - last_report >= 1:
            print(f"open={len(swarm.ready)} closed={swarm.closed}", flush=True)
            last_report = now
    swarm.step(0)
    print(f"open={len(swarm.ready)} closed={swarm.closed}", flush=True)


if __name__ == "__main__":
    main()
