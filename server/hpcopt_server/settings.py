"""Server configuration, declared once: each ``serve`` flag is a field of
:class:`ServerSettings` or of :class:`~hpcopt_server.service.limits.RequestLimits` whose
:class:`~hpcopt.core.options.Option` gives its default, kind, bounds and help. The command
line (:func:`add_flags`), its checks (:func:`from_args`), the ``HPCOPT_*`` environment
defaults and the configuration reference (``scripts/gen_docs.py``) are built from them.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from hpcopt.core.options import Option
from hpcopt.errors import OptionError

T = TypeVar("T")
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class Flag:
    """How a setting appears on the command line; ``name`` the flag without ``--`` and
    the environment variable without ``HPCOPT_`` (both from the field's name unless
    given)."""

    option: Option
    name: str = ""
    metavar: str | None = None
    #: ``--server-file`` alone means "the default file": the value given then.
    alone: str | None = None
    #: The default as the reference shows it, where the declaration's says too little.
    shown: str = ""


def setting(option: Option, **how: Any) -> Any:
    """A dataclass field that is a ``serve`` flag: ``how`` as :class:`Flag`'s fields."""
    return field(default=option.default, metadata={"flag": Flag(option, **how)})


def flags_of(cls: type) -> list[tuple[str, Flag]]:
    """(field name, flag) of every setting of ``cls``, in declaration order."""
    return [(f.name, f.metadata["flag"]) for f in fields(cls) if "flag" in f.metadata]


def flag_name(name: str, flag: Flag) -> str:
    """``--grpc-port`` for the field ``grpc_port``."""
    return "--" + (flag.name or name).replace("_", "-")


def env_name(name: str, flag: Flag) -> str:
    """``HPCOPT_GRPC_PORT`` for the field ``grpc_port``."""
    return "HPCOPT_" + (flag.name or name).upper()


def add_flags(parser: argparse.ArgumentParser, cls: type, only: tuple[str, ...] = ()) -> None:
    """Adds ``cls``'s settings (or ``only`` these) to ``parser``; a flag's default is its
    environment variable when set, else the declaration's."""
    for name, flag in flags_of(cls):
        if only and name not in only:
            continue
        o, variable = flag.option, env_name(name, flag)
        help_text = f"{o.doc} (env {variable})"
        dest = flag.name or name
        if o.kind is bool:
            given = os.environ.get(variable, "")
            default = given not in ("", "0", "false") if given else o.default
            parser.add_argument(flag_name(name, flag), dest=dest, action="store_true", default=default, help=help_text)
            continue
        kw: dict[str, Any] = {"metavar": flag.metavar} if flag.metavar else {}
        if flag.alone is not None:
            kw |= {"nargs": "?", "const": flag.alone}
        kind: Any = o.kind
        if o.kind is str and o.choices:
            kw["choices"] = o.choices
            kind = str.lower  # --log-level DEBUG is debug
        parser.add_argument(
            flag_name(name, flag),
            dest=dest,
            type=kind,
            default=os.environ.get(variable, o.default),
            help=help_text,
            **kw,
        )


def from_args(cls: type[T], args: argparse.Namespace) -> T:
    """``cls`` from parsed flags, each checked by its declaration; OptionError naming
    the flag otherwise."""
    values = {}
    for name, flag in flags_of(cls):
        values[name] = flag.option.check(flag_name(name, flag), getattr(args, flag.name or name))
    return cls(**values)


def shown_default(name: str, flag: Flag) -> str:
    """A setting's default as the configuration reference shows it."""
    if flag.shown:
        return flag.shown
    o = flag.option
    if o.default is None or o.default is False:
        return "off"
    return f"`{o.shown_default()}`"


