"""``from hpcopt_server import optuna``: Optuna's quick start as the docs show it, an
objective that defines its space as it runs (grown while the first trial runs, then
fixed, later names kept outside it), Optuna's habits (direction, n_jobs, load_if_exists,
pruning) and what differs by design, named."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hpcopt_server import optuna
from tests.helpers.env import ROOT, scaled

pytestmark = pytest.mark.timeout(300)
MARK = re.compile(r"<!-- docs-test: optuna-quickstart -->\n```python\n(.*?)```", re.S)


def test_optunas_quick_start_runs_as_the_docs_show_it_and_leaves_nothing_behind(tmp_path: Path) -> None:
    (block,) = MARK.findall((ROOT / "docs/getting-started/from-optuna.md").read_text())
    assert block.startswith("from hpcopt_server import optuna\n"), "only the import line differs from Optuna's"
    probe = block + "\nprint('scratch', study._where.scratch)\n"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=scaled(120)
    )
    assert out.returncode == 0, out.stderr
    best, scratch = out.stdout.strip().splitlines()[-2:]
    params = ast.literal_eval(best)
    assert set(params) == {"x"} and -10 <= params["x"] <= 10, best
    assert not Path(scratch.split(" ", 1)[1]).exists(), "the in-memory study's file outlived the script"
    assert list(tmp_path.iterdir()) == [], "nothing written where the script ran"


def branchy(trial: optuna.Trial) -> float:
    kind = trial.suggest_categorical("kind", ["a", "b"])
    if kind == "a":
        return (trial.suggest_float("x", -1, 1) - 0.5) ** 2
    return 1 + trial.suggest_int("n", 1, 5, log=True) / 10


def test_the_space_grows_while_the_first_trial_runs_then_later_names_are_kept_outside(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(storage=url, study_name="branchy", seed=5)
    try:
        study.optimize(branchy, n_trials=30)
        records = [study.client.get_trial(t.id) for t in study.trials]
        first = records[0]
        space = study.spec["space"]
        assert set(space) == set(first.params) and "kind" in space, (space, first.params)
        assert all(t.state == "COMPLETED" for t in records)
        for t in records:  # every finished trial holds every parameter of the space
            assert set(t.params) == set(space), t.params
        other = "n" if "x" in space else "x"
        outside = [t for t in records if t.params["kind"] != first.params["kind"]]
        assert outside, "some trials took the other branch"
        for t in outside:  # its parameter kept with it; the space's one it never asked for named
            (event,) = [e for e in t.events if e.kind == "params_outside_space"]
            kept = json.loads(event.reason[event.reason.index("{") :])
            assert set(kept["outside"]) == {other} and kept["unused"] == [p for p in space if p != "kind"], kept
            assert set(study.suggested(t)) == {"kind", other}
        best = study.best_params
        assert "kind" in best and len(best) == 2, best  # what the objective asked for, as Optuna gives it
    finally:
        study.close()


def test_a_distribution_that_changes_is_sampled_outside_the_space(caplog: pytest.LogCaptureFixture) -> None:
    def moving(trial: optuna.Trial) -> float:
        return trial.suggest_float("x", 0, 1 + trial.number)

    study = optuna.create_study(seed=1)
    try:
        study.optimize(moving, n_trials=4)
        assert study.spec["space"]["x"]["high"] == 1.0
        assert "sampled independently" in caplog.text
        later = [study.client.get_trial(t.id) for t in study.trials][1:]
        assert all(any(e.kind == "params_outside_space" for e in t.events) for t in later)
    finally:
        study.close()


def test_direction_n_jobs_and_a_study_continued_from_its_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"

    def peak(trial: optuna.Trial) -> float:
        return -((trial.suggest_float("x", -3, 3) - 1) ** 2)

    study = optuna.create_study(storage=url, study_name="peak", direction="maximize", seed=2)
    study.optimize(peak, n_trials=12, n_jobs=3)
    assert study.spec["objective"]["direction"] == "maximize"
    values = [t.value for t in study.trials]
    assert len(values) == 12 and study.best_value == max(v for v in values if v is not None)
    study.close()
    with pytest.raises(ValueError, match="load_if_exists=True"):
        optuna.create_study(storage=url, study_name="peak")
    again = optuna.load_study(study_name="peak", storage=url)
    try:
        again.optimize(peak, n_trials=3)
        assert len(again.trials) == 15 and len({t.number for t in again.trials}) == 15
    finally:
        again.close()
    with pytest.raises(ValueError, match="no study named 'nope'"):
        optuna.load_study(study_name="nope", storage=url)


def test_pruning_as_optuna_users_write_it() -> None:
    def curve(trial: optuna.Trial) -> float:
        q = trial.suggest_float("q", 0, 1)
        for step in range(1, 6):
            value = q + 1.0 / step  # a falling curve, worse for a larger q
            trial.report(value, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return value

    study = optuna.create_study(pruner="median", seed=0)
    try:
        study.optimize(curve, n_trials=20)
        pruned = [t.params["q"] for t in study.trials if t.state == "PRUNED"]
        done = [t.params["q"] for t in study.trials if t.state == "COMPLETED"]
        assert pruned and done, [(t.params, t.state) for t in study.trials]
        assert min(pruned) > min(done), "the worse curves were pruned"
    finally:
        study.close()


@pytest.mark.parametrize(
    ("call", "error", "says"),
    [
        (lambda: optuna.create_study(sampler=object()), TypeError, "algorithm='bo'"),
        (lambda: optuna.create_study(pruner=object()), TypeError, "pruner='median'"),
        (lambda: optuna.create_study(directions=["minimize", "minimize"]), ValueError, "objectives"),
        (lambda: optuna.create_study(direction="up"), ValueError, "'minimize' or 'maximize'"),
        (lambda: optuna.create_study(storage=3.5), TypeError, "database URL"),
        (lambda: optuna.delete_study(study_name="s", storage=None), NotImplementedError, "hpcopt cancel"),
    ],
)
def test_what_differs_by_design_is_named(call: Any, error: type[Exception], says: str) -> None:
    with pytest.raises(error, match=re.escape(says)):
        study = call()
        study.close()


def test_a_step_is_refused_with_what_to_do_instead() -> None:
    study = optuna.create_study()
    try:
        with pytest.raises(ValueError, match="step by 1"):
            study.optimize(lambda t: t.suggest_int("w", 16, 256, step=16), n_trials=1)
    finally:
        study.close()


def test_the_native_study_takes_memory_too() -> None:
    from hpcopt_server import Study

    spec = {
        "name": "m",
        "objective": {"metric": "value"},
        "space": {"x": {"type": "real", "low": 0, "high": 1}},
        "budget": {"max_trials": 5},
    }
    with Study(":memory:", spec) as study:
        scratch = study._where.scratch
        assert scratch is not None and scratch.exists()
        study.optimize(lambda t: t.params["x"])
        assert len(study.trials) == 5
    assert not scratch.exists()


def test_callbacks_see_every_finished_trial_and_catch_keeps_going() -> None:
    def flaky(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0, 1)
        if trial.number % 3 == 1:
            raise ValueError("a bad batch")
        if trial.number % 3 == 2:
            raise optuna.TrialPruned()
        return x

    seen: list[tuple[int, str]] = []
    study = optuna.create_study(seed=4)
    try:
        study.optimize(
            flaky, n_trials=6, catch=(ValueError,), callbacks=[lambda s, t: seen.append((t.number, t.state))]
        )
        assert sorted(seen) == [(n, ("COMPLETED", "FAILED", "PRUNED")[n % 3]) for n in range(6)], seen
        with pytest.raises(ValueError, match="a bad batch"):
            study.optimize(flaky, n_trials=3)  # not caught: raised, the trial FAILED
    finally:
        study.close()


def test_a_native_study_names_the_door_for_suggest_calls() -> None:
    from hpcopt_server import Study

    spec = {"name": "n", "objective": {"metric": "value"}, "space": {"x": {"type": "real", "low": 0, "high": 1}}}
    with (
        Study(":memory:", {**spec, "budget": {"max_trials": 1}}) as study,
        pytest.raises(AttributeError, match="from hpcopt_server import optuna"),
    ):
        study.optimize(lambda t: t.suggest_float("x", 0, 1))


def test_the_start_up_benchmark_runs_and_prints_both_ratios() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/embedded_start.py"), "--reps", "1"],
        capture_output=True,
        text=True,
        timeout=scaled(240),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for row in ("import", "quick start"):
        assert re.search(rf"^{row}.*\d\.\d\d \(.*\(goal <= [\d.]+\)$", out.stdout, re.M), out.stdout


def test_a_study_before_its_first_trial_says_so() -> None:
    study = optuna.create_study()
    try:
        assert study.trials == []
        with pytest.raises(ValueError, match="no trial has completed yet"):
            _ = study.best_params
    finally:
        study.close()
