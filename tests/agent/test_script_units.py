"""Script tasks without MPI: what the spec refuses (naming the field), how arguments
are filled, what the agent's owner allows, which checkpoint URIs the server takes, and
the script's API outside an agent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hpcopt.core.checkpoints import check_reported
from hpcopt.core.spec import parse_spec
from hpcopt.errors import CheckpointRefused, SpecError
from hpcopt_agent.script import Script, load_script
from hpcopt_agent.trust import TaskPolicy, TaskRefused
from tests.helpers.env import ROOT, scaled

SERVER = "0123456789abcdef0123456789abcdef"


def spec(task: Any, **extra: Any) -> dict[str, Any]:
    return {
        "name": "s",
        "objective": {"metric": "val_loss"},
        "space": {"lr": {"type": "real", "low": 1e-4, "high": 0.1, "scale": "log"}},
        "budget": {"max_trials": 4},
        "folds": 2,
        "training": {"task": task, **extra.pop("training", {})},
        **extra,
    }


def errors(doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as err:
        parse_spec(doc)
    return list(err.value.errors)


def test_a_script_spec_is_stored_as_given() -> None:
    task = {"script": "train.py", "args": ["--lr", "{lr}", "--out={checkpoint_dir}/x", "{{literal}}"]}
    parsed = parse_spec(spec(task))
    assert parsed.training is not None and parsed.training.task.model_dump() == task  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("task", "extra", "field", "says"),
    [
        ({"script": "train.py"}, {"training": {"scheme": "downpour"}}, "training.scheme", "allreduce only"),
        ({"script": "train.py"}, {"algorithm": {"name": "pbt"}}, "algorithm.name", "script task"),
        ({"script": "train.py", "args": ["--lr", "{lrr}"]}, {}, "training.task.args.1", "did you mean 'lr'"),
        ({"script": "train.py", "args": ["{lr.__class__}"]}, {}, "training.task.args.0", "plain name"),
        ({"script": "train.py", "args": ["{lr"]}, {}, "training.task.args.0", "literal braces"),
        ({"script": "../train.py"}, {}, "training.task.script", "'..'"),
        ({"script": "/abs/train.py"}, {}, "training.task.script", "not absolute"),
        ({"script": "train.sh"}, {}, "training.task.script", "ending in .py"),
        ({"script": "train.py", "argv": []}, {}, "training.task.argv", "did you mean 'args'"),
        ({"script": "train.py", "args": ["a\x1b[2J"]}, {}, "training.task.args.0", "control characters"),
    ],
)
def test_a_bad_script_spec_names_the_field(task: Any, extra: dict[str, Any], field: str, says: str) -> None:
    found = errors(spec(task, **extra))
    assert any(f == field and says in m for f, m in found), found


def test_the_arguments_are_filled_one_argument_each() -> None:
    script = Script(Path("/x/train.py"), ("--lr", "{lr}", "--name={name}", "{{x}}"))
    assert script.command({"lr": 0.01, "name": "a b; rm -rf /"}) == ["--lr", "0.01", "--name=a b; rm -rf /", "{x}"]
    with pytest.raises(ValueError, match=r"training\.task\.args"):
        script.command({"lr": 0.01})


def test_the_task_root_holds_the_script(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub/train.py").write_text("")
    (tmp_path / "evil.py").write_text("")
    (root / "link.py").symlink_to(tmp_path / "evil.py")
    policy = TaskPolicy.of(root)
    assert load_script("sub/train.py", (), policy).path == root / "sub/train.py"
    with pytest.raises(TaskRefused, match="outside this agent's task root"):
        load_script("link.py", (), policy)
    with pytest.raises(ValueError, match="no file"):
        load_script("missing.py", (), policy)
    with pytest.raises(ValueError, match=r"'\.\.'"):
        load_script("../evil.py", (), policy)


@pytest.mark.parametrize(
    ("uri", "ok"),
    [
        (f"file:///ck/{SERVER}/1/5/fold0", True),
        (f"file:///ck/{SERVER}/1/5/fold0.pt", True),
        (f"file:///ck/{SERVER}/1/5/fold1", False),
        (f"file:///ck/{SERVER}/1/6/fold0", False),
        (f"file:///ck/{SERVER}/1/5/fold0/../../6/fold0", False),
        (f"/ck/{SERVER}/1/5/fold0", False),
    ],
)
def test_the_server_takes_a_script_folder_only_for_its_own_trial_and_fold(uri: str, ok: bool) -> None:
    if ok:
        check_reported(uri, SERVER, 5, 0)
    else:
        with pytest.raises(CheckpointRefused):
            check_reported(uri, SERVER, 5, 0)


def run_script(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("HPCOPT_TRIAL")}
    full.update(PYTHONPATH=str(ROOT), **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=scaled(120))


def test_outside_an_agent_the_api_answers_so_the_same_script_runs() -> None:
    out = run_script(
        "import sys; from hpcopt_agent import trial\n"
        "tr, va = trial.split(10)\n"
        "print(trial.active, trial.params, len(tr), len(va), trial.report(1, val_loss=0.5), trial.should_checkpoint(),"
        " trial.checkpoint_dir, 'torch' in sys.modules)",
        {},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "{}", "10", "0", "continue", "False", "None", "False"]


def test_the_split_is_the_agents_split_of_a_task() -> None:
    from hpcopt_agent.folds import splits

    info = {"params": {"lr": 0.1}, "fold": 1, "folds": 3, "fold_seed": 7, "epochs": 2}
    out = run_script(
        "import json; from hpcopt_agent import trial\n"
        "tr, va = trial.split(50)\n"
        "print(json.dumps([tr.tolist(), va.tolist()]))",
        {"HPCOPT_TRIAL": json.dumps(info)},
    )
    assert out.returncode == 0, out.stderr
    train, validation = splits(50, 3, 7)[1]
    assert json.loads(out.stdout) == [train.tolist(), validation.tolist()]


def test_a_metric_that_is_not_a_number_is_named() -> None:
    out = run_script(
        "from hpcopt_agent import trial\ntrial.report(1, val_loss='low')", {"HPCOPT_TRIAL": json.dumps({"fold": 0})}
    )
    assert out.returncode != 0 and "metric 'val_loss' must be a number, got str" in out.stderr, out.stderr
