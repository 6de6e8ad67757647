"""The multi-fidelity searcher (``algorithm: mf``) with the real agent under mpiexec
against a real server: trials start on one fold and a few epochs, are promoted as the
same trial to more epochs (each fold resumed from its own checkpoint) and to more folds,
and every fold-epoch is trained exactly once, also when the agent is preempted in the
middle of a promotion and another agent, laid out differently, finishes it."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest

from tests.helpers.agents import AgentServer, agent_spec, dump, preempt_when, trial_json
from tests.helpers.env import scaled, timeout_scale

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(900)]

FOLDS, EPOCHS, CONFIGS = 3, 4, 9
#: The agent's line for each epoch a fold trains: "... trial #N fold K ... epoch E/4: ...".
EPOCH_LINE = re.compile(r"trial #(\d+) fold (\d+)\b.*?\bepoch (\d+)/\d+: ")


def _spec() -> dict[str, Any]:
    return agent_spec(
        space={
            "lr": {"type": "real", "low": 1e-3, "high": 0.3, "scale": "log"},
            "width": {"type": "int", "low": 4, "high": 32},
        },
        algorithm={"name": "mf", "seed": 7, "options": {"n_initial": 3}},
        budget={"max_trials": CONFIGS, "max_parallel": 3},
        folds=FOLDS,
        training={"task": "tests/agent/tasks.py:Regression", "epochs": EPOCHS, "ranks_per_fold": 1},
    )


def _trained(*logs: str) -> Counter[tuple[int, int, int]]:
    """(trial number, fold, epoch) -> how many times an agent trained that epoch."""
    return Counter((int(a), int(b), int(c)) for text in logs for a, b, c in EPOCH_LINE.findall(text))


def _check(agent_server: AgentServer, campaign: int, trained: Counter[tuple[int, int, int]], logs: str) -> list[Any]:
    with agent_server.client() as c:
        summary = c.get_campaign(campaign)
        trials = [c.get_trial(t.id) for t in c.list_trials(campaign, limit=100)]
    assert summary.state == "COMPLETED", logs
    assert len(trials) == CONFIGS  # a promotion is the same trial, not a new one
    assert set(summary.trial_counts) <= {"COMPLETED", "PRUNED"}, summary.trial_counts
    assert summary.best_trial_id is not None
    for t in trials:
        f = t.fidelity
        assert f is not None and f.history, t
        top = f.history[-1]
        # Every epoch of every fold up to the rung it reached, trained exactly once.
        want = {(t.number, k, e) for k in range(top.folds) for e in range(1, top.epochs + 1)}
        got = {key for key in trained if key[0] == t.number}
        assert got == want, (t.number, sorted(got ^ want), logs[-4000:])
        assert all(trained[key] == 1 for key in want), [(k, trained[k]) for k in want if trained[k] != 1]
        # The learning curve holds each fold's epochs once, in order, across its rungs.
        steps = {k: sorted(p.step for p in t.curves if p.fold == k) for k in range(top.folds)}
        assert all(s == list(range(1, top.epochs + 1)) for s in steps.values()), (t.number, steps)
        if t.state == "COMPLETED":
            assert (top.folds, top.epochs) == (FOLDS, EPOCHS)
            assert sorted(x.index for x in t.folds if x.finished) == list(range(FOLDS))
        else:
            assert "not promoted past" in t.error
    best = next(t for t in trials if t.id == summary.best_trial_id)
    assert best.state == "COMPLETED" and best.fidelity is not None and best.fidelity.folds == FOLDS
    return trials


def test_trials_are_promoted_and_resume_from_their_checkpoints_training_every_fold_epoch_once(
    agent_server: AgentServer,
) -> None:
    campaign = agent_server.submit(_spec())
    result = agent_server.run_agent(6, campaign, "--groups", "3", timeout=scaled(600))
    assert result.returncode == 0, dump(result)
    trials = _check(agent_server, campaign, _trained(result.stderr), result.stderr)
    climbed = [t for t in trials if len(t.fidelity.history) > 1]
    assert any(r.epochs > t.fidelity.history[0].epochs for t in climbed for r in t.fidelity.history), dump(result)
    assert any(r.folds > 1 for t in climbed for r in t.fidelity.history), dump(result)
    assert "resuming fold 0 at the start of epoch" in result.stderr, dump(result)
    assert "PAUSED after rung 0" in result.stderr, dump(result)


def test_an_agent_preempted_in_the_middle_of_a_promotion_leaves_it_to_another_layout(
    agent_server: AgentServer,
) -> None:
    campaign = agent_server.submit(_spec())
    # A pause per training step leaves the signal time to land in the middle of an epoch.
    step_sleep = f"{0.05 * timeout_scale():.3f}"

    def promoted_and_training() -> bool:
        with agent_server.client() as c:
            running = [t for t in c.list_trials(campaign, limit=100) if t.state == "RUNNING"]
        for t in running:
            doc = trial_json(agent_server, t.id)
            history = (doc.get("fidelity") or {}).get("history") or []
            if history and any(p["step"] > history[-1]["epochs"] for p in doc["curves"]):
                return True
        return False

    first = preempt_when(
        agent_server,
        campaign,
        promoted_and_training,
        "a promoted trial training past its last rung",
        6,
        "--groups",
        "3",
        HPCOPT_TEST_STEP_SLEEP=step_sleep,
    )
    # Another layout finishes the campaign: four trial groups of one rank.
    result = agent_server.run_agent(4, campaign, "--groups", "4", timeout=scaled(600))
    assert result.returncode == 0, dump(result)
    both = first + result.stderr
    _check(agent_server, campaign, _trained(first, result.stderr), both)
    assert "resuming fold" in result.stderr, dump(result)
