"""Multi-objective search quality: bo (ParEGO) and ea (NSGA-II selection) against
Optuna's NSGA-II, TPE and GP (logEHVI) samplers and random search, by hypervolume.

    python benchmarks/optimizers/multiobjective.py [--seeds 10] [--procs 2] [--pending 4] [--budget 100]
        [--only bo,ea,optuna-nsga2] [--problems zdt1,dtlz2]

Problems (d = 6, every input in [0, 1]): ZDT1 (convex front), ZDT2 (concave), ZDT3
(disconnected), DTLZ2 (three objectives, a sphere octant). The table prints the
hypervolume gap, HV(true front) - HV(found), with the reference point 10% past the worst
value of each objective over the unit cube (ZDT: (1.1, 11); DTLZ2: 2.2 per objective),
so every evaluation counts from the start (median and IQR over the seeds; 0 is the
whole front), and the ratio of each method's median gap to Optuna NSGA-II's.
``--pending K``: asynchronous, K suggestions in flight (ours are told what is pending;
Optuna sees its RUNNING trials).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

import numpy as np

from hpcopt_server import domain as d
from hpcopt_server.optimizers import REGISTRY, Problem, SearchSpace
from hpcopt_server.optimizers.pareto import hypervolume

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DIM = 6
METHODS = ("bo", "ea", "optuna-nsga2", "optuna-tpe", "optuna-gp", "random")


def zdt1(x: np.ndarray) -> list[float]:
    g = 1 + 9 * x[1:].mean()
    return [float(x[0]), float(g * (1 - math.sqrt(x[0] / g)))]


def zdt2(x: np.ndarray) -> list[float]:
    g = 1 + 9 * x[1:].mean()
    return [float(x[0]), float(g * (1 - (x[0] / g) ** 2))]


def zdt3(x: np.ndarray) -> list[float]:
    g = 1 + 9 * x[1:].mean()
    h = 1 - math.sqrt(x[0] / g) - (x[0] / g) * math.sin(10 * math.pi * x[0])
    return [float(x[0]), float(g * h)]


def dtlz2(x: np.ndarray) -> list[float]:
    g = float(((x[2:] - 0.5) ** 2).sum())
    a, b = x[0] * math.pi / 2, x[1] * math.pi / 2
    return [(1 + g) * math.cos(a) * math.cos(b), (1 + g) * math.cos(a) * math.sin(b), (1 + g) * math.sin(a)]


def true_hv(name: str) -> float:
    """The hypervolume of the true front (from a dense sample of it)."""
    t = np.linspace(0, 1, 20001)
    ref = REF[name]
    if name == "zdt1":
        return hypervolume(np.c_[t, 1 - np.sqrt(t)], ref)
    if name == "zdt2":
        return hypervolume(np.c_[t, 1 - t**2], ref)
    if name == "zdt3":
        return hypervolume(np.c_[t, 1 - np.sqrt(t) - t * np.sin(10 * np.pi * t)], ref)
    return 2.2**3 - math.pi / 6  # DTLZ2: the front is the unit sphere's octant


PROBLEMS = {"zdt1": (zdt1, 2), "zdt2": (zdt2, 2), "zdt3": (zdt3, 2), "dtlz2": (dtlz2, 3)}
REF = {"zdt1": [1.1, 11.0], "zdt2": [1.1, 11.0], "zdt3": [1.1, 11.0], "dtlz2": [2.2, 2.2, 2.2]}


class Ours:
    def __init__(self, name: str, m: int, seed: int, budget: int):
        space = SearchSpace({f"x{i}": {"type": "real", "low": 0.0, "high": 1.0} for i in range(DIM)})
        directions = ("minimize",) * m
        self.opt = REGISTRY[name](Problem(space, "minimize", seed, {}, budget=budget, directions=directions))
        self.n = 0

    def ask(self, pending: list[dict[str, Any]]) -> dict[str, Any]:
        return dict(self.opt.suggest(1, pending)[0])

    def tell(self, params: dict[str, Any], values: list[float], handle: Any) -> None:
        trial = d.Trial(
            id=self.n,
            campaign_id=1,
            number=self.n,
            state=d.TrialState.COMPLETED,
            attempt=1,
            params=params,
            created_at=NOW,
            value=values[0],
            values=tuple(values),
            finished_at=NOW,
        )
        self.n += 1
        self.opt.observe([trial])


class Optuna:
    def __init__(self, kind: str, m: int, seed: int):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        samplers: dict[str, Any] = {
            "nsga2": lambda: optuna.samplers.NSGAIISampler(seed=seed),
            "tpe": lambda: optuna.samplers.TPESampler(seed=seed),
            "gp": lambda: optuna.samplers.GPSampler(seed=seed),
        }
        self.study = optuna.create_study(sampler=samplers[kind](), directions=["minimize"] * m)
        self.dists: dict[str, Any] = {f"x{i}": optuna.distributions.FloatDistribution(0.0, 1.0) for i in range(DIM)}
        self.handle: Any = None

    def ask(self, pending: list[dict[str, Any]]) -> dict[str, Any]:
        self.handle = self.study.ask(self.dists)
        return {"__trial": self.handle, **self.handle.params}

    def tell(self, params: dict[str, Any], values: list[float], handle: Any) -> None:
        self.study.tell(handle, values)


class Random:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def ask(self, pending: list[dict[str, Any]]) -> dict[str, Any]:
        return {f"x{i}": float(v) for i, v in enumerate(self.rng.random(DIM))}

    def tell(self, params: dict[str, Any], values: list[float], handle: Any) -> None:
        pass


def run(method: str, problem: str, seed: int, pending: int, budget: int) -> tuple[float, float]:
    """(hypervolume gap, seconds spent suggesting) of one run."""
    fn, m = PROBLEMS[problem]
    opt: Any
    if method in ("bo", "ea"):
        opt = Ours(method, m, seed, budget)
    elif method == "random":
        opt = Random(seed)
    else:
        opt = Optuna(method.split("-")[1], m, seed)
    found: list[list[float]] = []
    spent = 0.0
    in_flight: list[dict[str, Any]] = []
    asked = 0
    while len(found) < budget:
        while len(in_flight) < max(pending, 1) and asked < budget:
            t = time.perf_counter()
            in_flight.append(opt.ask([{k: v for k, v in p.items() if k != "__trial"} for p in in_flight]))
            spent += time.perf_counter() - t
            asked += 1
        p = in_flight.pop(0)
        handle = p.pop("__trial", None)
        values = fn(np.array([p[f"x{i}"] for i in range(DIM)]))
        t = time.perf_counter()
        opt.tell(p, values, handle)
        spent += time.perf_counter() - t
        found.append(values)
    gap = true_hv(problem) - hypervolume(np.array(found), REF[problem])
    return max(gap, 0.0), spent


def _job(args: tuple[str, str, int, int, int]) -> tuple[str, str, int, float, float]:
    method, problem, seed, pending, budget = args
    gap, spent = run(method, problem, seed, pending, budget)
    return method, problem, seed, gap, spent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--procs", type=int, default=2, help="runs at once (processes)")
    ap.add_argument("--pending", type=int, default=1, help="suggestions in flight (1: one at a time)")
    ap.add_argument("--budget", type=int, default=100, help="evaluations per run")
    ap.add_argument("--only", default=",".join(METHODS))
    ap.add_argument("--problems", default=",".join(PROBLEMS))
    args = ap.parse_args()
    methods = [x for x in args.only.split(",") if x]
    problems = [x for x in args.problems.split(",") if x]
    jobs = [(m, p, s, args.pending, args.budget) for p in problems for s in range(args.seeds) for m in methods]
    print(
        f"# {len(jobs)} runs on {os.cpu_count()} cores, {args.procs} at once; {args.pending} in flight", file=sys.stderr
    )
    results: dict[tuple[str, str], list[float]] = {}
    seconds: dict[str, float] = {}
    started = time.time()
    with mp.get_context("spawn").Pool(args.procs) as pool:
        for i, (m, p, _, gap, spent) in enumerate(pool.imap_unordered(_job, jobs), 1):
            results.setdefault((m, p), []).append(gap)
            seconds[m] = seconds.get(m, 0.0) + spent
            if i % 10 == 0 or i == len(jobs):
                print(f"# {i}/{len(jobs)} runs, {time.time() - started:.0f} s", file=sys.stderr)
    print(
        f"\nHypervolume gap (true front - found), median [IQR] over {args.seeds} seeds, {args.budget} "
        f"evaluations, {args.pending} in flight; after it: median / optuna-nsga2's median\n"
    )
    print("| problem | " + " | ".join(methods) + " |")
    print("|---" * (len(methods) + 1) + "|")
    for p in problems:
        ref = float(np.median(results[("optuna-nsga2", p)])) if ("optuna-nsga2", p) in results else None
        cells = []
        for m in methods:
            g = np.array(results[(m, p)])
            q1, med, q3 = np.percentile(g, [25, 50, 75])
            ratio = f" ({med / ref:.2f}x)" if ref else ""
            cells.append(f"{med:.3g} [{q1:.2g}, {q3:.2g}]{ratio}")
        print(f"| {p} ({PROBLEMS[p][1]} obj) | " + " | ".join(cells) + " |")
    runs = {m: sum(len(results[(m, p)]) for p in problems) for m in methods}
    print("\nSeconds spent suggesting, per run: " + ", ".join(f"{m} {seconds[m] / runs[m]:.2f}" for m in methods))
    return 0


if __name__ == "__main__":
    sys.exit(main())
