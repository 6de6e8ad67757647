"""Suggestion latency against history size: the steady-state cost of one observe +
suggest at n = 20 ... 5000 and d = 6 and 20, for our ``bo`` (and ``ea``) next to skopt's
GP Optimizer, Optuna's GPSampler and TPESampler, and random search, in the same run.

    python benchmarks/optimizers/latency.py [--ns 20,100,500,1000,2000,5000,20000,100000] [--dims 6,20]
    python benchmarks/optimizers/latency.py --ns 1000 --dims 6 --only bo --pending 16   # the server's path

For each (optimizer, d, n): the optimizer is given n observed points of Ackley, then
tells one new result and asks one suggestion ``--reps`` times; p50 and mean of that
step are printed. Our BO refits its hyper-parameters in a background thread when n
has grown by 20%; the step's mean therefore excludes the refit, so the table also shows
one refit's time and the mean with refits amortized (refit / (0.2 n) added; past
``max_points`` = 3000 a refit of a 1500-point subset every 750 observations). "MB" is
what our optimizer holds (``memory_bytes``: model arrays, factor buffer, history).
A peer whose step took longer than ``--cap`` seconds is not run at larger n.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from functions import ackley
from runners import Optuna, Ours, Skopt, options_of, split_names


def _history(d: int, n: int, seed: int) -> list[tuple[dict[str, float], float]]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-5, 5, (n + 400, d))
    return [({f"x{i}": float(v) for i, v in enumerate(x)}, ackley(x)) for x in X]


def during_refit(opt: Any, hist: list[tuple[dict[str, float], float]], reps: int) -> float:
    """The slowest of ``reps`` observe + suggest steps made while a refit of the whole
    history runs in another thread (what a request meets when a refit is due)."""
    import threading

    busy = threading.Event()

    def refit() -> None:
        while not busy.is_set():
            opt.opt._fit(len(opt.opt._rows))

    worker = threading.Thread(target=refit, daemon=True)
    worker.start()
    time.sleep(0.2)
    worst = 0.0
    for p, v in hist[:reps]:
        t0 = time.perf_counter()
        opt.tell([(p, v)])
        opt.ask(1)
        worst = max(worst, time.perf_counter() - t0)
    busy.set()
    worker.join()
    return worst


def measure(name: str, d: int, n: int, reps: int, pending: int = 0) -> dict[str, float]:
    space = {f"x{i}": {"type": "real", "low": -5.0, "high": 5.0} for i in range(d)}
    hist = _history(d, n, seed=n + d)
    # Trials in flight (ours are told them, as the server does; the peers are not).
    running = [p for p, _ in _history(d, pending, seed=n + d + 1)[:pending]]
    opt: Any
    refit = float("nan")
    base, options = options_of(name)  # "bo[acquisition=ucb]": one of ours with options
    if base in ("bo", "ea", "random"):
        opt = Ours(base, space, 0, options)
        opt.tell(hist[:n])
        if base == "bo":
            bo = opt.opt
            bo.wait_for_refit()
            t0 = time.perf_counter()
            bo._fit(n)  # the fit a refit at n computes (of a subset past max_points)
            refit = time.perf_counter() - t0
    elif name == "skopt":
        opt = Skopt(space, 0)
        opt.tell(hist[:n])
    else:
        opt = Optuna(name.split("-")[1], space, 0)
        import optuna

        dists = opt.dists
        opt.study.add_trials([optuna.trial.create_trial(params=p, distributions=dists, value=v) for p, v in hist[:n]])
    times = []
    for i in range(reps):
        p, v = hist[n + i]
        t0 = time.perf_counter()
        if base in ("bo", "ea", "random"):
            opt.tell([(p, v)])
            opt.ask(1, running)
        elif name == "skopt":
            opt.tell([(p, v)])
            opt.ask(1)
        else:
            [params] = opt.ask(1)
            opt.tell([(params, v)])
        times.append(time.perf_counter() - t0)
    out = {"p50": statistics.median(times), "mean": statistics.fmean(times), "refit": refit}
    out["during"] = during_refit(opt, hist[n + reps :], reps) if base == "bo" else float("nan")
    every = 0.2 * n if n <= 3000 else 750.0
    out["amortized"] = out["mean"] + (refit / every if refit == refit else 0.0)
    out["mb"] = opt.opt.memory_bytes() / 2**20 if base == "bo" else float("nan")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", default="20,100,500,1000,2000,5000,20000,100000")
    ap.add_argument("--dims", default="6,20")
    ap.add_argument("--only", default="bo,ea,skopt,optuna-gp,optuna-tpe,random")
    ap.add_argument("--reps", type=int, default=20, help="steps per cell for ours (peers: fewer when slow)")
    ap.add_argument("--pending", type=int, default=0, help="trials in flight our optimizers are told of")
    ap.add_argument("--cap", type=float, default=15.0, help="seconds per step beyond which a peer stops")
    args = ap.parse_args()
    names = split_names(args.only)
    print(
        f"{'d':>3} {'n':>5} | {'optimizer':<11} {'p50 ms':>10} {'mean ms':>10} {'refit s':>8} {'amort ms':>9} | "
        f"{'p50 vs bo':>9} {'MB':>6} {'max ms during refit':>19}"
    )
    print("-" * 78)
    for d in (int(x) for x in args.dims.split(",")):
        stopped: set[str] = set()
        for n in (int(x) for x in args.ns.split(",")):
            ours_p50 = None
            for name in names:
                if name in stopped:
                    print(f"{d:>3} {n:>5} | {name:<11} {'(skipped: slower than --cap at a smaller n)':>44}")
                    continue
                reps = args.reps if name in ("bo", "ea", "random", "optuna-tpe") else max(2, min(args.reps, 5))
                r = measure(name, d, n, reps, args.pending)
                if name == "bo":
                    ours_p50 = r["p50"]
                ratio = f"{r['p50'] / ours_p50:>8.1f}x" if ours_p50 and name != "bo" else ""
                refit = f"{r['refit']:>8.2f}" if r["refit"] == r["refit"] else f"{'':>8}"
                mb = f"{r['mb']:>6.0f} {r['during'] * 1e3:>19.0f}" if r["mb"] == r["mb"] else ""
                print(
                    f"{d:>3} {n:>5} | {name:<11} {r['p50'] * 1e3:>10.1f} {r['mean'] * 1e3:>10.1f} {refit} "
                    f"{r['amortized'] * 1e3:>9.1f} | {ratio:>9} {mb}",
                    flush=True,
                )
                if r["p50"] > args.cap and name not in ("bo",):
                    stopped.add(name)
    print("\nratio: the peer's p50 step time over ours (bo); > 1 means bo is faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
