"""The gRPC front: counts gRPC connections against caps and sheds the idlest first, and
ends calls that wait on their client (a request that never arrives, a response it
never lets through).

grpcio's server offers no hook on connections: it accepts as many as arrive, and an
idle one is closed only by ``grpc.max_connection_idle_ms``. 1,005 idle channels that had
finished the HTTP/2 handshake took every descriptor of a server under ``ulimit -n 1024``
and REST and /healthz stopped answering. So the gRPC server listens on a private Unix
socket (in a 0700 directory), and this front accepts clients on the public port and
relays bytes both ways, one asyncio loop in its own thread. It reads HTTP/2 frame
headers as they pass (and the payloads of SETTINGS and WINDOW_UPDATE, never others) to
know which connections have a call at work.

A call is at work once its request has arrived whole and while its client lets its
response through. The front follows the client's flow-control windows as the server
sends against them (RFC 9113 6.9: the connection's and each stream's, the initial one
from the client's SETTINGS, less the server's DATA, plus the client's WINDOW_UPDATEs). A
call whose client lets less than ``_MIN_WINDOW`` bytes through is *blocked*: 1,000
connections that advertised a window of 0 and sent one complete Health/Check each used
to count as busy, so at the cap the front shed the agents' idle connections instead, and
the victim's lease expired.

Past ``cap`` open connections, or ``per_address`` from one client address, the front
sheds (``GrpcFront._enforce``), never a connection with a call at work: first one whose
calls all wait on the client (``stalled``), which is *parked* (its relay and calls let
go, its socket kept open and unread for ``PARK_SECONDS``, so that a client that reopens
whatever is closed has nothing to reopen), then one that never made a call (once it is
``_FRESH`` s old), then the one quiet longest. While none can be shed, a cap may be
passed by ``slack`` connections; past that the new one is closed.

grpcio's sync server gives a call a worker thread when its HEADERS arrive, and that
thread waits for the request message. A client that sends HEADERS and never ends the
request (64 such calls on one connection, no token needed: the request is read before
the auth interceptor) held all 64 workers, and every agent's heartbeat timed out for as
long as it wanted. ``maximum_concurrent_rpcs`` counts those calls too, so it would only
turn the agents' timeouts into refusals. The front therefore watches each call's
request: a call whose request has not ended (END_STREAM from the client) is *waiting*.

- A connection holding a call that has waited ``request_timeout`` seconds on its client
  (for its request, or for its window) is closed, which ends its calls and frees their
  workers and streams (the gRPC server cancels them).
- At most ``max_waiting`` calls may have waited longer than 50 ms at once,
  server-wide, so that the other workers stay free for agents: past it, the
  connections holding the calls that have waited longest are closed (an honest request
  arrives whole within milliseconds). Looked at every 50 ms.
- A blocked unary call holds no worker (grpcio hands the response over and lets go), so
  only calls waiting for their request count against ``max_waiting``.
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
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _WINDOW_UPDATE = 0, 1, 3, 4, 8
_END_STREAM, _ACK = 0x1, 0x1
_INITIAL_WINDOW_SIZE = 0x4  # the SETTINGS parameter
_DEFAULT_WINDOW = 65_535  # RFC 9113 6.9.2: a connection's and a stream's window until SETTINGS say otherwise
_MAX_KEPT = 16_384  # a SETTINGS frame larger than the default frame size is an error at the server anyway
# A response is blocked when the client lets less than this through (the smaller of its
# stream's and its connection's window): it cannot carry a gRPC message's 5-byte prefix
# and a few bytes of answer. An honest client's window only dips this low for the
# moment between reading and its WINDOW_UPDATE.
_MIN_WINDOW = 1024
_SWEEP = 0.05  # seconds between looks at the calls waiting for their request
# A call counts against the server-wide cap only once it has waited this long: an honest
# request's DATA follows its HEADERS within milliseconds, but under flow control or a
# busy loop it may come a read later, and 64 threads sharing one channel (one
# connection) then had their connection closed under them, again and again.
_GRACE = 0.05
#: Seconds a shed connection whose calls all waited on its client stays parked (open,
#: unread) before it is closed: a client that reopens what is closed then gets a new
#: connection a minute, not one per shed.
PARK_SECONDS = 60.0
# A connection that has made no call yet is not shed this young: an honest client's
# first call follows its handshake within milliseconds, and closing it would only send
# a client that reconnects when closed straight back.
_FRESH = 1.0


class _Frames:
    """Reads HTTP/2 frames out of a byte stream: the header of each, and the payload of
    the kinds in ``keep`` (small control frames); other payloads are skipped unread.
    ``on_frame(kind, flags, stream, length, payload)``; ``payload`` is empty unless kept."""

    __slots__ = ("body", "head", "keep", "kept", "on_frame", "skip")

    def __init__(
        self, skip: int, on_frame: Callable[[int, int, int, int, bytes], None], keep: frozenset[int] = frozenset()
    ):
        self.skip, self.head, self.on_frame, self.keep = skip, b"", on_frame, keep
        self.body = b""  # the kept payload so far
        self.kept: tuple[int, int, int, int] | None = None  # the frame whose payload is being kept

    def feed(self, data: bytes) -> None:
        i, n = 0, len(data)
        while i < n:
            if self.skip:
                k = min(self.skip, n - i)
                if self.kept is not None and len(self.body) < _MAX_KEPT:
                    self.body += data[i : i + min(k, _MAX_KEPT - len(self.body))]
                self.skip -= k
                i += k
                if not self.skip and self.kept is not None:
                    self.on_frame(*self.kept, self.body)
                    self.kept, self.body = None, b""
                continue
            take = 9 - len(self.head)
            self.head += data[i : i + take]
            i += take
            if len(self.head) == 9:
                h, self.head = self.head, b""
                length, kind, flags = int.from_bytes(h[0:3], "big"), h[3], h[4]
                stream = int.from_bytes(h[5:9], "big") & 0x7FFFFFFF
                if kind in self.keep and length:
                    self.skip, self.kept = length, (kind, flags, stream, length)
                else:
                    self.skip = length
                    self.on_frame(kind, flags, stream, length, b"")


class _Backend(asyncio.Protocol):
    """The relay's side towards the gRPC server."""

    def __init__(self, client: _Client):
        self.client = client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.client.from_server(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.backend_lost()

    def pause_writing(self) -> None:  # the gRPC server reads slower than the client sends
        self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        self.client.transport.resume_reading()


class _Client(asyncio.Protocol):
    """One gRPC client connection and its relay to the server."""

    def __init__(self, front: GrpcFront):
        self.front = front
        self.backend: asyncio.Transport | None = None
        self.peer = ""  # the client's address, set once connected
        self.streams: set[int] = set()  # calls in progress
        self.waiting: dict[int, float] = {}  # calls whose request has not ended: since when
        self.blocked: dict[int, float] = {}  # calls whose response the client does not let through: since when
        # The client's receive windows, as the server sends against them: the
        # connection's, each call's, and what a new call starts with.
        self.conn_window = self.initial_window = _DEFAULT_WINDOW
        self.windows: dict[int, int] = {}
        self.last_stream = 0
        self.called = False
        self.parked = False
        self.quiet_since = time.monotonic()
        self.to_server = _Frames(_PREFACE, self._client_frame, frozenset((_SETTINGS, _WINDOW_UPDATE)))
        self.to_client = _Frames(0, self._server_frame)

    # -- accounting --------------------------------------------------------------------
    def _client_frame(self, kind: int, flags: int, stream: int, length: int, payload: bytes) -> None:
        was_busy = self.busy
        if kind == _HEADERS and stream > self.last_stream:  # a new call (later HEADERS are trailers)
            self.last_stream = stream
            self.streams.add(stream)
            self.windows[stream] = self.initial_window
            self.called = True
            if flags & _END_STREAM:
                self._check(stream)
            else:
                self.waiting[stream] = time.monotonic()
        elif kind in (_HEADERS, _DATA) and flags & _END_STREAM:  # the request has arrived whole
            self._arrived(stream)
        elif kind == _RST_STREAM:
            self._ended(stream)
        elif kind == _WINDOW_UPDATE and len(payload) >= 4:
            grow = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            if stream == 0:
                self._set_conn_window(self.conn_window + grow)
            elif stream in self.windows:
                self.windows[stream] += grow
                self._check(stream)
        elif kind == _SETTINGS and not flags & _ACK:
            for i in range(0, len(payload) - 5, 6):
                if int.from_bytes(payload[i : i + 2], "big") == _INITIAL_WINDOW_SIZE:
                    value = int.from_bytes(payload[i + 2 : i + 6], "big")
                    delta, self.initial_window = value - self.initial_window, value
                    if delta:  # RFC 9113 6.9.2: every open stream's window moves by the change
                        for s in self.windows:
                            self.windows[s] += delta
                        self._check_all()
        self._quieted(was_busy)

    def _server_frame(self, kind: int, flags: int, stream: int, length: int, payload: bytes) -> None:
        was_busy = self.busy
        if kind == _DATA and length:
            if stream in self.windows:
                self.windows[stream] -= length
                self._check(stream)
            self._set_conn_window(self.conn_window - length)
        if kind == _RST_STREAM or (kind in (_HEADERS, _DATA) and flags & _END_STREAM):
            self._ended(stream)
        self._quieted(was_busy)

    def _set_conn_window(self, window: int) -> None:
        crossed = (window < _MIN_WINDOW) != (self.conn_window < _MIN_WINDOW)
        self.conn_window = window
        if crossed:
            self._check_all()

    def _check_all(self) -> None:
        for s in self.streams:
            self._check(s)

    def _check(self, stream: int) -> None:
        """Marks a call whose request has arrived as blocked while the client lets less
        than ``_MIN_WINDOW`` bytes of its response through, and unmarks it after."""
        if stream not in self.streams or stream in self.waiting:
            return
        if min(self.conn_window, self.windows.get(stream, 0)) < _MIN_WINDOW:
            self.blocked.setdefault(stream, time.monotonic())
        else:
            self.blocked.pop(stream, None)

    def _arrived(self, stream: int) -> None:
        if self.waiting.pop(stream, None) is not None:
            self._check(stream)

    def _ended(self, stream: int) -> None:
        self.waiting.pop(stream, None)
        self.blocked.pop(stream, None)
        self.streams.discard(stream)
        self.windows.pop(stream, None)

    def _quieted(self, was_busy: bool) -> None:
        if was_busy and not self.busy:
            self.quiet_since = time.monotonic()

    @property
    def busy(self) -> bool:
        """Whether a call is at work here: one whose request has arrived whole and whose
        response the client lets through."""
        return len(self.streams) > len(self.waiting) + len(self.blocked)

    @property
    def stalled(self) -> bool:
        """Whether every call here waits on the client (none at work, one at least)."""
        return bool(self.streams) and not self.busy

    @property
    def oldest_stall(self) -> float:
        return min(min(self.waiting.values(), default=float("inf")), min(self.blocked.values(), default=float("inf")))

    @property
    def oldest_wait(self) -> float:
        return min(self.waiting.values(), default=float("inf"))

    def waits_since(self, when: float) -> int:
        """The calls here that have waited for their request since ``when`` or before."""
        return sum(1 for t in self.waiting.values() if t <= when)

    @property
    def stall_kind(self) -> str:
        if self.waiting and min(self.waiting.values()) <= min(self.blocked.values(), default=float("inf")):
            return "request did not arrive"
        return "response the client did not let through"

    @property
    def live(self) -> bool:
        return not self.transport.is_closing()

    # -- relay -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else ""
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
        if self.parked:
            return
        self.to_server.feed(data)
        assert self.backend is not None  # reading is paused until it is set
        self.backend.write(data)

    def from_server(self, data: bytes) -> None:
        if self.parked:
            return
        self.to_client.feed(data)
        self.transport.write(data)

    def pause_writing(self) -> None:  # the client reads slower than the server sends
        if self.backend is not None:
            self.backend.pause_reading()

    def resume_writing(self) -> None:
        if self.backend is not None:
            self.backend.resume_reading()

    def _drop_calls(self) -> None:
        self.waiting.clear()
        self.blocked.clear()

    def park(self) -> None:
        """Lets go of the gRPC side of this connection (the relay, its calls and their
        streams) but keeps the client's socket open and no longer reads it: a client
        whose calls all wait on it sees nothing happen, and so has no reason to open
        another connection, as it would at once if this one closed."""
        self.parked = True
        self._drop_calls()
        self.transport.pause_reading()
        if self.backend is not None and not self.backend.is_closing():
            self.backend.close()

    def backend_lost(self) -> None:
        if not self.parked:
            self.close()

    def close(self) -> None:
        self._drop_calls()
        if self.live:
            self.transport.close()
        if self.backend is not None and not self.backend.is_closing():
            self.backend.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.front.forget(self)
        self.close()


def _shed_order(c: _Client) -> tuple[int, float]:
    """Which idle connection goes first: those whose every call waits on the client
    (its request or its window), then those that never made a call, then those quiet
    longest; within each, the oldest."""
    return (0 if c.stalled else 1 if not c.called else 2, c.quiet_since)


class GrpcFront:
    """Accepts gRPC clients on ``sock`` and relays each to the gRPC server listening on
    ``backend_address`` (``unix:PATH``, in a private directory this front owns)."""

    def __init__(
        self,
        sock: socket.socket,
        cap: int,
        *,
        per_address: int | None = None,
        request_timeout: float = 10.0,
        max_waiting: int = 32,
        max_parked: int | None = None,
    ):
        self.sock, self.cap, self.per_address = sock, cap, per_address if per_address is not None else cap
        self.request_timeout, self.max_waiting = request_timeout, max_waiting
        # Mode 0700: only this user reaches the server. A Unix socket path must fit in 107
        # bytes, which a long $TMPDIR (a cluster's scratch path) may not leave room for.
        base = None if len(tempfile.gettempdir()) <= 64 else "/tmp"
        self._dir = tempfile.mkdtemp(prefix="hpcopt-grpc-", dir=base)
        self.backend_path = os.path.join(self._dir, "grpc.sock")
        self.clients: set[_Client] = set()  # counted against the caps: every connection not parked
        self.by_peer: dict[str, set[_Client]] = {}
        # Shed connections whose calls all waited on their client: socket open, unread,
        # oldest first; each closed after PARK_SECONDS or when more than max_parked are.
        self.parked: dict[_Client, float] = {}
        self.max_parked = max_parked if max_parked is not None else cap
        self.slack = ACCEPT_BATCH  # connections a cap may be over while none can be shed
        self.shed_log = ShedLog(log, "gRPC")
        self.peer_shed_log = ShedLog(log, "gRPC (one client address)")
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
        """Counts a new connection against the per-address cap (among its address's
        connections) and the cap (among all): ``_enforce``."""
        self.clients.add(new)
        peer = self.by_peer.setdefault(new.peer, set())
        peer.add(new)
        if self.per_address < self.cap:  # else it is the cap itself, and the cap's rules apply
            self._enforce(peer, self.per_address, self.peer_shed_log, new)
        if new.live:
            self._enforce(self.clients, self.cap, self.shed_log, new)

    def _enforce(self, group: set[_Client], cap: int, shed_log: ShedLog, new: _Client | None = None) -> None:
        """Sheds connections of ``group`` past ``cap``, in ``_shed_order``: one whose calls
        all waited on their client is parked, any other closed. A connection at work is
        never shed; nor, yet, one younger than ``_FRESH`` s that has made no call (it may
        be about to), nor any after it in the order (those between calls). While no
        other can be shed the group stays over its cap, by ``slack`` connections at
        most: past that, the new one is closed. The sweep comes back every ``_SWEEP`` s."""
        excess = len(group) - cap
        if excess <= 0:
            return
        now = time.monotonic()
        for victim in sorted((c for c in group if c is not new and c.live and not c.busy), key=_shed_order):
            if excess <= 0:
                break
            if victim.stalled and victim.oldest_stall > now - _GRACE:
                continue  # stalled for a moment only: an honest reader's WINDOW_UPDATE may be on its way
            if not victim.called and victim.quiet_since > now - _FRESH:
                break  # this one and every one after it is fresher, or at work between calls
            shed_log.shed(len(group), cap, now - victim.quiet_since)
            if victim.stalled:
                self._park(victim)
            else:
                victim.close()
                group.discard(victim)  # connection_lost forgets it too, a loop pass later
            excess -= 1
        if new is not None and new.live and len(group) > cap + self.slack:
            shed_log.shed(len(group), cap, None)
            new.close()
            group.discard(new)

    def _park(self, c: _Client) -> None:
        self.forget(c)
        c.park()
        self.parked[c] = time.monotonic()
        while len(self.parked) > self.max_parked:
            self._close_oldest_parked()

    def _close_oldest_parked(self) -> None:
        oldest = next(iter(self.parked))
        del self.parked[oldest]
        oldest.close()

    def forget(self, gone: _Client) -> None:
        self.parked.pop(gone, None)
        self.clients.discard(gone)
        peer = self.by_peer.get(gone.peer)
        if peer is not None:
            peer.discard(gone)
            if not peer:
                del self.by_peer[gone.peer]

    def _sweep(self) -> None:
        """Closes every connection holding a call that has waited on its client
        ``request_timeout`` seconds, then those holding the calls that have waited
        longest while more than ``max_waiting`` calls have waited past the grace period."""
        now = time.monotonic()
        while self.parked and next(iter(self.parked.values())) <= now - PARK_SECONDS:
            self._close_oldest_parked()
        if self.per_address < self.cap:
            for peer in [p for p in self.by_peer.values() if len(p) > self.per_address]:
                self._enforce(peer, self.per_address, self.peer_shed_log)
        self._enforce(self.clients, self.cap, self.shed_log)
        holding = [c for c in self.clients if c.waiting or c.blocked]
        for c in holding:
            if c.oldest_stall <= now - self.request_timeout:
                self.stall_log.closed(
                    len(c.waiting) + len(c.blocked), c.stall_kind, f"stalled {self.request_timeout:g} s"
                )
                c.close()
        # Only calls waiting for their request hold a worker (a unary call's worker lets
        # go once it hands its response to gRPC, sent or not): the server-wide bound is theirs.
        late = now - _GRACE
        holding = [c for c in holding if c.waiting]
        stalled = sum(c.waits_since(late) for c in holding)
        for c in sorted(holding, key=lambda c: c.oldest_wait):
            if stalled <= self.max_waiting:
                break
            stalled -= c.waits_since(late)
            self.stall_log.closed(
                len(c.waiting) + len(c.blocked),
                c.stall_kind,
                f"more than {self.max_waiting} requests waiting server-wide",
            )
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
                for c in [*self.clients, *self.parked]:
                    c.close()
                self._loop.call_later(0.1, self._loop.stop)

            self._loop.call_soon_threadsafe(close_all)
            self._thread.join(timeout=10)
        else:
            self.sock.close()
        shutil.rmtree(self._dir, ignore_errors=True)
