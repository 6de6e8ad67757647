"""Scripts drive trials without an MPI agent (``Client.trials``: ask/tell), against a real
server with 4 s leases; and the MPI agent refuses such campaigns, quietly."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import hpcopt
from tests.helpers.agents import AgentServer, dump, mpi_env, trial_json, wait_for
from tests.helpers.clients import Client
from tests.helpers.env import ROOT, scaled

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(180)]

SPACE = {  # deliberately not in alphabetical order: every view keeps this order
    "zeta": {"type": "real", "low": -2.0, "high": 2.0},
    "alpha": {"type": "int", "low": 1, "high": 8},
    "mode": {"type": "categorical", "choices": ["a", "b"]},
}


def script_spec(**overrides: object) -> dict[str, object]:
    spec: dict[str, object] = {
        "name": "script-driven",
        "objective": {"metric": "loss", "direction": "minimize"},
        "space": SPACE,
        "algorithm": {"name": "random", "seed": 5},
        "budget": {"max_trials": 4, "max_parallel": 2},
        "folds": 2,
    }
    spec.update(overrides)
    return spec


def f(p: dict[str, object]) -> float:
    return float(p["zeta"]) ** 2 + int(p["alpha"]) / 10 + (0.5 if p["mode"] == "b" else 0.0)  # type: ignore[call-overload, arg-type]


def test_a_script_tunes_a_function_with_ask_and_tell(agent_server: AgentServer) -> None:
    with Client(agent_server.target) as c:
        campaign = c.create_campaign(script_spec())
        seen = []
        for trial in c.trials(campaign.id):
            assert isinstance(trial, hpcopt.ActiveTrial) and list(trial.params) == list(SPACE)
            assert trial.folds == 2
            for step in range(3):
                assert trial.report(step, f(trial.params) + 1 / (step + 1)) is True
            done = trial.complete(folds=[f(trial.params), f(trial.params) + 0.2])
            assert isinstance(done, hpcopt.Trial) and done.state == "COMPLETED"
            assert done.value == pytest.approx(f(trial.params) + 0.1) and list(done.params) == list(SPACE)
            with pytest.raises(hpcopt.TrialStopped):
                trial.report(3, 0.0)  # the trial is over for this script
            seen.append(trial.id)
        assert len(seen) == 4
        final = c.get_campaign(campaign.id)
        assert final.state == "COMPLETED" and final.trial_counts == {"COMPLETED": 4} and final.spec is not None
        assert final.spec["training"] is None
        # A single value where the campaign has 2 folds is refused before anything is sent.
        other = c.create_campaign(script_spec(name="two-folds", budget={"max_trials": 1}))
        for trial in c.trials(other.id, max_trials=1):
            with pytest.raises(ValueError, match="2 folds"):
                trial.complete(1.0)
    # The trial the loop gave back when it ended without a result is queued again.
    assert trial_json(agent_server, trial.id)["state"] == "QUEUED"


def test_a_script_that_dies_mid_trial_loses_its_lease_and_the_trial_is_resumed(agent_server: AgentServer) -> None:
    with Client(agent_server.target) as c:
        campaign = c.create_campaign(script_spec(budget={"max_trials": 1, "max_parallel": 1}))
    # A script that reports fold 0 and a curve point, then dies without a word (no release).
    code = textwrap.dedent(f"""
        import os, hpcopt
        with hpcopt.Client({agent_server.target!r}, timeout={scaled(30)}) as c:
            for trial in c.trials({campaign.id}):
                trial.report(0, 1.5)
                trial._agent.report_fold(trial._lease, 0, 1.25)
                print(trial.id, flush=True)
                os._exit(3)
    """)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=scaled(60), env=mpi_env()
    )
    assert out.returncode == 3, dump(out)
    trial_id = int(out.stdout.split()[0])
    assert trial_json(agent_server, trial_id)["state"] == "RUNNING"
    # The heartbeats stopped with the process: the 4 s lease expires and the trial is requeued.
    wait_for(lambda: trial_json(agent_server, trial_id)["state"] == "QUEUED", scaled(20), "the lease to expire")
    state = trial_json(agent_server, trial_id)
    assert state["state"] == "QUEUED" and state["attempt"] == 2, state
    with Client(agent_server.target) as c:
        for again in c.trials(campaign.id):
            assert again.id == trial_id and again.attempt == 2 and again.finished_folds == {0: 1.25}
            again.complete(folds=[None, 1.75])  # type: ignore[list-item]
    done = trial_json(agent_server, trial_id)
    assert done["state"] == "COMPLETED" and done["value"] == pytest.approx(1.5)
    assert [e["kind"] for e in done["events"]][:2] == ["acquired", "lease_expired"], done["events"]


@pytest.mark.parametrize(
    "spec,extra,message",
    [
        (script_spec(), (), "has no `training` section: it is driven by a script"),
        (None, ("--task", "missing.py:Task"), "training.task: no file"),
    ],
    ids=["script-campaign", "missing-task"],
)
def test_the_agent_refuses_quietly_at_four_ranks(
    agent_server: AgentServer, spec: dict[str, object] | None, extra: tuple[str, ...], message: str
) -> None:
    from tests.helpers.agents import agent_spec

    campaign = agent_server.submit(spec or agent_spec(folds=4))
    result = agent_server.run_agent(4, campaign, *extra, timeout=scaled(120))
    assert result.returncode == 2 and message in result.stderr, dump(result)
    # One line says why; no MPI_Abort screen follows it.
    assert "abort" not in (result.stdout + result.stderr).lower(), dump(result)
    assert (result.stdout + result.stderr).count("refusing to start") == 1, dump(result)


def test_the_example_script_runs(agent_server: AgentServer) -> None:
    out = subprocess.run(
        [sys.executable, "examples/scripts/tune_function.py", "--server", agent_server.target, "--trials", "6"],
        capture_output=True,
        text=True,
        timeout=scaled(120),
        cwd=ROOT,
        env=mpi_env(),
    )
    assert out.returncode == 0, dump(out)
    assert "best: trial" in out.stdout and "6 trials" in out.stdout, out.stdout
