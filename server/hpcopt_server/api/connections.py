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
- the process's soft descriptor limit is raised to its hard limit at start, and
  ``max_connections`` is kept under half of it (gRPC and the database pool need the rest).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import resource
import socket
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)
_order = itertools.count()  # connection ages: accepts in one loop pass share a clock reading


class GuardedHttpProtocol(H11Protocol):
    header_timeout = 10.0
    max_connections = 1000

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._opened = next(_order)
        self._arm()
        if len(self.connections) > self.max_connections:
            self._shed()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    @property
    def idle(self) -> bool:
        """No request in progress (waiting for headers counts as idle): the request cycle
        starts once h11 has parsed a request's headers."""
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.header_timeout, self._too_slow)

    def _disarm(self) -> None:
        if getattr(self, "_deadline", None) is not None:
            self._deadline.cancel()  # type: ignore[union-attr]
            self._deadline = None

    def _too_slow(self) -> None:
        if self.idle and not self.transport.is_closing():
            self.transport.close()

    def _shed(self) -> None:
        """Closes the oldest idle connection if more than ``max_connections`` are open.
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
        victim = min(idle, key=lambda c: c._opened) if idle else self
        if victim is self:
            log.warning("%d connections open, all busy: refusing a new one", live)
        victim.transport.close()


def descriptor_budget() -> int:
    """Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return int(soft if soft != resource.RLIM_INFINITY else 1 << 20)


def guarded_protocol(max_connections: int, header_timeout: float) -> type[GuardedHttpProtocol]:
    """The protocol class with these limits (``max_connections`` clamped to half the
    descriptor limit, leaving the rest to gRPC, the database and files)."""
    budget = max(16, (descriptor_budget() - 64) // 2)
    if max_connections > budget:
        log.warning("max connections lowered from %d to %d (the open-file limit)", max_connections, budget)
    attrs = {"max_connections": min(max_connections, budget), "header_timeout": header_timeout}
    return type("HttpProtocol", (GuardedHttpProtocol,), attrs)


def uvicorn_config(app: Any, host: str, port: int, *, max_connections: int = 1000, header_timeout: float = 10.0,
                   idle_timeout: int = 5, log_level: str = "info") -> uvicorn.Config:  # fmt: skip
    """The uvicorn configuration every hpcopt HTTP server runs with."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=guarded_protocol(max_connections, header_timeout),
        timeout_keep_alive=idle_timeout,
        log_level=log_level,
        access_log=False,
    )


def listen(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A listening TCP socket on ``host:port`` for uvicorn (``Server.run(sockets=...)``).
    Bound here, not by uvicorn, so that a busy port is an OSError the caller can explain
    (uvicorn logs it and exits with status 0)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock
