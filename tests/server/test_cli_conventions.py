"""The CLI's conventions, as a user meets them: narrow terminals, pipes, bad files, a
wrong address, a wrong token, --version and defaults in --help."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.clients import AgentClient, Client
from tests.helpers.env import scaled
from tests.helpers.live import LiveServer, free_port
from tests.helpers.specs import make_spec

SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
NUMBER = re.compile(r"^-?\d+(\.\d+)?(e[-+]\d+)?$")


def cli(*args: str, server: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "HPCOPT_TOKEN", "HPCOPT_SERVER")}
    prefix = ["--server", server] if server else []
    cmd = [sys.executable, "-m", "hpcopt.cli", *prefix, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(60), env={**base, **env})


def _seed(server: LiveServer, n: int = 6) -> int:
    space = {f"parameter_{i}": {"type": "real", "low": 1e-6, "high": 1e-2, "scale": "log"} for i in range(8)}
    spec = make_spec(name="a-campaign-with-a-rather-long-name", space=space, folds=1, budget={"max_trials": 20})
    with Client(server.grpc_target) as c, AgentClient(server.grpc_target) as a:
        cid = c.create_campaign(spec).id
        agent = a.register(host="t", campaign_id=cid).agent_id
        for i in range(n):
            got = a.acquire(agent, cid)
            assert got.lease is not None
            a.report_fold(got.lease, 0, 0.0001928 * (i + 1))
            a.complete(got.lease)
    return cid


@SQLITE_ONLY
@pytest.mark.parametrize("columns", ["80", "120"])
def test_tables_never_split_a_value_at_any_width(live_server: LiveServer, columns: str) -> None:
    cid = _seed(live_server)
    out = cli("trials", str(cid), server=live_server.grpc_target, COLUMNS=columns)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    rows = lines[2:-1] if lines[-1].startswith("(") else lines[2:]
    assert all(len(line) <= int(columns) for line in lines[:2] + rows), lines
    assert len(rows) == 6 and "left out to fit the terminal" in lines[-1], lines
    for row in rows:
        cells = row.split()
        assert cells[1] == "COMPLETED" and cells[0].isdigit(), row
        assert all(NUMBER.match(c) for c in cells[3:]), row  # value, std, shown parameters: whole numbers
    listing = cli("list", server=live_server.grpc_target, COLUMNS="50").stdout.splitlines()
    assert all(len(x) <= 50 for x in listing), listing
    row = listing[2].split()
    assert row[0] == str(cid) and row[1].endswith("…") and row[2:] == ["RUNNING", "random", "6/20", "0.0001928"], row
    wide = cli("trials", str(cid), server=live_server.grpc_target)  # a pipe: every column, in full
    assert wide.stdout.splitlines()[0].split()[-1] == "parameter_7", wide.stdout


@SQLITE_ONLY
def test_errors_are_one_line_with_a_status_and_json_when_asked(live_server: LiveServer, tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"campaign": ')
    out = cli("import", str(broken), server=live_server.grpc_target)
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    assert "broken.json is not valid JSON" in out.stderr
    as_json = cli("--json", "import", str(broken), server=live_server.grpc_target)
    assert as_json.returncode == 2 and json.loads(as_json.stdout)["error"]["code"] == "INVALID_ARGUMENT"
    missing = cli("--json", "show", "999", server=live_server.grpc_target)
    assert missing.returncode == 1 and json.loads(missing.stdout)["error"]["code"] == "NOT_FOUND"
    nowhere = cli("list", server=f"127.0.0.1:{free_port()}")
    assert nowhere.returncode == 2 and len(nowhere.stderr.splitlines()) == 1, nowhere.stderr
    assert "no hpcopt server answers" in nowhere.stderr and "HPCOPT_SERVER" in nowhere.stderr
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps(make_spec()))
    dry = cli("submit", "--dry-run", "--json", str(spec))
    assert dry.returncode == 0 and json.loads(dry.stdout)["valid"] is True
    waited = cli("wait", "--timeout", "1", server=f"127.0.0.1:{free_port()}")
    assert waited.returncode == 2 and "within 1 s" in waited.stderr, waited.stderr


@SQLITE_ONLY
def test_a_refused_token_names_the_option_and_the_variable(live_server: LiveServer) -> None:
    live_server.service.tokens.create("admin", ["admin"], secret="s" * 32)
    live_server.service.tokens.turn_on()
    for extra, env in (([], {}), (["--token", "wrong-token-wrong-token"], {})):
        out = cli(*extra, "list", server=live_server.grpc_target, **env)
        assert out.returncode == 2 and "--token" in out.stderr and "HPCOPT_TOKEN" in out.stderr, out.stderr
        assert len(out.stderr.splitlines()) == 1, out.stderr


def test_version_everywhere_and_defaults_in_every_help() -> None:
    from hpcopt.cli import parser as client_parser
    from hpcopt_agent.cli import build_parser
    from hpcopt_server.cli import parser as server_parser
    from scripts.gen_docs import _commands

    for module in ("hpcopt.cli", "hpcopt_server.cli", "hpcopt_agent"):
        out = subprocess.run(
            [sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=scaled(120)
        )
        assert out.returncode == 0 and re.search(r"\d+\.\d+\.\d+", out.stdout), (module, out)
    for prog, parser in (
        ("hpcopt", client_parser()),
        ("hpcopt-server", server_parser()),
        ("hpcopt-agent", build_parser()),
    ):
        for name, p in _commands(parser, prog):
            text = " ".join(p.format_help().split())
            for action in p._actions:
                shown = action.default not in (None, False, "==SUPPRESS==") and action.default != []
                if action.option_strings and shown and "--version" not in action.option_strings:
                    assert "default" in (action.help or "") or f"(default: {action.default})" in text, (
                        name,
                        action.option_strings,
                    )
