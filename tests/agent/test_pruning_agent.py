"""A pruned trial under a real agent (``mpiexec``): the server prunes it on a fold's
result, the agent hears it right after that fold and trains no further fold."""

from __future__ import annotations

import pytest

from tests.helpers.agents import AgentServer, agent_spec, dump

pytestmark = pytest.mark.mpi


def test_the_fold_pruner_stops_a_hopeless_trial_after_its_first_fold_under_a_real_agent(
    agent_server: AgentServer,
) -> None:
    spec = agent_spec(
        space={"lr": {"type": "categorical", "choices": [0.05, 0.03, 1e-6]}},
        algorithm={"name": "grid"},  # the choices in order: two good trials, then a hopeless one
        budget={"max_trials": 3, "max_parallel": 1},
        folds=3,
        pruner={"name": "fold", "options": {"min_trials": 2}},
    )
    campaign = agent_server.submit(spec)
    result = agent_server.run_agent(1, campaign)
    assert result.returncode == 0, dump(result)
    assert "the server stopped the trial after fold 0 (pruned)" in result.stderr, dump(result)
    with agent_server.client() as c:
        trials = {t.params["lr"]: c.get_trial(t.id) for t in c.list_trials(campaign)}
        assert c.get_campaign(campaign).trial_counts == {"COMPLETED": 2, "PRUNED": 1}
    hopeless = trials[1e-6]
    assert hopeless.state == "PRUNED"
    assert hopeless.error.startswith("fold: after 1 of 3 folds"), hopeless.error
    assert sorted({p.fold for p in hopeless.curves}) == [0], "no epoch of fold 1 was trained"
    assert [f.index for f in hopeless.folds if f.finished] == [0]
