"""The input pipeline under a real agent: loader workers read file-backed shards, a
fold preempted mid-epoch resumes to exactly where an uninterrupted one ends, folds
keep each shard whole, and a parameter server's master never builds the dataset."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.agents import AgentServer, agent_spec, dump, final_state, preempt_after_first_epoch, trial_json
from tests.helpers.clients import Client

pytestmark = pytest.mark.mpi


TASK = "tests/agent/tasks.py:FileRegression"


def _spec(scheme: str = "allreduce", workers: int = 2, **options: Any) -> dict[str, Any]:
    return agent_spec(
        TASK,
        space={
            "lr": {"type": "real", "low": 1e-3, "high": 0.05, "scale": "log"},
            "width": {"type": "int", "low": 4, "high": 32},
            "batch_size": {"type": "categorical", "choices": [4]},  # 48 steps per epoch and rank
        },
        folds=1,
        budget={"max_trials": 1, "max_parallel": 1},
        training={
            "task": TASK,
            "scheme": scheme,
            "ranks_per_fold": 4,
            "epochs": 3,
            "options": {"folds_by": "group", "loader": {"workers": workers, "prefetch": 3}, **options},
        },
    )


def test_a_fold_preempted_mid_epoch_with_loader_workers_resumes_to_where_an_uninterrupted_one_ends(
    agent_server: AgentServer, tmp_path: Path
) -> None:
    data = {"HPCOPT_TEST_DATA": str(tmp_path)}
    spec = _spec()
    whole = agent_server.submit(spec)
    result = agent_server.run_agent(4, whole, **data)
    assert result.returncode == 0, dump(result)
    [reference] = agent_server.client().list_trials(whole)
    # Loader workers (processes other than the ranks) did the reading, on every rank.
    readers = {p.name.split(".")[1] for p in tmp_path.glob("read.*")}
    assert readers == {"0", "1", "2", "3"}, sorted(p.name for p in tmp_path.glob("read.*"))
    metrics = trial_json(agent_server, reference.id)["folds"][0]["metrics"]
    assert metrics["samples_per_second"] > 0, metrics

    cut = agent_server.submit(spec)
    stopped = preempt_after_first_epoch(agent_server, cut, HPCOPT_TEST_STEP_SLEEP="0.05", **data)
    [trial] = agent_server.client().list_trials(cut)
    resumed = agent_server.run_agent(4, cut, **data)
    assert resumed.returncode == 0, dump(resumed)
    # Mid-epoch: the checkpoint's position is inside an epoch, not at its start; the
    # preemption and the resume name the same position, counted alike (issue 62).
    where = re.search(r"resuming fold 0 at (epoch \d+/\d+, after batch (\d+))", resumed.stderr)
    assert where and int(where[2]) > 0, dump(resumed)
    assert f"preempted at {where[1]};" in stopped, stopped
    assert trial_json(agent_server, trial.id)["state"] == "COMPLETED"
    want, got = final_state(agent_server, reference.id, 3), final_state(agent_server, trial.id, 3)
    for name, tensor in want["models"]["model"].items():
        assert got["models"]["model"][name].equal(tensor), f"{name} differs after the preemption and resume"


def test_a_parameter_server_master_never_builds_the_dataset(agent_server: AgentServer, tmp_path: Path) -> None:
    spec = _spec("downpour", workers=1, downpour={"sub_masters": 1})
    campaign = agent_server.submit(spec)
    result = agent_server.run_agent(4, campaign, HPCOPT_TEST_DATA=str(tmp_path))
    assert result.returncode == 0, dump(result)
    [trial] = agent_server.client().list_trials(campaign)
    assert trial_json(agent_server, trial.id)["state"] == "COMPLETED"
    # Fold rank 0 is the master, 1 the sub-master; 2 and 3 are the workers that read.
    assert sorted(p.name for p in tmp_path.glob("built.*")) == ["built.2", "built.3"]
    assert {p.name.split(".")[1] for p in tmp_path.glob("read.*")} == {"2", "3"}


@pytest.mark.parametrize(
    "options,field",
    [
        ({"loader": {"workers": -1}}, "training.options.loader.workers"),
        ({"loader": {"prefetch": 0}}, "training.options.loader.prefetch"),
        ({"loader": {"pin": True}}, "training.options.loader.pin"),
        ({"loader": 4}, "training.options.loader"),
        ({"folds_by": "file"}, "training.options.folds_by"),
        ({"precision": "fp8"}, "training.options.precision"),
        ({"cudnn_benchmark": "yes"}, "training.options.cudnn_benchmark"),
    ],
)
def test_bad_input_options_are_refused_at_submission_naming_the_field(
    agent_server: AgentServer, options: dict[str, Any], field: str
) -> None:
    import hpcopt

    spec = _spec()
    spec["training"]["options"] = options
    with Client(agent_server.target) as c:
        before = len(c.list_campaigns())
        with pytest.raises(hpcopt.ApiError) as err:
            c.create_campaign(spec)
        assert err.value.code == "INVALID_ARGUMENT" and f"{field}:" in str(err.value), str(err.value)
        assert len(c.list_campaigns()) == before  # nothing was stored
