"""gRPC authentication: a bearer token in the ``authorization`` metadata
(``Bearer TOKEN``, the same form as REST's header; a bare token is refused), checked
against the scope each method needs, read from the one operations table
(``hpcopt_server.operations``). Health checks and reflection stay open so that load
balancers and grpcurl can see the server, and so does ``IdentityService`` (a client
checks the server before it sends a token)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from hpcopt_server.errors import ServiceError, Unauthenticated
from hpcopt_server.operations import rpc_scope
from hpcopt_server.rpc.errors import CODES
from hpcopt_server.service.tokens import TokenService


def scope_for(method: str) -> str | None:
    """The scope a full method name needs (``hpcopt_server.operations``); None for open
    ones (health, reflection, the identity proof)."""
    return rpc_scope(method)


def bearer(metadata: Any) -> str | None:
    """The token of ``authorization: Bearer TOKEN``; None when there is no such entry.
    Raises Unauthenticated for an entry of another form (a bare token, say)."""
    for key, value in metadata or ():
        if key == "authorization":
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            scheme, _, token = text.strip().partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise Unauthenticated("the authorization metadata must be 'Bearer TOKEN'")
            return token.strip()
    return None


def caller(tokens: TokenService, context: grpc.ServicerContext, scope: str) -> int | None:
    """The id of the token the call presented (None with auth off). The interceptor has
    already checked it; this lookup is served from the token cache."""
    token = tokens.authorize(bearer(context.invocation_metadata()), scope)
    return token.id if token is not None else None


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
            if self.tokens.enabled():
                self.tokens.authorize(bearer(handler_call_details.invocation_metadata), needed)
        except ServiceError as exc:
            code, message = CODES[type(exc)], exc.message

            def deny(request: Any, context: grpc.ServicerContext) -> Any:
                context.abort(code, message)

            return grpc.unary_unary_rpc_method_handler(deny)
        return continuation(handler_call_details)
