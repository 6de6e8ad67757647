"""A full disk under a SQLite database is a condition to wait out, not a crash: calls get
UNAVAILABLE / 503 with Retry-After (which agents ride out, as they ride out a PostgreSQL
outage), the log says so in one line rather than a traceback a call, nothing that was
acknowledged is lost, and the server works again once space is freed. Before, a full
disk gave a plain-text 500 or INTERNAL, 954 tracebacks in the log, and the real agent
exited on INTERNAL with its trial left RUNNING.

The disk is a real one: a 4 MB tmpfs, mounted here (root; under CI=true a machine that
cannot mount one fails the test)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcopt import ApiError
from hpcopt_server.storage.migrate import upgrade
from tests.helpers import web
from tests.helpers.clients import AgentClient, Client
from tests.helpers.env import scaled
from tests.helpers.process import ServerProcess
from tests.helpers.specs import make_spec

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "disk"
    where.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], capture_output=True)
    if made.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot mount a tmpfs: {made.stderr.decode().strip()}")
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(where: Path) -> Path:
    filler = where / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_gets_unavailable_and_the_server_recovers_losing_nothing(small_disk: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{small_disk / 'full.db'}"
    upgrade(db)
    log = tmp_path / "server.log"
    with ServerProcess(db, log=log) as server:
        with Client(server.grpc_target, timeout=scaled(30)) as c:
            campaign = c.create_campaign(make_spec(name="full", folds=2, budget={"max_trials": 40})).id
        with AgentClient(server.grpc_target, timeout=scaled(30)) as agent:
            agent_id = agent.register(host="a").agent_id
            lease = agent.acquire(agent_id, campaign).lease
            assert lease is not None
            agent.report_fold(lease, 0, 0.25)  # acknowledged before the disk fills
            filler = _fill(small_disk)
            refused = None
            for k in range(5000):  # curve points until the file needs a page the disk no longer has
                try:
                    agent.report_intermediate(lease, 1, k, float(k))
                except ApiError as exc:
                    refused = exc
                    break
            assert refused is not None and refused.code == "UNAVAILABLE", refused
            rest = web.post(server.http_url + "/api/v1/campaigns", json=make_spec(name="more"), timeout=scaled(30))
            assert rest.status_code == 503 and "Retry-After" in rest.headers, (rest.status_code, rest.text[:300])
            assert "cannot write" in rest.json()["detail"]
            filler.unlink()  # space again: the same calls go through
            agent.report_fold(lease, 1, 0.75)
            done = agent.complete(lease)
    assert str(done.state) == "COMPLETED" and done.value == pytest.approx(0.5)  # the fold from before was kept
    text = log.read_text()
    assert "the database cannot write" in text and text.count("Traceback") == 0, text[-3000:]
