"""Server configuration: command-line flags, each with an ``HPCOPT_*`` environment default."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass


def env(name: str, default: str) -> str:
    return os.environ.get(f"HPCOPT_{name}", default)


@dataclass(frozen=True)
class ServerSettings:
    db: str = "sqlite:///hpcopt.db"
    """SQLAlchemy URL: ``sqlite:///PATH`` (default, a file in the working directory) or
    ``postgresql+psycopg://USER@HOST:PORT/DB``."""
    host: str = "127.0.0.1"
    """Address both REST and gRPC bind to. Anything but loopback requires auth."""
    port: int = 8000
    """REST (dashboard, /api/v1, /docs, /metrics, /healthz)."""
    grpc_port: int = 50051
    """gRPC (CampaignService, AgentService, health, reflection)."""
    lease_seconds: float = 60.0
    """A trial goes back to the queue this long after its agent's last heartbeat."""
    reap_interval: float = 5.0
    """How often this process looks for expired leases."""
    require_auth: bool = False
    """Demand tokens even with none created yet (auth is on anyway once a token exists)."""
    grpc_workers: int = 64
    """Threads serving gRPC calls."""
    db_pool: int = 16
    """Database connections of this process: up to twice this on PostgreSQL, each kept
    open once opened (replicas * 2 * db_pool must stay under its ``max_connections``)."""
    max_connections: int = 1000
    """Open HTTP connections; past it the idlest one is closed. Lowered to fit the
    open-file limit: after a reserve of 128, HTTP gets at most two fifths."""
    max_grpc_connections: int = 1000
    """Open gRPC connections; past it the idlest one (no call in progress) is closed.
    Lowered to fit the open-file limit: each takes three descriptors, from what HTTP
    leaves."""
    header_timeout: float = 10.0
    """Seconds a client has to send a request's headers after connecting (or after its
    previous response) before the connection is closed."""
    request_timeout: float = 10.0
    """Seconds a gRPC call's request may take to arrive after its headers; a connection
    holding a call still waiting past it is closed, freeing the workers its calls held.
    Raise it for imports of tens of MB over a slow link."""
    idle_timeout: int = 5
    """Seconds an HTTP keep-alive connection may sit idle after a response."""
    max_spec_bytes: int = 1024 * 1024
    """Largest campaign spec document accepted (REST body or gRPC spec_json)."""
    max_import_bytes: int = 32 * 1024 * 1024
    """Largest export document accepted by import (JSON)."""

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False
