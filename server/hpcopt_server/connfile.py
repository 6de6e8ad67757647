"""``serve --server-file``: the connection file a running server writes for its clients
(``hpcopt.serverfile`` reads it), so that it can take any free port and two servers on
one login node never collide. Written once both ports are bound, removed at a clean
exit; a file that names a server that still answers is never overwritten."""

from __future__ import annotations

import ipaddress
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from hpcopt.serverfile import ServerFile, ServerFileError, read, write


class ServerFileInUse(RuntimeError):
    """The connection file names a server that still answers."""


def client_host(bind: str) -> str:
    """The name clients dial for a server bound to ``bind``: this machine's name for a
    wildcard bind (the compute nodes' view), the bind address otherwise."""
    try:
        wildcard = ipaddress.ip_address(bind).is_unspecified
    except ValueError:
        return bind
    return socket.gethostname() if wildcard else bind


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _answers(address: str, timeout: float = 2.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def check_free(path: Path) -> None:
    """Raises ``ServerFileInUse`` when ``path`` names a server that still answers (its
    gRPC port takes a connection); a stale or foreign file may be replaced."""
    try:
        old = read(path)
    except ServerFileError:
        return
    if _answers(old.grpc):
        raise ServerFileInUse(
            f"{old.describe(path)} names a server that still answers at {old.grpc}; stop it, "
            "or give this one another file (--server-file PATH, env HPCOPT_SERVER_FILE)"
        )


def publish(
    path: Path, *, bind: str, http_port: int, grpc_port: int, database: str, auth: bool, token_file: str | None
) -> ServerFile:
    """Writes the file for this process's server; what was written."""
    host = _bracket(client_host(bind))
    info = ServerFile(
        grpc=f"{host}:{grpc_port}",
        rest=f"http://{host}:{http_port}/",
        host=socket.gethostname(),
        pid=os.getpid(),
        database=database,
        auth=auth,
        token_file=str(Path(token_file).expanduser().resolve()) if token_file else None,
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    write(path, info)
    return info


def withdraw(path: Path, info: ServerFile) -> None:
    """Removes the file if it is still the one this server wrote."""
    try:
        if read(path) == info:
            path.unlink()
    except (ServerFileError, OSError):
        pass
