"""A PostgreSQL that refuses connections for a while (at ``max_connections``, starting
up) does not make the server exit: at start it retries with back-off and says so, up to
``--db-wait``; while serving, new connections are retried and a call that still cannot
get one is UNAVAILABLE / 503 (which agents retry), never a crash or a 500. The refusal
is real: the server's role gets ``CONNECTION LIMIT 0``."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import web
from tests.helpers.env import scaled
from tests.helpers.pg import libpq
from tests.helpers.process import ServerProcess

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


class Role:
    """A login role owning a fresh, migrated database; ``limit`` sets its connection limit."""

    def __init__(self, admin: str):
        self.admin, self.name = admin, f"hpcopt_lim_{uuid.uuid4().hex[:10]}"

    def sql(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(libpq(self.admin), autocommit=True) as conn:
            conn.execute(statement)

    def limit(self, n: int, *, kick: bool = False) -> None:
        self.sql(f'ALTER ROLE "{self.name}" CONNECTION LIMIT {n}')
        if kick:
            self.sql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{self.name}'")

    @property
    def url(self) -> str:
        host = self.admin.split("@", 1)[1].rsplit("/", 1)[0]
        return f"postgresql+psycopg://{self.name}:pw@{host}/{self.name}"


@pytest.fixture
def role(pg_admin: str) -> Iterator[Role]:
    from hpcopt_server.storage.migrate import upgrade

    r = Role(pg_admin)
    r.sql(f"CREATE ROLE \"{r.name}\" LOGIN PASSWORD 'pw'")
    r.sql(f'CREATE DATABASE "{r.name}" OWNER "{r.name}"')
    try:
        upgrade(r.url)
        yield r
    finally:
        r.sql(f'DROP DATABASE IF EXISTS "{r.name}" WITH (FORCE)')
        r.sql(f'DROP ROLE IF EXISTS "{r.name}"')


def _when_logged(log: Path, text: str, then: Callable[[], None], timeout: float = scaled(120)) -> threading.Thread:
    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if log.exists() and text in log.read_text():
                then()
                return
            time.sleep(0.1)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def test_serve_waits_for_a_database_that_refuses_connections_at_start(role: Role, tmp_path: Path) -> None:
    role.limit(0)
    log = tmp_path / "server.log"
    opener = _when_logged(log, "retrying for up to", lambda: role.limit(-1))
    with ServerProcess(role.url, log=log) as server:  # waits until /healthz answers
        assert web.get(server.http_url + "/api/v1/campaigns", timeout=scaled(30)).status_code == 200
    opener.join(timeout=scaled(5))
    text = log.read_text()
    assert "the database refused" in text and "too many connections" in text, text


def test_serve_gives_up_after_the_documented_deadline_with_a_clear_error(role: Role) -> None:
    import subprocess
    import sys

    role.limit(0)
    out = subprocess.run(
        [sys.executable, "-m", "hpcopt_server.cli", "serve", "--db", role.url, "--db-wait", "2", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert out.returncode != 0
    assert "still refuses connections after 2 s" in out.stderr and "--db-wait SECONDS" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_a_database_refusing_connections_while_serving_is_503_then_recovers(role: Role, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with ServerProcess(role.url, "--log-level", "warning", log=log) as server:
        url = server.http_url + "/api/v1/campaigns"
        assert web.get(url, timeout=scaled(30)).status_code == 200
        role.limit(0, kick=True)  # pooled connections die; new ones are refused
        statuses = [web.get(url, timeout=scaled(60)).status_code for _ in range(3)]
        assert set(statuses) <= {503}, statuses  # each waited, then said so: no 500
        reopen = threading.Timer(2.0, lambda: role.limit(-1))
        reopen.start()
        deadline, status = time.monotonic() + scaled(120), 0
        while time.monotonic() < deadline and status != 200:
            status = web.get(url, timeout=scaled(60)).status_code
            assert status in (200, 503)
        reopen.join()
        assert status == 200
        assert server.proc is not None and server.proc.poll() is None
    assert "refused a connection" in log.read_text()
