"""``hpcopt-agent --tensorboard DIR`` under a real agent: the event files of both doors
(a Task and a script) load with TensorBoard's own reader and hold every fold's curve and
the trial's parameters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.agent.test_script_task import docs_files, script_spec
from tests.helpers.agents import AgentServer, agent_spec, dump

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(600)]


def load(folder: Path) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return acc


def curves(acc: Any, tag: str) -> list[int]:
    return [e.step for e in acc.Scalars(tag)]


@pytest.mark.parametrize("door", ["task", "script"])
def test_every_fold_of_every_trial_has_its_curve_and_hparams(
    agent_server: AgentServer, tmp_path: Path, door: str
) -> None:
    extra: tuple[str, ...] = ()
    if door == "task":
        spec, metric = agent_spec(budget={"max_trials": 2, "max_parallel": 2}), "loss"
    else:
        for name, text in docs_files("docs/guides/scripts.md").items():
            (tmp_path / name).write_text(text)
        args = ["--lr", "{lr}", "--width", "{width}", "--epochs", "{epochs}"]
        spec = script_spec(
            "train.py", args, budget={"max_trials": 2, "max_parallel": 2}, training={"ranks_per_fold": 1}
        )
        metric, extra = "val_loss", ("--task-root", str(tmp_path))
    campaign = agent_server.submit(spec)
    board = tmp_path / "board"
    result = agent_server.run_agent(2, campaign, "--groups", "1", "--tensorboard", str(board), *extra)
    assert result.returncode == 0, dump(result)
    epochs = spec["training"]["epochs"]
    with agent_server.client() as c:
        trials = c.list_trials(campaign)
    assert len(trials) == 2 and all(t.state == "COMPLETED" for t in trials), trials
    for t in trials:
        for fold in range(spec["folds"]):
            folder = board / f"campaign-{campaign}" / f"trial-{t.number}" / f"fold-{fold}"
            acc = load(folder)
            assert curves(acc, metric) == list(range(1, epochs + 1)), (folder, acc.Tags())
            plugins = acc.PluginTagToContent("hparams")
            assert plugins, f"{folder}: no hparams"
            blob = b"".join(plugins.values())
            assert all(name.encode() in blob for name in t.params), (t.params, blob[:200])


def test_mlflow_has_a_run_per_trial_and_a_nested_run_per_fold(agent_server: AgentServer, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    spec = agent_spec(budget={"max_trials": 2, "max_parallel": 2})
    campaign = agent_server.submit(spec)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # Two fold groups: the folds' runs are written by two processes at once.
    result = agent_server.run_agent(2, campaign, "--groups", "1", "--mlflow", uri)
    assert result.returncode == 0, dump(result)
    assert "mlflow:" not in result.stderr, dump(result)  # no write was refused
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(f"hpcopt: {spec['name']} (campaign {campaign})")
    assert experiment is not None
    with agent_server.client() as c:
        trials = c.list_trials(campaign)
    epochs = spec["training"]["epochs"]
    for t in trials:
        (run,) = client.search_runs([experiment.experiment_id], f"tags.`hpcopt.trial_id` = '{t.id}'")
        assert run.info.status == "FINISHED" and run.data.metrics["value"] == pytest.approx(t.value), run
        assert set(run.data.params) == set(t.params), run.data.params
        folds = client.search_runs([experiment.experiment_id], f"tags.`mlflow.parentRunId` = '{run.info.run_id}'")
        assert sorted(f.data.tags["hpcopt.fold"] for f in folds) == ["0", "1"], folds
        for f in folds:
            steps = [m.step for m in client.get_metric_history(f.info.run_id, "loss")]
            assert sorted(steps) == list(range(1, epochs + 1)), (f.data.tags, steps)
            assert f.data.tags["hpcopt.checkpoint"].startswith("file://"), f.data.tags
            assert f.info.status == "FINISHED"
