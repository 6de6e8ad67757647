"""``serve --health-port``: ``GET /healthz`` on a listener of its own, for monitoring.

The REST port's ``/healthz`` shares its accept queue and event loop with every other
client. 1,100 slow-header clients that reopen whatever is closed keep that loop busy
accepting and shedding them, and a health probe waited over a second there (p50 1.3 s),
from any address. This listener has its own socket, thread and event loop, and answers
only ``/healthz`` (the same check and document as the REST port's): one line of request
within :data:`REQUEST_TIMEOUT`, at most :data:`MAX_CONNECTIONS` at once (past it the
oldest is closed), then ``Connection: close``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from hpcopt_server.sockets import listen

log = logging.getLogger(__name__)

#: Seconds a health client has to send its request; connections open at once.
REQUEST_TIMEOUT, MAX_CONNECTIONS = 2.0, 64
_MAX_REQUEST = 8192


class HealthListener:
    """``check()`` (the health document, or an exception: 503) served on ``host:port``
    (0: a free port, then :attr:`port`) from a thread of its own."""

    def __init__(self, check: Callable[[], dict[str, Any]], host: str, port: int) -> None:
        self.check = check
        self.sock = listen(host, port)
        self.port = int(self.sock.getsockname()[1])
        self._loop = asyncio.new_event_loop()
        self._open: dict[asyncio.StreamWriter, None] = {}  # oldest first
        self._thread = threading.Thread(target=self._run, name="health", daemon=True)
        self._ready = threading.Event()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(timeout=30)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self.sock.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, sock=self.sock, limit=_MAX_REQUEST))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open[writer] = None
        if len(self._open) > MAX_CONNECTIONS:
            oldest = next(iter(self._open))
            self._open.pop(oldest, None)
            oldest.close()
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT)
            line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(line) != 3 or line[0] not in ("GET", "HEAD") or line[1].split("?", 1)[0] != "/healthz":
                await self._answer(writer, 404, {"detail": "this port answers GET /healthz only"}, line)
                return
            try:
                doc = await self._loop.run_in_executor(None, self.check)
                await self._answer(writer, 200, doc, line)
            except Exception as exc:  # the database is unreachable, say
                await self._answer(writer, 503, {"status": "unavailable", "detail": str(exc)[:300]}, line)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError):
            pass
        finally:
            self._open.pop(writer, None)
            writer.close()

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, status: int, doc: dict[str, Any], line: list[str]) -> None:
        body = json.dumps(doc).encode()
        reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        writer.write(head if line and line[0] == "HEAD" else head + body)
        await writer.drain()


__all__ = ["HealthListener"]
