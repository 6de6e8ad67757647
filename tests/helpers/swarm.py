"""A swarm of hostile idle clients, run as its own process so that it does not share an
interpreter (or its GIL) with whoever measures the server meanwhile:

    python -m tests.helpers.swarm grpc PORT N      # N connections that finish the HTTP/2
                                          # handshake of a gRPC channel, then sit idle
    python -m tests.helpers.swarm slow PORT N      # N HTTP clients sending their request
                                          # headers one byte every 2 s
    python -m tests.helpers.swarm halfopen PORT N --calls M
                                          # N gRPC connections, each opening M unary
                                          # calls to AgentService/Heartbeat whose request
                                          # never arrives (HEADERS without END_STREAM)
    python -m tests.helpers.swarm nowindow PORT N --window W [--open-once K]
                                          # N gRPC connections that advertise an initial
                                          # window of W bytes (0: none) and send one
                                          # complete Health/Check call whose response
                                          # they never let through; with --open-once,
                                          # one WINDOW_UPDATE of K bytes for that call
                                          # once the server's SETTINGS arrive, then none

``--source ADDR`` connects from that local address (any of 127.0.0.0/8 on Linux), so
that the swarm is a peer of its own. A connection the server closes stays closed, as an idle gRPC channel does; with
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.env import scaled

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
SETTINGS_ACK = b"\x00\x00\x00\x04\x01\x00\x00\x00\x00"
SLOW_HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "


def _literal(name: bytes, value: bytes) -> bytes:
    """One HPACK "literal header field without indexing", new name, no Huffman coding."""
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def settings_frame(initial_window: int | None = None) -> bytes:
    """A client SETTINGS frame: empty, or setting SETTINGS_INITIAL_WINDOW_SIZE (0x4)."""
    if initial_window is None:
        return SETTINGS
    return b"\x00\x00\x06\x04\x00\x00\x00\x00\x00" + b"\x00\x04" + initial_window.to_bytes(4, "big")


def window_update(stream: int, increment: int) -> bytes:
    return b"\x00\x00\x04\x08\x00" + stream.to_bytes(4, "big") + increment.to_bytes(4, "big")


def health_check_call(stream: int = 1) -> bytes:
    """One whole unary grpc.health.v1.Health/Check call: its HEADERS, then a DATA frame
    with the empty request message and END_STREAM."""
    end_stream = 0x1
    message = b"\x00" + (0).to_bytes(4, "big")  # not compressed, zero bytes long
    headers = half_open_calls(1, b"/grpc.health.v1.Health/Check")
    headers = headers[:5] + stream.to_bytes(4, "big") + headers[9:]
    return headers + len(message).to_bytes(3, "big") + bytes([0, end_stream]) + stream.to_bytes(4, "big") + message


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
    def __init__(
        self,
        kind: str,
        port: int,
        n: int,
        reconnect: float | None,
        calls: int = 0,
        *,
        window: int | None = None,
        open_once: int | None = None,
        source: str | None = None,
    ):
        self.kind, self.port, self.n, self.reconnect = kind, port, n, reconnect
        self.h2 = kind in ("grpc", "halfopen", "nowindow")
        self.settings = settings_frame(window if kind == "nowindow" else None)
        self.calls = {"halfopen": half_open_calls(calls), "nowindow": health_check_call()}.get(kind, b"")
        self.open_once = window_update(1, open_once) if kind == "nowindow" and open_once else b""
        self.source = (source, 0) if source else None
        self.sel = selectors.DefaultSelector()
        self.ready: dict[socket.socket, bool] = {}
        self.closed = 0
        self.pending_reopen: list[float] = []

    def open_one(self) -> None:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=scaled(10), source_address=self.source)
        s.setblocking(False)
        s.sendall(PREFACE + self.settings + self.calls if self.h2 else SLOW_HEAD)
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
                    s.sendall(SETTINGS_ACK + self.open_once)
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


def probe_health(target: str, seconds: float, token: str | None = None, *, new_channel: bool = False) -> list[float]:
    """Latencies of grpc.health.v1 Check calls on a channel of their own, one every 0.2 s
    for ``seconds``, each with a 5 s deadline; inf for one that failed. With
    ``new_channel`` each check opens a channel of its own (connects anew), as a monitor
    or a starting agent does."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    out: list[float] = []
    meta = [("authorization", f"Bearer {token}")] if token else None
    shared = None if new_channel else grpc.insecure_channel(target)
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            t0 = time.monotonic()
            ch = shared or grpc.insecure_channel(target)
            try:
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=scaled(5), metadata=meta)
                out.append(time.monotonic() - t0)
            except grpc.RpcError:
                out.append(float("inf"))
            finally:
                if ch is not shared:
                    ch.close()
            time.sleep(max(0.0, 0.2 - (time.monotonic() - t0)))
    finally:
        if shared is not None:
            shared.close()
    return out


