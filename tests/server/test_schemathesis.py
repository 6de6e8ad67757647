"""schemathesis against the real server on PostgreSQL with auth on: generated requests
for every operation of the OpenAPI document (examples, coverage, fuzzing and stateful
phases), seeded and bounded in time. Checks: no server error, responses conform to the
documented schema, status codes and content types. Zero failures."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpcopt_server.service import Service
from hpcopt_server.storage.repository import Storage
from tests.helpers.clients import AgentClient, Client
from tests.helpers.env import IN_CI, scaled
from tests.helpers.process import ServerProcess
from tests.helpers.specs import make_spec

CHECKS = "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance"
SEED = 20261123
MAX_EXAMPLES = 15  # per operation and phase: ~450 requests (20 took 56 s of a 25-minute CI budget)
#: A hard stop only, stretched with the load as every test limit is (schemathesis's own
#: --max-time makes it repeat until the time is spent).
TIMEOUT_SECONDS = 300


def _schemathesis() -> str:
    found = shutil.which("schemathesis") or str(Path(sys.executable).with_name("schemathesis"))
    if not Path(found).exists():
        message = "schemathesis is not installed (requirements/dev.txt pins it)"
        if IN_CI:
            pytest.fail(message + " (CI=true: this test must run)")
        pytest.skip(message)
    return found


@pytest.mark.slow
@pytest.mark.postgres
def test_schemathesis_finds_nothing_on_postgresql_with_auth(pg_url: str, tmp_path: Path) -> None:
    tool = _schemathesis()
    storage = Storage(pg_url)
    admin = Service(storage).tokens.create("schemathesis", ["admin"])[1]
    storage.close()
    with ServerProcess(pg_url, log=tmp_path / "server.log") as server:
        # Data for the id routes to find: a campaign with a completed trial, curves, an agent.
        with Client(server.grpc_target, token=admin) as c:
            cid = c.create_campaign(make_spec(folds=1)).id
        with AgentClient(server.grpc_target, token=admin) as a:
            agent_id = a.register(host="st", campaign_id=cid).agent_id
            lease = (a.acquire(agent_id, cid)).lease
            a.report_intermediate(lease, 0, 0, 0.5)
            a.report_fold(lease, 0, 0.5)
            a.complete(lease)
        out = subprocess.run(
            [
                tool,
                "run",
                f"{server.http_url}/openapi.json",
                "--header",
                f"Authorization: Bearer {admin}",
                "--checks",
                CHECKS,
                "--seed",
                str(SEED),
                "--max-examples",
                str(MAX_EXAMPLES),
                "--request-timeout",
                str(round(scaled(20))),
                "--workers",
                "1",
                "--no-color",
            ],
            capture_output=True,
            text=True,
            timeout=scaled(TIMEOUT_SECONDS),
            cwd=tmp_path,  # its .schemathesis/ cache stays out of the tree
            env={**os.environ, "SCHEMATHESIS_HOOKS": ""},
        )
    report = out.stdout[-6000:] + out.stderr[-2000:]
    assert out.returncode == 0, report
    summary = out.stdout.split("SUMMARY")[-1]
    assert "generated" in summary and "failed" not in summary.lower(), report
