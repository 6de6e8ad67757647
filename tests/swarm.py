"""A swarm of hostile idle clients, run as its own process so that it does not share an
interpreter (or its GIL) with whoever measures the server meanwhile:

    python -m tests.swarm grpc PORT N      # N connections that finish the HTTP/2
                                          # handshake of a gRPC channel, then sit idle
    python -m tests.swarm slow PORT N      # N HTTP clients sending their request
                                          # headers one byte every 2 s
    python -m tests.swarm halfopen PORT N --calls M
                                          # N gRPC connections, each opening M unary
                                          # calls to AgentService/Heartbeat whose request
                                          # never arrives (HEADERS without END_STREAM)

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


def _literal(name: bytes, value: bytes) -> bytes:
    """One HPACK "literal header field without indexing", new name, no Huffman coding."""
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def half_open_calls(m: int, method: bytes = b"/hpcopt.v1.AgentService/Heartbeat") -> bytes:
    """The HEADERS frames of ``m`` unary gRPC calls (streams 1, 3, 5, ...) that end their
    headers but never their request: no DATA, no END_STREAM."""
    block = b"".join(
        _literal(n, v)
        for n, v in (
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", method),
            (b":authority", b"x"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        )
    )
    end_headers = 0x4
    return b"".join(
        len(block).to_bytes(3, "big") + bytes([1, end_headers]) + (2 * i + 1).to_bytes(4, "big") + block
        for i in range(m)
    )


class Swarm:
    def __init__(self, kind: str, port: int, n: int, reconnect: float | None, calls: int = 0):
        self.kind, self.port, self.n, self.reconnect = kind, port, n, reconnect
        self.h2 = kind in ("grpc", "halfopen")
        self.calls = half_open_calls(calls) if kind == "halfopen" else b""
        self.sel = selectors.DefaultSelector()
        self.ready: dict[socket.socket, bool] = {}
        self.closed = 0
        self.pending_reopen: list[float] = []

    def open_one(self) -> None:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.setblocking(False)
        s.sendall(PREFACE + SETTINGS + self.calls if self.h2 else SLOW_HEAD)
        self.ready[s] = not self.h2
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
            if self.h2 and not self.ready[s]:
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


def probe_health(target: str, seconds: float, token: str | None = None) -> list[float]:
    """Latencies of grpc.health.v1 Check calls on a channel of their own, one every 0.2 s
    for ``seconds``, each with a 5 s deadline; inf for one that failed."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    out: list[float] = []
    with grpc.insecure_channel(target) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        meta = [("authorization", f"Bearer {token}")] if token else None
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                stub.Check(health_pb2.HealthCheckRequest(), timeout=5, metadata=meta)
                out.append(time.monotonic() - t0)
            except grpc.RpcError:
                out.append(float("inf"))
            time.sleep(max(0.0, 0.2 - (time.monotonic() - t0)))
    return out


@dataclass
class Beats:
    ok: int = 0
    failed: int = 0


@contextlib.contextmanager
def heartbeating(agent: Any, lease: Any, period: float = 1.0) -> Iterator[Beats]:
    """Heartbeats ``lease`` with ``agent`` (an ``hpcopt.AgentClient``) every ``period``
    seconds in a thread until the block ends, counting answers and failures."""
    beats, stop = Beats(), threading.Event()

    def beat() -> None:
        while not stop.wait(period):
            try:
                agent.heartbeat(lease)
                beats.ok += 1
            except Exception:
                beats.failed += 1

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield beats
    finally:
        stop.set()
        thread.join()


@dataclass
class Outcome:
    closed_by_server: int = 0


@contextlib.contextmanager
def swarming(kind: str, port: int, n: int, *extra: str, ready_timeout: float = 180) -> Iterator[Outcome]:
    """Runs ``python -m tests.swarm KIND PORT N EXTRA...`` until the block ends, once
    it is ready; the outcome holds how many connections the server closed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.swarm", kind, str(port), str(n), *extra],
        cwd=Path(__file__).resolve().parents[1],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
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
    ap.add_argument("kind", choices=["grpc", "slow", "halfopen"])
    ap.add_argument("port", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("--reconnect", type=float, default=None)
    ap.add_argument("--calls", type=int, default=64, help="halfopen: calls held open on each connection")
    args = ap.parse_args()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    swarm = Swarm(args.kind, args.port, args.n, args.reconnect, args.calls)
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
