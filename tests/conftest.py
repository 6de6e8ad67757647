"""Fixtures shared by every test: databases (SQLite and the real PostgreSQL), a service
over them, and live REST + gRPC servers on free ports."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.db import migrated_sqlite
from tests.helpers.env import IN_CI, PG_ADMIN_URL, running_test, timeout_scale
from tests.helpers.live import LiveServer, run_live_server
from tests.helpers.pg import fresh_pg_database, libpq

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


#: A test's own limit in seconds as written (its marker's, else the ini's), before any stretch.
_written_limit = pytest.StashKey[float]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks what a test's fixtures show it needs (the ``browser`` and ``slurm``
    fixtures), and keeps each test's timeout as written (its marker's, else the ini's
    300 s) for :func:`pytest_runtest_protocol` to stretch."""
    default = float(config.getini("timeout") or 0)
    for item in items:
        for part in ("browser", "slurm"):
            if part in getattr(item, "fixturenames", ()):
                item.add_marker(part)
        marker = item.get_closest_marker("timeout")
        seconds = default
        if marker is not None:
            seconds = float(marker.args[0] if marker.args else marker.kwargs.get("timeout", default))
        if seconds > 0:
            item.stash[_written_limit] = seconds


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Stretches the test's limit as it starts by :func:`timeout_scale` (the load at
    collection or now, whichever is more): a machine that got busy during the run
    (another job, CI's neighbours) stretches the tests that start after. Runs before
    pytest-timeout's own wrapper, which reads the marker to arm its timer."""
    seconds = item.stash.get(_written_limit, 0.0)
    if seconds > 0:
        item.add_marker(pytest.mark.timeout(seconds * timeout_scale()), append=False)
    yield


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    running_test[:] = [item]


def pytest_unconfigure(config: pytest.Config) -> None:
    path = config.stash.get(_tmpdir_key, None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_admin() -> str:
    """The admin URL of the real PostgreSQL; a skip locally, a failure under CI=true."""
    import psycopg

    try:
        with psycopg.connect(libpq(PG_ADMIN_URL), connect_timeout=3):
            pass
    except Exception as exc:
        message = f"PostgreSQL at {PG_ADMIN_URL} is not reachable: {str(exc).strip()}"
        if IN_CI:
            pytest.fail(message + " (CI=true: the PostgreSQL suite must run, not skip)")
        pytest.skip(message)
    return PG_ADMIN_URL


@pytest.fixture(scope="session")
def _migrated_pg(pg_admin: str) -> Iterator[str]:
    """The name of a PostgreSQL database migrated once per worker process, that
    :func:`pg_url` copies: running the migrations took 0.4-2.5 s a test, and hundreds
    of tests take a fresh database (the migrations' own tests run them themselves)."""
    from hpcopt_server.storage.migrate import upgrade

    gen = fresh_pg_database(pg_admin)
    url = next(gen)
    upgrade(url)  # alembic's engine is disposed: no session stays on the template
    yield url.rsplit("/", 1)[1]
    gen.close()


@pytest.fixture
def pg_url(pg_admin: str, _migrated_pg: str) -> Iterator[str]:
    """An empty, migrated PostgreSQL database."""
    gen = fresh_pg_database(pg_admin, template=_migrated_pg)
    url = next(gen)
    yield url
    gen.close()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty, migrated database of each backend."""
    if request.param == "postgresql":
        url: str = request.getfixturevalue("pg_url")
        return url
    return migrated_sqlite(tmp_path / "hpcopt.db")


@pytest.fixture
def service(db_url: str) -> Iterator[Any]:
    """The service over ``db_url``, assembled as the server assembles it."""
    from hpcopt_server.local import LocalServer

    with LocalServer.open(db_url) as server:
        yield server.service


@pytest.fixture
def live_server(service: Any) -> Iterator[LiveServer]:
    yield from run_live_server(service)
