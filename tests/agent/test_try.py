"""``hpcopt-agent try``: the task guide's skeleton and its try command, run as the page
writes them; a task that raises shows its own traceback; bad input is refused naming
the flag; ``--ranks 4`` runs under mpiexec."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agent.test_docs_blocks import docs_blocks
from tests.helpers.agents import mpi_env
from tests.helpers.env import ROOT, scaled

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(300)]

BROKEN = """
import torch
from torch import nn
from torch.utils.data import TensorDataset

from hpcopt_agent import Task


class Broken(Task):
    def dataset(self):
        return TensorDataset(torch.randn(64, 4), torch.randn(64, 1))

    def build(self, params):
        return nn.Linear(4, 1)

    def optimizer(self, params, model):
        return torch.optim.SGD(model.parameters(), lr=params["lr"])

    def loss(self, output, batch):
        return nn.functional.mse_loss(output, batch[1])

    def evaluate(self, model, batches, params):
        return {"val_loss": self.helper_that_breaks()}

    def helper_that_breaks(self):
        raise KeyError("no_such_column")
"""


def agent_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = mpi_env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        [sys.executable, "-m", "hpcopt_agent", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(240),
    )


def test_the_guides_skeleton_trains_with_the_guides_try_command(tmp_path: Path) -> None:
    [(lang, skeleton)] = docs_blocks("task-skeleton")
    [(_, command)] = docs_blocks("task-try")
    assert lang == "python" and "import torch" in skeleton and "from hpcopt_agent import Task" in skeleton
    (tmp_path / "mytask.py").write_text(skeleton)
    env = mpi_env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    out = subprocess.run(
        ["bash", "-ec", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled(240)
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "trial: COMPLETED" in text and "fold 1: val_loss=" in text and "samples/s per fold:" in text
    assert "a campaign would record: val_loss = " in text
    assert "Traceback" not in text
    # Nothing of the run is left where it ran (its database and checkpoints were temporary).
    assert {p.name for p in tmp_path.iterdir()} <= {"mytask.py", "__pycache__"}


def test_a_task_that_raises_is_shown_with_its_own_traceback(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text(BROKEN)
    out = agent_cli("try", "broken.py:Broken", "--params", "lr=0.1", "--folds", "2", cwd=tmp_path)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "trial: FAILED" in text and "the task failed:" in text
    assert 'broken.py", line' in text and "helper_that_breaks" in text and "KeyError: 'no_such_column'" in text


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["examples/digits/task.py:DigitsTask", "--params", "lr"], "--params"),
        (["examples/digits/task.py:DigitsTask"], "--params"),
        (["/etc/passwd.py:X", "--params", "lr=1"], "the task"),
        (["examples/digits/task.py:DigitsTask", "--params", "lr=1", "--folds", "0"], "--folds"),
        (["examples/digits/task.py:DigitsTask", "--params", "lr=1", "--options", "{nope"], "Expecting"),
        (["examples/digits/task.py:DigitsTask", "--params", "lr=1", "--threads", "0"], "--threads must be at least 1"),
    ],
)
def test_bad_input_is_refused_naming_what_is_wrong(tmp_path: Path, args: list[str], names: str) -> None:
    out = agent_cli("try", *args, cwd=ROOT)
    assert out.returncode == 2 and names in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_a_misspelt_params_name_is_refused_with_what_the_task_asked_for(tmp_path: Path) -> None:
    """The task reads ``params.get("width", 16)``: ``widht=32`` trained a width of 16,
    so the run ends with status 2 naming the slip; the trial keeps it as an event."""
    args = ["try", "tests/agent/tasks.py:Regression", "--metric", "loss", "--threads", "1"]
    out = agent_cli(*args, "--params", "lr=0.05,widht=32", cwd=ROOT)
    text = out.stdout + out.stderr
    assert out.returncode == 2, text
    assert "trial: COMPLETED" in text and "torch: 1 thread(s) per rank (--threads)" in text, text
    assert (
        "hpcopt-agent try: --params: the task never read parameter(s) widht; it asked for batch_size, width, which the "
        "trial does not have (a slip? 'widht' for 'width')"
    ) in out.stderr, text
    fine = agent_cli(*args, "--params", "lr=0.05,width=32", cwd=ROOT)
    assert fine.returncode == 0 and "never read" not in fine.stdout + fine.stderr, fine.stdout + fine.stderr


def test_four_ranks_run_under_mpiexec(tmp_path: Path) -> None:
    from tests.helpers.agents import mpiexec_path

    mpiexec_path()  # a failure under CI=true when MPI is missing
    (tmp_path / "mytask.py").write_text(docs_blocks("task-skeleton")[0][1])
    out = agent_cli("try", "mytask.py:MyTask", "--params", "lr=0.01,width=32", "--ranks", "4", cwd=tmp_path)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "4 ranks = 1 trial group(s)" in text and "trial: COMPLETED" in text
