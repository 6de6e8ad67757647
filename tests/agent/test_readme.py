"""The README's "By hand" block, run as written: a newcomer copies it into a shell on a
fresh machine (root, 2 cores) and every line must work."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.agent.conftest import mpi_env, mpiexec_path
from tests.conftest import ROOT, free_port

pytestmark = pytest.mark.timeout(300)


def readme_block(after: str) -> list[str]:
    """The command lines of the first fenced block after the line starting with ``after``."""
    text = (ROOT / "README.md").read_text()
    start = text.index("\n" + after)
    block = re.search(r"```\n(.*?)```", text[start:], re.S)
    assert block, f"no code block after {after!r} in README.md"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_by_hand_commands_work_as_written(tmp_path: Path) -> None:
    mpiexec_path()  # a failure under CI=true when MPI is missing
    lines = readme_block("By hand")
    assert lines[0].startswith("source .venv/bin/activate") and lines[1].startswith("hpcopt-server serve &")
    # The working directory is a scratch copy of the repository root: its .venv and the
    # digits example by symlink, the campaign cut to 4 trials of 2 epochs.
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples/digits").mkdir()
    (tmp_path / "examples/digits/task.py").symlink_to(ROOT / "examples/digits/task.py")
    spec = yaml.safe_load((ROOT / "examples/digits/campaign.yaml").read_text())
    spec["budget"]["max_trials"], spec["training"]["epochs"] = 4, 2
    (tmp_path / "examples/digits/campaign.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    rest, grpc_port = free_port(), free_port()
    # Typed by hand, line 3 comes seconds after the server started; a script waits for it.
    wait = f"for _ in $(seq 150); do (exec 3<>/dev/tcp/127.0.0.1/{grpc_port}) 2>/dev/null && break; sleep 0.2; done"
    script = "\n".join(
        ["set -e", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT", lines[0], lines[1], wait, *lines[2:]]
    )
    env = mpi_env(HPCOPT_PORT=str(rest), HPCOPT_GRPC_PORT=str(grpc_port), HPCOPT_SERVER=f"127.0.0.1:{grpc_port}")
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # the agent's default checkpoint folder is under it
    for name in ("VIRTUAL_ENV", "SCRATCH", "HPCOPT_CHECKPOINT_DIR", "HPCOPT_DB", "HPCOPT_TOKEN"):
        env.pop(name, None)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-6000:]
    for expected in (
        "campaign 1 'digits-mlp' submitted",
        "stopping after",
        "imported as campaign 2 'digits-mlp' (COMPLETED)",
        "campaign 3 'digits-mlp' submitted",
        "campaign 3 CANCELLED",
        "learning curves",
    ):
        assert expected in text, f"{expected!r} not in the output:\n{text[-6000:]}"
    assert (tmp_path / "hpcopt.db").exists() and (tmp_path / "campaign-1.json").exists()
