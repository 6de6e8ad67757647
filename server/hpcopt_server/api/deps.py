"""Request dependencies as ``Annotated`` aliases, so routes read like sentences."""

from __future__ import annotations

from typing import Annotated, TypeVar

import pydantic
from fastapi import Depends, Request

from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument, TooLarge
from hpcopt_server.operations import rest_scope
from hpcopt_server.service import Service


def get_service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


ServiceDep = Annotated[Service, Depends(get_service)]


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def caller(request: Request, service: ServiceDep) -> d.ApiToken | None:
    """The request's token, checked for the scope its route needs: the operations
    table's, by the route's ``operation_id`` (``hpcopt_server.operations``). None for
    an open route or with auth off."""
    scope = rest_scope(getattr(request.scope.get("route"), "operation_id", None))
    return None if scope is None else service.tokens.authorize(bearer(request), scope)


#: A route's caller, authorized for the route's scope.
Caller = Annotated[d.ApiToken | None, Depends(caller)]


def etag_matches(if_none_match: str, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (weak comparison, RFC 9110)."""
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag.removeprefix("W/") in tags


async def limited_body(request: Request, max_bytes: int) -> bytes:
    """The request body, refused (413) as soon as it passes ``max_bytes``: a huge body is
    never held in memory whole."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise TooLarge(f"the body is {declared} bytes; at most {max_bytes} are accepted", [("body", "too large")])
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise TooLarge(f"the body is over {max_bytes} bytes, the most accepted", [("body", "too large")])
        chunks.append(chunk)
    return b"".join(chunks)


Body = TypeVar("Body", bound=pydantic.BaseModel)


def parse_json(raw: bytes, model: type[Body], what: str, expected: str) -> Body:
    """A request body (from :func:`limited_body`) as ``model``, or InvalidArgument naming
    each bad field: "invalid ``what``: ... (expected ``expected``)"."""
    try:
        return model.model_validate_json(raw)
    except pydantic.ValidationError as exc:
        errors = [(".".join(str(p) for p in e["loc"]) or "body", e["msg"]) for e in exc.errors(include_url=False)]
        message = "; ".join(f"{f}: {m}" for f, m in errors[:5])
        raise InvalidArgument(f"invalid {what}: {message} (expected {expected})", errors) from None
