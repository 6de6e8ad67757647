"""The embedded mode (``hpcopt_server.Study``) against Optuna in one process, as a user
new to hpcopt would compare them: the whole cost per trial of ``optimize`` on a function
that costs nothing.

    .venv/bin/python benchmarks/embedded.py                      # both parts, about 10 minutes
    .venv/bin/python benchmarks/embedded.py --reps 7 --bo-reps 0  # the overhead part alone

1. Overhead, ``random`` on a 1-d quadratic, ``--trials`` trials per run: our Study on a
   fresh SQLite file (every trial's three state changes committed, fsync'd, before the
   next) against Optuna's ``RandomSampler`` with its default storage (in memory, nothing
   kept) and with ``sqlite:///`` (``RDBStorage``, what a file-backed study uses).
   ``--reps`` runs of each, interleaved; median ms per trial and the spread.
2. ``bo`` against Optuna's ``GPSampler`` on Hartmann-6, ``--bo-trials`` trials: ms per
   trial over the last 50 (the cost at n near ``--bo-trials``) and over the whole run,
   and the best value found, over ``--bo-reps`` seeds, interleaved.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "optimizers"))

from functions import FUNCTIONS

H6 = FUNCTIONS["hartmann6"]


def ours(
    folder: Path, algorithm: str, space: dict[str, Any], n: int, seed: int, fn: Callable[..., float]
) -> list[float]:
    """Seconds at which each trial finished (from the Study's open), and the best value last."""
    from hpcopt_server import Study

    spec = {
        "name": f"bench-{algorithm}-{seed}",
        "objective": {"metric": "value", "direction": "minimize"},
        "space": space,
        "algorithm": {"name": algorithm, "seed": seed},
        "budget": {"max_trials": n},
    }
    stamps: list[float] = []
    with Study(folder / f"ours-{algorithm}-{seed}-{time.monotonic_ns()}.db", spec) as study:
        t0 = time.perf_counter()

        def objective(trial: Any) -> float:
            value = fn(trial.params)
            stamps.append(time.perf_counter() - t0)
            return value

        study.optimize(objective)
        stamps.append(time.perf_counter() - t0)
        stamps.append(float(study.best_value or 0.0))
    return stamps


def optuna_run(
    storage: str | None, sampler: Any, space: dict[str, Any], n: int, fn: Callable[..., float]
) -> list[float]:
    import optuna

    stamps: list[float] = []
    study = optuna.create_study(storage=storage, sampler=sampler)
    t0 = time.perf_counter()

    def objective(trial: Any) -> float:
        params = {k: trial.suggest_float(k, v["low"], v["high"]) for k, v in space.items()}
        value = fn(params)
        stamps.append(time.perf_counter() - t0)
        return value

    study.optimize(objective, n_trials=n)
    stamps.append(time.perf_counter() - t0)
    stamps.append(float(study.best_value))
    return stamps


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):8.3f} ({min(values):.3f}-{max(values):.3f})"


def overhead(folder: Path, reps: int, n: int) -> None:
    import optuna

    space = {"x": {"type": "real", "low": -10.0, "high": 10.0}}

    def quad(p: dict[str, float]) -> float:
        return (p["x"] - 2) ** 2

    runs: dict[str, list[float]] = {
        "hpcopt Study (SQLite file)": [],
        "Optuna (in memory)": [],
        "Optuna (sqlite:///)": [],
    }
    for rep in range(reps):
        s = ours(folder, "random", space, n, rep, quad)
        runs["hpcopt Study (SQLite file)"].append(s[-2] / n * 1000)
        s = optuna_run(None, optuna.samplers.RandomSampler(seed=rep), space, n, quad)
        runs["Optuna (in memory)"].append(s[-2] / n * 1000)
        url = f"sqlite:///{folder / f'optuna-{rep}.db'}"
        s = optuna_run(url, optuna.samplers.RandomSampler(seed=rep), space, n, quad)
        runs["Optuna (sqlite:///)"].append(s[-2] / n * 1000)
        print(f"  rep {rep + 1}/{reps}: " + ", ".join(f"{k} {v[-1]:.3f} ms" for k, v in runs.items()), flush=True)
    mine = statistics.median(runs["hpcopt Study (SQLite file)"])
    print(f"\nrandom, {n} trials of a 1-d quadratic, ms per trial over {reps} interleaved runs: median (min-max)")
    print(f"{'':28} {'ms/trial':>24}  {'ours / it':>9}")
    for name, values in runs.items():
        print(f"{name:28} {spread(values):>24}  {mine / statistics.median(values):9.2f}")


def bo_vs_gp(folder: Path, reps: int, n: int) -> None:
    import optuna

    tail = min(50, n // 2)
    rows: dict[str, list[tuple[float, float, float]]] = {"hpcopt bo": [], "Optuna GPSampler": []}
    for seed in range(reps):
        s = ours(folder, "bo", H6.space(), n, seed, H6)
        rows["hpcopt bo"].append(((s[n - 1] - s[n - 1 - tail]) / tail * 1000, s[-2] / n * 1000, s[-1]))
        s = optuna_run(None, optuna.samplers.GPSampler(seed=seed), H6.space(), n, H6)
        rows["Optuna GPSampler"].append(((s[n - 1] - s[n - 1 - tail]) / tail * 1000, s[-2] / n * 1000, s[-1]))
        print(
            f"  seed {seed}: " + ", ".join(f"{k} {v[-1][0]:.1f} ms/trial at n~{n}" for k, v in rows.items()), flush=True
        )
    print(f"\nbo against GPSampler on Hartmann-6 (min -3.32237), {n} trials, {reps} seeds: median (min-max)")
    print(f"{'':18} {f'ms/trial, last {tail}':>26} {'ms/trial, whole run':>26} {'best value':>26}")
    for name, values in rows.items():
        cols = [spread([v[i] for v in values]) for i in range(3)]
        print(f"{name:18} {cols[0]:>26} {cols[1]:>26} {cols[2]:>26}")
    ratio = statistics.median(v[0] for v in rows["hpcopt bo"]) / statistics.median(
        v[0] for v in rows["Optuna GPSampler"]
    )
    print(f"bo / GPSampler, ms per trial at n~{n}: {ratio:.2f} (target <= 2)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7, help="interleaved runs of the overhead part (default 7)")
    ap.add_argument("--trials", type=int, default=200, help="trials per overhead run (default 200)")
    ap.add_argument("--bo-reps", type=int, default=3, help="seeds of the bo part; 0 skips it (default 3)")
    ap.add_argument("--bo-trials", type=int, default=200, help="trials per bo run (default 200)")
    args = ap.parse_args()
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("hpcopt").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="hpcopt-embedded-") as tmp:
        if args.reps:
            overhead(Path(tmp), args.reps, args.trials)
        if args.bo_reps:
            bo_vs_gp(Path(tmp), args.bo_reps, args.bo_trials)


if __name__ == "__main__":
    main()
