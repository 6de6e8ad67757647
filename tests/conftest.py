"""Fixtures shared by every test: databases (SQLite and the real PostgreSQL), a service
over them, and live REST + gRPC servers on free ports."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PG_ADMIN_URL = os.environ.get("HPCOPT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ROOT = Path(__file__).resolve().parent.parent


#: The TMPDIR of every process the suite starts (servers, agents, mpiexec, chromium),
#: set by the first pytest process and inherited by its xdist workers.
_TMPDIR_VAR = "HPCOPT_TEST_TMPDIR"
_tmpdir_key = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """Gives the processes the suite starts a private TMPDIR, removed when the run ends. A
    server or rank a test kills with SIGKILL cannot remove what it made there (a gRPC
    server's socket directory: ``test_crash.py``'s SQLite tests alone left four a run),
    and they piled up in /tmp. This process keeps its own temporary directory, and
    pytest's ``tmp_path`` stays there in the xdist workers too (the workers' ``tempfile``
    uses the private one)."""
    if os.path.isdir(os.environ.get(_TMPDIR_VAR, "")):  # an xdist worker: the first process made it
        return
    tempfile.gettempdir()  # fixed for this process before TMPDIR changes
    # Short, under /tmp: a Unix socket path must fit in 107 bytes.
    path = tempfile.mkdtemp(prefix="hpcopt-tests-", dir="/tmp" if os.path.isdir("/tmp") else None)
    os.environ["TMPDIR"] = os.environ[_TMPDIR_VAR] = path
    # The default connection file is looked for under HPCOPT_HOME: the suite's own, never
    # the user's ~/.hpcopt (a server file there would redirect every client of the run).
    os.environ["HPCOPT_HOME"] = os.path.join(path, "hpcopt-home")
    config.stash[_tmpdir_key] = path


def timeout_scale() -> float:
    """How much longer than written a test may take here: the larger of
    ``HPCOPT_TEST_TIMEOUT_SCALE`` (default 1) and the load per core when the run starts,
    at most 10. A limit is a guard against a hang, never a speed check: on a machine
    loaded 6 deep per core a correct test ran past its fixed 300 s and failed."""
    try:
        asked = float(os.environ.get("HPCOPT_TEST_TIMEOUT_SCALE", "1"))
    except ValueError:
        asked = 1.0
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return min(10.0, max(1.0, asked, load))


#: Markers of the tests that need a real part the fast tier (``make check``) leaves
#: out; the part's fixture or helper fails a test that uses it unmarked.
PARTS = {
    "mpi": "runs mpiexec",
    "slurm": "submits to the Slurm cluster",
    "browser": "drives chromium",
    "postgres": "needs the real PostgreSQL",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks what a test's fixtures show it needs (the ``browser`` and ``slurm``
    fixtures), then stretches every test's timeout (its marker's, else the ini's 300 s)
    by :func:`timeout_scale`."""
    for item in items:
        for part in ("browser", "slurm"):
            if part in getattr(item, "fixturenames", ()):
                item.add_marker(part)
    scale = timeout_scale()
    if scale == 1.0:
        return
    default = float(config.getini("timeout") or 0)
    for item in items:
        marker = item.get_closest_marker("timeout")
        seconds = default
        if marker is not None:
            seconds = float(marker.args[0] if marker.args else marker.kwargs.get("timeout", default))
        if seconds > 0:
            item.add_marker(pytest.mark.timeout(seconds * scale), append=False)


_running: list[pytest.Item] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _running[:] = [item]


def require_marker(part: str) -> None:
    """Fails the running test unless it carries the marker of ``part`` (``PARTS``): the
    fast tier selects tests by these markers, so one that uses a part unmarked would
    slip into it."""
    item = _running[0] if _running else None
    if item is not None and item.get_closest_marker(part) is None:
        fast = "the fast tier, make check, leaves such tests out"
        pytest.fail(f"{item.nodeid} {PARTS[part]}: mark it @pytest.mark.{part} ({fast})")


