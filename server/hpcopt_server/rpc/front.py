"""The gRPC front: counts gRPC connections against a cap and sheds the idlest first, and
ends calls whose request never arrives.

grpcio's server offers no hook on connections: it accepts as many as arrive, and an
idle one is closed only by ``grpc.max_connection_idle_ms``. 1,005 idle channels that had
finished the HTTP/2 handshake took every descriptor of a server under ``ulimit -n 1024``
and REST and /healthz stopped answering. So the gRPC server listens on a private Unix
socket (in a 0700 directory), and this front accepts clients on the public port and
relays bytes both ways, one asyncio loop in its own thread. It reads HTTP/2 frame
headers as they pass (never payloads) to know which connections have a call in
progress. Past ``cap`` open connections, a new one closes the idlest connection with
no call at work: first those that never made a call (oldest first), then those quiet
longest. A call at work is one whose request has arrived whole. If every connection
has a call at work, the new one is closed.

grpcio's sync server gives a call a worker thread when its HEADERS arrive, and that
thread waits for the request message. A client that sends HEADERS and never ends the
request (64 such calls on one connection, no token needed: the request is read before
the auth interceptor) held all 64 workers, and every agent's heartbeat timed out for as
long as it wanted. ``maximum_concurrent_rpcs`` counts those calls too, so it would only
turn the agents' timeouts into refusals. The front therefore watches each call's
request: a call whose request has not ended (END_STREAM from the client) is *waiting*.

- A connection holding a call that has waited ``request_timeout`` seconds is closed,
  which ends its calls and frees their workers (the gRPC server cancels them).
- At most ``max_waiting`` calls may have waited longer than 50 ms at once,
  server-wide, so that the other workers stay free for agents: past it, the
  connections holding the calls that have waited longest are closed (an honest request
  arrives whole within milliseconds). Looked at every 50 ms.
- A connection whose calls are all waiting counts as idle when connections are shed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable

from hpcopt_server.sockets import ACCEPT_BATCH, LISTEN_BACKLOG, ShedLog, StallLog

log = logging.getLogger(__name__)

_PREFACE = 24  # b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", sent by the client before its frames
_DATA, _HEADERS, _RST_STREAM = 0, 1, 3
_END_STREAM = 0x1
_SWEEP = 0.05  # seconds between looks at the calls waiting for their request
# A call counts against the server-wide cap only once it has waited this long: an honest
# request's DATA follows its HEADERS within milliseconds, but under flow control or a
# busy loop it may come a read later, and 64 threads sharing one channel (one
# connection) then had their connection closed under them, again and again.
_GRACE = 0.05


class _Frames:
    """Reads HTTP/2 frame headers out of a byte stream, skipping payloads."""

    __slots__ = ("head", "on_frame", "skip")

    def __init__(self, skip: int, on_frame: Callable[[int, int, int], None]):
        self.skip, self.head, self.on_frame = skip, b"", on_frame

    def feed(self, data: bytes) -> None:
        i, n = 0, len(data)
        while i < n:
            if self.skip:
                k = min(self.skip, n - i)
                self.skip -= k
                i += k
                continue
            take = 9 - len(self.head)
            self.head += data[i : i + take]
            i += take
            if len(self.head) == 9:
                h, self.head = self.head, b""
                self.skip = int.from_bytes(h[0:3], "big")
                self.on_frame(h[3], h[4], int.from_bytes(h[5:9], "big") & 0x7FFFFFFF)


class _Backend(asyncio.Protocol):
    """The relay's side towards the gRPC server."""

    def __init__(self, client: _Client):
        self.client = client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.client.from_server(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()

    def pause_writing(self) -> None:  # the gRPC server reads slower than the client sends
        self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        self.client.transport.resume_reading()


class _Client(asyncio.Protocol):
    """One gRPC client connection and its relay to the server."""

    def __init__(self, front: GrpcFront):
        self.front = front
        self.backend: asyncio.Transport | None = None
        self.streams: set[int] = set()  # calls in progress
        self.waiting: dict[int, float] = {}  # calls whose request has not ended: since when
        self.last_stream = 0
        self.called = False
        self.quiet_since = time.monotonic()
        self.to_server = _Frames(_PREFACE, self._client_frame)
        self.to_client = _Frames(0, self._server_frame)

    # -- accounting --------------------------------------------------------------------
    def _client_frame(self, kind: int, flags: int, stream: int) -> None:
        if kind == _HEADERS and stream > self.last_stream:  # a new call (later HEADERS are trailers)
            self.last_stream = stream
            self.streams.add(stream)
            self.called = True
            if not flags & _END_STREAM:
                self.waiting[stream] = time.monotonic()
                self.front.waiting += 1
        elif kind in (_HEADERS, _DATA) and flags & _END_STREAM:  # the request has arrived whole
            self._arrived(stream)
        elif kind == _RST_STREAM:
            self._ended(stream)

    def _arrived(self, stream: int) -> None:
        if self.waiting.pop(stream, None) is not None:
            self.front.waiting -= 1

    def _server_frame(self, kind: int, flags: int, stream: int) -> None:
        if kind == _RST_STREAM or (kind in (_HEADERS, _DATA) and flags & _END_STREAM):
            self._ended(stream)

    def _ended(self, stream: int) -> None:
        self._arrived(stream)
        if stream in self.streams:
            was_busy = self.busy
            self.streams.discard(stream)
            if was_busy and not self.busy:
                self.quiet_since = time.monotonic()

    @property
    def busy(self) -> bool:
        """Whether a call is at work here: one whose request has arrived whole."""
        return len(self.streams) > len(self.waiting)

    @property
    def oldest_wait(self) -> float:
        return min(self.waiting.values(), default=float("inf"))

    @property
    def live(self) -> bool:
        return not self.transport.is_closing()

    # -- relay -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.pause_reading()  # until the relay to the server is up
        self.front.admit(self)
        if self.live:
            asyncio.get_running_loop().create_task(self._relay())

    async def _relay(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            backend, _ = await loop.create_unix_connection(lambda: _Backend(self), self.front.backend_path)
        except OSError as exc:
            log.warning("gRPC front: cannot reach the gRPC server: %s", exc)
            self.close()
            return
        if not self.live:
            backend.close()
            return
        self.backend = backend
        self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        self.to_server.feed(data)
        assert self.backend is not None  # reading is paused until it is set
        self.backend.write(data)

    def from_server(self, data: bytes) -> None:
        self.to_client.feed(data)
        self.transport.write(data)

    def pause_writing(self) -> None:  # the client reads slower than the server sends
        if self.backend is not None:
            self.backend.pause_reading()

    def resume_writing(self) -> None:
        if self.backend is not None:
            self.backend.resume_reading()

    def close(self) -> None:
        self.front.waiting -= len(self.waiting)
        self.waiting.clear()
        if self.live:
            self.transport.close()
        if self.backend is not None and not self.backend.is_closing():
            self.backend.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.front.clients.discard(self)
        self.close()


class GrpcFront:
    """Accepts gRPC clients on ``sock`` and relays each to the gRPC server listening on
    ``backend_address`` (``unix:PATH``, in a private directory this front owns)."""

    def __init__(self, sock: socket.socket, cap: int, *, request_timeout: float = 10.0, max_waiting: int = 32):
        self.sock, self.cap = sock, cap
        self.request_timeout, self.max_waiting = request_timeout, max_waiting
        self.waiting = 0  # calls waiting for their request, over every connection
        # Mode 0700: only this user reaches the server. A Unix socket path must fit in 107
        # bytes, which a long $TMPDIR (a cluster's scratch path) may not leave room for.
        base = None if len(tempfile.gettempdir()) <= 64 else "/tmp"
        self._dir = tempfile.mkdtemp(prefix="hpcopt-grpc-", dir=base)
        self.backend_path = os.path.join(self._dir, "grpc.sock")
        self.clients: set[_Client] = set()
        self.shed_log = ShedLog(log, "gRPC")
        self.stall_log = StallLog(log)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="grpc-front", daemon=True)
        self._started = threading.Event()

    @property
    def backend_address(self) -> str:
        return f"unix:{self.backend_path}"

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def admit(self, new: _Client) -> None:
        self.clients.add(new)
        live = [c for c in self.clients if c.live]
        if len(live) <= self.cap:
            return
        idle = [c for c in live if c is not new and not c.busy]
        victim = min(idle, key=lambda c: (c.called, c.quiet_since)) if idle else new
        self.shed_log.shed(len(live), self.cap, None if victim is new else time.monotonic() - victim.quiet_since)
        victim.close()

    def _sweep(self) -> None:
        """Closes every connection holding a call that has waited ``request_timeout``,
        then those holding the calls that have waited longest while more than
        ``max_waiting`` calls have waited past the grace period."""
        now = time.monotonic()
        holding = [c for c in self.clients if c.waiting]
        for c in holding:
            if c.oldest_wait <= now - self.request_timeout:
                self.stall_log.closed(len(c.waiting), f"a request unfinished after {self.request_timeout:g} s")
                c.close()
        late = now - _GRACE
        stalled = sum(sum(1 for t in c.waiting.values() if t <= late) for c in holding)
        for c in sorted((c for c in holding if c.waiting), key=lambda c: c.oldest_wait):
            if stalled <= self.max_waiting:
                break
            stalled -= sum(1 for t in c.waiting.values() if t <= late)
            self.stall_log.closed(len(c.waiting), f"more than {self.max_waiting} requests waiting server-wide")
            c.close()
        self._loop.call_later(_SWEEP, self._sweep)

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        serving = self._loop.create_server(lambda: _Client(self), sock=self.sock, backlog=ACCEPT_BATCH)
        self._server = self._loop.run_until_complete(serving)
        self.sock.listen(LISTEN_BACKLOG)  # asyncio set it to the accept pass's length
        self._started.set()
        self._loop.call_later(_SWEEP, self._sweep)
        self._loop.run_forever()

    def stop(self) -> None:
        """Stops accepting, closes every connection and removes the private directory."""
        if self._thread.is_alive():

            def close_all() -> None:
                self._server.close()
                for c in list(self.clients):
                    c.close()
                self._loop.call_later(0.1, self._loop.stop)

            self._loop.call_soon_threadsafe(close_all)
            self._thread.join(timeout=10)
        else:
            self.sock.close()
        shutil.rmtree(self._dir, ignore_errors=True)
