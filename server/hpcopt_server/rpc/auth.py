"""gRPC authentication: a bearer token in the ``authorization`` metadata, checked
against the scope each method needs. Health checks and reflection stay open so that
load balancers and grpcurl can see the server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from hpcopt_server.errors import ServiceError
from hpcopt_server.rpc.errors import CODES
from hpcopt_server.service.tokens import TokenService

CAMPAIGN = "/hpcopt.v1.CampaignService/"
AGENT = "/hpcopt.v1.AgentService/"
SUBMIT_METHODS = {"CreateCampaign", "CancelCampaign", "ImportCampaign"}


def scope_for(method: str) -> str | None:
    """The scope a full method name needs; None for open ones (health, reflection)."""
    if method.startswith(AGENT):
        return "agent"
    if method.startswith(CAMPAIGN):
        return "submit" if method.removeprefix(CAMPAIGN) in SUBMIT_METHODS else "read"
    if method.startswith(("/grpc.health.", "/grpc.reflection.")):
        return None
    return "admin"


def bearer(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == "authorization":
            text = value.decode() if isinstance(value, bytes) else value
            return text.removeprefix("Bearer ").removeprefix("bearer ").strip() or None
    return None


class AuthInterceptor(grpc.ServerInterceptor):
    def __init__(self, tokens: TokenService):
        self.tokens = tokens

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        needed = scope_for(handler_call_details.method)
        if needed is None:
            return continuation(handler_call_details)
        try:
            self.tokens.authorize(bearer(handler_call_details.invocation_metadata), needed)
        except ServiceError as exc:
            code, message = CODES[type(exc)], exc.message

            def deny(request: Any, context: grpc.ServicerContext) -> Any:
                context.abort(code, message)

            return grpc.unary_unary_rpc_method_handler(deny)
        return continuation(handler_call_details)
