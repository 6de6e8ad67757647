"""``IdentityService.Prove``: the server proves it is the one that wrote the connection
file a client read (``hpcopt.core.serverfile``), before the client sends a token.

``serve`` makes a random secret at every start, writes it into the owner-only
connection file and gives it to its gRPC processes (``--processes``: through the
environment, ``processes.START_SECRET_ENV``). A client sends a fresh challenge and checks the
answer, ``HMAC-SHA256(secret, "hpcopt-identity-v1:" + challenge)``, against the secret
in the file. Any other process (one that took the port of a server killed with -9) cannot
answer, and the client sends it nothing. The call is open (no token) and costs one HMAC;
the secret itself never crosses the wire."""

from __future__ import annotations

import grpc

from hpcopt.core.serverfile import MAX_CHALLENGE, MIN_CHALLENGE, proof
from hpcopt.v1 import identity_pb2, identity_pb2_grpc


class IdentityServicer(identity_pb2_grpc.IdentityServiceServicer):
    def __init__(self, secret: bytes):
        self.secret = secret

    def Prove(self, request: identity_pb2.ProveRequest, context: grpc.ServicerContext) -> identity_pb2.ProveResponse:
        n = len(request.challenge)
        if not MIN_CHALLENGE <= n <= MAX_CHALLENGE:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"challenge: must be {MIN_CHALLENGE}..{MAX_CHALLENGE} bytes, got {n}"
            )
        return identity_pb2.ProveResponse(proof=proof(self.secret, request.challenge))
