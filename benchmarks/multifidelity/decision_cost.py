"""The multi-fidelity searcher's cost per decision against its history: one ``tell``
(a unit's result) and one ``next`` (the next unit) after n reports, d = 6, with 16
units running (fantasised), as a campaign's optimizer makes them under the campaign's
lock.

    .venv/bin/python benchmarks/multifidelity/decision_cost.py [--ns 1000,10000] [--reps 20]

The searcher is driven by itself on a synthetic multi-fidelity Hartmann-6 (the value
at z, the log share of the epochs, is the full value plus (1 - z) times a bias and a
little noise) with 5 folds and 20 epochs, keeping 16 units running, until it has n
reports; then ``--reps`` more steps are timed. Printed: p50, p90 and max of tell +
next, and of next alone; how many configurations it holds; and the time to reach n.

``--direct`` builds the n reports without asking the searcher for them (each new
configuration at random, its rung 0 told, and each rung above with chance 1/eta, as
successive halving leaves a ladder): reaching 10,000 reports by the searcher's own
steps takes most of an hour here, and the cost of a step depends on how many reports
and configurations it holds, not on how they were chosen.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks/optimizers")]

from functions import H6_A, H6_ALPHA, H6_P  # noqa: E402

from hpcopt_server.optimizers.multifidelity import MultiFidelitySearch, Work  # noqa: E402
from hpcopt_server.optimizers.space import SearchSpace  # noqa: E402

D, FOLDS, EPOCHS, RUNNING = 6, 5, 20, 16
SPACE = SearchSpace({f"x{i}": {"type": "real", "low": 0.0, "high": 1.0} for i in range(D)})


def hartmann(x: np.ndarray) -> float:
    inner = (H6_A * (x[None, :] - H6_P) ** 2).sum(axis=1)
    return float(-(H6_ALPHA * np.exp(-inner)).sum())


def result(work: Work, rng: np.random.Generator) -> list[float]:
    x = np.array([float(work.params[f"x{i}"]) for i in range(D)])
    z = math.log(work.rung.epochs) / math.log(EPOCHS)
    base = hartmann(x) + (1 - z) * 0.5
    return [base + 0.05 * float(rng.normal()) for _ in range(work.rung.folds)]


def build(search: MultiFidelitySearch, n: int, rng: np.random.Generator) -> int:
    """``n`` reports told directly (``--direct``); returns how many."""
    reports = 0
    while reports < n:
        x = search.encoder.random(1, rng)[0]
        work = search._new(x, "direct", None)
        for rung in search.rungs[search.configs[work.config].start :]:
            w = Work(work.config, rung, work.params, "direct")
            search.tell(work.config, rung.index, result(w, rng), 1.0)
            reports += 1
            if reports >= n or rng.random() > 1 / 3:
                break
    return reports


def run(n: int, reps: int, seed: int = 0, direct: bool = False) -> dict[str, float]:
    search = MultiFidelitySearch(SPACE, folds=FOLDS, epochs=EPOCHS, seed=seed)
    rng = np.random.default_rng(seed)
    running: list[Work] = []
    t0 = time.perf_counter()
    reports = build(search, n, rng) if direct else 0
    reached = time.perf_counter() - t0
    steps: list[float] = []
    nexts: list[float] = []
    while reports < n + reps:
        while len(running) < RUNNING:
            work = search.next()
            assert work is not None
            running.append(work)
        work = running.pop(0)
        timed = reports >= n
        a = time.perf_counter()
        search.tell(work.config, work.rung.index, result(work, rng), 1.0)
        b = time.perf_counter()
        nxt = search.next()
        c = time.perf_counter()
        assert nxt is not None
        running.append(nxt)
        if timed:
            steps.append(c - a)
            nexts.append(c - b)
        elif reports == n - 1:
            reached = time.perf_counter() - t0
        reports += 1
    steps.sort()
    return {
        "n": n,
        "configs": len(search.configs),
        "p50": statistics.median(steps),
        "p90": steps[int(0.9 * (len(steps) - 1))],
        "max": steps[-1],
        "next_p50": statistics.median(nexts),
        "reach": reached,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", default="1000,10000")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--direct", action="store_true", help="build the history by telling it (see above)")
    args = ap.parse_args()
    print(
        f"{'n':>7} {'configs':>7} {'step p50 ms':>11} {'p90 ms':>8} {'max ms':>8} {'next p50 ms':>11} "
        f"{'to reach n s':>12}"
    )
    for n in (int(v) for v in args.ns.split(",")):
        r = run(n, args.reps, direct=args.direct)
        print(
            f"{r['n']:>7} {r['configs']:>7} {1000 * r['p50']:>11.1f} {1000 * r['p90']:>8.1f} {1000 * r['max']:>8.1f} "
            f"{1000 * r['next_p50']:>11.1f} {r['reach']:>12.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
