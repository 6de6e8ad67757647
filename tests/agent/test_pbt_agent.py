"""Population-based training with the real agent under mpiexec against a real server:
members continue from checkpoints, exploited members copy a top member's weights with
their own hyper-parameters, and a parent that cannot be read fails the interval rather
than training it from scratch."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import torch

from tests.agent.conftest import AgentServer, agent_spec, dump

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(600)]

EPOCHS, INTERVAL, POPULATION = 6, 2, 4


def _spec(**options: Any) -> dict[str, Any]:
    return agent_spec(
        space={
            "lr": {"type": "real", "low": 1e-4, "high": 0.3, "scale": "log"},
            "width": {"type": "int", "low": 4, "high": 32},
        },
        algorithm={
            "name": "pbt",
            "seed": 5,
            "options": {"population": POPULATION, "interval": INTERVAL, "mutable": ["lr"], **options},
        },
        budget={"max_trials": POPULATION * EPOCHS // INTERVAL, "max_parallel": POPULATION},
        training={"task": "tests/agent/tasks.py:Regression", "epochs": EPOCHS, "ranks_per_fold": 1},
    )


def _checkpoint(uri: str) -> dict[str, Any]:
    return dict(torch.load(uri.removeprefix("file://"), weights_only=True))


def test_a_population_trains_in_intervals_and_exploited_members_copy_weights_with_their_own_lr(
    agent_server: AgentServer,
) -> None:
    campaign = agent_server.submit(_spec(quantile=0.5))
    result = agent_server.run_agent(4, campaign, "--groups", "4", timeout=480)
    assert result.returncode == 0, dump(result)
    with agent_server.client() as c:
        assert c.get_campaign(campaign).trial_counts == {"COMPLETED": POPULATION * EPOCHS // INTERVAL}
        trials = {t.number: c.get_trial(t.id) for t in c.list_trials(campaign, limit=100)}
    members: dict[int, list[int]] = {}
    exploited = 0
    for t in trials.values():
        lin = t.lineage
        assert lin is not None
        members.setdefault(lin.member, []).append(t.number)
        assert lin.stop_epoch == min(lin.start_epoch + INTERVAL, EPOCHS)
        # It trained its own epochs only: it started at the parent's epoch.
        steps = sorted({p.step for p in t.curves})
        assert steps == list(range(lin.start_epoch + 1, lin.stop_epoch + 1)), (t.number, steps)
        for f in t.folds:
            state = _checkpoint(f.checkpoint_uri)
            assert state["epoch"] == lin.stop_epoch and state["trial"] == t.id
            # The optimizer kept this interval's lr, not the one it copied.
            assert state["optimizers"]["model"]["param_groups"][0]["lr"] == pytest.approx(t.params["lr"])
        if lin.start_epoch == 0:
            assert lin.parent is None
            continue
        parent = trials[lin.parent]
        assert parent.lineage is not None and parent.lineage.stop_epoch == lin.start_epoch
        # The model's shape parameter comes with the weights; only mutable ones change.
        assert t.params["width"] == parent.params["width"]
        assert set(lin.changed) <= {"lr"}
        if lin.exploited:
            exploited += 1
            assert lin.previous is not None and trials[lin.previous].lineage.member == lin.member  # type: ignore[union-attr]
            said = f"trial #{t.number} fold 0 starts at epoch {lin.start_epoch} from trial #{lin.parent}'s checkpoint"
            assert said in result.stderr, dump(result)
        else:
            assert t.params == parent.params and lin.parent == lin.previous
    assert sorted(members) == list(range(POPULATION))
    assert all(len(n) == EPOCHS // INTERVAL for n in members.values())
    assert exploited >= 2, dump(result)


def test_an_interval_whose_parent_cannot_be_read_fails_instead_of_training_from_scratch(
    agent_server: AgentServer,
) -> None:
    from hpcopt import AgentClient

    campaign = agent_server.submit(_spec())
    # The first intervals are "trained" by an agent whose checkpoints are elsewhere.
    with AgentClient(agent_server.target) as a:
        agent = a.register(host=socket.gethostname(), ranks=1)
        server_id = agent.server_id
        for _ in range(POPULATION):
            got = a.acquire(agent.agent_id, campaign)
            assert got.trial is not None and got.lease is not None
            for k in range(2):
                uri = f"file:///elsewhere/{server_id}/{campaign}/{got.trial.id}/fold{k}.pt"
                a.report_fold(got.lease, k, 1.0 + got.trial.number, {"loss": 1.0 + got.trial.number}, uri)
            a.complete(got.lease)
    result = agent_server.run_agent(4, campaign, "--groups", "4", timeout=480)
    assert result.returncode == 0, dump(result)
    with agent_server.client() as c:
        later = [c.get_trial(t.id) for t in c.list_trials(campaign, limit=100) if t.number >= POPULATION]
    failed = [t for t in later if t.lineage is not None and t.lineage.parent is not None and t.state == "FAILED"]
    assert failed, dump(result)
    for t in failed:
        assert "PBT: cannot start from trial #" in t.error and "--checkpoint-dir" in t.error, t.error
        assert not t.curves  # nothing was trained in its place


def test_a_mutable_parameter_that_shapes_the_model_is_refused_at_start_naming_it(agent_server: AgentServer) -> None:
    campaign = agent_server.submit(_spec(mutable=["lr", "width"]))
    result = agent_server.run_agent(4, campaign, "--groups", "4", timeout=240)
    assert result.returncode == 2, dump(result)
    assert "algorithm.options.mutable: 'width' changes the model's shape" in result.stderr, dump(result)
    with agent_server.client() as c:
        assert c.list_trials(campaign) == []  # nothing was acquired