def pytest_unconfigure(config: pytest.Config) -> None:
    path = config.stash.get(_tmpdir_key, None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


#: Where free_port() looks: below the kernel's ephemeral range (which bind(0) and every
#: outgoing connection draw from, so the kernel hands these ports to no one), from here.
_PORTS_FROM = 15000
_port_cursor: int | None = None


def _port_share() -> tuple[int, int]:
    """This pytest worker's share of the ports below the ephemeral range: the two
    workers of ``make test`` (pytest-xdist's ``gw0``, ``gw1``) never pick the same port."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    size = (ephemeral - _PORTS_FROM) // max(workers, 1)
    return _PORTS_FROM + worker * size, _PORTS_FROM + (worker + 1) * size


def free_port() -> int:
    """A port nothing listens on, for a server a test is about to start. A port taken by
    bind(0) would be in the ephemeral range, where an outgoing connection of a busy
    machine or of the other pytest worker may take it before the server binds it; these
    come from this worker's own share below that range, in turn from a random start, so
    one worker picks a port again only after its whole share."""
    global _port_cursor
    low, high = _port_share()
    if high - low < 100:  # an ephemeral range reaching down below _PORTS_FROM
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    if _port_cursor is None:
        _port_cursor = random.Random(os.getpid()).randrange(high - low)
    for _ in range(high - low):
        port = low + _port_cursor % (high - low)
        _port_cursor += 1
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))  # taken on any address is taken
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {low}-{high - 1}")


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg", "postgresql")


@pytest.fixture(scope="session")
def pg_admin() -> str:
    """The admin URL of the real PostgreSQL; a skip locally, a failure under CI=true."""
    import psycopg

    try:
        with psycopg.connect(_libpq(PG_ADMIN_URL), connect_timeout=3):
            pass
    except Exception as exc:
        message = f"PostgreSQL at {PG_ADMIN_URL} is not reachable: {str(exc).strip()}"
        if IN_CI:
            pytest.fail(message + " (CI=true: the PostgreSQL suite must run, not skip)")
        pytest.skip(message)
    return PG_ADMIN_URL


def _fresh_pg_database(admin: str) -> Generator[str, None, None]:
    import psycopg

    name = f"hpcopt_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq(admin), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(_libpq(admin), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_admin: str) -> Iterator[str]:
    """An empty, migrated PostgreSQL database."""
    from hpcopt_server.storage.migrate import upgrade

    gen = _fresh_pg_database(pg_admin)
    url = next(gen)
    upgrade(url)
    yield url
    gen.close()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty, migrated database of each backend."""
    from hpcopt_server.storage.migrate import upgrade

    if request.param == "postgresql":
        url: str = request.getfixturevalue("pg_url")
        return url
    url = f"sqlite:///{tmp_path / 'hpcopt.db'}"
    upgrade(url)
    return url


@pytest.fixture
def service(db_url: str) -> Iterator[Any]:
    from hpcopt_server.service import Service
    from hpcopt_server.storage.repository import Storage

    storage = Storage(db_url)
    yield Service(storage)
    storage.close()


def make_spec(**overrides: Any) -> dict[str, Any]:
    """A small valid campaign spec; keyword arguments replace top-level fields."""
    spec: dict[str, Any] = {
        "name": "test-campaign",
        "objective": {"metric": "loss", "direction": "minimize"},
        "space": {
            "lr": {"type": "real", "low": 1e-4, "high": 1.0, "scale": "log"},
            "width": {"type": "int", "low": 8, "high": 64},
            "act": {"type": "categorical", "choices": ["relu", "tanh"]},
        },
        "algorithm": {"name": "random", "seed": 1},
        "budget": {"max_trials": 10, "max_parallel": 4},
        "folds": 3,
        "training": {"task": "tests:task", "epochs": 2},
        "max_attempts": 2,
    }
    spec.update(overrides)
    return spec


def _slowed(app: Any, low: float, high: float) -> Any:
    """An ASGI wrapper that delays each request under /api/ by a seeded random time."""
    rng = random.Random(31)

    async def slowed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/api/"):
            await asyncio.sleep(rng.uniform(low, high))
        await app(scope, receive, send)

    return slowed


@dataclass
class LiveServer:
    """A real gRPC server and a real uvicorn HTTP server in this process."""

    service: Any
    grpc_target: str
    http_url: str


@pytest.fixture
def live_server(service: Any) -> Iterator[LiveServer]:
    yield from run_live_server(service)


def run_live_server(service: Any, *, slow: tuple[float, float] | None = None) -> Iterator[LiveServer]:
    """``slow=(low, high)``: every REST answer waits a seeded random time in [low, high)
    seconds first, so answers arrive late and out of order (the dashboard's races)."""

    from hpcopt_server.api.app import create_app
    from hpcopt_server.api.connections import HttpServer, uvicorn_config
    from hpcopt_server.metrics import Metrics
    from hpcopt_server.rpc.server import serve_grpc

    metrics = Metrics(service)
    grpc = serve_grpc(service, metrics, "127.0.0.1", 0)
    grpc.start()
    grpc_port = grpc.port
    http_port = free_port()
    app = create_app(service, metrics, agent_server=f"127.0.0.1:{grpc_port}")
    if slow is not None:
        app = _slowed(app, *slow)
    config = uvicorn_config(app, "127.0.0.1", http_port, log_level="warning")
    server = HttpServer(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield LiveServer(service, f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{http_port}")
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        grpc.stop(grace=1)
