"""``training.options.batchnorm`` under a real agent at 4 ranks: SyncBatchNorm runs on
GPUs only, so on CPUs ``node`` (and ``global``) fail the trial at its start with a
message that names the option, not torch's error from the first forward pass. A
BatchNorm model under every scheme: ``scheme_conformance.py``'s batchnorm check; the
spec's refusals, where ranks are not in lock-step: ``tests/server/test_spec.py``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.agents import AgentServer, agent_spec, dump, trial_json

pytestmark = pytest.mark.mpi


def _spec(scheme: str, mode: str) -> dict[str, Any]:
    return agent_spec(
        folds=1,
        budget={"max_trials": 1, "max_parallel": 1},
        training={
            "task": "tests/agent/tasks.py:Normalised",
            "scheme": scheme,
            "ranks_per_fold": 4,
            "epochs": 1,
            "options": {"batchnorm": mode},
        },
    )


@pytest.mark.parametrize("mode", ["global", "node"])
def test_synchronised_batchnorm_on_cpus_fails_the_trial_naming_the_option(agent_server: AgentServer, mode: str) -> None:
    campaign = agent_server.submit(_spec("allreduce", mode))
    result = agent_server.run_agent(4, campaign, "--groups", "1")
    assert result.returncode == 0, dump(result)
    [trial] = agent_server.client().list_trials(campaign)
    state = trial_json(agent_server, trial.id)
    assert state["state"] == "FAILED", state
    assert f"training.options.batchnorm: {mode} synchronises" in state["error"], state["error"]
    assert "GPUs only" in state["error"] and "Use local" in state["error"], state["error"]
