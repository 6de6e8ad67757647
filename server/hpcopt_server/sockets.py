"""File descriptors, shared between the HTTP and gRPC listeners so that neither can starve
the other: the soft limit is raised to the hard one at start, a reserve is kept for the
database pool, logs and the servers' own machinery, HTTP gets a share and gRPC the rest.

Each HTTP connection holds one descriptor. Each gRPC connection holds three: the
client's socket and the relay's socket in the front (``rpc/front.py``), and the gRPC
server's end of that relay; a parked one (shed while its calls all waited on its
client) holds only the client's, and as many may be parked as connected. A cap may be
passed by ``ACCEPT_BATCH`` connections while none of its own can be shed.
"""

from __future__ import annotations

import logging
import resource
import socket
import time
from dataclasses import dataclass

RESERVE = 128  # database pool (up to 2 x --db-pool), logs, epoll/eventfds, imports
GRPC_DESCRIPTORS = 3
PARKED_DESCRIPTORS = 1
# asyncio accepts up to its ``backlog`` connections in one pass before any protocol sees
# them, so a listener can be over its cap by that many descriptors before shedding frees
# any: each listener's pass is kept this small (and counted in the budget), while the
# kernel's queue of finished handshakes stays LISTEN_BACKLOG long.
ACCEPT_BATCH = 64
LISTEN_BACKLOG = 2048


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


@dataclass(frozen=True)
class ConnectionCaps:
    http: int
    grpc: int
    descriptors: int


def connection_caps(max_http: int, max_grpc: int, log: logging.Logger | None = None) -> ConnectionCaps:
    """The HTTP and gRPC connection caps that fit the open-file limit: after the reserve
    and the two accept passes, HTTP may use at most two fifths, gRPC what remains (three
    descriptors a connection, one for a parked one, as many parked as connected, and
    ``ACCEPT_BATCH`` over the cap).
    A requested cap that does not fit is lowered, and the log says so."""
    total = descriptor_budget()
    usable = max(total - RESERVE - 2 * ACCEPT_BATCH, 64)
    http = max(8, min(max_http, usable * 2 // 5))
    grpc = max(
        8, min(max_grpc, (usable - http - ACCEPT_BATCH * GRPC_DESCRIPTORS) // (GRPC_DESCRIPTORS + PARKED_DESCRIPTORS))
    )
    if log is not None:
        if http < max_http:
            log.warning("max HTTP connections lowered from %d to %d (open-file limit %d)", max_http, http, total)
        if grpc < max_grpc:
            log.warning("max gRPC connections lowered from %d to %d (open-file limit %d)", max_grpc, grpc, total)
    return ConnectionCaps(http=http, grpc=grpc, descriptors=total)


class ShedLog:
    """Says in the log when a listener starts shedding connections (again, after a quiet
    minute), then at most once a minute how many it shed since."""

    QUIET = 60.0

    def __init__(self, log: logging.Logger, what: str):
        self.log, self.what = log, what
        self._since = 0  # shed since the last line
        self._last_line = 0.0
        self._last_shed = -1e18

    def shed(self, open_now: int, cap: int, idle_for: float | None) -> None:
        now = time.monotonic()
        idle = f"idle {idle_for:.0f} s" if idle_for is not None else "the newest: every other one is busy"
        if now - self._last_shed > self.QUIET:
            self.log.warning(
                "%s connections reached the cap of %d (%d open): shedding started, closing the idlest first (%s)",
                self.what,
                cap,
                open_now,
                idle,
            )
            self._since, self._last_line = 0, now
        else:
            self._since += 1
            if now - self._last_line > self.QUIET:
                self.log.warning(
                    "%s connections at the cap of %d: %d shed in the last %.0f s",
                    self.what,
                    cap,
                    self._since,
                    now - self._last_line,
                )
                self._since, self._last_line = 0, now
        self._last_shed = now


class StallLog:
    """Says in the log when gRPC connections are closed for calls that wait on their
    client (a request that does not arrive, a response it does not let through): the
    first one (again, after a quiet minute), then at most once a minute how many."""

    QUIET = 60.0

    def __init__(self, log: logging.Logger):
        self.log = log
        self._since = 0
        self._last_line = -1e18

    def closed(self, calls: int, what: str, why: str) -> None:
        now = time.monotonic()
        self._since += 1
        if now - self._last_line > self.QUIET:
            self.log.warning(
                "gRPC: closed %d connection(s) holding calls whose %s (last: %d call(s), %s)",
                self._since,
                what,
                calls,
                why,
            )
            self._since, self._last_line = 0, now


def listen(host: str, port: int, backlog: int = LISTEN_BACKLOG) -> socket.socket:
    """A listening TCP socket on ``host:port``. Bound here, not by uvicorn or gRPC, so
    that a busy port is an OSError the caller can explain (uvicorn logs it and exits with
    status 0)."""
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
