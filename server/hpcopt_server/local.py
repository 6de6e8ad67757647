"""The one composition root: ``LocalServer`` assembles the server's parts in one process
(a storage on a database at this release's schema, the service over it, and on request
its metrics, gRPC endpoint and REST app). ``hpcopt-server serve`` and its gRPC child
processes, the embedded ``Study``, ``hpcopt-agent try`` and the tests' live servers are
all made by it, so a part added to the server (a setting, a background task, a
transport's limit) is wired once. Optuna's ``make_server`` and Vizier's
``DefaultVizierServer`` are the models.

Transports are imported when asked for: the embedded mode needs neither gRPC nor REST.
What each caller adds on top stays with it: the CLI its sockets, child processes,
health listener, connection file and signals; ``try`` its agent; the embedded mode its
in-process channel."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

from hpcopt_server.service import Service
from hpcopt_server.storage.repository import Storage

if TYPE_CHECKING:
    from hpcopt_server.api.connections import HttpServer
    from hpcopt_server.metrics import Metrics
    from hpcopt_server.rpc.server import GrpcEndpoint, GrpcLimits


class StorageUnready(RuntimeError):
    """The database cannot be used: it refused connections past the wait, or its schema
    is at another revision than this release's. The message says what to do."""


def open_storage(url: str, pool_size: int = 16, wait: float = 0.0) -> Storage:
    """Storage on a database at this release's schema (an empty one is migrated). A
    database that refuses connections (starting up, at ``max_connections``) is retried
    with back-off for ``wait`` seconds (``serve``'s ``--db-wait``), each wait logged;
    then StorageUnready."""
    from sqlalchemy.exc import OperationalError

    from hpcopt_server.storage import migrate
    from hpcopt_server.storage.db import transient, with_retries

    try:
        current = with_retries(lambda: migrate.current_revision(url), patience=wait, what="the database refused")
    except OperationalError as exc:
        if not transient(exc):
            raise
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise StorageUnready(
            f"the database still refuses connections after {wait:.0f} s ({reason}); "
            "giving up (wait longer with --db-wait SECONDS, env HPCOPT_DB_WAIT)"
        ) from None
    try:
        migrate.ensure_schema(url, current)
    except migrate.SchemaMismatch as exc:
        raise StorageUnready(str(exc)) from None
    return Storage(url, pool_size=pool_size)


class LocalServer:
    """A storage, the service over it, and the transports asked for, in this process.
    ``close()`` (or leaving the ``with`` block) stops what was started, then closes the
    storage."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.storage: Storage = service.ctx.storage
        self.grpc: GrpcEndpoint | None = None
        self._metrics: Metrics | None = None
        self._http: tuple[HttpServer, threading.Thread] | None = None

    @classmethod
    def open(cls, url: str, *, pool_size: int = 16, wait: float = 0.0, **service: Any) -> LocalServer:
        """The server's parts on the database at ``url`` (see :func:`open_storage`);
        ``service`` goes to :class:`Service` (settings, ``require_auth``, ``limits``...)."""
        storage = open_storage(url, pool_size, wait)
        try:
            return cls(Service(storage, **service))
        except BaseException:
            storage.close()
            raise

    @property
    def metrics(self) -> Metrics:
        """The server's Prometheus metrics, which the transports count into."""
        if self._metrics is None:
            from hpcopt_server.metrics import Metrics

            self._metrics = Metrics(self.service)
        return self._metrics

    def serve_grpc(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        limits: GrpcLimits | None = None,
        **endpoint: Any,
    ) -> GrpcEndpoint:
        """The gRPC endpoint on ``host:port`` (0: a free port), bound, not started;
        ``endpoint`` goes to ``rpc.server.serve_grpc`` (``sock``, ``start_secret``)."""
        from hpcopt_server.rpc.server import GrpcLimits, serve_grpc

        self.grpc = serve_grpc(self.service, self.metrics, host, port, limits or GrpcLimits(), **endpoint)
        return self.grpc

    def rest_app(self, agent_server: str = "") -> Any:
        """The REST API and the dashboard as an ASGI app; ``agent_server`` is the gRPC
        address the dashboard tells agents to use."""
        from hpcopt_server.api.app import create_app

        return create_app(self.service, self.metrics, agent_server=agent_server)

    def serve_http_thread(self, app: Any, host: str, port: int, *, timeout: float = 20.0, **config: Any) -> None:
        """Serves ``app`` with the server's uvicorn settings in a thread of this process,
        once it accepts connections (the tests' live servers)."""
        from hpcopt_server.api.connections import HttpServer, uvicorn_config

        server = HttpServer(uvicorn_config(app, host, port, **config))
        thread = threading.Thread(target=server.run, daemon=True, name="hpcopt-http")
        thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                server.should_exit = True
                raise RuntimeError(f"the HTTP server on {host}:{port} did not start")
            time.sleep(0.02)
        self._http = (server, thread)

    def stop(self, grace: float = 1.0) -> None:
        """Stops the HTTP thread and the gRPC endpoint (within ``grace`` seconds); the
        storage stays open."""
        if self._http is not None:
            server, thread = self._http
            server.should_exit = True
            thread.join(timeout=10 + grace)
            self._http = None
        if self.grpc is not None:
            self.grpc.stop(grace=grace)
            self.grpc = None

    def close(self, grace: float = 1.0) -> None:
        """Stops the transports (:meth:`stop`), then closes the storage."""
        try:
            self.stop(grace)
        finally:
            self.storage.close()

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
