"""What both clients share: the gRPC channel with its token, the error every call
raises (:class:`ApiError`), and the wait for a server to answer."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import grpc

from hpcopt.core.records import TrialState
from hpcopt.core.serverfile import MIN_CHALLENGE, Found, proof, resolve, token_of
from hpcopt.errors import ApiError, ServerFileError
from hpcopt.v1 import common_pb2, identity_pb2, identity_pb2_grpc

T = TypeVar("T")
_HINT = (
    "; start one with `hpcopt-server serve`, or give its address with --server or HPCOPT_SERVER"
    " (or its connection file with --server-file or HPCOPT_SERVER_FILE)"
)


def _call(fn: Callable[..., T], request: Any, metadata: tuple[tuple[str, str], ...], timeout: float, target: str) -> T:
    try:
        return fn(request, metadata=metadata, timeout=timeout)
    except grpc.RpcError as exc:
        call = cast(grpc.Call, exc)  # every RpcError of a unary call is also a Call
        code = call.code().name if call.code() is not None else "UNKNOWN"
        details = call.details() or code
        fields: list[dict[str, str]] = []
        for key, value in call.trailing_metadata() or ():
            if key == "hpcopt-field-errors":
                fields = json.loads(value)
        raise ApiError(code, _explain(code, details, target, bool(metadata)), fields) from None


def _explain(code: str, details: str, target: str, has_token: bool) -> str:
    """The server's message, or for the two errors a user's setup causes, what to do."""
    if code == "UNAVAILABLE" and ("connect" in details.lower() or "resolve" in details.lower()):
        reason = details.rsplit(": ", 1)[-1].strip()
        return f"no hpcopt server answers at {target} ({reason}){_HINT}"
    if code == "UNAUTHENTICATED":
        given = "the token given was refused" if has_token else "no token was given"
        return f"{details} ({given}: pass one with --token or set HPCOPT_TOKEN)"
    return details


class Channel:
    """A gRPC channel to ``target`` (``HPCOPT_SERVER``) carrying ``token`` (``HPCOPT_TOKEN``)."""

    def __init__(
        self,
        target: str | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        *,
        channel: Any = None,
        server_file: str | Path | None = None,
    ):
        # ``channel``: an open channel to use instead of dialling ``target`` (the caller
        # keeps it and closes it): another client's, or the embedded mode's in-process one
        # (``hpcopt_server.Study``), which answers the same calls without a socket.
        # ``server_file``: a connection file to read the address from (see serverfile.py
        # for the order in which an address, the environment and the files are tried).
        self._owned = channel is None
        try:
            found = resolve(target, server_file)
            if token is None:
                token = os.environ.get("HPCOPT_TOKEN") or token_of(found.file)
        except ServerFileError as exc:
            raise ApiError("UNAVAILABLE", str(exc)) from None
        self.target = found.address
        self._where = found.where
        self._token = token
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self.timeout = timeout
        self.channel = (
            grpc.insecure_channel(self.target, options=[("grpc.max_receive_message_length", 256 * 1024 * 1024)])
            if channel is None
            else channel
        )
        # An address read from a connection file gets a token only once the server has
        # proved it wrote that file (at the first call).
        self._unproven: Found | None = found if found.file is not None and token else None

    def close(self) -> None:
        if self._owned:
            self.channel.close()

    def __enter__(self: Any) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _do(self, fn: Callable[..., T], request: Any) -> T:
        if self._unproven is not None:
            prove(self.channel, self._unproven, self.timeout)
            self._unproven = None
        return _call(fn, request, self._metadata, self.timeout, self._where)


def prove(channel: grpc.Channel, found: Found, timeout: float) -> None:
    """Returns once the server on ``channel`` proved it wrote ``found``'s connection
    file (``IdentityService.Prove``); ApiError UNAUTHENTICATED, naming the file, when it
    did not, and no token is sent. (Nothing to prove without a file.)"""
    if found.file is None:
        return
    where = f"{found.address} (read from {found.path})"
    if not found.file.secret:
        raise ApiError(
            "UNAUTHENTICATED",
            f"the connection file {found.path} has no start secret (a server older than this client wrote it), so "
            f"nothing proves that {found.address} is that server: no token was sent. Restart the server, or give "
            "its address with --server or HPCOPT_SERVER",
        )
    challenge = os.urandom(2 * MIN_CHALLENGE)
    stub = identity_pb2_grpc.IdentityServiceStub(channel)
    try:
        answer = _call(stub.Prove, identity_pb2.ProveRequest(challenge=challenge), (), timeout, where)
    except ApiError as exc:
        if exc.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
            raise
        answer = None
    if answer is None or answer.proof != proof(bytes.fromhex(found.file.secret), challenge):
        raise ApiError(
            "UNAUTHENTICATED",
            f"the process at {found.address} is not the server that wrote {found.path} (it could not prove the "
            f"file's start secret): no token was sent. That server may have stopped (killed, so its file stayed) "
            f"and another process taken its port; start the server again, or give its address with --server",
        )


def verify(found: Found, token: str | None, timeout: float = 30.0) -> None:
    """:func:`prove` on a channel of its own, when a token would go to an address read
    from a connection file (the agent checks once at start, then dials the address)."""
    if found.file is None or not token:
        return
    channel = grpc.insecure_channel(found.address)
    try:
        prove(channel, found, timeout)
    finally:
        channel.close()


def state_value(name: str) -> common_pb2.TrialState.ValueType:
    try:
        return common_pb2.TrialState.Value(f"TRIAL_STATE_{str(name).upper()}")
    except ValueError:
        allowed = ", ".join(TrialState)
        raise ValueError(f"state: {name!r} is not a trial state (one of {allowed})") from None


def wait_for_server(channel: grpc.Channel, target: str, timeout: float) -> None:
    """Blocks until ``channel`` connects and the server's health check says SERVING."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout
    stub = health_pb2_grpc.HealthStub(channel)
    last = ""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ApiError("UNAVAILABLE", f"no hpcopt server answered at {target} within {timeout:g} s{last}{_HINT}")
        # wait_for_ready, not grpc.channel_ready_future: the future polls the channel from a
        # thread of its own that outlives it, and that thread raised "Channel closed!" when
        # the caller closed the channel right after (seen in CI, 2026-11-28).
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=min(left, 5.0), wait_for_ready=True)
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return
            last = " (it is starting)"
        except grpc.RpcError as exc:
            code = cast(grpc.Call, exc).code()
            if code != grpc.StatusCode.DEADLINE_EXCEEDED:
                last = f" ({code.name})"
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
