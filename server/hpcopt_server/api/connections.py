"""HTTP connections that cannot starve the server: a deadline for every request's
headers, and a cap on open connections that sheds idle ones first.

uvicorn (0.54, h11) arms its keep-alive timer only after a first response, and any
byte received cancels it, so a client that connects and sends nothing (or one byte now
and then) holds a file descriptor forever: about 1,000 such connections exhausted a
1,024-descriptor limit and REST, gRPC and /healthz all stopped answering. Here:

- a connection must finish each request's headers within ``header_timeout`` seconds of
  opening (or of its previous response), or it is closed;
- past ``max_connections`` open connections, a new one closes the oldest connection
  that has no request in progress; if every connection is busy, the new one is closed.
  A health probe therefore always gets through idle attackers;
- a request answered before its body ended (413) has the rest of its body read and
  dropped while it keeps coming (each chunk within ``header_timeout``, for at most
  ``linger`` seconds), so that the client, still sending, reads the answer instead of a
  reset; also when the connection is to close after the answer (the client sent
  ``Connection: close``), where uvicorn closed at once and a client sending 20 MB or
  more got a reset;
- at most ``per_address`` connections from one client address, checked when a
  connection is accepted, before anything is set up for it: past it, that address's
  idlest connection is closed (if all of its connections are busy, the new one), so one
  address cannot hold every connection and make the others' be shed. Clients that
  reopen whatever is closed still keep this loop busy: 1,100 slow-header ones that did
  made a health probe here wait 1.3 s (p50), from any address. ``--health-port``
  (``health.py``) answers ``/healthz`` from a listener of its own (0.07 s then);
- ``max_connections`` fits the open-file limit beside gRPC's share (``sockets.py``),
  and the log says when shedding starts.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from hpcopt_server.sockets import ACCEPT_BATCH, LISTEN_BACKLOG, ShedLog

log = logging.getLogger(__name__)
_order = itertools.count()  # connection ages: accepts in one loop pass share a clock reading


class _CloseAfterBody:
    """The transport as uvicorn's request cycle sees it: a close while the client is
    still sending the body of a request already answered (a 413 on a ``Connection:
    close`` request) waits until the body has been read and dropped (``_drain``)."""

    def __init__(self, protocol: GuardedHttpProtocol, transport: asyncio.Transport):
        self._protocol, self.real = protocol, transport

    def close(self) -> None:
        if self._protocol.conn.their_state is h11.SEND_BODY and not self.real.is_closing():
            self._protocol._drain()
        else:
            self.real.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class GuardedHttpProtocol(H11Protocol):
    header_timeout = 10.0
    linger = 60.0
    max_connections = 1000
    per_address = 256
    shed_log = ShedLog(log, "HTTP")
    address_log = ShedLog(log, "HTTP (one client address)")
    #: The open connections by client address (one dict per server: ``guarded_protocol``).
    by_address: dict[str, set[GuardedHttpProtocol]] = {}

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        peer = transport.get_extra_info("peername")
        self._address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        self._refused = False
        group = self.by_address.setdefault(self._address, set())
        if len(group) >= self.per_address and not self._make_room(group):
            self._refused = True  # closed before anything was set up for it
            self.address_log.shed(len(group) + 1, self.per_address, None)
            transport.close()
            return
        group.add(self)
        super().connection_made(transport)
        self.transport = _CloseAfterBody(self, transport)  # type: ignore[assignment]
        self._draining = False  # answered and to be closed: the rest of the body is dropped
        self._deadline: asyncio.TimerHandle | None = None
        self._linger_until: float | None = None
        self._opened = next(_order)
        self._quiet_since = self.loop.time()
        self._arm()
        if len(self.connections) > self.max_connections:
            self._shed()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        group = self.by_address.get(self._address)
        if group is not None:
            group.discard(self)
            if not group:
                del self.by_address[self._address]
        self._disarm()
        super().connection_lost(exc)

    def _make_room(self, group: set[GuardedHttpProtocol]) -> bool:
        """Closes the idlest connection of a full address group; whether there was one
        (else the new connection is the one refused)."""
        live = [c for c in group if c.transport is not None and not c.transport.is_closing()]
        if len(live) < self.per_address:
            return True
        idle = [c for c in live if c.idle]
        if not idle:
            return False
        victim = min(idle, key=lambda c: (c._quiet_since, c._opened))
        self.address_log.shed(len(live) + 1, self.per_address, victim.idle_for)
        victim._close_now()
        return True

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._quiet_since = self.loop.time()
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.SEND_BODY:
            # Answered before the body ended (a 413): closing now would reset the
            # connection under a client still sending, which then never reads the answer.
            # Read and drop the rest while it keeps coming, for at most ``linger`` s.
            if self.timeout_keep_alive_task is not None:
                self.timeout_keep_alive_task.cancel()
                self.timeout_keep_alive_task = None
            self._linger_until = self.loop.time() + self.linger
        self._arm()

    def _drain(self) -> None:
        """Reads and drops the rest of an answered request's body (h11 is not fed: it
        would keep it). The client closes once it has read the answer; otherwise the
        connection is closed when nothing has come for ``header_timeout`` seconds, or
        ``linger`` seconds after the answer."""
        self._draining = True
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        self._linger_until = self.loop.time() + self.linger
        self.flow.resume_reading()
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._draining:
            self._arm()  # the body keeps coming: wait for the client to read the answer and close
            return
        super().data_received(data)
        if self._linger_until is not None and not self.transport.is_closing():
            if self.conn.their_state is not h11.SEND_BODY:  # the body is over: an idle connection again
                self._linger_until = None
            self._arm()

    @property
    def idle(self) -> bool:
        """No request in progress (waiting for headers counts as idle): the request cycle
        starts once h11 has parsed a request's headers."""
        return self.cycle is None or self.cycle.response_complete

    @property
    def idle_for(self) -> float:
        return self.loop.time() - self._quiet_since

    def _arm(self) -> None:
        """The deadline for the next request's headers or, while the rest of an answered
        request's body is read, for its next bytes."""
        self._disarm()
        delay = self.header_timeout
        if self._linger_until is not None:
            delay = min(delay, max(self._linger_until - self.loop.time(), 0.0))
        self._deadline = self.loop.call_later(delay, self._too_slow)

    def _disarm(self) -> None:
        if getattr(self, "_deadline", None) is not None:
            self._deadline.cancel()  # type: ignore[union-attr]
            self._deadline = None

    def _too_slow(self) -> None:
        if (self.idle or self._draining) and not self.transport.is_closing():
            self._close_now()

    def _close_now(self) -> None:
        transport = self.transport
        (transport.real if isinstance(transport, _CloseAfterBody) else transport).close()

    def _shed(self) -> None:
        """Closes the idlest connection (longest without a request in progress, then the
        oldest) if more than ``max_connections`` are open.
        Closed ones leave ``connections`` only when their connection_lost runs, later:
        they are not counted."""
        live, idle = 0, []
        for c in self.connections:
            if c.transport is None or c.transport.is_closing():
                continue
            live += 1
            if c is not self and isinstance(c, GuardedHttpProtocol) and c.idle:
                idle.append(c)
        if live <= self.max_connections:
            return
        victim = min(idle, key=lambda c: (c._quiet_since, c._opened)) if idle else self
        self.shed_log.shed(live, self.max_connections, None if victim is self else victim.idle_for)
        victim._close_now()


