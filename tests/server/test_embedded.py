"""The embedded mode (``hpcopt_server.Study``): the service layer in the caller's process
on a SQLite file. The client calls it answers are the server's own servicers, so the
same client behaviour is pinned here on both transports (gRPC to a live server, and the
in-process channel), and the Study's own contract on its own."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import hpcopt
from hpcopt_server import Study, TrialPruned
from hpcopt_server.embedded import LocalChannel
from hpcopt_server.service import Service
from hpcopt_server.storage.repository import Storage
from tests.helpers.clients import Client
from tests.helpers.env import scaled
from tests.helpers.live import run_live_server

pytestmark = pytest.mark.timeout(300)


def spec(**overrides: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": "embedded",
        "objective": {"metric": "value", "direction": "minimize"},
        "space": {
            "x": {"type": "real", "low": -5.0, "high": 5.0},
            "n": {"type": "int", "low": 1, "high": 4},
            "kind": {"type": "categorical", "choices": ["a", "b"]},
        },
        "algorithm": {"name": "random", "seed": 3},
        "budget": {"max_trials": 6},
    }
    out.update(overrides)
    return out


def f(p: dict[str, Any]) -> float:
    return (float(p["x"]) - 1) ** 2 + int(p["n"]) / 10 + (0.3 if p["kind"] == "b" else 0.0)


# -- one client contract, two transports ------------------------------------------------


@pytest.fixture(params=["grpc", "embedded"])
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[hpcopt.Client]:
    from hpcopt_server.storage.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'c.db'}"
    upgrade(url)
    storage = Storage(url)
    service = Service(storage)
    try:
        if request.param == "grpc":
            for live in run_live_server(service):
                with Client(live.grpc_target) as c:
                    yield c
        else:
            with Client("embedded", channel=LocalChannel(service)) as c:
                yield c
    finally:
        storage.close()


def test_ask_tell_reads_and_errors_are_the_same_on_both_transports(client: hpcopt.Client) -> None:
    campaign = client.create_campaign(spec(folds=2, budget={"max_trials": 3, "max_parallel": 2}))
    done = []
    for trial in client.trials(campaign.id):
        assert list(trial.params) == ["x", "n", "kind"] and trial.folds == 2
        assert trial.report(0, f(trial.params) + 1) is True
        done.append(trial.complete(folds=[f(trial.params), f(trial.params) + 0.2]))
    assert [t.state for t in done] == ["COMPLETED"] * 3
    best = client.get_best_trial(campaign.id)
    assert best.value == min(t.value for t in done if t.value is not None)
    assert isinstance(best, hpcopt.Trial) and best.number in {t.number for t in done}
    listed = client.list_trials(campaign.id)
    assert sorted(t.number for t in listed) == [0, 1, 2]
    assert client.get_campaign(campaign.id).state == "COMPLETED"
    # Bad input: the same code and the same field on both.
    with pytest.raises(hpcopt.ApiError) as bad:
        client.create_campaign(spec(budget={"max_trials": 0}))
    assert bad.value.code == "INVALID_ARGUMENT" and any("max_trials" in e["field"] for e in bad.value.field_errors)
    with pytest.raises(hpcopt.ApiError) as missing:
        client.get_campaign(campaign.id + 100)
    assert missing.value.code == "NOT_FOUND"
    with pytest.raises(hpcopt.ApiError) as lost:  # an unknown lease is refused, not obeyed
        client.agent().heartbeat(hpcopt.Lease("nobody", done[0].id, "no-lease"))
    assert lost.value.code in {"NOT_FOUND", "FAILED_PRECONDITION", "PERMISSION_DENIED"}
    client.wait_ready(timeout=scaled(5))


# -- the Study --------------------------------------------------------------------------


def test_optimize_runs_the_budget_and_leaves_no_thread_and_the_file_reopens(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    db = tmp_path / "s.db"
    with Study(db, spec()) as study:
        study.optimize(lambda trial: f(trial.params))
        trials = study.trials
        assert [t.state for t in trials] == ["COMPLETED"] * 6
        assert study.best_value == min(t.value for t in trials if t.value is not None)
        assert study.best_params == study.best_trial.params and list(study.best_params) == ["x", "n", "kind"]
        first = study.campaign_id
    assert set(threading.enumerate()) == before
    # The same spec reopens the same campaign (its budget is spent: nothing more runs);
    # another spec under another name is a new campaign in the same file.
    with Study(db, spec()) as again:
        assert again.campaign_id == first and again.ask() is None
    with Study(db, spec(name="other", budget={"max_trials": 2})) as other:
        assert other.campaign_id != first
        other.optimize(lambda trial: f(trial.params))
        assert other.campaign.trial_counts == {"COMPLETED": 2}
    with pytest.raises(ValueError, match="holds 2 campaigns"):
        Study(db)
    with Study(db, campaign=first) as by_id:
        assert len(by_id.trials) == 6
    assert set(threading.enumerate()) == before


def test_ask_and_tell_out_of_order_and_the_parallel_budget(tmp_path: Path) -> None:
    with Study(tmp_path / "s.db", spec(budget={"max_trials": 4, "max_parallel": 2})) as study:
        a, b = study.ask(), study.ask()
        assert a is not None and b is not None and a.id != b.id
        with pytest.raises(RuntimeError, match="max_parallel"):
            study.ask()
        assert study.tell(b, 2.0) is not None
        assert study.tell(a, [1.0]) is not None  # one fold: a list of one value
        c = study.ask()
        assert c is not None
        study.tell(c, state="PRUNED", reason="no good")
        d = study.ask()
        assert d is not None
        study.tell(d, state="PREEMPTED")  # given back: asked again, as attempt 2
        again = study.ask()
        assert again is not None and again.id == d.id and again.attempt == 2
        with pytest.raises(ValueError, match="a number"):
            study.tell(again, "not a number")  # type: ignore[arg-type]
        study.tell(again, 0.5)
        assert study.ask() is None
        states = sorted(t.state for t in study.trials)
        assert states == ["COMPLETED", "COMPLETED", "COMPLETED", "PRUNED"]


def test_a_paused_study_says_so_and_a_raised_budget_asks_on(tmp_path: Path) -> None:
    with Study(tmp_path / "s.db", spec(budget={"max_trials": 1, "max_parallel": 2})) as study:
        study.client.pause_campaign(study.campaign_id)
        with pytest.raises(RuntimeError, match="PAUSED: it hands out no trial until it is resumed"):
            study.ask()
        study.client.resume_campaign(study.campaign_id)
        first = study.ask()
        assert first is not None
        study.tell(first, 1.0)
        assert study.ask() is None  # the budget is spent
        study.client.raise_budget(study.campaign_id, 2)
        more = study.ask()
        assert more is not None and more.number == 1


def test_a_study_closed_with_a_trial_asked_gives_it_back(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with Study(db, spec()) as study:
        held = study.ask()
        assert held is not None
    with Study(db, spec()) as again:
        assert [t.state for t in again.trials] == ["QUEUED"]
        resumed = again.ask()
        assert resumed is not None and resumed.id == held.id and resumed.attempt == 2


def test_objective_failures_pruning_and_catch(tmp_path: Path) -> None:
    calls = []

    def objective(trial: hpcopt.ActiveTrial) -> Any:
        calls.append(trial.number)
        if trial.number == 0:
            raise TrialPruned("early")
        if trial.number == 1:
            return None  # no result: FAILED, the loop goes on
        if trial.number == 2:
            raise ZeroDivisionError("boom")
        return f(trial.params)

    with Study(tmp_path / "s.db", spec()) as study:
        with pytest.raises(ZeroDivisionError):
            study.optimize(objective)
        assert calls == [0, 1, 2]
        by_number = {t.number: t for t in study.trials}
        assert by_number[0].state == "PRUNED" and by_number[1].state == "FAILED"
        assert by_number[2].state == "FAILED" and "ZeroDivisionError: boom" in by_number[2].error
        study.optimize(objective, n_trials=1)
        assert calls[-1] == 3

        def flaky(trial: hpcopt.ActiveTrial) -> float:
            if trial.number % 2:
                raise KeyError("odd")
            return f(trial.params)

        study.optimize(flaky, catch=(KeyError,))
        assert sum(t.state == "COMPLETED" for t in study.trials) >= 2 and study.ask() is None


def test_a_bad_spec_is_refused_naming_the_field_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with pytest.raises(hpcopt.ApiError) as bad:
        Study(db, spec(space={"x": {"type": "real", "low": 2.0, "high": 1.0}}))
    assert bad.value.code == "INVALID_ARGUMENT" and "space" in str(bad.value.field_errors)
    with Study(db, spec()) as study:  # the file is usable and holds only the good campaign
        assert [c.name for c in study.client.list_campaigns()] == ["embedded"]


@pytest.mark.parametrize("algorithm", ["random", "sobol", "grid", "bo", "ea", "skopt"])
def test_every_algorithm_runs_embedded(tmp_path: Path, algorithm: str) -> None:
    space = {"x": {"type": "real", "low": -5.0, "high": 5.0}, "n": {"type": "int", "low": 1, "high": 4}}
    if algorithm == "grid":
        space = {
            "x": {"type": "categorical", "choices": [-1.0, 0.0, 1.0, 2.0]},
            "n": {"type": "int", "low": 1, "high": 2},
        }
    s = spec(space=space, algorithm={"name": algorithm, "seed": 1}, budget={"max_trials": 8})
    with Study(tmp_path / "s.db", s) as study:
        study.optimize(lambda t: (float(t.params["x"]) - 1) ** 2 + int(t.params["n"]))
        assert study.campaign.trial_counts == {"COMPLETED": 8}


@pytest.mark.parametrize("pruner", ["median", "asha"])
def test_pruners_stop_trials_through_report(tmp_path: Path, pruner: str) -> None:
    s = spec(pruner={"name": pruner}, budget={"max_trials": 12}, algorithm={"name": "random", "seed": 2})
    stopped = []

    def objective(trial: hpcopt.ActiveTrial) -> float:
        # Trials after the first few are all worse than every earlier one at every step.
        for step in range(1, 10):
            if not trial.report(step, trial.number + 1 / step):
                stopped.append(trial.number)
                return float("nan")  # ignored: the server ended the trial
        return float(trial.number)

    with Study(tmp_path / "s.db", s) as study:
        study.optimize(objective)
        counts = study.campaign.trial_counts
    assert stopped and counts.get("PRUNED", 0) == len(stopped), counts


def test_the_same_seed_gives_the_same_trials(tmp_path: Path) -> None:
    runs = []
    for i in range(2):
        with Study(tmp_path / f"{i}.db", spec(algorithm={"name": "bo", "seed": 7}, budget={"max_trials": 10})) as study:
            study.optimize(lambda t: f(t.params))
            runs.append([t.params for t in study.trials])
    assert runs[0] == runs[1]


@pytest.mark.slow
def test_the_pages_quick_start_runs_as_written_in_ten_lines_and_its_file_can_be_served(tmp_path: Path) -> None:
    import json
    import os
    import signal
    import subprocess
    import sys

    from tests.agent.test_docs_blocks import docs_blocks

    [(lang, code)] = docs_blocks("embedded-quickstart")
    assert lang == "python" and len(code.strip().splitlines()) <= 10, code  # Optuna's quick start is 10
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCOPT_SERVER")}
    env["HPCOPT_HOME"] = str(tmp_path / "home")
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled(240)
    )
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    best = eval(run.stdout.strip(), {})  # the printed dict of best params
    assert set(best) == {"x"} and abs(best["x"] - 2) < 1.0, run.stdout
    again = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled(240)
    )
    assert again.returncode == 0 and again.stdout == run.stdout  # reopened: nothing more ran
    # The page's serve block, as written, on the file the script left.
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hpcopt_server.cli",
            "serve",
            "--db",
            "sqlite:///quadratic.db",
            "--port",
            "0",
            "--grpc-port",
            "0",
            "--server-file",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        cli = [sys.executable, "-m", "hpcopt.cli"]
        waited = subprocess.run(
            [*cli, "wait"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled(120)
        )
        assert waited.returncode == 0, waited.stderr
        listed = subprocess.run(
            [*cli, "--json", "list"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled(60)
        )
        [campaign] = json.loads(listed.stdout)
        assert campaign["name"] == "quadratic" and campaign["state"] == "COMPLETED" and campaign["finished"] == 100
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=scaled(30))


def test_bo_leaves_no_refit_thread_behind(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    space = {f"x{i}": {"type": "real", "low": 0.0, "high": 1.0} for i in range(4)}
    s = spec(space=space, algorithm={"name": "bo", "seed": 0}, budget={"max_trials": 40})
    with Study(tmp_path / "s.db", s) as study:
        study.optimize(lambda t: sum((float(v) - 0.3) ** 2 for v in t.params.values()))
    assert {t.name for t in set(threading.enumerate()) - before} == set()
