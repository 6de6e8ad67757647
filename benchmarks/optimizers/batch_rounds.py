"""Rounds to the sequential regret: with P agents, how many rounds an optimizer needs to
reach the regret that one agent reaches with a function's whole budget.

- **The target.** Per function, the median final regret of the reference optimizer
  (``--reference``, default bo) run one evaluation at a time, ``budget`` evaluations,
  over the seeds: what one agent reaches in ``budget`` rounds.
- **The runs.** Every optimizer (``--only``) runs each seed with P evaluations in flight
  (asynchronous workers as in ``quality.py``, each in its own batch mode:
  ``runners.trace``) for at most ``--cap`` times the budget (the budget it is told:
  ea sizes its population by it), and stops at the first result at or below the target.
- **A round** is one evaluation's time. With P workers and equal evaluation times,
  result i arrives in round ceil(i / P), so a run that reaches the target with its i-th
  result took ceil(i / P) rounds; one that does not within the cap never reaches it
  ("never", counted as infinitely many rounds).
- **Per function and P:** the median rounds over seeds (by then half the runs have
  reached the target) and a bootstrap over seeds (5th to 95th percentile of the median).
  For the first optimizer named against each other, paired by seed: the share of
  resamples in which the first needs fewer rounds. A line per P counts the functions on
  which the first needs fewer rounds than every other, by the medians.

    python benchmarks/optimizers/batch_rounds.py [--functions branin,hartmann6] [--seeds 40] [--pending 4,16]
        [--only bo,botorch,optuna-gp,skopt] [--reference bo] [--cap 2] [--procs 2] [--json rounds.json]

``--json`` keeps every run's result and the machine they were made on
(``quality.machine``); runs already in the file are not run again (a run kept for
another target or cap is run again), and a file made on another machine says so.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from functions import ALL_FUNCTIONS, FUNCTIONS
from quality import functions_named, machine, warn_if_made_elsewhere
from runners import ALL, run, split_names, trace

RESAMPLES = 4000
PEERS_FIRST = ("botorch", "skopt", "optuna-gp")  # the slow ones first, so the pool stays busy to the end


def _sequential(args: tuple[str, str, int]) -> tuple[str, float]:
    opt, fn, seed = args
    return f"{opt}/{fn}/{seed}", run(opt, ALL_FUNCTIONS[fn], seed)


def _batch(args: tuple[str, str, int, int, float, int]) -> tuple[str, dict[str, Any]]:
    """One run with ``workers`` in flight until the target or the cap: the evaluations it
    took to reach the target (None: not within the cap)."""
    opt, fn, workers, seed, target, cap = args
    capped = replace(ALL_FUNCTIONS[fn], budget=cap)
    tr = trace(opt, capped, seed, workers, until=target)
    reached = len(tr) if tr and tr[-1] <= target else None
    return f"{opt}/{fn}/{workers}/{seed}", {"target": target, "cap": cap, "evaluations": reached}


def rounds(evaluations: list[int | None], workers: int) -> np.ndarray:
    """The rounds each run took to reach the target: ceil(i / workers), inf if never."""
    return np.array([math.inf if e is None else math.ceil(e / workers) for e in evaluations], float)


def median_rounds(r: np.ndarray) -> float:
    """The median over runs (of an even count, the mean of the two middle ones): inf
    when half or more never reached the target."""
    return float(np.median(r))


def bootstrap(per_opt: dict[str, np.ndarray], seed: int = 0) -> dict[str, np.ndarray]:
    """The median rounds of each optimizer in every resample of the seeds, the same
    resampled seeds for all (paired): ``{optimizer: medians[RESAMPLES]}``."""
    n = len(next(iter(per_opt.values())))
    draws = np.random.default_rng(seed).integers(0, n, (RESAMPLES, n))
    return {o: np.median(r[draws], axis=1) for o, r in per_opt.items()}


def _cell(median: float, medians: np.ndarray) -> str:
    def f(x: float) -> str:
        return "never" if math.isinf(x) else f"{x:g}"

    # Percentiles that are medians of resamples, not interpolated between them: inf - inf is nan.
    low, high = np.percentile(medians, [5, 95], method="inverted_cdf")
    return f"{f(median)} [{f(float(low))}, {f(float(high))}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--pending", default="4,16", help="comma-separated evaluations in flight (each 2 or more)")
    ap.add_argument(
        "--functions",
        default=",".join(FUNCTIONS),
        help="comma-separated names; held-out, many-peaked: those groups",
    )
    ap.add_argument(
        "--only", default="bo,botorch,optuna-gp,skopt", help="comma-separated optimizers, the first compared"
    )
    ap.add_argument("--reference", default="bo", help="the optimizer whose sequential runs set the target")
    ap.add_argument("--cap", type=float, default=2.0, help="a batch run's most evaluations, in budgets (default 2)")
    ap.add_argument("--procs", type=int, default=2, help="runs at once (processes)")
    ap.add_argument(
        "--json", type=Path, help="keep every run's result here; runs already in the file are not run again"
    )
    args = ap.parse_args()
    fns = functions_named(ap, args.functions)
    opts = split_names(args.only)
    for name, value in [*(("--only", o) for o in opts), ("--reference", args.reference)]:
        if value.split("[")[0] not in ALL:
            ap.error(f"{name}: {value!r}; allowed: {', '.join(ALL)}, with options in brackets for ours")
    try:
        pending = [int(p) for p in args.pending.split(",") if p]
    except ValueError:
        pending = []
    if not pending or min(pending) < 2:
        ap.error(f"--pending: {args.pending}; allowed: comma-separated whole numbers, each 2 or more")
    if args.seeds < 1:
        ap.error(f"--seeds: {args.seeds}; allowed: 1 or more")
    if not args.cap >= 1:
        ap.error(f"--cap: {args.cap}; allowed: 1 or more budgets")
    stored: dict[str, Any] = json.loads(args.json.read_text()) if args.json and args.json.exists() else {}
    here = machine()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in here.items()))
    made_on = stored.pop("_machine", here if not stored else None)
    warn_if_made_elsewhere("batch_rounds.py", args.json, made_on, here)
    seq: dict[str, float] = stored.get("sequential", {})
    hits: dict[str, dict[str, Any]] = stored.get("batch", {})

    def save() -> None:
        if args.json:  # after every run: a long run stopped early keeps what it measured
            tmp = args.json.with_suffix(".tmp")
            tmp.write_text(json.dumps({"sequential": seq, "batch": hits, "_machine": made_on or {}}))
            tmp.replace(args.json)

    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as quality.py: a seed's regret should not depend on the cores
    t0 = time.time()
    with mp.get_context("spawn").Pool(args.procs) as pool:
        todo = [(args.reference, fn, s) for fn in fns for s in range(args.seeds)]
        todo = [t for t in todo if f"{t[0]}/{t[1]}/{t[2]}" not in seq]
        for i, (key, regret) in enumerate(pool.imap_unordered(_sequential, todo), 1):
            seq[key] = regret
            save()
            print(f"\r{i}/{len(todo)} sequential runs, {time.time() - t0:.0f} s", end="", file=sys.stderr, flush=True)
        targets = {fn: float(np.median([seq[f"{args.reference}/{fn}/{s}"] for s in range(args.seeds)])) for fn in fns}
        caps = {fn: math.ceil(args.cap * ALL_FUNCTIONS[fn].budget) for fn in fns}
        tasks = [
            (o, fn, w, s, targets[fn], caps[fn])
            for fn in fns
            for w in pending
            for o in opts
            for s in range(args.seeds)
            if hits.get(f"{o}/{fn}/{w}/{s}", {}).get("target") != targets[fn]
            or hits[f"{o}/{fn}/{w}/{s}"].get("cap") != caps[fn]
        ]
        tasks.sort(key=lambda t: t[0] not in PEERS_FIRST)
        print(file=sys.stderr)
        for i, (key, hit) in enumerate(pool.imap_unordered(_batch, tasks), 1):
            hits[key] = hit
            save()
            print(f"\r{i}/{len(tasks)} batch runs, {time.time() - t0:.0f} s", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    _report(args, fns, opts, pending, targets, hits)
    return 0


def _report(
    args: argparse.Namespace,
    fns: list[str],
    opts: list[str],
    pending: list[int],
    targets: dict[str, float],
    hits: dict[str, dict[str, Any]],
) -> None:
    first, others = opts[0], opts[1:]
    print(
        f"\nthe target: {args.reference}'s median final regret one at a time over seeds 0-{args.seeds - 1}, in "
        "`budget` rounds: "
        + ", ".join(f"{fn} {targets[fn]:.3g} in {ALL_FUNCTIONS[fn].budget}" for fn in fns)
        + f"; batch runs stop at it or at {args.cap:g} budgets"
    )
    width = max([24, *(len(o) + 2 for o in opts)])
    for w in pending:
        print(f"\n{w} pending: median rounds to the target [bootstrap 5-95%]; fewer is better\n")
        print(f"{'function':<14}{'budget':>8}" + "".join(f"{o:>{width}}" for o in opts))
        print("-" * (22 + width * len(opts)))
        fewer_than_all = 0
        shares: list[str] = []
        for fn in fns:
            per = {o: rounds([hits[f"{o}/{fn}/{w}/{s}"]["evaluations"] for s in range(args.seeds)], w) for o in opts}
            boot = bootstrap(per)
            medians = {o: median_rounds(per[o]) for o in opts}
            cells = [_cell(medians[o], boot[o]) for o in opts]
            print(f"{fn:<14}{ALL_FUNCTIONS[fn].budget:>8}" + "".join(f"{c:>{width}}" for c in cells))
            fewer_than_all += all(medians[first] < medians[o] for o in others)
            if others:
                shares.append(f"{fn}: " + ", ".join(f"{o} {float(np.mean(boot[first] < boot[o])):.0%}" for o in others))
        if others:
            print(
                f"\n{w} pending: {first} needs fewer rounds than every other on {fewer_than_all} of "
                f"{len(fns)} functions"
            )
            print(f"share of resamples in which {first} needs fewer rounds than: " + "; ".join(shares))


if __name__ == "__main__":
    sys.exit(main())
