"""Errors the service raises; each transport maps them to its own status codes.

| error               | gRPC                | HTTP |
|---------------------|---------------------|------|
| NotFound            | NOT_FOUND           | 404  |
| InvalidArgument     | INVALID_ARGUMENT    | 422  |
| TooLarge            | INVALID_ARGUMENT    | 413  |
| FailedPrecondition  | FAILED_PRECONDITION | 409  |
| Unauthenticated     | UNAUTHENTICATED     | 401  |
| PermissionDenied    | PERMISSION_DENIED   | 403  |
| QuotaExceeded       | RESOURCE_EXHAUSTED  | 429 (with Retry-After) |
| Unavailable         | UNAVAILABLE         | 503 (with Retry-After) |
"""

from __future__ import annotations

from hpcopt.core.documents import clip

#: What an error may echo back: a caller's over-long input must not come back whole (an
#: 8,000-character name in the gRPC trailer broke the client's metadata limit).
MAX_MESSAGE_CHARS = 1000
MAX_FIELD_CHARS = 200
MAX_FIELD_MESSAGE_CHARS = 300
MAX_FIELD_ERRORS = 20


class ServiceError(Exception):
    """Base class. ``errors`` lists (field path, message) for field-level problems.

    The message and the field errors are cut to the limits above, so an error stays
    small whatever the input was."""

    def __init__(self, message: str, errors: list[tuple[str, str]] | None = None):
        message = clip(message, MAX_MESSAGE_CHARS)
        super().__init__(message)
        self.message = message
        errors = errors or []
        self.errors = [
            (clip(f, MAX_FIELD_CHARS), clip(m, MAX_FIELD_MESSAGE_CHARS)) for f, m in errors[:MAX_FIELD_ERRORS]
        ]
        if len(errors) > MAX_FIELD_ERRORS:
            self.errors.append(("", f"... and {len(errors) - MAX_FIELD_ERRORS} more errors"))


class NotFound(ServiceError):
    pass


class InvalidArgument(ServiceError):
    pass


class TooLarge(InvalidArgument):
    """A request body over its limit: HTTP 413 (gRPC INVALID_ARGUMENT)."""


class FailedPrecondition(ServiceError):
    pass


class Unauthenticated(ServiceError):
    pass


class PermissionDenied(ServiceError):
    pass


class QuotaExceeded(ServiceError):
    """A caller's quota is used up; ``retry_after``: seconds until it allows one more."""

    def __init__(self, message: str, errors: list[tuple[str, str]] | None = None, *, retry_after: int = 1):
        super().__init__(message, errors)
        self.retry_after = retry_after


class Unavailable(ServiceError):
    """The database refuses connections (or lost one) for now; the caller may retry."""
