"""``serve --server-file``: the connection file a running server writes for its clients
(``hpcopt.core.serverfile`` reads it), so that it can take any free port and two servers on
one login node never collide. Written once both ports are bound, removed at a clean
exit; a file that names a server that still answers is never overwritten."""

from __future__ import annotations

import ipaddress
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from hpcopt.core.serverfile import ServerFile, read, write
from hpcopt.errors import ServerFileError


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
    gRPC port takes a connection); a stale or foreign file may be replaced. Raises
    ServerFileError when its folder is one others may write: the file would be refused
    by every client, and could be replaced under them."""
    folder = path.parent
    if folder.exists():
        st = os.stat(folder)
        if st.st_uid not in (os.getuid(), 0) or st.st_mode & 0o022:
            raise ServerFileError(
                f"refusing to write the connection file into {folder}: others may write it or it is not yours "
                f"(mode {st.st_mode & 0o7777:04o}, uid {st.st_uid}); clients trust a connection file only in a "
                "folder only its owner can write (chmod 700 it, or give --server-file PATH elsewhere)"
            )
    try:
        old = read(path, trust=False)
    except ServerFileError:
        return
    if _answers(old.grpc):
        raise ServerFileInUse(
            f"{old.describe(path)} names a server that still answers at {old.grpc}; stop it, "
            "or give this one another file (--server-file PATH, env HPCOPT_SERVER_FILE)"
        )


def publish(
    path: Path,
    *,
    bind: str,
    http_port: int,
    grpc_port: int,
    database: str,
    auth: bool,
    token_file: str | None,
    secret: bytes,
) -> ServerFile:
    """Writes the file for this process's server, with its start ``secret`` (what its
    ``IdentityService`` proves); what was written. ServerFileError for a folder others
    may write."""
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
        secret=secret.hex(),
    )
    write(path, info)
    return info


def withdraw(path: Path, info: ServerFile) -> None:
    """Removes the file if it is still the one this server wrote."""
    try:
        if read(path, trust=False) == info:
            path.unlink()
    except (ServerFileError, OSError):
        pass
