"""The connection file: where a running server can be reached, written by
``hpcopt-server serve --server-file`` and read by the CLI, the Python client and the
agent, so that nobody has to know (or fix) its ports. Like Dask's scheduler file.

    {"version": 1, "grpc": "login1:41023", "rest": "http://login1:38211/", "host": "login1",
     "pid": 12345, "database": "sqlite:///.../hpcopt.db", "auth": false, "token_file": null,
     "started_at": "2026-11-28T23:50:00+00:00"}

Where a client looks for the server, first match wins:

1. an address given (``--server``, ``Client(target)``);
2. a connection file given (``--server-file``, ``Client(server_file=...)``);
3. ``HPCOPT_SERVER``; 4. ``HPCOPT_SERVER_FILE``;
5. the default file, ``~/.hpcopt/server.json`` (``$HPCOPT_HOME/server.json``), if it exists;
6. ``127.0.0.1:50051``.

The file is written owner-only (0600, in a 0700 folder) and replaced atomically. It never
holds a token: with auth on it may name the file that does (``--token-file``), which a
client reads when it was given no token.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

DEFAULT_SERVER = "127.0.0.1:50051"
VERSION = 1


class ServerFileError(ValueError):
    """A connection file that is missing, unreadable or not one of ours."""


@dataclass(frozen=True)
class ServerFile:
    grpc: str
    rest: str
    host: str
    pid: int
    database: str
    auth: bool
    token_file: str | None
    started_at: str
    version: int = VERSION

    def describe(self, path: Path) -> str:
        return f"{path}: written by pid {self.pid} on {self.host} at {self.started_at}"


def default_path() -> Path:
    """``$HPCOPT_HOME/server.json``, else ``~/.hpcopt/server.json``."""
    home = os.environ.get("HPCOPT_HOME")
    return (Path(home) if home else Path.home() / ".hpcopt") / "server.json"


def write(path: Path, info: ServerFile) -> None:
    """Writes ``info`` to ``path`` owner-only, atomically (a reader never sees half)."""
    path = path.expanduser()
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=".server-", suffix=".json", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(asdict(info), out, indent=1)
            out.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read(path: Path) -> ServerFile:
    """The file at ``path``; ``ServerFileError`` saying what is wrong with it."""
    path = path.expanduser()
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ServerFileError(
            f"no connection file at {path}: start a server with `hpcopt-server serve --server-file {path}`"
        ) from None
    except OSError as exc:
        raise ServerFileError(f"cannot read the connection file {path}: {exc.strerror}") from None
    try:
        data: Any = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError("not a version-1 connection file")
        fields = ServerFile.__dataclass_fields__
        missing = [k for k in fields if k not in data]
        if missing:
            raise ValueError(f"it lacks {', '.join(missing)}")
        info = ServerFile(**{k: data[k] for k in fields})
        if not isinstance(info.grpc, str) or not info.grpc:
            raise ValueError("grpc must be HOST:PORT")
        return info
    except (ValueError, TypeError) as exc:
        raise ServerFileError(f"{path} is not an hpcopt connection file ({exc})") from None


@dataclass(frozen=True)
class Found:
    """Where a client will dial, and the connection file that said so (if one did)."""

    address: str
    file: ServerFile | None = None
    path: Path | None = None

    @property
    def where(self) -> str:
        """The address, naming the file it was read from (for error messages)."""
        return self.address if self.path is None else f"{self.address} (read from {self.path})"


def resolve(target: str | None = None, server_file: str | Path | None = None) -> Found:
    """The gRPC address to dial, in the order the module's docstring gives."""
    if target:
        return Found(target)
    if server_file:
        return _from_file(Path(server_file))
    if os.environ.get("HPCOPT_SERVER"):
        return Found(os.environ["HPCOPT_SERVER"])
    if os.environ.get("HPCOPT_SERVER_FILE"):
        return _from_file(Path(os.environ["HPCOPT_SERVER_FILE"]))
    default = default_path()
    if default.is_file():
        return _from_file(default)
    return Found(DEFAULT_SERVER)


def _from_file(path: Path) -> Found:
    path = path.expanduser()
    info = read(path)
    return Found(info.grpc, info, path)


def token_of(info: ServerFile | None) -> str | None:
    """The token in the file the connection file names (``token_file``), if any."""
    if info is None or not info.token_file:
        return None
    try:
        return Path(info.token_file).expanduser().read_text().strip() or None
    except OSError as exc:
        raise ServerFileError(f"cannot read the token file {info.token_file}: {exc.strerror}") from None
