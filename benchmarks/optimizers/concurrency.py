"""Many workers at once: regret per round when 16 or 64 evaluations are in flight, for
our ``bo`` and ``ea`` next to Optuna's TPE and random search, in the same run.

A round is ``workers`` evaluations finishing: the wall-clock unit of a cluster where
every trial takes about as long. The run is asynchronous (the oldest pending evaluation
finishes, one new suggestion is made with the other ``workers - 1`` pending) for
``max(budget, 5 * workers)`` evaluations, so 64 workers get 5 rounds. The table shows
the median regret over seeds after round 2 and after the last round, and the seconds
each optimizer spent suggesting (what a round must also pay for).

    python benchmarks/optimizers/concurrency.py [--seeds 10] [--workers 16,64] [--procs 2]

Each optimizer after the first is also paired with the first run by run (the same
function and seed), after round 2 and after the last round: in how many runs it ended
lower / higher / the same, with the sign test's two-sided p. bo's batch rules:

    python benchmarks/optimizers/concurrency.py --workers 16,64 --seeds 5 --only "bo,bo[batch=believer]"
    python benchmarks/optimizers/concurrency.py --workers 256 --seeds 4 --only "bo,bo[batch=believer]" \
        --functions hartmann6,rosenbrock4,levy8
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from functions import FUNCTIONS
from quality import sign_test
from runners import Optuna, Ours, make


def _task(args: tuple[str, str, int, int]) -> tuple[str, str, int, int, list[float], float]:
    name, fn_name, workers, seed = args
    fn = FUNCTIONS[fn_name]
    budget = max(fn.budget, 5 * workers)
    fn = dataclasses.replace(fn, budget=budget)
    opt = make(name, fn.space(), seed, budget)
    spent = 0.0

    def ask(pending: list[Any]) -> Any:
        nonlocal spent
        t0 = time.perf_counter()
        out: Any
        if isinstance(opt, Optuna):
            out = opt.study.ask(opt.dists)
        else:
            [out] = opt.ask(1, [dict(p) for p in pending]) if isinstance(opt, Ours) else opt.ask(1)
        spent += time.perf_counter() - t0
        return out

    def params(p: Any) -> dict[str, float]:
        return dict(p.params) if isinstance(opt, Optuna) else dict(p)

    pending: list[Any] = []
    for _ in range(workers):
        pending.append(ask([params(p) for p in pending]))
    best, done, rounds = np.inf, 0, []
    asked = workers
    while pending:
        p = pending.pop(0)
        value = fn(params(p))
        if isinstance(opt, Optuna):
            opt.study.tell(p, value)
        else:
            opt.tell([(params(p), value)])
        best = min(best, value)
        done += 1
        if done % workers == 0 or done == budget:
            rounds.append(float(best - fn.minimum))
        if asked < budget:
            pending.append(ask([params(q) for q in pending]))
            asked += 1
    return name, fn_name, workers, seed, rounds, spent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--workers", default="16,64")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--only", default="bo,ea,optuna-tpe,random")
    ap.add_argument("--functions", default=",".join(FUNCTIONS))
    args = ap.parse_args()
    opts, fns = args.only.split(","), args.functions.split(",")
    counts = [int(w) for w in args.workers.split(",")]
    tasks = [(o, f, w, s) for w in counts for f in fns for o in opts for s in range(args.seeds)]
    tasks.sort(key=lambda t: t[0] != "bo")
    results: dict[tuple[str, str, int], dict[int, list[float]]] = {}  # by seed
    seconds: dict[tuple[str, int], float] = {}
    t0 = time.time()
    with mp.get_context("spawn").Pool(args.procs) as pool:
        for i, (o, f, w, seed, rounds, spent) in enumerate(pool.imap_unordered(_task, tasks), 1):
            results.setdefault((o, f, w), {})[seed] = rounds
            seconds[(o, w)] = seconds.get((o, w), 0.0) + spent
            print(f"\r{i}/{len(tasks)} runs, {time.time() - t0:.0f} s", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    for w in counts:
        print(f"\n{w} workers: median regret after round 2 / after the last round (seeds: {args.seeds})\n")
        print("| function | rounds | " + " | ".join(opts) + " |")
        print("|---|---|" + "---|" * len(opts))
        for f in fns:
            cells = []
            for o in opts:
                runs = list(results[(o, f, w)].values())
                r2 = np.median([r[min(1, len(r) - 1)] for r in runs])
                last = np.median([r[-1] for r in runs])
                cells.append(f"{r2:.3g} / {last:.3g}")
            print(f"| {f} | {len(results[(opts[0], f, w)][0])} | " + " | ".join(cells) + " |")
        wins = {
            o: sum(
                np.median([r[-1] for r in results[(o, f, w)].values()])
                <= np.median([r[-1] for r in results[("random", f, w)].values()])
                for f in fns
            )
            for o in opts
            if "random" in opts
        }
        if wins:
            summary = ", ".join(f"{o} {n}/{len(fns)}" for o, n in wins.items())
            print(f"\nno worse than random after the last round: {summary}")
        if "bo" in opts and "ea" in opts:
            ea_wins = [
                f
                for f in fns
                if np.median([r[-1] for r in results[("ea", f, w)].values()])
                < np.median([r[-1] for r in results[("bo", f, w)].values()])
            ]
            print(f"ea below bo after the last round on: {', '.join(ea_wins) or 'none'}")
        for o in opts[1:]:
            for label, at in (("after round 2", 1), ("after the last round", -1)):

                def by_run(name: str, at: int = at, w: int = w) -> dict[int, float]:
                    return {
                        i * 1000 + s: r[min(at, len(r) - 1)] if at >= 0 else r[-1]
                        for i, f in enumerate(fns)
                        for s, r in results[(name, f, w)].items()
                    }

                lower, higher, same, p = sign_test(by_run(opts[0]), by_run(o))
                print(
                    f"{o} against {opts[0]}, {label}: lower / higher / the same in {lower} / {higher} / {same} "
                    f"of {lower + higher + same} runs (sign test p = {p:.2g})"
                )
        print(
            "suggestion seconds per run (mean): "
            + ", ".join(f"{o} {seconds[(o, w)] / (len(fns) * args.seeds):.2f}" for o in opts)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
