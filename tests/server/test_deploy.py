"""docker-compose.yml and its nginx config (no container engine can pull images here,
so the topology itself runs in test_concurrency: two ``serve`` processes on one
PostgreSQL): the file is what its comments promise."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import pytest
import yaml

from tests.helpers.env import ROOT, scaled


def test_compose_runs_two_replicas_behind_a_balancer_with_health_checks_and_a_volume() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "server", "lb"}
    assert all("healthcheck" in s for s in services.values())
    server = services["server"]
    assert server["deploy"]["replicas"] == 2
    assert "ports" not in server, "replicas must not claim host ports: the balancer does"
    assert server["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["lb"]["depends_on"]["server"]["condition"] == "service_healthy"
    assert "pgdata" in compose["volumes"]
    assert any(v.startswith("pgdata:") for v in services["postgres"]["volumes"])
    # The server reads each variable it is given (HPCOPT_X is serve's --x).
    from hpcopt_server.cli import parser

    [commands] = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    flags = {opt for action in commands.choices["serve"]._actions for opt in action.option_strings}
    for name in server["environment"]:
        if name != "HPCOPT_ADMIN_TOKEN":
            assert "--" + name.removeprefix("HPCOPT_").lower().replace("_", "-") in flags, name
    # max_connections leaves room for both replicas' pools at their burst size.
    pool = int(server["environment"]["HPCOPT_DB_POOL"])
    limit = int(services["postgres"]["command"][-1].split("=")[1])
    assert 2 * 2 * pool < limit


def test_nginx_balances_rest_and_grpc_over_the_server_replicas() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    lb = compose["services"]["lb"]
    [mount] = [v for v in lb["volumes"] if "nginx.conf" in v]
    conf = (ROOT / mount.split(":")[0].removeprefix("./")).read_text()
    assert re.search(r"server server:8000 resolve;", conf) and re.search(r"server server:50051 resolve;", conf)
    assert re.search(r"listen 50051 http2;", conf) and "grpc_pass grpc://grpc;" in conf
    assert "proxy_pass http://rest;" in conf
    assert sorted(lb["ports"]) == ["50051:50051", "8000:8000"]
    exposed = {str(p) for p in compose["services"]["server"]["expose"]}
    assert exposed == {"8000", "50051"}


def test_docker_compose_accepts_the_file_with_the_documented_env_and_refuses_it_without(tmp_path: Path) -> None:
    import shutil
    import subprocess

    from tests.helpers.env import IN_CI

    tool = shutil.which("docker-compose")
    if tool is None:
        message = "docker-compose is not installed (`apt-get install docker-compose`; setup.sh --services does)"
        pytest.fail(message + " (CI=true)") if IN_CI else pytest.skip(message)
    # The documented sequence's first line, run as written in a scratch folder: .env once.
    docs = (ROOT / "docs/guides/deployment.md").read_text()
    [first] = [line for line in docs.splitlines() if line.startswith("test -f .env")]
    command = first.split("#")[0]
    for _ in range(2):  # a second run keeps the token of the first
        subprocess.run(["bash", "-c", command], cwd=tmp_path, check=True, timeout=scaled(30))
    env_text = (tmp_path / ".env").read_text()
    assert re.fullmatch(r"HPCOPT_ADMIN_TOKEN=[0-9a-f]{48}\n", env_text), env_text
    for name in ("docker-compose.yml", "deploy", "Dockerfile"):
        (tmp_path / name).symlink_to(ROOT / name)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HPCOPT_")}
    ok = subprocess.run([tool, "config"], cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=scaled(60))
    assert ok.returncode == 0, ok.stderr
    config = yaml.safe_load(ok.stdout)
    assert config["services"]["server"]["environment"]["HPCOPT_ADMIN_TOKEN"] == env_text.split("=", 1)[1].strip()
    (tmp_path / ".env").unlink()
    bad = subprocess.run([tool, "config"], cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=scaled(60))
    assert bad.returncode != 0 and "HPCOPT_ADMIN_TOKEN" in bad.stderr, bad.stderr