@dataclass
class Beats:
    #: Each heartbeat in order: seconds from the start to its answer, or ``-1`` where it
    #: failed (its deadline passed, or the call failed).
    seen: list[float] = field(default_factory=list)
    ended: float = 0.0  # seconds from the start to the last heartbeat's end

    @property
    def ok(self) -> int:
        return sum(1 for at in self.seen if at >= 0)

    @property
    def failed(self) -> int:
        return len(self.seen) - self.ok

    @property
    def longest_gap(self) -> float:
        """The longest time without an answer (from the start, between answers, and to
        the last heartbeat sent): a stall answers none for its duration, and a gap as
        long as the lease loses it, where a loaded machine fails a beat here and there,
        which the agent retries."""
        answered = [0.0, *(at for at in self.seen if at >= 0)]
        return max(b - a for a, b in zip(answered, [*answered[1:], self.ended], strict=True))


@contextlib.contextmanager
def heartbeating(agent: Any, lease: Any, period: float = 1.0) -> Iterator[Beats]:
    """Heartbeats ``lease`` with ``agent`` (an ``hpcopt.AgentClient``) every ``period``
    seconds in a thread until the block ends, counting answers and failures."""
    beats, stop = Beats(), threading.Event()

    def beat() -> None:
        t0 = time.monotonic()
        while not stop.wait(period):
            try:
                agent.heartbeat(lease)
                beats.seen.append(round(time.monotonic() - t0, 1))
            except Exception:
                beats.seen.append(-1)
        beats.ended = round(time.monotonic() - t0, 1)

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
def swarming(kind: str, port: int, n: int, *extra: str, ready_timeout: float = scaled(180)) -> Iterator[Outcome]:
    """Runs ``python -m tests.helpers.swarm KIND PORT N EXTRA...`` until the block ends, once
    it is ready; the outcome holds how many connections the server closed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.swarm", kind, str(port), str(n), *extra],
        cwd=Path(__file__).resolve().parents[2],
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
            out = proc.communicate(input="", timeout=scaled(60))[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0]
        last = out.strip().splitlines()[-1:] or ["closed=0"]
        outcome.closed_by_server = int(last[0].split("closed=")[-1]) if "closed=" in last[0] else 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["grpc", "slow", "halfopen", "nowindow"])
    ap.add_argument("port", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("--reconnect", type=float, default=None)
    ap.add_argument("--calls", type=int, default=64, help="halfopen: calls held open on each connection")
    ap.add_argument("--window", type=int, default=0, help="nowindow: the initial window advertised, in bytes")
    ap.add_argument("--open-once", type=int, default=None, help="nowindow: one WINDOW_UPDATE of this many bytes")
    ap.add_argument("--source", default=None, help="the local address to connect from")
    args = ap.parse_args()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    swarm = Swarm(
        args.kind,
        args.port,
        args.n,
        args.reconnect,
        args.calls,
        window=args.window,
        open_once=args.open_once,
        source=args.source,
    )
    stop = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    for _ in range(args.n):
        swarm.open_one()
        swarm.step(0)
    deadline = time.monotonic() + scaled(60)
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
