"""The optimizer benchmarks' test functions: each stated minimum is the function's
value at its known minimizer and lies below every sampled value, so a regret of 0 means
the optimum was found; ``quality.py`` runs on the held-out functions end to end,
pairs each optimizer's runs with the first one's by seed (counts and a sign test), and
reads the regret part way through a run (``--at``); ``batch_rounds.py`` stops each run
with trials pending at the sequential target and counts its rounds."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.env import ROOT, scaled

sys.path.insert(0, str(ROOT / "benchmarks/optimizers"))
from functions import _GALLAGHER_PEAKS, _RUGGED_CENTRE, ALL_FUNCTIONS, FUNCTIONS, HELD_OUT

_DIXON = 2.0 ** (-(2.0 ** np.arange(1, 7) - 2) / 2.0 ** np.arange(1, 7))
MINIMIZERS = {
    "branin": [math.pi, 2.275],
    "hartmann6": [0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573],
    "rosenbrock4": [1.0] * 4,
    "ackley10": [0.0] * 10,
    "levy8": [1.0] * 8,
    "ellipsoid5": [1.5] * 5,
    "styblinski4": [-2.903534027771178] * 4,
    "camel": [0.0898, -0.7126],
    "griewank6": [0.0] * 6,
    "michalewicz5": [2.202906, 1.570796, 1.284992, 1.923058, 1.720470],
    "shekel10": [4.00075, 4.00059, 3.99966, 3.99951],
    "powell8": [0.0] * 8,
    "rastrigin4": [0.0] * 4,
    "dixon6": list(_DIXON),
    "gallagher5": list(_GALLAGHER_PEAKS[0]),  # the highest peak
    "schwefel4": [420.968746] * 4,
    "rugged6": list(_RUGGED_CENTRE),
}


def test_every_function_has_a_minimizer_here_and_the_held_out_ones_are_apart() -> None:
    assert set(MINIMIZERS) == set(ALL_FUNCTIONS)
    assert not set(FUNCTIONS) & set(HELD_OUT) and len(HELD_OUT) == 8


@pytest.mark.parametrize("name", list(ALL_FUNCTIONS))
def test_the_stated_minimum_is_reached_at_the_minimizer_and_nothing_sampled_is_below_it(name: str) -> None:
    fn = ALL_FUNCTIONS[name]
    x = np.array(MINIMIZERS[name])
    lo, hi = np.array(fn.bounds).T
    assert np.all((lo <= x) & (x <= hi)), "the minimizer lies in the domain"
    assert abs(fn.f(x) - fn.minimum) < 1e-5 * max(1.0, abs(fn.minimum)), (fn.f(x), fn.minimum)
    rng = np.random.default_rng(0)
    X = lo + rng.random((20_000, fn.dim)) * (hi - lo)
    # Near the minimizer too: a stated minimum above the true one shows up there first.
    X = np.vstack([X, np.clip(x + rng.normal(size=(2_000, fn.dim)) * 1e-3 * (hi - lo), lo, hi)])
    assert min(fn.f(row) for row in X) >= fn.minimum - 1e-6 * max(1.0, abs(fn.minimum))


def test_quality_runs_the_held_out_functions_and_names_an_unknown_one() -> None:
    script = str(ROOT / "benchmarks/optimizers/quality.py")
    out = subprocess.run(
        [
            sys.executable,
            script,
            "--functions",
            "held-out",
            "--only",
            "random",
            "--seeds",
            "2",
            "--pending",
            "",
            "--procs",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=scaled(300),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split()[0] for line in out.stdout.splitlines() if line.split()[:1] and line.split()[0] in HELD_OUT]
    assert rows == list(HELD_OUT), out.stdout
    bad = subprocess.run(
        [sys.executable, script, "--functions", "branin,nope"], capture_output=True, text=True, timeout=scaled(60)
    )
    assert bad.returncode == 2 and "--functions: unknown nope" in bad.stderr, bad.stderr


def test_the_sign_test_counts_runs_paired_by_seed_and_leaves_ties_out() -> None:
    from quality import sign_test

    first = {s: 1.0 for s in range(20)}
    # 14 of 20 lower is within chance (p 0.12), 17 of 20 is not (p 0.0026): the figures
    # docs/benchmarks/optimizers.md reads splits by.
    lower, higher, same, p = sign_test(first, {s: 0.5 if s < 14 else 2.0 for s in range(20)})
    assert (lower, higher, same) == (14, 6, 0) and p == pytest.approx(0.1153, abs=1e-4)
    assert sign_test(first, {s: 0.5 if s < 17 else 2.0 for s in range(20)})[3] == pytest.approx(0.0026, abs=1e-4)
    # Ties are counted apart and left out of the test; only seeds both ran are paired.
    lower, higher, same, p = sign_test(first, {0: 0.5, 1: 1.0, 2: 1.0, 3: 2.0, 99: 0.0})
    assert (lower, higher, same) == (1, 1, 2) and p == 1.0
    assert sign_test(first, {0: 1.0})[3] == 1.0


def test_quality_pairs_each_optimizer_with_the_first_by_seed(tmp_path: Path) -> None:
    import json

    from quality import sign_test

    runs = tmp_path / "runs.json"
    command = [
        sys.executable,
        str(ROOT / "benchmarks/optimizers/quality.py"),
        "--functions",
        "branin",
        "--only",
        "random,ea",
        "--seeds",
        "5",
        "--pending",
        "",
        "--procs",
        "1",
        "--json",
        str(runs),
    ]
    out = subprocess.run(command, capture_output=True, text=True, timeout=scaled(300))
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(runs.read_text())
    made_on = data.pop("_machine")
    stored = {k: {int(s): v for s, v in r.items()} for k, r in data.items()}
    lower, higher, same, _ = sign_test(stored["random/branin/1"], stored["ea/branin/1"])
    [row] = [line for line in out.stdout.splitlines() if line.startswith("branin") and " -> " in line]
    assert (
        row.split()[:6] == ["branin", "one", "at", "a", "time", "ea"] and f"{lower} / {higher} / {same} of 5" in row
    ), row

    # The file names the machine its runs were made on; resumed on another, it says so.
    assert out.stdout.startswith("machine: cpu ") and made_on["cpu"] in out.stdout.splitlines()[0], out.stdout[:500]
    assert "differs" not in out.stderr, out.stderr[-2000:]
    runs.write_text(json.dumps({**data, "_machine": {**made_on, "cpu": "another CPU"}}))
    again = subprocess.run(command, capture_output=True, text=True, timeout=scaled(300))
    assert again.returncode == 0 and "were made on cpu another CPU" in again.stderr, again.stderr[-2000:]
    assert json.loads(runs.read_text())["_machine"]["cpu"] == "another CPU"  # the runs' machine, kept


@pytest.mark.slow
def test_quality_at_reads_the_best_regret_after_that_share_of_the_budget(tmp_path: Path) -> None:
    import json

    from runners import make

    script = str(ROOT / "benchmarks/optimizers/quality.py")
    base = [
        sys.executable,
        script,
        "--functions",
        "branin",
        "--only",
        "random",
        "--seeds",
        "3",
        "--pending",
        "4",
        "--procs",
        "1",
    ]
    half, final = tmp_path / "half.json", tmp_path / "final.json"
    outs = [
        subprocess.run(command, capture_output=True, text=True, timeout=scaled(300))
        for command in ([*base, "--at", "0.5", "--json", str(half)], [*base, "--json", str(final)])
    ]
    assert [out.returncode for out in outs] == [0, 0], outs[0].stderr[-3000:] + outs[1].stderr[-3000:]
    assert "regret after branin 25 of 50 evaluations (--at)" in outs[0].stdout, outs[0].stdout
    assert "(--at)" not in outs[1].stdout, outs[1].stdout
    at_half, at_end = json.loads(half.read_text()), json.loads(final.read_text())
    assert at_half["_at"] == 0.5 and "_at" not in at_end
    # One at a time: the best of the run's first 25 evaluations, the run told its whole budget.
    fn = ALL_FUNCTIONS["branin"]
    for seed in range(3):
        opt, best = make("random", fn.space(), seed, fn.budget), math.inf
        for _ in range(25):
            [p] = opt.ask(1)
            value = fn(p)
            opt.tell([(p, value)])
            best = min(best, value)
        assert at_half["random/branin/1"][str(seed)] == pytest.approx(best - fn.minimum, rel=1e-12)
    # With 4 pending too: never below the final regret of the same seed, and above it somewhere.
    for key in ("random/branin/1", "random/branin/4"):
        halves, ends = at_half[key], at_end[key]
        assert all(halves[s] >= ends[s] for s in ends) and any(halves[s] > ends[s] for s in ends), (halves, ends)

    # A file of half-way regrets is not resumed as final ones, and a share must be in (0, 1].
    mixed = subprocess.run([*base, "--json", str(half)], capture_output=True, text=True, timeout=scaled(120))
    assert mixed.returncode == 2 and "holds regrets at --at 0.5, not 1" in mixed.stderr, mixed.stderr[-2000:]
    for bad in ("0", "1.5", "half"):
        out = subprocess.run([*base, "--at", bad], capture_output=True, text=True, timeout=scaled(60))
        assert out.returncode == 2 and "argument --at" in out.stderr and "(0, 1]" in out.stderr, out.stderr


def test_batch_rounds_counts_a_round_per_evaluation_time_and_never_past_the_cap() -> None:
    from batch_rounds import bootstrap, median_rounds, rounds

    # Result i of P workers arrives in round ceil(i / P); a run that never reached the target is inf.
    r = rounds([4, 5, None, 16, 1], 4)
    assert list(r) == [1, 2, math.inf, 4, 1]
    assert median_rounds(r) == 2 and median_rounds(np.array([1.0, 3.0])) == 2
    # Half or more never reaching it: the median is never, not the last run that did.
    assert median_rounds(rounds([3, None, None, 8], 2)) == math.inf
    # The bootstrap draws the same seeds for every optimizer: one that is a round faster on
    # every seed is faster in every resample, and equal ones are never fewer.
    a = np.array([2.0, 5.0, 3.0, 9.0, 4.0])
    boot = bootstrap({"a": a, "b": a + 1, "c": a.copy()})
    assert bool(np.all(boot["a"] < boot["b"])) and not bool(np.any(boot["a"] < boot["c"]))
    assert set(np.unique(boot["a"])) <= set(a)


def test_skopt_is_asked_in_its_own_batch_mode_with_points_pending() -> None:
    from runners import make

    fn = ALL_FUNCTIONS["branin"]
    opt = make("skopt", fn.space(), 0)
    rng = np.random.default_rng(0)
    for _ in range(12):
        p = {f"x{i}": float(rng.uniform(lo, hi)) for i, (lo, hi) in enumerate(fn.bounds)}
        opt.tell([(p, fn(p))])
    [alone] = opt.ask(1)
    # A pending point is told to a copy with the lowest value seen (skopt's cl_min): the
    # next point moves away from it, and the optimizer itself keeps only real results.
    [beside] = opt.ask(1, [alone])
    assert beside != alone and len(opt.opt.yi) == 12
    assert opt.ask(1, [alone]) == [beside] and opt.ask(1) == [alone]


@pytest.mark.slow
def test_batch_rounds_stops_each_run_at_the_sequential_target_and_names_bad_arguments(tmp_path: Path) -> None:
    import json
    from dataclasses import replace

    from runners import run, trace

    script = str(ROOT / "benchmarks/optimizers/batch_rounds.py")
    store = tmp_path / "rounds.json"
    base = [sys.executable, script, "--functions", "branin", "--seeds", "3", "--procs", "1"]
    base += ["--only", "ea,random", "--reference", "random", "--pending", "4"]
    out = subprocess.run([*base, "--json", str(store)], capture_output=True, text=True, timeout=scaled(300))
    assert out.returncode == 0, out.stderr[-3000:]
    stored = json.loads(store.read_text())
    fn = ALL_FUNCTIONS["branin"]
    # The target is random's median final regret one at a time, as quality.py runs it.
    finals = [run("random", fn, s) for s in range(3)]
    assert [stored["sequential"][f"random/branin/{s}"] for s in range(3)] == finals
    target = float(np.median(finals))
    capped = replace(fn, budget=2 * fn.budget)
    evaluations = []
    for opt in ("ea", "random"):
        for seed in range(3):
            hit = stored["batch"][f"{opt}/branin/4/{seed}"]
            assert hit["target"] == target and hit["cap"] == 2 * fn.budget
            # The first result at or below the target, from a run told the capped budget.
            tr = np.array(trace(opt, capped, seed, 4))
            below = np.flatnonzero(tr <= target)
            assert hit["evaluations"] == (int(below[0]) + 1 if len(below) else None), (opt, seed, hit)
            evaluations.append(hit["evaluations"])
    assert any(e is not None for e in evaluations)
    [row] = [line for line in out.stdout.splitlines() if line.startswith("branin")]
    ea_rounds = sorted(math.inf if e is None else math.ceil(e / 4) for e in evaluations[:3])[1]
    assert row.split()[2] == ("never" if math.isinf(ea_rounds) else f"{ea_rounds:g}"), row
    assert "4 pending: ea needs fewer rounds than every other on" in out.stdout
    # Resumed, nothing runs again; on another machine it says so.
    stored["_machine"] = {**stored["_machine"], "cpu": "another CPU"}
    store.write_text(json.dumps(stored))
    again = subprocess.run([*base, "--json", str(store)], capture_output=True, text=True, timeout=scaled(120))
    assert again.returncode == 0 and "were made on cpu another CPU" in again.stderr, again.stderr[-2000:]
    assert "batch runs" not in again.stderr, again.stderr[-2000:]
    for bad, says in (
        (["--pending", "1"], "--pending: 1"),
        (["--pending", "four"], "--pending: four"),
        (["--functions", "nope"], "--functions: unknown nope"),
        (["--only", "bo,nope"], "--only: 'nope'"),
        (["--reference", "nope"], "--reference: 'nope'"),
        (["--cap", "0.5"], "--cap: 0.5"),
    ):
        err = subprocess.run([*base, *bad], capture_output=True, text=True, timeout=scaled(60))
        assert err.returncode == 2 and says in err.stderr, (bad, err.stderr[-2000:])
