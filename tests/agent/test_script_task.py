"""Script tasks under a real agent (``mpiexec``): the docs' DDP script as written, on 4
ranks with its 2 folds side by side, preempted once and resumed from its own checkpoint;
a script that ignores the stop is still ended before the walltime; a crash on one rank
fails the fold with that rank's stderr instead of hanging the other; a script that only
prints its metrics line completes."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.agents import AgentServer, agent_spec, alive, dump, kill_group, rank_pids, trial_json, wait_for
from tests.helpers.env import ROOT, scaled

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(900)]
FILE = re.compile(r"<!-- docs-file: ([\w.-]+) -->\n```\w+\n(.*?)```", re.S)
SCRIPTS = "tests/agent/script_tasks"


def docs_files(page: str) -> dict[str, str]:
    found = {m.group(1): m.group(2) for m in FILE.finditer((ROOT / page).read_text())}
    assert found, f"no docs-file block in {page}"
    return found


def script_spec(script: str, args: list[str], **overrides: Any) -> dict[str, Any]:
    training = {"task": {"script": script, "args": args}, "epochs": 3, "ranks_per_fold": 2}
    overrides.setdefault("objective", {"metric": "val_loss", "direction": "minimize"})
    return agent_spec(training={**training, **overrides.pop("training", {})}, **overrides)


def test_the_docs_ddp_script_runs_as_written_two_folds_at_once_preempted_and_resumed(
    agent_server: AgentServer, tmp_path: Path
) -> None:
    files = docs_files("docs/guides/scripts.md")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    spec = yaml.safe_load(files["campaign.yaml"])
    spec["budget"] = {"max_trials": 1, "max_parallel": 1}
    campaign = agent_server.submit(spec)
    extra = ("--groups", "1", "--task-root", str(tmp_path))
    log = tmp_path / "first.log"
    agent = agent_server.start_agent(4, campaign, *extra, log=log)
    try:
        # Both folds' scripts are starting (importing torch): the job is told to stop, as
        # Slurm's --signal=USR1 does; each script learns it at its first report.
        wait_for(lambda: log.read_text().count("started train.py on 2 rank(s)") == 2, scaled(120), "both folds")
        for pid in rank_pids(agent):
            subprocess.run(["kill", "-USR1", str(pid)], check=False)
        assert agent.wait(timeout=scaled(180)) == 0, log.read_text()
    finally:
        if agent.poll() is None:
            kill_group(agent)
    first = log.read_text()
    assert "PREEMPTED" in first, first
    with agent_server.client() as c:
        (trial,) = c.list_trials(campaign)
    assert trial.state == "QUEUED", trial
    done_before = {(p["fold"], p["step"]) for p in trial_json(agent_server, trial.id)["curves"]}
    result = agent_server.run_agent(4, campaign, *extra)
    assert result.returncode == 0, dump(result)
    assert result.stderr.count("(resuming from") == 2, dump(result)
    final = trial_json(agent_server, trial.id)
    assert final["state"] == "COMPLETED" and final["attempt"] == 2, final
    epochs = spec["training"]["epochs"]
    for fold in (0, 1):
        steps = sorted(p["step"] for p in final["curves"] if p["fold"] == fold)
        # Every epoch once: the resumed attempt went on from the checkpoint, not from epoch 1.
        assert steps == list(range(1, epochs + 1)), (fold, steps, done_before)
        assert final["folds"][fold]["checkpoint_uri"].endswith(f"/{trial.id}/fold{fold}"), final["folds"]
    assert done_before, "the first attempt reported the epoch it checkpointed"


def test_a_script_that_ignores_the_stop_is_ended_before_the_walltime(agent_server: AgentServer, tmp_path: Path) -> None:
    pids = tmp_path / "pid"
    campaign = agent_server.submit(script_spec(f"{SCRIPTS}/stubborn.py", [str(pids)]))
    limit, reserve = scaled(40), scaled(24)  # the stop at 16 s, the scripts ended 12 s later
    started = time.monotonic()
    result = agent_server.run_agent(
        2, campaign, "--groups", "1", "--time-limit", f"{limit:.0f}", "--reserve", f"{reserve:.0f}"
    )
    took = time.monotonic() - started
    assert result.returncode == 0, dump(result)
    assert "script rank(s) still ran" in result.stderr and "PREEMPTED" in result.stderr, dump(result)
    assert took < limit, f"the job ran {took:.0f} s of its {limit:.0f} s walltime"
    scripts = [int(p.read_text()) for p in tmp_path.glob("pid.*")]
    assert len(scripts) == 2 and not alive(scripts), scripts
    with agent_server.client() as c:
        (trial,) = c.list_trials(campaign)
    assert trial.state == "QUEUED", trial


def test_a_crash_on_one_rank_fails_the_fold_with_its_stderr_and_stops_the_other(agent_server: AgentServer) -> None:
    campaign = agent_server.submit(
        script_spec(f"{SCRIPTS}/crash.py", [], folds=1, budget={"max_trials": 1, "max_parallel": 1}, max_attempts=1)
    )
    result = agent_server.run_agent(2, campaign, "--groups", "1")
    assert result.returncode == 0, dump(result)
    with agent_server.client() as c:
        (trial,) = c.list_trials(campaign)
        trial = c.get_trial(trial.id)
    assert trial.state == "FAILED", trial
    # Python exits 1, or aborts (SIGABRT) when gloo's threads outlive the interpreter.
    assert re.search(r"the script on rank 1 (exited with code 1|was killed by SIGABRT)", trial.error), trial.error
    assert "RuntimeError: rank 1 ran out of patience" in trial.error, trial.error
    assert "about to fail" in trial.error, "the stderr tail"


def test_a_script_that_prints_its_metrics_line_completes_and_one_that_does_not_fails(
    agent_server: AgentServer,
) -> None:
    args = ["--lr", "{lr}", "--fold", "{fold}", "--params-file", "{params_file}"]
    good = agent_server.submit(
        script_spec(
            f"{SCRIPTS}/printer.py", args, budget={"max_trials": 2, "max_parallel": 2}, training={"ranks_per_fold": 1}
        )
    )
    result = agent_server.run_agent(2, good, "--groups", "2")
    assert result.returncode == 0, dump(result)
    with agent_server.client() as c:
        trials = c.list_trials(good)
    assert [t.state for t in trials] == ["COMPLETED", "COMPLETED"], dump(result)
    for t in trials:  # the mean over folds 0 and 1 of lr * 100 + fold
        assert t.value == pytest.approx(t.params["lr"] * 100 + 0.5), t
    silent = agent_server.submit(
        script_spec(
            f"{SCRIPTS}/printer.py",
            [*args, "--silent"],
            budget={"max_trials": 1, "max_parallel": 1},
            max_attempts=1,
            training={"ranks_per_fold": 1},
        )
    )
    result = agent_server.run_agent(1, silent, "--groups", "1")
    assert result.returncode == 0, dump(result)
    with agent_server.client() as c:
        (trial,) = c.list_trials(silent)
        trial = c.get_trial(trial.id)
    assert trial.state == "FAILED" and "without a finite 'val_loss'" in trial.error, trial.error
    assert "hpcopt-metrics" in trial.error, "the message says how to report"


def test_a_script_outside_the_task_root_is_refused_at_start(agent_server: AgentServer, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "outside.py").write_text("print('never run')\n")
    (root / "link.py").symlink_to(tmp_path / "outside.py")
    campaign = agent_server.submit(script_spec("link.py", []))
    result = agent_server.run_agent(2, campaign, "--groups", "1", "--task-root", str(root))
    assert result.returncode == 2, dump(result)
    assert "outside this agent's task root" in result.stderr, dump(result)
    assert "never run" not in result.stdout


def test_the_docs_lightning_module_reports_and_a_bad_trial_is_pruned(agent_server: AgentServer, tmp_path: Path) -> None:
    for name, text in docs_files("docs/guides/scripts.md").items():
        (tmp_path / name).write_text(text)
    spec = script_spec(
        "lightning_train.py",
        ["--lr", "{lr}", "--width", "{width}"],
        space={
            "lr": {"type": "categorical", "choices": [0.05, 0.03, 1e-7]},  # the last one learns nothing
            "width": {"type": "categorical", "choices": [16]},
        },
        algorithm={"name": "grid"},
        pruner={"name": "median", "options": {"n_startup_trials": 2, "n_warmup_steps": 0}},
        budget={"max_trials": 3, "max_parallel": 1},
        folds=1,
        training={"ranks_per_fold": 1},
    )
    campaign = agent_server.submit(spec)
    result = agent_server.run_agent(1, campaign, "--groups", "1", "--task-root", str(tmp_path))
    assert result.returncode == 0, dump(result)
    with agent_server.client() as c:
        trials = {t.params["lr"]: c.get_trial(t.id) for t in c.list_trials(campaign)}
    assert [trials[lr].state for lr in (0.05, 0.03)] == ["COMPLETED", "COMPLETED"], dump(result)
    bad = trials[1e-7]
    assert bad.state == "PRUNED", (bad, dump(result))
    assert sorted(p.step for p in bad.curves) == [1], "pruned at its first report: no epoch after it"
    assert "the server stopped the trial at epoch 1 (pruned)" in result.stderr, dump(result)
    good = trials[0.05]
    assert sorted(p.step for p in good.curves) == [1, 2, 3], "the callback reported every epoch"
