"""Mixed precision under a real agent at 4 ranks: bf16 and fp16 (with its GradScaler)
in synchronous, parameter-server and pipeline schemes; a task step that skips the
loss scaling is named, not silently trained unscaled."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from hpcopt.core.schemes import TRAITS
from hpcopt_agent.checkpoint import stage_path
from tests.helpers.agents import AgentServer, agent_spec, dump, trial_json
from tests.helpers.clients import Client

pytestmark = pytest.mark.mpi


def _spec(task: str, scheme: str, precision: str, **knobs: Any) -> dict[str, Any]:
    return agent_spec(
        task,
        folds=2,
        budget={"max_trials": 1, "max_parallel": 1},
        training={
            "task": task,
            "scheme": scheme,
            "ranks_per_fold": 2,
            "epochs": 2,
            "options": {"precision": precision, **knobs},
        },
    )


@pytest.mark.parametrize(
    "scheme,precision,knobs",
    [
        ("allreduce", "bf16", {}),
        ("allreduce", "fp16", {}),
        ("downpour", "fp16", {}),
        ("pipeline", "bf16", {"pipeline": {"microbatches": 2}}),
    ],
)
def test_a_campaign_trains_in_reduced_precision(
    agent_server: AgentServer, scheme: str, precision: str, knobs: dict[str, Any]
) -> None:
    task = "tests/agent/tasks.py:Regression"
    campaign = agent_server.submit(_spec(task, scheme, precision, **knobs))
    result = agent_server.run_agent(4, campaign)
    assert result.returncode == 0, dump(result)
    [trial] = agent_server.client().list_trials(campaign)
    state = trial_json(agent_server, trial.id)
    assert state["state"] == "COMPLETED" and math.isfinite(state["value"]), state
    uri = state["folds"][0]["checkpoint_uri"]
    path = Path(uri.removeprefix("file://"))
    saved = torch.load(path, weights_only=True)
    tensors = list(saved["models"].get("model", {}).values())
    if TRAITS[scheme].splits_model:  # each stage in its own file, written by the stage's rank
        assert saved["models"] == {} and saved["pipeline_stages"] == 2, saved
        tensors = [
            t for s in range(2) for t in torch.load(stage_path(path, s, 2), weights_only=True)["tensors"].values()
        ]
    # Weights stay fp32; under fp16 each rank's loss scale is checkpointed with it.
    assert tensors and all(t.dtype == torch.float32 for t in tensors)
    scalers = saved["scalers"]
    if precision == "fp16":
        assert all(s.get("scale", 0) > 0 for s in scalers if s) and any(scalers), scalers
    else:
        assert not any(scalers), scalers


def test_fp16_names_a_train_step_that_does_not_scale_its_loss(agent_server: AgentServer) -> None:
    campaign = agent_server.submit(_spec("tests/agent/tasks.py:PlainBackward", "allreduce", "fp16"))
    # The planner's probe trains the task first: the agent refuses to start, naming it.
    result = agent_server.run_agent(4, campaign)
    assert result.returncode == 2, dump(result)
    assert (
        "refusing to start: the throughput probe failed at every width it measured (at 2 rank(s) per fold: "
        in result.stderr
    ), dump(result)
    assert "self.backward(loss)" in result.stderr, dump(result)
    # With a fixed layout there is no probe: the trial fails with the same message.
    result = agent_server.run_agent(4, campaign, "--groups", "1")
    assert result.returncode == 0, dump(result)
    [trial] = agent_server.client().list_trials(campaign)
    state = trial_json(agent_server, trial.id)
    assert state["state"] == "FAILED" and "self.backward(loss)" in state["error"], state


def test_fp16_with_the_pipeline_is_refused_at_submission(agent_server: AgentServer) -> None:
    import hpcopt

    spec = _spec("tests/agent/tasks.py:Regression", "pipeline", "fp16")
    with Client(agent_server.target) as c, pytest.raises(hpcopt.ApiError) as err:
        c.create_campaign(spec)
    assert "training.options.precision:" in str(err.value) and "bf16" in str(err.value), str(err.value)
