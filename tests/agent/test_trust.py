"""A campaign cannot choose what code an agent runs: the agent's owner does
(``hpcopt_agent/trust.py``). A submit token used to make an agent import and run
``../../../evil/payload.py:Evil``, and ``os:abort``, ``sys:exit`` and ``this:s`` each
crashed or stopped one. Now the server refuses what is never a task reference, and the
agent refuses, without importing it, what its owner does not allow: it logs why, tells
the server (the campaign's agents list shows it) and takes no trial."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpcopt import ApiError
from hpcopt_agent.task import TaskError, load_task
from hpcopt_agent.trust import TaskPolicy, TaskRefused
from tests.helpers import web
from tests.helpers.agents import AgentServer, agent_spec, dump
from tests.helpers.env import ROOT, scaled

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


REFUSED_MODULES = ["os:abort", "sys:exit", "this:s", "json:loads", "torch:Tensor", "grpc:server"]


def test_a_module_outside_the_task_root_is_refused_without_importing_it() -> None:
    """In a fresh interpreter (``this`` prints the Zen of Python when imported), from the
    repository root: the standard library and installed packages are not the project's."""
    code = (
        "import sys\nfrom hpcopt_agent.task import load_task\nfrom hpcopt_agent.trust import TaskPolicy, TaskRefused\n"
        f"for ref in {REFUSED_MODULES!r}:\n"
        "    try:\n        load_task(ref, TaskPolicy.of(None))\n        print('LOADED', ref)\n"
        "    except TaskRefused as e:\n        print('REFUSED', e)\n"
        "print('this imported' if 'this' in sys.modules else 'this not imported')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=scaled(120))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == len(REFUSED_MODULES) + 1, out.stdout
    for ref, line in zip(REFUSED_MODULES, lines, strict=False):
        assert line.startswith(f"REFUSED training.task {ref!r}") and "no --allow-module names it" in line, line
    assert lines[-1] == "this not imported" and "Zen of Python" not in out.stdout


def test_a_task_file_that_escapes_the_task_root_by_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir(), outside.mkdir()
    (outside / "payload.py").write_text("raise SystemExit('the payload ran')\n")
    (root / "task.py").symlink_to(outside / "payload.py")
    (root / "sub").symlink_to(outside, target_is_directory=True)
    for ref in ("task.py:Evil", "sub/payload.py:Evil"):
        with pytest.raises(TaskRefused, match=r"outside this agent's task root"):
            load_task(ref, TaskPolicy.of(root))
    for ref in ("../outside/payload.py:Evil", "/etc/passwd.py:X"):
        with pytest.raises(TaskError, match=r"'\.\.'|not absolute"):
            load_task(ref, TaskPolicy.of(root))


def test_allowed_modules_are_named_by_prefix_and_only_tasks_are_called(tmp_path: Path) -> None:
    assert load_task("tests.agent.tasks:Regression", TaskPolicy.of(ROOT)) is not None  # under the root
    with pytest.raises(TaskRefused):
        load_task("tests.agent.tasks:Regression", TaskPolicy.of(tmp_path))  # another root
    assert load_task("tests.agent.tasks:Regression", TaskPolicy.of(tmp_path, ["tests.agent"])) is not None
    with pytest.raises(TaskRefused):
        load_task("tests.agentx:T", TaskPolicy.of(tmp_path, ["tests.agent"]))  # a prefix of names, not of text
    # A function imported from elsewhere is not called (``from os import abort as task`` was).
    (tmp_path / "imported.py").write_text("from platform import python_version as task\n")
    with pytest.raises(TaskError, match=r"gave a function, not an hpcopt_agent\.Task"):
        load_task("imported.py:task", TaskPolicy.of(tmp_path))
    with pytest.raises(ValueError, match="--allow-module must be a dotted module name"):
        TaskPolicy.of(tmp_path, ["os;rm"])


def test_the_server_refuses_what_is_never_a_task_reference_naming_the_field(agent_server: AgentServer) -> None:
    for ref in ["../../../evil/payload.py:Evil", "/tmp/evil.py:Evil", "a\x1b[2J.py:T", "x.py:not-a-name", "os.:x"]:
        with pytest.raises(ApiError) as err:
            agent_server.submit(agent_spec(task=ref))
        assert err.value.code == "INVALID_ARGUMENT" and "training.task" in str(err.value), (ref, err.value)
        rest = web.post(agent_server.url + "/api/v1/campaigns", json=agent_spec(task=ref), timeout=scaled(30))
        assert rest.status_code == 422 and "training.task" in rest.text, (ref, rest.text)


@pytest.mark.parametrize(
    ("ref", "why"),
    [("os:abort", "is not allowed by this agent"), ("escape.py:Evil", "outside this agent's task root")],
)
def test_an_agent_refuses_a_task_its_owner_does_not_allow_and_tells_the_server(
    agent_server: AgentServer, tmp_path: Path, ref: str, why: str
) -> None:
    root, outside = tmp_path / "tasks", tmp_path / "outside"
    root.mkdir(), outside.mkdir()
    (outside / "payload.py").write_text("import os\nos.abort()\n")
    (root / "escape.py").symlink_to(outside / "payload.py")  # in the task root, pointing out of it
    campaign = agent_server.submit(agent_spec(task=ref, folds=4))
    result = agent_server.run_agent(4, campaign, "--task-root", str(root), timeout=scaled(180))
    assert result.returncode == 2, dump(result)
    assert "refusing to start: training.task" in result.stderr and why in result.stderr, dump(result)
    assert result.stderr.count("refusing to start") == 1 and "MPI_Abort" not in result.stderr, dump(result)
    agents = web.get(f"{agent_server.url}/api/v1/campaigns/{campaign}/agents", timeout=scaled(30)).json()
    assert len(agents) == 1 and agents[0]["exited_at"] and agents[0]["gone"], agents
    assert agents[0]["exit_reason"].startswith("refused to start: training.task") and why in agents[0]["exit_reason"]
    trials = web.get(f"{agent_server.url}/api/v1/campaigns/{campaign}/trials", timeout=scaled(30)).json()
    assert all(t["state"] == "QUEUED" for t in trials.get("trials", trials)), trials  # it took no trial
