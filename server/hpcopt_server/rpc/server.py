"""The gRPC server: campaign and agent services, health checking, reflection, auth."""

from __future__ import annotations

import secrets
import socket
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from hpcopt.v1 import agent_pb2, agent_pb2_grpc, campaign_pb2, campaign_pb2_grpc, identity_pb2, identity_pb2_grpc
from hpcopt_server.metrics import Metrics
from hpcopt_server.rpc.auth import AuthInterceptor
from hpcopt_server.rpc.front import GrpcFront
from hpcopt_server.rpc.identity import IdentityServicer
from hpcopt_server.rpc.servicers import AgentServicer, CampaignServicer
from hpcopt_server.service import Service
from hpcopt_server.settings import ServerSettings
from hpcopt_server.sockets import listen


class MetricsInterceptor(grpc.ServerInterceptor):
    """Counts calls by method and status code, and times them. The timed handler of a
    method is built once and reused while the handler below it is the same object (a
    refusal from the auth interceptor is a new one each time, and is wrapped anew)."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics
        self._wrapped: dict[str, tuple[Any, grpc.RpcMethodHandler[Any, Any]]] = {}

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        method = handler_call_details.method.rsplit("/", 1)[-1]
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._timed(method, handler)
        if len(self._wrapped) < 1000:  # the methods of the services: a fixed set
            self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _timed(self, method: str, handler: grpc.RpcMethodHandler[Any, Any]) -> grpc.RpcMethodHandler[Any, Any]:
        inner = handler.unary_unary
        assert inner is not None
        latency = self.metrics.grpc_latency.labels(method)
        ok = self.metrics.grpc_requests.labels(method, "OK")
        requests = self.metrics.grpc_requests

        def timed(request: Any, context: grpc.ServicerContext) -> Any:
            t0 = time.perf_counter()
            try:
                result = inner(request, context)
            except Exception:
                status = getattr(context, "code", lambda: None)()  # set by context.abort
                requests.labels(method, status.name if status is not None else "UNKNOWN").inc()
                raise
            finally:
                latency.observe(time.perf_counter() - t0)
            ok.inc()
            return result

        return grpc.unary_unary_rpc_method_handler(
            timed,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


#: Calls one connection may hold open at once (HTTP/2 SETTINGS). A client sees it and
#: queues past it; the calls it sends before those SETTINGS arrive are refused past it
#: (REFUSED_STREAM, which grpcio reports as UNAVAILABLE). gRPC counts a call's stream
#: until the server's Python side has let go of it, which on a loaded machine lags the
#: client's next call: 64 threads sharing one channel, one call each, were refused under
#: 100 in 4 of 12 runs with both cores busy (and the agent whose report was refused left
#: its trial RUNNING), never under 1000. 16 refused their first burst outright. The
#: front's cap on calls waiting for their request is what keeps workers free.
MAX_STREAMS_PER_CONNECTION = 1000


@dataclass(frozen=True)
class GrpcLimits:
    """What one gRPC process serves at most: ``serve``'s options of the same names."""

    #: threads serving calls; calls waiting on their client may hold at most half
    workers: int = 64
    #: open connections; past it the idlest is closed (``front.py``)
    connections: int = 1000
    #: open connections from one client address; past it that address's idlest is closed
    per_address: int = 256
    #: seconds a call may wait on its client (its request, its window) before its
    #: connection is closed
    request_timeout: float = 10.0
    #: seconds a connection may live; then the client is asked to reconnect (GOAWAY),
    #: and the connection is closed :data:`AGE_GRACE` seconds later if calls still run
    connection_age: float = 1800.0

    @classmethod
    def of(cls, settings: ServerSettings, connections: int) -> GrpcLimits:
        """The limits ``settings`` ask for, with ``connections`` as the open-file limit
        lets it be (``sockets.connection_caps``)."""
        return cls(
            workers=settings.grpc_workers,
            connections=connections,
            per_address=min(settings.max_grpc_connections_per_address, connections),
            request_timeout=settings.request_timeout,
            connection_age=settings.connection_age,
        )


