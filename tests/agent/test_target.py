"""Time to a target under a real agent (``mpiexec -n 4``, two fold groups of 2 ranks):
a fold that meets ``training.target`` keeps the seconds at which it met it for the rest
of its epochs; one that never meets it counts twice its whole time; rank-seconds are
the fold group's ranks times the seconds; the trial's objective is the folds' mean."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from hpcopt.core.spec import parse_spec
from hpcopt.core.target import MISSED, clock
from hpcopt.errors import SpecError
from tests.agent.test_docs_blocks import docs_blocks
from tests.helpers.agents import AgentServer, agent_spec, dump, trial_json
from tests.helpers.env import ROOT

pytestmark = pytest.mark.mpi


def _campaign(server: AgentServer, name: str, at_most: float, objectives: list[dict[str, Any]]) -> int:
    spec = agent_spec(
        name=name,
        objective=objectives[0],
        budget={"max_trials": 1, "max_parallel": 1},
        training={
            "task": "tests/agent/tasks.py:Regression",
            "epochs": 3,
            "ranks_per_fold": 2,
            "target": {"metric": "rmse", "at_most": at_most},
        },
    )
    if len(objectives) > 1:
        spec["objectives"] = objectives
    return server.submit(spec)


def test_a_fold_keeps_the_seconds_it_met_the_target_at_and_one_that_misses_counts_double(
    agent_server: AgentServer,
) -> None:
    seconds = {"metric": "seconds_to_target", "direction": "minimize"}
    met = _campaign(agent_server, "met", 1e9, [seconds])  # every rmse meets it: at epoch 1
    missed = _campaign(agent_server, "missed", -1.0, [{"metric": "rmse", "direction": "minimize"}, seconds])
    for campaign in (met, missed):
        result = agent_server.run_agent(4, campaign, "--groups", "2")
        assert result.returncode == 0, dump(result)
    with agent_server.client() as c:
        [trial] = [c.get_trial(t.id) for t in c.list_trials(met)]
        assert trial.state == "COMPLETED"
        curves = trial_json(agent_server, trial.id)["curves"]
        for f in trial.folds:
            m = f.metrics
            assert m["target_reached"] == 1.0
            # Met after the first of three epochs: a third or so of the fold's time,
            # and the same at every epoch after (the curve is the objective's).
            assert 0 < m["seconds_to_target"] < m["train_seconds"]
            assert m["rank_seconds_to_target"] == pytest.approx(2 * m["seconds_to_target"])
            points = [p["value"] for p in curves if p["fold"] == f.index]
            assert points == [m["seconds_to_target"]] * 3, curves
        assert trial.value == pytest.approx(sum(f.metrics["seconds_to_target"] for f in trial.folds) / 2)

        [trial] = [c.get_trial(t.id) for t in c.list_trials(missed)]
        assert trial.state == "COMPLETED"
        for f in trial.folds:
            m = f.metrics
            assert m["target_reached"] == 0.0
            assert m["seconds_to_target"] == pytest.approx(MISSED * m["train_seconds"])
            assert m["rank_seconds_to_target"] == pytest.approx(2 * MISSED * m["train_seconds"])
        assert trial.values[1] == pytest.approx(sum(f.metrics["seconds_to_target"] for f in trial.folds) / 2)


def test_the_clock_keeps_a_met_target_across_a_resume_and_grows_while_it_is_missed() -> None:
    target = {"metric": "acc", "at_least": 0.8}
    first = {"acc": 0.5, "train_seconds": 10.0}
    first |= clock(target, first, {}, 4)
    assert first["seconds_to_target"] == MISSED * 10 and first["target_reached"] == 0.0
    second = {"acc": 0.85, "train_seconds": 20.0}
    second |= clock(target, second, first, 4)
    assert (second["seconds_to_target"], second["rank_seconds_to_target"], second["target_reached"]) == (20, 80, 1)
    # The metrics a checkpoint keeps are the ``before`` of the epoch after a resume, on
    # another layout: the figures stay those of the epoch that met it.
    third = {"acc": 0.7, "train_seconds": 35.0}
    assert clock(target, third, second, 8) == {
        "seconds_to_target": 20.0,
        "rank_seconds_to_target": 80.0,
        "target_reached": 1.0,
    }
    assert (
        clock({"metric": "loss", "at_most": 0.3}, {"loss": float("nan"), "train_seconds": 5.0}, {}, 1)["target_reached"]
        == 0.0
    )
    assert clock(None, third, second, 8) == {}


def test_the_guides_target_is_a_valid_spec_and_without_the_target_is_refused_naming_the_objective() -> None:
    [(lang, text)] = docs_blocks("time-to-target")
    assert lang == "yaml"
    fragment = yaml.safe_load(text)
    spec = yaml.safe_load((ROOT / "examples/digits/campaign-time-to-target.yaml").read_text())
    spec["objectives"] = fragment["objectives"]
    spec["training"].update(fragment["training"])
    assert parse_spec(spec).training.target.metric == fragment["training"]["target"]["metric"]  # type: ignore[union-attr]
    del spec["training"]["target"]
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    assert [f for f, _ in err.value.errors] == ["objectives.1.metric"]


def test_a_script_that_prints_only_its_last_metrics_gets_its_seconds_and_the_targets_figures(
    agent_server: AgentServer,
) -> None:
    """A script task that reports no epoch, only a final ``hpcopt-metrics`` line: the
    agent adds the fold's seconds and the target's figures to that line's metrics, so an
    objective on them is met (it failed for want of them before)."""
    from tests.agent.test_script_task import SCRIPTS, script_spec

    args = ["--lr", "{lr}", "--fold", "{fold}", "--params-file", "{params_file}"]
    spec = script_spec(
        f"{SCRIPTS}/printer.py",
        args,
        budget={"max_trials": 1, "max_parallel": 1},
        objective={"metric": "seconds_to_target", "direction": "minimize"},
        training={"ranks_per_fold": 1, "target": {"metric": "val_loss", "at_most": 1e9}},
    )
    campaign = agent_server.submit(spec)
    result = agent_server.run_agent(1, campaign, "--groups", "1")
    assert result.returncode == 0, dump(result)
    with agent_server.client() as c:
        [trial] = [c.get_trial(t.id) for t in c.list_trials(campaign)]
    assert trial.state == "COMPLETED", dump(result)
    for f in trial.folds:
        m = f.metrics
        assert m["target_reached"] == 1.0 and 0 < m["seconds_to_target"] == m["train_seconds"], m
        assert m["rank_seconds_to_target"] == m["seconds_to_target"]  # one rank per fold
