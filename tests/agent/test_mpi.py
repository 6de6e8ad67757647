"""The agent under the real mpiexec at world sizes 1, 2 and 4, against a real server."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from tests.helpers.agents import AgentServer, agent_spec, dump, kill_group, rank_pids, trial_json, wait_for
from tests.helpers.env import scaled

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(300)]


@pytest.mark.parametrize(
    "ranks,groups,rpf",
    [(1, 1, 1), (2, 2, 1), (4, 2, 2)],  # DDP fold groups: 4-ranks-2x2 (2 groups of rpf 2)
    ids=["1-rank", "2-ranks-2-groups", "4-ranks-2x2"],
)
def test_a_campaign_runs_to_completion(agent_server: AgentServer, ranks: int, groups: int, rpf: int) -> None:
    spec = agent_spec(training={"task": "tests/agent/tasks.py:Regression", "epochs": 3, "ranks_per_fold": rpf})
    campaign = agent_server.submit(spec)
    result = agent_server.run_agent(ranks, campaign, "--groups", str(groups))
    assert result.returncode == 0, dump(result)
    assert "the campaign is finished" in result.stderr, dump(result)
    with agent_server.client() as c:
        assert c.get_campaign(campaign).trial_counts == {"COMPLETED": 4}
        for t in c.list_trials(campaign):
            full = c.get_trial(t.id)
            assert sorted(f.index for f in full.folds if f.finished) == [0, 1]
            assert all(f.checkpoint_uri.startswith("file://") and "rmse" in f.metrics for f in full.folds)
            values = [f.value for f in full.folds]
            assert full.value == pytest.approx(sum(values) / 2)
            # One learning-curve point per epoch and fold.
            assert sorted((p.fold, p.step) for p in full.curves) == [(k, e) for k in (0, 1) for e in (1, 2, 3)]
    # Every group trained, and each line says which trial and fold it is about.
    leaders = {int(m) for m in re.findall(r"\[r(\d+) g\d+\] trial #\d+ COMPLETED", result.stderr)}
    assert leaders == {g * (ranks // groups) for g in range(groups)}, dump(result)
    assert re.search(r"trial #\d+ fold [01] epoch 3/3: loss=", result.stderr), dump(result)


def test_a_task_that_raises_fails_its_trial_and_the_agent_goes_on(agent_server: AgentServer) -> None:
    spec = agent_spec(
        task="tests/agent/tasks.py:Exploding",
        space={"lr": {"type": "real", "low": 1e-3, "high": 1.0, "scale": "log"}},
        budget={"max_trials": 8, "max_parallel": 2},
        pause_after_failures=0,  # three in a row would pause it (test_failures.py)
    )
    campaign = agent_server.submit(spec)
    result = agent_server.run_agent(2, campaign, "--groups", "2")
    assert result.returncode == 0, dump(result)
    with agent_server.client() as c:
        trials = c.list_trials(campaign)
        assert len(trials) == 8
        for t in trials:
            lr = t.params["lr"]
            if lr > 0.1:
                assert t.state == "FAILED", t
                assert "boom: lr" in t.error and "RuntimeError" in t.error
                assert "fold 0, setting up fold 0" in t.error or "fold 1, setting up fold 1" in t.error
            else:
                assert t.state == "COMPLETED", t
        assert {t.state for t in trials} == {"FAILED", "COMPLETED"}, "the seed should give both kinds"


def _epochs_trained(log: str, number: int) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for fold, epoch in re.findall(rf"trial #{number} fold (\d+) epoch (\d+)/", log):
        out.setdefault(int(fold), []).append(int(epoch))
    return out


def test_kill_9_mid_trial_resumes_from_checkpoints_without_retraining_finished_folds(
    agent_server: AgentServer,
) -> None:
    spec = agent_spec(
        folds=4,
        budget={"max_trials": 1, "max_parallel": 1},
        training={"task": "tests/agent/tasks.py:Regression", "epochs": 4},
    )
    campaign = agent_server.submit(spec)
    log_a = agent_server.workdir / "a.log"
    # ~0.5 s per epoch: the window the kill aims at (folds 0 and 1 finished, 2 or 3 under
    # way) lasts about two epochs. At 0.1 s per epoch a loaded CI machine polled past it.
    slow = {"HPCOPT_TEST_STEP_SLEEP": "0.1"}
    a = agent_server.start_agent(2, campaign, log=log_a, **slow)  # 2 fold groups: folds 0+1, then 2+3

    def folds_state() -> tuple[set[int], set[int]] | None:
        trials = agent_server.client().list_trials(campaign)
        if not trials:
            return None
        full = trial_json(agent_server, trials[0].id)
        assert full["state"] == "RUNNING", f"the trial ended before the kill: {full['state']}"
        done = {f["index"] for f in full["folds"] if f["finished"]}
        started = {p["fold"] for p in full["curves"] if p["fold"] not in done}
        return (done, started) if done == {0, 1} and started else None

    try:
        wait_for(folds_state, scaled(120), "folds 0 and 1 finished and a later fold under way")
    finally:
        kill_group(a)
    [trial] = agent_server.client().list_trials(campaign)
    before = trial_json(agent_server, trial.id)
    assert before["state"] == "RUNNING" and before["attempt"] == 1
    at_kill = {f["index"]: f for f in before["folds"]}

    # A second agent takes the same trial id once the lease expires (4 s here).
    result = agent_server.run_agent(2, campaign, **slow)
    assert result.returncode == 0, dump(result)
    after = trial_json(agent_server, trial.id)
    assert after["state"] == "COMPLETED" and after["attempt"] == 2, after
    trained = _epochs_trained(result.stderr, trial.number)
    assert 0 not in trained and 1 not in trained, f"finished folds retrained: {trained}"
    for fold in (2, 3):
        resumed_at = max((p["step"] for p in before["curves"] if p["fold"] == fold), default=0)
        if at_kill.get(fold, {}).get("checkpoint_uri"):
            at = rf"resuming fold {fold} at (the start of )?epoch {resumed_at + 1}/"
            assert re.search(at, result.stderr), dump(result)
        assert trained[fold] == list(range(resumed_at + 1, 5)), (fold, trained, resumed_at)
    assert sum(1 for f in after["folds"] if f["finished"]) == 4
    events = [e["kind"] for e in after["events"]]
    assert "lease_expired" in events or any("expired" in e for e in events), events


def test_sigterm_preempts_with_a_checkpoint_and_a_later_agent_resumes(agent_server: AgentServer) -> None:
    spec = agent_spec(
        folds=2,
        budget={"max_trials": 1, "max_parallel": 1},
        training={"task": "tests/agent/tasks.py:Regression", "epochs": 6},
    )
    campaign = agent_server.submit(spec)
    log_a = agent_server.workdir / "a.log"
    slow = {"HPCOPT_TEST_STEP_SLEEP": "0.03"}
    a = agent_server.start_agent(2, campaign, log=log_a, **slow)

    def some_curve() -> bool:
        trials = agent_server.client().list_trials(campaign)
        return bool(trials) and len(trial_json(agent_server, trials[0].id)["curves"]) >= 2

    try:
        wait_for(some_curve, scaled(120), "two epochs reported")
        # As Slurm does: the signal goes to every task (rank), not to the launcher.
        pids = rank_pids(a)
        assert len(pids) == 2, pids
        for pid in pids:
            subprocess.run(["kill", "-TERM", str(pid)], check=False)
        assert a.wait(timeout=scaled(60)) == 0, log_a.read_text()
    finally:
        if a.poll() is None:
            kill_group(a)
    text = log_a.read_text()
    assert "SIGTERM received" in text and "PREEMPTED" in text, text
    [trial] = agent_server.client().list_trials(campaign)
    state = trial_json(agent_server, trial.id)
    assert state["state"] == "QUEUED" and state["attempt"] == 2, state
    assert any(e["kind"] == "preempted" and "SIGTERM" in e["reason"] for e in state["events"]), state["events"]
    unfinished = [f for f in state["folds"] if not f["finished"]]
    assert unfinished and all(f["checkpoint_uri"] for f in unfinished), state["folds"]

    result = agent_server.run_agent(2, campaign, **slow)
    assert result.returncode == 0, dump(result)
    assert re.search(r"resuming fold \d at (the start of )?epoch \d+/\d+", result.stderr), dump(result)
    done = trial_json(agent_server, trial.id)
    assert done["state"] == "COMPLETED" and done["attempt"] == 2
    # The whole run trained each fold's 6 epochs once: nothing lost, nothing repeated.
    for fold in (0, 1):
        first = _epochs_trained(text, trial.number).get(fold, [])
        second = _epochs_trained(result.stderr, trial.number).get(fold, [])
        assert sorted(first + second) == list(range(1, 7)), (fold, first, second)


def test_a_layout_that_does_not_fit_is_refused_at_start(agent_server: AgentServer) -> None:
    campaign = agent_server.submit(agent_spec())
    t0 = time.monotonic()
    result = agent_server.run_agent(4, campaign, "--groups", "3")
    assert result.returncode != 0
    assert "refusing to start: 4 ranks do not split into 3 equal trial groups" in result.stderr
    assert "--groups 2 (" in result.stderr and "--groups 4 (" in result.stderr, dump(result)
    assert time.monotonic() - t0 < 120
    with agent_server.client() as c:
        assert c.get_campaign(campaign).trial_counts == {}, "no trial was taken"


def test_two_networks_with_a_custom_step_train_under_ddp(agent_server: AgentServer) -> None:
    spec = agent_spec(
        task="tests/agent/tasks.py:TinyGan",
        budget={"max_trials": 2, "max_parallel": 1},
        training={"task": "tests/agent/tasks.py:TinyGan", "epochs": 3, "ranks_per_fold": 2},
    )
    campaign = agent_server.submit(spec)
    result = agent_server.run_agent(2, campaign)
    assert result.returncode == 0, dump(result)
    with agent_server.client() as c:
        assert c.get_campaign(campaign).trial_counts == {"COMPLETED": 2}, dump(result)
        trial = c.list_trials(campaign)[0]
    # Both networks and both optimizers are in the checkpoint.
    import torch

    uri = trial_json(agent_server, trial.id)["folds"][0]["checkpoint_uri"]
    state = torch.load(uri.removeprefix("file://"), weights_only=True)
    assert set(state["models"]) == {"generator", "critic"} and set(state["optimizers"]) == {"generator", "critic"}
    assert len(state["rng"]) == 2 and state["epoch"] == 3


def test_a_hung_rank_is_bounded_by_the_collective_timeout(agent_server: AgentServer) -> None:
    spec = agent_spec(
        budget={"max_trials": 1, "max_parallel": 1},
        training={"task": "tests/agent/tasks.py:Hanging", "epochs": 2, "ranks_per_fold": 2},
    )
    campaign = agent_server.submit(spec)
    t0 = time.monotonic()
    result = agent_server.run_agent(2, campaign, "--collective-timeout", "5", timeout=scaled(120))
    assert time.monotonic() - t0 < 90, "the hang was not bounded"
    assert result.returncode != 0, dump(result)
    [trial] = agent_server.client().list_trials(campaign)
    state = trial_json(agent_server, trial.id)
    assert state["state"] == "FAILED", state
    assert "world rank(s) [1] did not reach" in state["error"] and "Timed out" in state["error"], state["error"]


def test_an_allocation_without_time_for_a_trial_takes_none(agent_server: AgentServer) -> None:
    campaign = agent_server.submit(agent_spec())
    result = agent_server.run_agent(1, campaign, "--time-limit", "00:04")
    assert result.returncode == 0, dump(result)
    assert "stopping after 0 trial(s): 4 s of walltime left" in result.stderr, dump(result)
    with agent_server.client() as c:
        assert c.get_campaign(campaign).trial_counts == {}


def test_a_task_that_cannot_load_is_refused_at_start(agent_server: AgentServer) -> None:
    campaign = agent_server.submit(agent_spec())
    result = agent_server.run_agent(2, campaign, "--task", "tests/agent/tasks.py:Missing")
    assert result.returncode != 0
    assert "refusing to start: training.task: " in result.stderr and "no attribute 'Missing'" in result.stderr, dump(
        result
    )
    with agent_server.client() as c:
        assert c.get_campaign(campaign).trial_counts == {}


def test_a_task_that_always_fails_pauses_its_campaign_and_the_agent_says_it_waits(agent_server: AgentServer) -> None:
    spec = agent_spec(
        task="tests/agent/tasks.py:Exploding",  # every lr here is above 0.1: it always raises
        space={"lr": {"type": "real", "low": 0.2, "high": 1.0}},
        budget={"max_trials": 20, "max_parallel": 2},
    )
    campaign = agent_server.submit(spec)
    log = agent_server.workdir / "failing.log"
    proc = agent_server.start_agent(4, campaign, "--groups", "2", log=log)
    try:
        wait_for(
            lambda: "is PAUSED: 3 trials in a row failed" in log.read_text(), scaled(240), "the agent to log the pause"
        )
        with agent_server.client() as c:
            paused = c.get_campaign(campaign)
            assert paused.state == "PAUSED" and paused.pause_reason is not None
            assert "RuntimeError at tasks.py:" in paused.pause_reason and "in build" in paused.pause_reason
            # At most the trials already out when it paused failed after it: the budget is kept.
            assert 3 <= paused.trial_counts.get("FAILED", 0) <= 3 + 2 - 1, paused.trial_counts
            failed = [t for t in c.list_trials(campaign) if t.state == "FAILED"]
            assert all(t.error.startswith("fold ") and "RuntimeError: boom: lr" in t.error for t in failed)
            assert all(len(t.error) < 1000 and "Traceback" not in t.error for t in failed)
            c.cancel_campaign(campaign)  # the agents waiting on it then stop
        assert proc.wait(timeout=scaled(120)) == 0, log.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    # Once per trial group's leader (two here), not at every poll.
    assert 1 <= text.count("waiting: campaign") <= 2, text[-4000:]