#: Seconds the calls of a connection past its age may still run: past the request
#: timeout, so that an honest call that has its request whole finishes.
AGE_GRACE = 60.0


@dataclass
class GrpcEndpoint:
    """The gRPC server behind its front (``front.py``): clients connect to ``port``."""

    server: grpc.Server
    front: GrpcFront

    @property
    def port(self) -> int:
        return self.front.port

    def start(self) -> None:
        self.server.start()
        self.front.start()

    def stop(self, grace: float = 5) -> None:
        self.server.stop(grace=grace).wait()
        self.front.stop()


def serve_grpc(
    service: Service,
    metrics: Metrics,
    host: str,
    port: int,
    limits: GrpcLimits = GrpcLimits(),
    *,
    sock: socket.socket | None = None,
    start_secret: bytes | None = None,
) -> GrpcEndpoint:
    """The gRPC server, listening on a private Unix socket, and its front on ``host:port``
    (0: any free port) or on the listening socket ``sock`` (one that another process
    accepts from too: ``serve --processes``), within ``limits``; neither started. A port
    that cannot be bound is an OSError.

    Calls waiting on their client (a request that has not arrived, a response the
    client does not let through) may hold at most half the workers, server-wide, and for
    at most ``request_timeout`` seconds (``front.py``): the other half stays free for
    calls that are ready to run. ``start_secret``: what ``IdentityService.Prove``
    proves knowledge of (``identity.py``; a random one when not given)."""
    front = GrpcFront(
        sock if sock is not None else listen(host, port),
        limits.connections,
        per_address=limits.per_address,
        request_timeout=limits.request_timeout,
        max_waiting=max(1, limits.workers // 2),
    )
    try:
        server = _build(service, metrics, front.backend_address, limits, start_secret or secrets.token_bytes(32))
    except BaseException:
        front.stop()
        raise
    return GrpcEndpoint(server, front)


def _build(service: Service, metrics: Metrics, address: str, limits: GrpcLimits, start_secret: bytes) -> grpc.Server:
    """A ready (not started) server bound to ``address``."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=limits.workers, thread_name_prefix="grpc"),
        interceptors=[MetricsInterceptor(metrics), AuthInterceptor(service.tokens)],
        options=[
            ("grpc.so_reuseport", 0),
            # An import document may be larger than gRPC's 4 MiB default; nothing more.
            ("grpc.max_receive_message_length", service.limits.import_bytes + 64 * 1024),
            # A connection that never finishes its handshake, or sits idle, is closed
            # (agents call every heartbeat period, far below these).
            ("grpc.server_handshake_timeout_ms", 10_000),
            ("grpc.max_connection_idle_ms", 300_000),
            # Every connection, however busy, is renewed (GOAWAY, the client reconnects
            # for its next call), so none is held for ever.
            ("grpc.max_connection_age_ms", int(limits.connection_age * 1000)),
            ("grpc.max_connection_age_grace_ms", int(AGE_GRACE * 1000)),
            # Calls one connection may hold open at once (HTTP/2 SETTINGS): a client sees
            # the limit and queues past it; one that ignores it has the extra calls
            # refused before they take a worker. (The front's cap on calls waiting for
            # their request is what keeps workers free; this bounds one connection.)
            ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
        ],
    )
    campaign_pb2_grpc.add_CampaignServiceServicer_to_server(CampaignServicer(service), server)
    agent_pb2_grpc.add_AgentServiceServicer_to_server(AgentServicer(service), server)
    identity_pb2_grpc.add_IdentityServiceServicer_to_server(IdentityServicer(start_secret), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in (
        "",
        campaign_pb2.DESCRIPTOR.services_by_name["CampaignService"].full_name,
        agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name,
    ):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        (
            campaign_pb2.DESCRIPTOR.services_by_name["CampaignService"].full_name,
            agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name,
            identity_pb2.DESCRIPTOR.services_by_name["IdentityService"].full_name,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    if server.add_insecure_port(address) == 0:
        raise OSError(f"cannot bind gRPC to {address}")
    return server
