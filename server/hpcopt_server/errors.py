"""Errors the service raises; each transport maps them to its own status codes.

| error               | gRPC                | HTTP |
|---------------------|---------------------|------|
| NotFound            | NOT_FOUND           | 404  |
| InvalidArgument     | INVALID_ARGUMENT    | 422  |
| FailedPrecondition  | FAILED_PRECONDITION | 409  |
| Unauthenticated     | UNAUTHENTICATED     | 401  |
| PermissionDenied    | PERMISSION_DENIED   | 403  |
"""

from __future__ import annotations


class ServiceError(Exception):
    """Base class. ``errors`` lists (field path, message) for field-level problems."""

    def __init__(self, message: str, errors: list[tuple[str, str]] | None = None):
        super().__init__(message)
        self.message = message
        self.errors = errors or []


class NotFound(ServiceError):
    pass


class InvalidArgument(ServiceError):
    pass


class FailedPrecondition(ServiceError):
    pass


class Unauthenticated(ServiceError):
    pass


class PermissionDenied(ServiceError):
    pass
