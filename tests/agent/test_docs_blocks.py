"""The docs' runnable blocks, run exactly as written: every fenced block marked
``<!-- docs-test: NAME -->`` in docs/, in page order, pasted into one bash session as a
user would (a Python block through ``python -``), twice in a row in the same folder."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers.agents import mpi_env, mpiexec_path
from tests.helpers.env import ROOT, scaled

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(600)]
MARK = re.compile(r"<!-- docs-test: ([\w-]+) -->\n```(\w+)\n(.*?)```", re.S)


def docs_blocks(name: str) -> list[tuple[str, str]]:
    """(language, text) of the blocks marked ``name``, in the order of the pages."""
    found = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        found += [(m.group(2), m.group(3)) for m in MARK.finditer(page.read_text()) if m.group(1) == name]
    assert found, f"no block marked docs-test: {name} under docs/"
    return found


def session(blocks: list[tuple[str, str]]) -> str:
    parts = []
    for lang, text in blocks:
        assert lang in ("bash", "python"), lang
        parts.append(text if lang == "bash" else f"python - <<'HPCOPT_DOCS_EOF'\n{text}HPCOPT_DOCS_EOF\n")
    return "".join(parts)


def test_the_first_campaign_blocks_run_as_written_twice_in_a_row(tmp_path: Path) -> None:
    mpiexec_path()  # a failure under CI=true when MPI is missing
    script = session(docs_blocks("first-campaign"))
    assert script.startswith("source .venv/bin/activate") and "hpcopt wait" in script
    # The working directory is a scratch copy of the repository root: its .venv by
    # symlink, the digits task copied (the agent runs no task file that resolves outside
    # its task root, the working directory), the campaign cut to 4 trials of 2 epochs
    # (its file is a fixture; the commands are the page's).
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / "examples/digits").mkdir(parents=True)
    shutil.copy(ROOT / "examples/digits/task.py", tmp_path / "examples/digits/task.py")
    spec = yaml.safe_load((ROOT / "examples/digits/campaign.yaml").read_text())
    spec["budget"]["max_trials"], spec["training"]["epochs"] = 4, 2
    (tmp_path / "examples/digits/campaign.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    # The server takes free ports and writes ~/.hpcopt/server.json, which every later
    # command reads: HOME is the test's own, and nothing names a port or an address.
    env = mpi_env(HOME=str(tmp_path / "home"))
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # the agent's default checkpoint folder is under it
    for name in (
        "VIRTUAL_ENV",
        "SCRATCH",
        "HPCOPT_CHECKPOINT_DIR",
        "HPCOPT_DB",
        "HPCOPT_TOKEN",
        "COLUMNS",
        "HPCOPT_HOME",
        "HPCOPT_SERVER",
        "HPCOPT_SERVER_FILE",
        "HPCOPT_PORT",
        "HPCOPT_GRPC_PORT",
    ):
        env.pop(name, None)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
    # set -e: any line that fails fails the run (a user would see its error and stop).
    guarded = "set -e\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + script
    for run in (1, 2):
        out = subprocess.run(
            ["bash", "-c", guarded], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled(280)
        )
        text = out.stdout + out.stderr
        assert out.returncode == 0, f"run {run}:\n{text[-6000:]}"
        first = 1 if run == 1 else 4  # the second run's campaigns follow the first run's three
        for expected in (
            f"campaign {first} 'digits-mlp': COMPLETED",
            f"campaign {first + 1} 'digits-mlp': COMPLETED",
            f"campaign {first + 2} CANCELLED",
            "learning curves",
            f"campaign {first}: COMPLETED, best trial #",
            "['COMPLETED', ",
        ):
            assert expected in text, f"run {run}: {expected!r} not in the output:\n{text[-6000:]}"
        # The traceback itself, not the run's tail: a thread's traceback may sit anywhere in it.
        at = text.find("Traceback")
        # To its end: another process's lines come between a traceback's (one failure,
        # 2026-11-28, showed only "Exception in thread Thread-1 (_run)" within 6,000 characters).
        assert at < 0, f"run {run}: a traceback in the output:\n{text[max(0, at - 1500) :]}"
    assert (tmp_path / "hpcopt.db").exists() and (tmp_path / "campaign.json").exists()


def test_the_plan_block_ranks_the_layouts_of_the_allocation_it_names() -> None:
    # `hpcopt plan` with the measured points the page names, as written (no server needed).
    [(lang, text)] = docs_blocks("plan")
    assert lang == "bash"
    env = dict(os.environ, PATH=os.pathsep.join([str(ROOT / ".venv/bin"), os.environ.get("PATH", "")]))
    script = "set -e\n" + text
    out = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(60))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("8 ranks (2 node(s) x 4); 30 trials x 5 folds x 10 epochs") and "1 h" in lines[0], lines
    assert "model from examples/digits/throughput.json" in lines[1], lines
    rows = [ln.split() for ln in lines if ln.strip()[:1].isdigit() and len(ln.split()) == 9]
    assert rows, out.stdout
    # Every ranked layout divides the 8 ranks, the best first by trials in the hour.
    for row in rows:
        g, f, r = int(row[1]), int(row[2]), int(row[3])
        assert g * f * r == 8 and f <= 5 and r == 1  # the spec pins ranks_per_fold: 1
    by_deadline = [int(row[7]) for row in rows]
    assert by_deadline == sorted(by_deadline, reverse=True), rows


def test_the_mf_plan_block_plans_the_ladder_s_leases_narrow(tmp_path: Path) -> None:
    # `hpcopt plan` of the mf guide's campaign, as written, beside the spec it names.
    [(_, spec_text)] = docs_blocks("mf-campaign")
    [(lang, text)] = docs_blocks("mf-plan")
    assert lang == "bash"
    (tmp_path / "campaign-mf.yaml").write_text(spec_text)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = dict(os.environ, PATH=os.pathsep.join([str(ROOT / ".venv/bin"), os.environ.get("PATH", "")]))

    def rows(script: str) -> tuple[list[str], list[list[int]]]:
        out = subprocess.run(
            ["bash", "-c", "set -e\n" + script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=scaled(60),
        )
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        return lines, [
            [int(v) for v in ln.split()[:4]] for ln in lines if ln.strip()[:1].isdigit() and len(ln.split()) == 8
        ]

    lines, table = rows(text)
    assert lines[1].startswith("each trial a configuration climbing its mf ladder: leases of 1f x 1e by 1, "), lines
    assert table and all(g * f * r == 8 and r == 1 for _, g, f, r in table), table
    # Without the campaign's max_parallel of 2, every trial group may run a configuration:
    # the ladder's one-fold leases put one fold group in each, eight of them.
    spec = yaml.safe_load(spec_text)
    del spec["budget"]["max_parallel"]
    (tmp_path / "campaign-mf.yaml").write_text(yaml.safe_dump(spec))
    _, table = rows(text)
    assert table[0][1:] == [8, 1, 1], table
    # The same campaign under bo trains all five folds of every trial: wider groups win.
    spec["algorithm"] = {"name": "bo", "seed": 0}
    (tmp_path / "campaign-mf.yaml").write_text(yaml.safe_dump(spec))
    lines, table = rows(text)
    assert not lines[1].startswith("each trial"), lines
    assert table[0][2] > 1, table


def test_every_marked_block_belongs_to_a_test() -> None:
    names = {m.group(1) for page in (ROOT / "docs").rglob("*.md") for m in MARK.finditer(page.read_text())}
    # first-campaign and plan run here; task-skeleton and task-try in test_try.py;
    # embedded-quickstart in tests/server/test_embedded.py; mf-campaign in
    # tests/server/test_mf_campaign.py; mf-plan here; optuna-quickstart in
    # tests/server/test_optuna_facade.py; analysis-campaign in
    # tests/agent/test_analysis_agent.py, and analyse-request; time-to-target in
    # tests/agent/test_target.py; constraints-spec and constraints-optuna in
    # tests/server/test_constraints.py.
    # (The docs-file blocks of the scripts guide are written out and run by
    # tests/agent/test_script_task.py.)
    tested = {
        "first-campaign",
        "plan",
        "task-skeleton",
        "task-try",
        "embedded-quickstart",
        "mf-campaign",
        "mf-plan",
        "optuna-quickstart",
        "analysis-campaign",
        "time-to-target",
        "analyse-request",
        "constraints-spec",
        "constraints-optuna",
    }
    assert names == tested, f"a docs-test name without a test (or a test without its block): {names ^ tested}"