@dataclass(frozen=True)
class ServerSettings:
    db: str = setting(
        Option(
            "sqlite:///hpcopt.db",
            str,
            doc="SQLAlchemy URL: sqlite:///PATH (a file in the working directory by default) or "
            "postgresql+psycopg://USER:PASS@HOST:5432/DB",
        ),
        metavar="URL",
    )
    host: str = setting(Option("127.0.0.1", str, doc="bind address of REST and gRPC; anything but loopback needs auth"))
    port: int = setting(Option(8000, int, 0, 65535, doc="REST, dashboard, docs, metrics; 0: any free port"))
    grpc_port: int = setting(Option(50051, int, 0, 65535, doc="gRPC; 0: any free port"))
    health_port: int | None = setting(
        Option(
            None,
            int,
            0,
            65535,
            optional=True,
            doc="also answer GET /healthz on this port, from a listener and thread of its own that a flood of "
            "clients on the REST port cannot slow (point monitoring here); 0: any free port",
        )
    )
    server_file: str | None = setting(
        Option(
            None,
            str,
            optional=True,
            doc="write a connection file (address, ports, pid; owner-only) that hpcopt, the client and the agent "
            "read instead of fixed ports; alone: ~/.hpcopt/server.json ($HPCOPT_HOME/server.json)",
        ),
        metavar="PATH",
        alone="",
        shown="off; alone: `~/.hpcopt/server.json`",
    )
    token_file: str | None = setting(
        Option(
            None,
            str,
            optional=True,
            doc="with auth on, a file holding your token (keep it 0600): the connection file names it, and "
            "clients given no token read it",
        ),
        metavar="PATH",
    )
    lease_seconds: float = setting(
        Option(
            60.0,
            float,
            0,
            open_low=True,
            doc="a held trial goes back to the queue this long after its agent's last report; agents are told to "
            "heartbeat every quarter of it",
        )
    )
    reap_interval: float = setting(
        Option(5.0, float, 0, open_low=True, doc="seconds between sweeps for expired leases")
    )
    require_auth: bool = setting(
        Option(False, bool, doc="demand a token on every call even before one exists (auth stays on)")
    )
    grpc_workers: int = setting(Option(64, int, 1, doc="threads serving gRPC calls"))
    processes: int = setting(
        Option(
            1,
            int,
            1,
            doc="processes serving gRPC on its one port, each about a core's worth of agent calls; more than 1 "
            "needs PostgreSQL",
        )
    )
    db_pool: int = setting(
        Option(
            16,
            int,
            1,
            doc="database connections: on PostgreSQL up to twice this, kept open once opened; keep replicas * 2 * "
            "this under its max_connections",
        )
    )
    max_connections: int = setting(
        Option(
            1000,
            int,
            1,
            doc="open HTTP connections; past it the idlest one is closed (lowered to fit the open-file limit: after "
            "a reserve of 128, HTTP gets at most two fifths)",
        )
    )
    max_connections_per_address: int = setting(
        Option(
            256,
            int,
            1,
            doc="open HTTP connections from one client address, checked when one is accepted: past it that "
            "address's idlest (idle a second) is closed, else the new one (browsers behind one NAT address share "
            "it: raise it there)",
        )
    )
    max_grpc_connections: int = setting(
        Option(
            1000,
            int,
            1,
            doc="open gRPC connections; past it the idlest is shed: first one whose calls all wait on its client "
            "(parked: kept open, unread, for a minute), then one that never made a call, then the one quiet longest; "
            "never one with a call at work (lowered to fit the open-file limit: each takes three descriptors and one "
            "to park, from what HTTP leaves)",
        )
    )
    max_grpc_connections_per_address: int = setting(
        Option(
            256,
            int,
            1,
            doc="open gRPC connections from one client address; past it that address's idlest is closed (agents "
            "that reach the server through one NAT address share it: raise it there)",
        )
    )
    connection_age: float = setting(
        Option(
            1800.0,
            float,
            0,
            open_low=True,
            doc="seconds a gRPC connection may stay open; then its client is asked to reconnect (HTTP/2 GOAWAY, "
            "which gRPC clients do for their next call) and calls still running get 60 s more",
        )
    )
    header_timeout: float = setting(
        Option(
            10.0,
            float,
            0,
            open_low=True,
            doc="seconds a client has to send a request's headers after connecting or after its previous response",
        )
    )
    request_timeout: float = setting(
        Option(
            10.0,
            float,
            0,
            open_low=True,
            doc="seconds a gRPC call may wait on its client: for its request to arrive after its headers, or for "
            "the client to take its response (its flow-control window); a connection holding a call still waiting "
            "past it is closed. Raise it for imports of tens of MB over a slow link",
        )
    )
    idle_timeout: int = setting(
        Option(5, int, 1, doc="seconds an HTTP keep-alive connection may idle after a response")
    )
    db_wait: float = setting(
        Option(
            60.0,
            float,
            0,
            doc="seconds to keep retrying (with back-off, each wait logged) a database that refuses connections at "
            "start, then exit with one line saying so",
        )
    )
    log_level: str = setting(Option("info", str, choices=LOG_LEVELS, doc="the server log's level"))

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


__all__ = ["Flag", "OptionError", "ServerSettings", "add_flags", "flags_of", "from_args", "setting"]
