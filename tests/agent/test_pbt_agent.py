"""Population-based training with the real agent under mpiexec against a real server:
members continue from checkpoints, exploited members copy a top member's weights with
their own hyper-parameters, and a parent whose checkpoints cannot be read is replaced
(the interval re-planned in place) and never offered again: it costs only itself."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import torch

from tests.helpers.agents import AgentServer, agent_spec, dump
from tests.helpers.env import scaled

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


@pytest.mark.parametrize("groups", [4, 1])
def test_a_population_trains_in_intervals_and_exploited_members_copy_weights_with_their_own_lr(
    agent_server: AgentServer, groups: int
) -> None:
    campaign = agent_server.submit(_spec(quantile=0.5))
    result = agent_server.run_agent(groups, campaign, "--groups", str(groups), timeout=scaled(480))
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
    # Which member is in the bottom quantile when it reports, and whether a better one has
    # a checkpoint at its epoch by then, depends on the order the groups report in: four
    # concurrent groups gave 0 to 6 exploits over 18 runs here (0 twice, once in CI). One
    # group reports in one order, so the campaign is the same every run (6 exploits here).
    if groups == 1:
        assert exploited >= 1, dump(result)


def _check_replanned_around(agent_server: AgentServer, campaign: int, bad: int, result: Any) -> dict[int, Any]:
    """Every interval completed; none starts from trial ``bad`` (whose files the agent
    cannot read), at least one was re-planned away from it, every interval with a parent
    trained from that parent's epoch, and every member but ``bad``'s reached the end."""
    with agent_server.client() as c:
        assert c.get_campaign(campaign).trial_counts == {"COMPLETED": POPULATION * EPOCHS // INTERVAL}, dump(result)
        trials = {t.number: c.get_trial(t.id) for t in c.list_trials(campaign, limit=100)}
    unreadable = trials[bad]
    assert unreadable.lineage is not None
    replanned = [t for t in trials.values() if t.lineage is not None and bad in t.lineage.unreadable]
    assert replanned, dump(result)
    assert "the server re-planned it to start from" in result.stderr, dump(result)
    reached: dict[int, int] = {}
    for t in trials.values():
        lin = t.lineage
        assert lin is not None
        assert lin.parent != bad, (t.number, lin)
        reached[lin.member] = max(reached.get(lin.member, 0), lin.stop_epoch)
        steps = sorted({p.step for p in t.curves})
        if t.number != bad:
            assert steps == list(range(lin.start_epoch + 1, lin.stop_epoch + 1)), (t.number, steps)
    for m, epoch in reached.items():
        if m != unreadable.lineage.member:
            assert epoch == EPOCHS, (m, reached)
    assert any(e.kind == "checkpoint_unreadable" for e in unreadable.events)
    assert any(e.kind == "parent_unreadable" for t in replanned for e in t.events)
    return trials


def test_an_interval_that_reports_checkpoints_it_never_wrote_costs_only_itself(agent_server: AgentServer) -> None:
    from tests.helpers.clients import AgentClient

    campaign = agent_server.submit(_spec(quantile=0.5))
    # The probe's shape: one interval reports checkpoint URIs of the accepted form
    # without writing the files, with the best value of all.
    with AgentClient(agent_server.target) as a:
        agent = a.register(host=socket.gethostname(), ranks=1)
        got = a.acquire(agent.agent_id, campaign)
        assert got.trial is not None and got.lease is not None
        root = agent_server.workdir / "ckpt"
        for k in range(2):
            uri = f"file://{root}/{agent.server_id}/{campaign}/{got.trial.id}/fold{k}.pt"
            a.report_fold(got.lease, k, 0.0, {"loss": 0.0}, uri)
        a.complete(got.lease)
    result = agent_server.run_agent(4, campaign, "--groups", "4", timeout=scaled(480))
    assert result.returncode == 0, dump(result)
    _check_replanned_around(agent_server, campaign, got.trial.number, result)


def test_an_agent_whose_checkpoint_root_the_others_cannot_see_costs_only_its_interval(
    agent_server: AgentServer, tmp_path: Any
) -> None:
    campaign = agent_server.submit(_spec(quantile=0.5))
    alone = agent_server.run_agent(
        1,
        campaign,
        "--groups",
        "1",
        "--max-trials",
        "1",
        "--checkpoint-dir",
        str(tmp_path / "private"),
        timeout=scaled(240),
    )
    assert alone.returncode == 0, dump(alone)
    with agent_server.client() as c:
        (first,) = c.list_trials(campaign)
    assert first.state == "COMPLETED"
    result = agent_server.run_agent(4, campaign, "--groups", "4", timeout=scaled(480))
    assert result.returncode == 0, dump(result)
    _check_replanned_around(agent_server, campaign, first.number, result)


def test_a_mutable_parameter_that_shapes_the_model_is_refused_at_start_naming_it(agent_server: AgentServer) -> None:
    campaign = agent_server.submit(_spec(mutable=["lr", "width"]))
    result = agent_server.run_agent(4, campaign, "--groups", "4", timeout=scaled(240))
    assert result.returncode == 2, dump(result)
    assert "algorithm.options.mutable: 'width' changes the model's shape" in result.stderr, dump(result)
    with agent_server.client() as c:
        assert c.list_trials(campaign) == []  # nothing was acquired


@pytest.mark.parametrize(
    ("scheme", "options"),
    [("allreduce", {}), ("downpour", {})],
    ids=["ddp-2-ranks", "downpour-2-ranks"],
)
def test_intervals_copy_weights_under_a_multi_rank_scheme(
    agent_server: AgentServer, scheme: str, options: dict[str, Any]
) -> None:
    spec = _spec(population=2, quantile=0.5)
    spec["budget"] = {"max_trials": 4, "max_parallel": 2}
    spec["training"] = {
        "task": "tests/agent/tasks.py:Regression",
        "scheme": scheme,
        "epochs": 4,
        "ranks_per_fold": 2,
        "options": options,
    }
    campaign = agent_server.submit(spec)
    result = agent_server.run_agent(4, campaign, "--groups", "2", timeout=scaled(480))
    assert result.returncode == 0, dump(result)
    with agent_server.client() as c:
        trials = [c.get_trial(t.id) for t in c.list_trials(campaign)]
    assert [t.state for t in trials] == ["COMPLETED"] * 4
    later = [t for t in trials if t.lineage and t.lineage.start_epoch == 2]
    # Each starts from a parent's checkpoint (its own or, exploited, another member's),
    # loaded through the scheme's placement: it trains epochs 3 and 4 only.
    assert len(later) == 2 and all(t.lineage and t.lineage.parent is not None for t in later), dump(result)
    for t in later:
        assert sorted({p.step for p in t.curves}) == [3, 4]
        state = _checkpoint(t.folds[0].checkpoint_uri)
        assert state["scheme"] == scheme and state["epoch"] == 4


def test_a_preempted_interval_resumes_its_own_checkpoint_in_its_own_lineage(agent_server: AgentServer) -> None:
    from tests.helpers.agents import preempt_after_first_epoch

    # Intervals of 4 epochs at 0.2 s a step: the SIGTERM after the first epoch lands
    # while the first intervals still train (at 2 epochs of 0.02 s they had finished).
    spec = _spec(population=4, interval=4)
    spec["budget"] = {"max_trials": 8, "max_parallel": 4}
    spec["training"] = {"task": "tests/agent/tasks.py:Regression", "epochs": 8, "ranks_per_fold": 1}
    campaign = agent_server.submit(spec)
    preempt_after_first_epoch(agent_server, campaign, HPCOPT_TEST_STEP_SLEEP="0.2")
    with agent_server.client() as c:
        before = {t.number: t for t in c.list_trials(campaign)}
    requeued = [t for t in before.values() if t.state == "QUEUED"]
    assert requeued
    result = agent_server.run_agent(4, campaign, "--groups", "4", timeout=scaled(480))
    assert result.returncode == 0, dump(result)
    assert "resuming fold" in result.stderr, dump(result)
    with agent_server.client() as c:
        after = {t.number: c.get_trial(t.id) for t in c.list_trials(campaign)}
    assert len(after) == 8 and all(t.state == "COMPLETED" for t in after.values())
    for t in requeued:
        done = after[t.number]
        assert done.attempt == 2 and done.lineage == t.lineage  # the same interval, the same lineage
        assert done.lineage is not None
        steps = sorted(p.step for p in done.curves if p.fold == 0)
        assert steps == list(range(done.lineage.start_epoch + 1, done.lineage.stop_epoch + 1))
    # Each member still trained its epochs in exactly two intervals.
    members = sorted(t.lineage.member for t in after.values() if t.lineage)
    assert members == sorted(list(range(4)) * 2)
