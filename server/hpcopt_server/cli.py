"""``hpcopt-server``: serve, migrate the database, manage API tokens."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import secrets
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcopt.cli.util import finish
from hpcopt_server.processes import CHILD_PIPE, CHILD_SOCKET, START_SECRET_ENV
from hpcopt_server.service.limits import RequestLimits
from hpcopt_server.settings import OptionError, ServerSettings, add_flags, from_args

if TYPE_CHECKING:  # the storage stack is imported only by the commands that use it
    from hpcopt_server.local import LocalServer
    from hpcopt_server.service import Service


#: Seconds ``serve`` (and the other commands) wait for a database that refuses connections.
DB_WAIT: float = ServerSettings.db_wait


def _db_arg(p: argparse.ArgumentParser) -> None:
    add_flags(p, ServerSettings, only=("db",))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="hpcopt-server", description="The hpcopt optimization server.")
    sub = ap.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="serve REST, gRPC and the dashboard")
    add_flags(s, ServerSettings)
    add_flags(s, RequestLimits)
    s.add_argument(CHILD_SOCKET, type=int, default=None, help=argparse.SUPPRESS)
    s.add_argument(CHILD_PIPE, type=int, default=None, help=argparse.SUPPRESS)

    db = sub.add_parser("db", help="database schema")
    dbsub = db.add_subparsers(dest="db_command", required=True)
    _db_arg(dbsub.add_parser("upgrade", help="migrate the schema to this release"))
    _db_arg(dbsub.add_parser("current", help="print the schema revision"))

    tok = sub.add_parser("token", help="API tokens")
    toksub = tok.add_subparsers(dest="token_command", required=True)
    create = toksub.add_parser("create", help="create a token and print its secret once")
    _db_arg(create)
    create.add_argument("--name", required=True)
    create.add_argument("--scope", action="append", required=True, help="read, submit, agent or admin; repeatable")
    _db_arg(toksub.add_parser("list", help="list tokens (never their secrets)"))
    revoke = toksub.add_parser("revoke", help="revoke a token by id (auth stays on)")
    _db_arg(revoke)
    revoke.add_argument("id", type=int)

    auth = sub.add_parser("auth", help="whether the server demands tokens")
    authsub = auth.add_subparsers(dest="auth_command", required=True)
    _db_arg(authsub.add_parser("status", help="print whether auth is on and how many tokens are active"))
    _db_arg(authsub.add_parser("enable", help="turn auth on (creating a token does too)"))
    disable = authsub.add_parser(
        "disable", help="turn auth off: anyone who reaches a loopback-bound server may then do anything"
    )
    _db_arg(disable)
    disable.add_argument("--yes", action="store_true", help="confirm: open the server to anyone who reaches it")
    return finish(ap, "hpcopt-server")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    args.argv = argv  # what a gRPC child process is started with
    from hpcopt_server.errors import ServiceError

    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "db":
            return _db(args)
        if args.command == "auth":
            return _auth(args)
        return _token(args)
    except ServiceError as exc:
        print(f"hpcopt-server: {exc.message}", file=sys.stderr)
        return 2


def _open(url: str, *, pool_size: int = 16, wait: float = DB_WAIT, **service: Any) -> LocalServer:
    """The server's parts on a database at this release's schema (``local.LocalServer``);
    the command ends with the reason when the database cannot be used."""
    from hpcopt_server.local import LocalServer, StorageUnready

    try:
        return LocalServer.open(url, pool_size=pool_size, wait=wait, **service)
    except StorageUnready as exc:
        raise SystemExit(f"hpcopt-server: {exc}") from None


def _server(settings: ServerSettings, limits: RequestLimits) -> LocalServer:
    """The server of ``serve``: the service with the lease, reaping and request settings
    of the command line."""
    from hpcopt_server.service import ServiceSettings

    return _open(
        settings.db,
        pool_size=settings.db_pool,
        wait=settings.db_wait,
        settings=ServiceSettings(lease_seconds=settings.lease_seconds, heartbeat_seconds=settings.lease_seconds / 4),
        require_auth=settings.require_auth,
        reap_interval=settings.reap_interval,
        limits=limits,
    )


def _db(args: argparse.Namespace) -> int:
    from hpcopt_server.storage import migrate

    if args.db_command == "upgrade":
        before = migrate.current_revision(args.db)
        migrate.upgrade(args.db)
        print(f"database schema: {before or 'empty'} -> {migrate.current_revision(args.db)}")
    else:
        print(migrate.current_revision(args.db) or "empty")
    return 0


def _token(args: argparse.Namespace) -> int:
    service = _open(args.db).service
    if args.token_command == "create":
        token, secret = service.tokens.create(args.name, args.scope)
        print(secret)
        print(
            f"token {token.id} {token.name!r} scopes {sorted(token.scopes)}; the secret is shown only now",
            file=sys.stderr,
        )
    elif args.token_command == "list":
        for t in service.tokens.list_all():
            state = f"revoked {t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "active"
            print(f"{t.id:>4}  {t.name:<24} {','.join(sorted(t.scopes)):<24} {state}")
    else:
        service.tokens.revoke(args.id)
        print(f"token {args.id} revoked")
        if not any(t.revoked_at is None and "admin" in t.scopes for t in service.tokens.list_all()):
            print(
                "no active admin token is left; auth stays on. To get one back: "
                f"hpcopt-server token create --db {args.db} --scope admin --name NAME",
                file=sys.stderr,
            )
    return 0


def _auth(args: argparse.Namespace) -> int:
    tokens = _open(args.db).service.tokens
    if args.auth_command == "enable":
        tokens.turn_on()
    elif args.auth_command == "disable":
        if not args.yes:
            print(
                "hpcopt-server: `auth disable` opens the server to anyone who can reach it (servers bound beyond "
                "loopback refuse to start without auth). Add --yes to confirm.",
                file=sys.stderr,
            )
            return 2
        tokens.turn_off()
        print("auth is now off; running servers keep it on until they restart", file=sys.stderr)
    on, active = tokens.stored_state()
    print(f"auth {'on' if on else 'off'}; {active} active token(s)")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from hpcopt_server.api.connections import HttpServer, uvicorn_config
    from hpcopt_server.processes import GrpcProcesses
    from hpcopt_server.rpc.server import GrpcLimits
    from hpcopt_server.sockets import connection_caps, listen

    try:
        settings = from_args(ServerSettings, args)
        limits = from_args(RequestLimits, args)
    except OptionError as exc:
        print(f"hpcopt-server: {exc}", file=sys.stderr)
        return 2
    if settings.processes > 1 and not settings.db.startswith("postgresql"):
        print(
            f"hpcopt-server: --processes {settings.processes} needs PostgreSQL (--db postgresql://...): SQLite "
            "lets one process write at a time, so more would wait on each other. Use --processes 1 with SQLite.",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    if args.grpc_child_socket is not None:
        return _serve_grpc_child(args, settings, limits)
    server_file = None
    if settings.server_file is not None:
        from hpcopt.core.serverfile import default_path
        from hpcopt.errors import ServerFileError
        from hpcopt_server.serverfile import ServerFileInUse, check_free

        server_file = Path(settings.server_file).expanduser() if settings.server_file else default_path()
        try:
            check_free(server_file)
        except (ServerFileInUse, ServerFileError) as exc:
            print(f"hpcopt-server: {exc}", file=sys.stderr)
            return 2
    server = _server(settings, limits)
    service, storage = server.service, server.storage
    admin = os.environ.get("HPCOPT_ADMIN_TOKEN")
    if admin:
        service.tokens.create("HPCOPT_ADMIN_TOKEN", ["admin"], secret=admin)
    if not settings.loopback and service.tokens.stored_state()[1] == 0:
        print(
            f"hpcopt-server: refusing to serve on {settings.host} without auth: anyone who can reach it "
            "could submit and cancel campaigns. Create a token first "
            "(`hpcopt-server token create --scope admin --name me`), set HPCOPT_ADMIN_TOKEN, "
            "or bind to 127.0.0.1.",
            file=sys.stderr,
        )
        return 2
    _auth_at_start(service, settings)
    auth_on = service.tokens.enabled()
    try:
        http_socket = listen(settings.host, settings.port)
    except OSError as exc:
        return _cannot_listen("REST", settings.host, settings.port, "--port", "HPCOPT_PORT", exc)
    caps = connection_caps(settings.max_connections, settings.max_grpc_connections, logging.getLogger("hpcopt"))
    # What the connection file's readers check before a token goes out (rpc/identity.py);
    # the gRPC child processes inherit it.
    start_secret = secrets.token_bytes(32)
    os.environ[START_SECRET_ENV] = start_secret.hex()
    try:
        grpc = server.serve_grpc(
            settings.host, settings.grpc_port, GrpcLimits.of(settings, caps.grpc), start_secret=start_secret
        )
    except (OSError, RuntimeError) as exc:  # grpc raises RuntimeError("Failed to bind ...")
        http_socket.close()
        server.close(grace=0)
        return _cannot_listen("gRPC", settings.host, settings.grpc_port, "--grpc-port", "HPCOPT_GRPC_PORT", exc)
    health = None
    if settings.health_port is not None:
        from hpcopt_server.api.health import HealthListener

        try:
            health = HealthListener(service.health, settings.host, settings.health_port)
        except OSError as exc:
            http_socket.close()
            server.close(grace=0)
            port = settings.health_port
            return _cannot_listen("health", settings.host, port, "--health-port", "HPCOPT_HEALTH_PORT", exc)
        health.start()
    service.warm_optimizers()
    grpc.start()
    grpc_port = grpc.port
    http_port = http_socket.getsockname()[1]
    service.reaper.start()
    children = GrpcProcesses(settings.processes - 1, grpc.front.sock, args.argv)
    children.start()
    where = "localhost" if settings.loopback else socket.gethostname()
    app = server.rest_app(agent_server=f"{_bracket(where)}:{grpc_port}")
    processes = f" ({settings.processes} processes)" if settings.processes > 1 else ""
    print(
        f"hpcopt-server {'(auth on)' if auth_on else '(auth off: loopback, and auth never turned on or disabled)'}\n"
        f"  REST + dashboard  http://{_bracket(settings.host)}:{http_port}/   (API docs /docs)\n"
        f"  gRPC              {_bracket(settings.host)}:{grpc_port}{processes}\n"
        + (f"  health            http://{_bracket(settings.host)}:{health.port}/healthz\n" if health else "")
        + f"  database          {storage.db.url.render_as_string(hide_password=True)}",
        flush=True,
    )
    published = None
    if server_file is not None:
        from hpcopt_server.serverfile import publish

        published = publish(
            server_file,
            bind=settings.host,
            http_port=http_port,
            grpc_port=grpc_port,
            database=storage.db.url.render_as_string(hide_password=True),
            auth=auth_on,
            token_file=settings.token_file,
            secret=start_secret,
        )
        print(f"  connection file   {server_file}", flush=True)
    config = uvicorn_config(
        app,
        settings.host,
        http_port,
        max_connections=caps.http,
        header_timeout=settings.header_timeout,
        idle_timeout=settings.idle_timeout,
        log_level=settings.log_level.lower(),
        per_address=settings.max_connections_per_address,
    )
    # uvicorn stops gracefully on SIGTERM or SIGINT, then raises the signal again to end the
    # process as the signal would. SIGTERM's default action ended it before the clean-up
    # below (gRPC's graceful stop, the children, the private socket directory), and SIGINT
    # printed a KeyboardInterrupt traceback. Raised as exceptions, both run the clean-up;
    # then SIGTERM ends the process as SIGTERM does and Ctrl-C exits with 130, quietly.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        try:
            HttpServer(config).run(sockets=[http_socket])
        finally:
            if published is not None and server_file is not None:
                from hpcopt_server.serverfile import withdraw

                withdraw(server_file, published)
            children.stop(grace=5)
            if health is not None:
                health.stop()
            service.reaper.stop()
            server.close(grace=5)
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


class _Terminated(BaseException):
    """SIGTERM arrived (``serve``: after uvicorn's graceful stop)."""


def _terminated(signum: int, frame: object) -> None:
    raise _Terminated


def _serve_grpc_child(args: argparse.Namespace, settings: ServerSettings, limits: RequestLimits) -> int:
    """A gRPC-only process of ``serve --processes N`` (``processes.py``): clients from the
    inherited listening socket, until the first process goes."""
    from hpcopt_server.processes import wait_for_parent
    from hpcopt_server.rpc.server import GrpcLimits
    from hpcopt_server.sockets import connection_caps

    sock = socket.socket(fileno=args.grpc_child_socket)
    server = _server(settings, limits)
    service = server.service
    _auth_at_start(service, settings)
    caps = connection_caps(settings.max_connections, settings.max_grpc_connections, logging.getLogger("hpcopt"))
    secret = bytes.fromhex(os.environ.get(START_SECRET_ENV, "")) or None
    grpc = server.serve_grpc(settings.host, 0, GrpcLimits.of(settings, caps.grpc), sock=sock, start_secret=secret)
    service.warm_optimizers()
    grpc.start()
    try:
        wait_for_parent(args.grpc_child_pipe)
    finally:
        server.close(grace=5)
    return 0


def _auth_at_start(service: Service, settings: ServerSettings) -> None:
    """Beyond loopback auth is on, and stays on for this database; --require-auth too."""
    if not settings.loopback or settings.require_auth:
        service.tokens.turn_on()


def _cannot_listen(what: str, host: str, port: int, flag: str, env_name: str, exc: Exception) -> int:
    """Says which port could not be used and how to choose another; the exit status."""
    busy = isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE
    why = "the port is already in use" if busy else f"{exc}".split(";")[0]
    print(
        f"hpcopt-server: cannot listen for {what} on {_bracket(host)}:{port}: {why}. "
        f"Choose another port with {flag} PORT (env {env_name}), or stop what holds it.",
        file=sys.stderr,
    )
    return 2


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


if __name__ == "__main__":
    sys.exit(main())