def guarded_protocol(
    max_connections: int, header_timeout: float, per_address: int | None = None
) -> type[GuardedHttpProtocol]:
    """The protocol class with these limits (``max_connections`` already fitted to the
    open-file limit by ``sockets.connection_caps``; ``per_address`` at most that)."""
    attrs = {
        "max_connections": max_connections,
        "header_timeout": header_timeout,
        "per_address": min(per_address or max_connections, max_connections),
        "shed_log": ShedLog(log, "HTTP"),
        "address_log": ShedLog(log, "HTTP (one client address)"),
        "by_address": {},
    }
    return type("HttpProtocol", (GuardedHttpProtocol,), attrs)


def uvicorn_config(
    app: Any,
    host: str,
    port: int,
    *,
    max_connections: int = 1000,
    header_timeout: float = 10.0,
    idle_timeout: int = 5,
    log_level: str = "info",
    per_address: int | None = None,
) -> uvicorn.Config:
    """The uvicorn configuration every hpcopt HTTP server runs with."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=guarded_protocol(max_connections, header_timeout, per_address),
        timeout_keep_alive=idle_timeout,
        backlog=ACCEPT_BATCH,
        log_level=log_level,
        access_log=False,
    )


class HttpServer(uvicorn.Server):
    """uvicorn's server, accepting at most ``ACCEPT_BATCH`` connections a loop pass
    (uvicorn's backlog, which asyncio also uses as the kernel queue's length), with the
    kernel's queue of the sockets passed in set back to ``LISTEN_BACKLOG``."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        for sock in sockets or ():
            sock.listen(LISTEN_BACKLOG)
