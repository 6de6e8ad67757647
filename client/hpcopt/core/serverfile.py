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

**Trust.** The file decides where a client's token goes, so, as ssh treats its files:

- a client uses a connection file only if it is a regular file (not a symbolic link)
  owned by the user, that no one else may write, in a folder owned by the user (or
  root) that no one else may write; otherwise it refuses, naming the file and why;
- ``serve`` refuses to write one into a folder others may write;
- a ``token_file`` is read only if it is a regular file owned by the user that no one
  else may read or write, and holds one line of at most 1,024 printable characters; it
  may live anywhere (sites keep secrets where they keep them);
- the file holds a ``secret`` made at the server's start. Before a token goes to the
  address it names, the client asks the server to prove it knows that secret
  (``IdentityService.Prove``: an HMAC of a fresh challenge, so the secret never crosses
  the wire). A server killed with -9 leaves its file behind; another process on its
  port cannot prove it, and the client sends nothing (:func:`hpcopt.transport.verify`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hpcopt.errors import ServerFileError

DEFAULT_SERVER = "127.0.0.1:50051"
VERSION = 1
#: The bounds of an identity challenge, in bytes.
MIN_CHALLENGE, MAX_CHALLENGE = 16, 64
#: The longest token a token file may hold.
MAX_TOKEN_CHARS = 1024
_PROOF_LABEL = b"hpcopt-identity-v1:"


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
    #: Made at the server's start (hex); what ``IdentityService.Prove`` proves. Empty in
    #: files of servers older than the proof: a client then sends them no token.
    secret: str = ""

    def describe(self, path: Path) -> str:
        return f"{path}: written by pid {self.pid} on {self.host} at {self.started_at}"


def default_path() -> Path:
    """``$HPCOPT_HOME/server.json``, else ``~/.hpcopt/server.json``."""
    home = os.environ.get("HPCOPT_HOME")
    return (Path(home) if home else Path.home() / ".hpcopt") / "server.json"


def proof(secret: bytes, challenge: bytes) -> bytes:
    """What a server that knows ``secret`` answers to ``challenge``."""
    return hmac.new(secret, _PROOF_LABEL + challenge, hashlib.sha256).digest()


def untrusted(path: Path, *, private: bool = False) -> str:
    """Why ``path`` must not be trusted ("" when it may): it is not a regular file, is a
    symbolic link, is not the user's, or others may write it (with ``private``: read
    it); or its folder is not the user's (or root's) or others may write it."""
    uid = os.getuid()
    try:
        st = os.lstat(path)
        folder = os.stat(path.parent)
    except OSError as exc:
        return f"it cannot be examined ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link (give the file it points to)"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if st.st_uid != uid:
        return f"it belongs to uid {st.st_uid}, not to you (uid {uid})"
    mask = 0o077 if private else 0o022
    if st.st_mode & mask:
        who = "read or write" if private else "write"
        return f"others may {who} it (mode {stat.S_IMODE(st.st_mode):04o}; chmod 600 it)"
    if folder.st_uid not in (uid, 0):
        return f"its folder {path.parent} belongs to uid {folder.st_uid}, not to you"
    if folder.st_mode & 0o022:
        return f"others may write its folder {path.parent} (mode {stat.S_IMODE(folder.st_mode):04o}; chmod 700 it)"
    return ""


def write(path: Path, info: ServerFile) -> None:
    """Writes ``info`` to ``path`` owner-only, atomically (a reader never sees half).
    ServerFileError when its folder is one others may write (or not the user's)."""
    path = path.expanduser()
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
    folder = os.stat(path.parent)
    if folder.st_uid not in (os.getuid(), 0) or folder.st_mode & 0o022:
        raise ServerFileError(
            f"refusing to write the connection file into {path.parent}: "
            + (
                f"others may write it (mode {stat.S_IMODE(folder.st_mode):04o}), so they could replace the file and "
                "send your clients' tokens elsewhere; use a folder only you can write (chmod 700)"
                if folder.st_mode & 0o022
                else f"it belongs to uid {folder.st_uid}, not to you"
            )
        )
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


def read(path: Path, *, trust: bool = True) -> ServerFile:
    """The file at ``path``; ``ServerFileError`` saying what is wrong with it (with
    ``trust``, also when it must not be trusted: :func:`untrusted`)."""
    path = path.expanduser()
    if trust and path.exists():
        why = untrusted(path)
        if why:
            raise ServerFileError(f"refusing the connection file {path}: {why}")
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
        missing = [k for k in fields if k not in data and k != "secret"]
        if missing:
            raise ValueError(f"it lacks {', '.join(missing)}")
        info = ServerFile(**{k: data[k] for k in fields if k in data})
        if not isinstance(info.grpc, str) or not info.grpc:
            raise ValueError("grpc must be HOST:PORT")
        if not isinstance(info.secret, str) or (info.secret and len(info.secret) != 64):
            raise ValueError("secret must be 64 hex digits")
        bytes.fromhex(info.secret)
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
    """The token in the file the connection file names (``token_file``), if any: only
    from an owner-only regular file of one line (ServerFileError saying why not)."""
    if info is None or not info.token_file:
        return None
    path = Path(info.token_file).expanduser()
    why = untrusted(path, private=True) if path.exists() else ""
    if why:
        raise ServerFileError(f"refusing the token file {path}: {why}")
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(MAX_TOKEN_CHARS + 2)
    except OSError as exc:
        raise ServerFileError(f"cannot read the token file {info.token_file}: {exc.strerror}") from None
    token = text.strip()
    if len(text.rstrip("\n")) > MAX_TOKEN_CHARS or not token.isprintable() or " " in token or "\n" in token:
        raise ServerFileError(
            f"refusing the token file {path}: a token file holds one token, one line of at most {MAX_TOKEN_CHARS} "
            "printable characters without spaces"
        )
    return token or None
