"""Service errors to gRPC status codes (details carry the field list as JSON)."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from hpcopt_server import errors as e

log = logging.getLogger(__name__)

CODES: dict[type[e.ServiceError], grpc.StatusCode] = {
    e.NotFound: grpc.StatusCode.NOT_FOUND,
    e.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    e.TooLarge: grpc.StatusCode.INVALID_ARGUMENT,
    e.FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    e.Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    e.PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    e.QuotaExceeded: grpc.StatusCode.RESOURCE_EXHAUSTED,
    e.Unavailable: grpc.StatusCode.UNAVAILABLE,
}

F = TypeVar("F", bound=Callable[..., Any])


def abort_on_error(context: grpc.ServicerContext, exc: e.ServiceError) -> None:
    if exc.errors:
        context.set_trailing_metadata(
            (("hpcopt-field-errors", json.dumps([{"field": f, "message": m} for f, m in exc.errors])),)
        )
    context.abort(CODES[type(exc)], exc.message)


def handles_errors(method: F) -> F:
    """Maps ServiceError to its status code; anything else is INTERNAL and logged."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except e.ServiceError as exc:
            abort_on_error(context, exc)
        except Exception:
            log.exception("%s failed", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"{method.__name__} failed on the server; see its log")

    return wrapper  # type: ignore[return-value]
