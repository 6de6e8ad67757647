"""A multi-objective campaign under a real agent (``mpiexec``, 2 ranks): every fold
reports the second objective (``train_seconds``, which the agent measures itself), the
trials carry both values and the front is served; an objective no fold reports fails
the trial with its name."""

from __future__ import annotations

import pytest

from tests.helpers.agents import AgentServer, agent_spec, dump

pytestmark = pytest.mark.mpi


def test_a_real_agent_reports_every_objective_and_names_a_missing_one(agent_server: AgentServer) -> None:
    objectives = [{"metric": "rmse", "direction": "minimize"}, {"metric": "train_seconds", "direction": "minimize"}]
    spec = agent_spec(objectives=objectives, budget={"max_trials": 2, "max_parallel": 2})
    del spec["objective"]
    campaign = agent_server.submit(spec)
    missing = agent_spec(
        name="missing",
        budget={"max_trials": 1, "max_parallel": 1},
        max_attempts=1,
        objectives=[objectives[0], {"metric": "gpu_hours", "direction": "minimize"}],
    )
    del missing["objective"]
    missing_id = agent_server.submit(missing)
    result = agent_server.run_agent(2, campaign, "--groups", "2")
    assert result.returncode == 0, dump(result)
    with agent_server.client() as c:
        trials = [c.get_trial(t.id) for t in c.list_trials(campaign)]
        assert [t.state for t in trials] == ["COMPLETED", "COMPLETED"]
        for t in trials:
            rmse = [f.value for f in t.folds]
            seconds = [f.metrics["train_seconds"] for f in t.folds]
            assert list(t.values) == [sum(rmse) / 2, sum(seconds) / 2] and all(s > 0 for s in seconds)
        assert {t.id for t in c.get_pareto_front(campaign).trials} <= {t.id for t in trials}
    result = agent_server.run_agent(1, missing_id)
    with agent_server.client() as c:
        [failed] = [c.get_trial(t.id) for t in c.list_trials(missing_id)]
    assert failed.state == "FAILED", dump(result)
    assert "'gpu_hours' is not among them" in failed.error, failed.error
