"""The repository's promises: generated code matches the protos, each distribution
imports on its own, the server never pulls torch or mpi4py, migrations match the models."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine

from hpcopt_server.storage.models import Base
from tests.helpers.env import ROOT, scaled


def test_generated_protobuf_code_matches_the_protos(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/gen_protos.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    generated = sorted(p.name for p in (tmp_path / "hpcopt/v1").iterdir() if p.is_file())
    committed_dir = ROOT / "client/hpcopt/v1"
    committed = sorted(p.name for p in committed_dir.iterdir() if p.is_file())
    assert generated == committed, out.stdout
    stale = [n for n in generated if (tmp_path / "hpcopt/v1" / n).read_text() != (committed_dir / n).read_text()]
    assert not stale, f"regenerate with `make protos`: {stale} differ from protos/"


@pytest.mark.parametrize("module", ["hpcopt", "hpcopt.cli", "hpcopt_server.cli", "hpcopt_agent"])
def test_each_part_imports_cleanly_on_its_own(module: str) -> None:
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, timeout=scaled(60))


def test_the_server_never_imports_torch_mpi_or_the_web_stack_into_the_client() -> None:
    code = (
        "import sys, hpcopt_server.api.app, hpcopt_server.rpc.server, hpcopt_server.cli;"
        "bad = [m for m in ('torch', 'mpi4py') if m in sys.modules]; assert not bad, bad;"
        "import importlib; [sys.modules.pop(m) for m in list(sys.modules) if m.startswith(('hpcopt', 'fastapi', "
        "'sqlalchemy'))];"
        "import hpcopt, hpcopt.cli; web = [m for m in ('fastapi', 'sqlalchemy') if m in sys.modules]; "
        "assert not web, web"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=scaled(60))


def test_migrations_create_exactly_the_models(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    finally:
        engine.dispose()
    assert diff == [], "models changed without a migration: add one under storage/migrations/versions"


@pytest.mark.slow
def test_db_upgrade_command_migrates_an_empty_database(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'm.db'}"
    cli = [sys.executable, "-m", "hpcopt_server.cli", "db"]
    assert subprocess.run([*cli, "current", "--db", db], capture_output=True, text=True).stdout.strip() == "empty"
    from hpcopt_server.storage.migrate import head_revision

    head = head_revision()
    assert head is not None and len(
        list((ROOT / "server/hpcopt_server/storage/migrations/versions").glob("0*.py"))
    ) == int(head)
    up = subprocess.run([*cli, "upgrade", "--db", db], capture_output=True, text=True, check=True)
    assert f"empty -> {head}" in up.stdout
    assert subprocess.run([*cli, "current", "--db", db], capture_output=True, text=True).stdout.strip() == head


def test_the_agent_never_imports_the_web_or_sql_stack() -> None:
    code = (
        "import sys, hpcopt_agent.cli, hpcopt_agent.agent, hpcopt_agent.fold;"
        "bad = [m for m in ('fastapi', 'sqlalchemy', 'uvicorn', 'hpcopt_server') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=scaled(120))


def test_the_agent_help_runs_without_an_mpi_launch() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "hpcopt_agent", "--help"], capture_output=True, text=True, timeout=scaled(120)
    )
    assert out.returncode == 0 and "--checkpoint-dir" in out.stdout and "--groups" in out.stdout


def test_generated_docs_pages_match_the_code(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts/gen_docs.py"), "--out", str(tmp_path)], check=True, timeout=scaled(120)
    )
    stale = [
        p.name for p in sorted(tmp_path.iterdir()) if p.read_text() != (ROOT / "docs/reference" / p.name).read_text()
    ]
    assert not stale, f"regenerate with `make docs`: {stale} differ from the code"


def test_readme_is_short_and_every_docs_page_is_in_the_nav() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = [p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")]
    assert pages and all(p in nav for p in pages), [p for p in pages if p not in nav]
