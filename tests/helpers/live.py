"""A live REST + gRPC server in the test process, and free ports for servers a test
starts."""

from __future__ import annotations

import asyncio
import os
import random
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers.env import scaled

#: Where free_port() looks: below the kernel's ephemeral range (which bind(0) and every
#: outgoing connection draw from, so the kernel hands these ports to no one), from here.
_PORTS_FROM = 15000


_port_cursor: int | None = None


def _port_share() -> tuple[int, int]:
    """This pytest worker's share of the ports below the ephemeral range: the two
    workers of ``make test`` (pytest-xdist's ``gw0``, ``gw1``) never pick the same port."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    size = (ephemeral - _PORTS_FROM) // max(workers, 1)
    return _PORTS_FROM + worker * size, _PORTS_FROM + (worker + 1) * size


def free_port() -> int:
    """A port nothing listens on, for a server a test is about to start. A port taken by
    bind(0) would be in the ephemeral range, where an outgoing connection of a busy
    machine or of the other pytest worker may take it before the server binds it; these
    come from this worker's own share below that range, in turn from a random start, so
    one worker picks a port again only after its whole share."""
    global _port_cursor
    low, high = _port_share()
    if high - low < 100:  # an ephemeral range reaching down below _PORTS_FROM
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    if _port_cursor is None:
        _port_cursor = random.Random(os.getpid()).randrange(high - low)
    for _ in range(high - low):
        port = low + _port_cursor % (high - low)
        _port_cursor += 1
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))  # taken on any address is taken
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {low}-{high - 1}")


def _slowed(app: Any, low: float, high: float) -> Any:
    """An ASGI wrapper that delays each request under /api/ by a seeded random time."""
    rng = random.Random(31)

    async def slowed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/api/"):
            await asyncio.sleep(rng.uniform(low, high))
        await app(scope, receive, send)

    return slowed


@dataclass
class LiveServer:
    """A real gRPC server and a real uvicorn HTTP server in this process."""

    service: Any
    grpc_target: str
    http_url: str


def run_live_server(service: Any, *, slow: tuple[float, float] | None = None) -> Iterator[LiveServer]:
    """The server's gRPC endpoint and REST app over ``service``, assembled as ``serve``
    assembles them (``hpcopt_server.local.LocalServer``), on free ports of this process.
    ``slow=(low, high)``: every REST answer waits a seeded random time in [low, high)
    seconds first, so answers arrive late and out of order (the dashboard's races). The
    service's storage stays open: its fixture closes it."""
    from hpcopt_server.local import LocalServer

    server = LocalServer(service)
    try:
        grpc = server.serve_grpc("127.0.0.1", 0)
        grpc.start()
        app = server.rest_app(agent_server=f"127.0.0.1:{grpc.port}")
        if slow is not None:
            app = _slowed(app, *slow)
        http_port = free_port()
        server.serve_http_thread(app, "127.0.0.1", http_port, timeout=scaled(20), log_level="warning")
        yield LiveServer(service, f"127.0.0.1:{grpc.port}", f"http://127.0.0.1:{http_port}")
    finally:
        server.stop()
