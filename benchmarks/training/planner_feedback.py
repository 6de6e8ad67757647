"""How much time the planner should pay for search feedback: the rule behind
``hpcopt.core.planner.FEEDBACK``.

A search that learns from finished trials (bo, ea, skopt, mf) gets one round of results
per wave of trials; a wave of every trial at once is a random search. ``docs/benchmarks/
optimizers.md`` ("Rounds to the sequential regret") measured that bo with 16 trials at
once needs 5 to 10 rounds to reach what one agent reaches with the whole budget. So a
layout that finishes in one or two waves wastes the search, even when it is as fast.

For a grid of campaign shapes (allocations of 8 to 1,000 ranks, collectives from free to
dear, 20 to 1,000 trials, with and without a walltime) this plays each campaign out with
``hpcopt.planner.simulate`` (re-planning as the agent does) under each price, the share
of time the planner may give up for results that come back sooner, and prints per price:
the time to finish against the fastest plan (median and worst), the waves (the search's
rounds), the share of campaigns with fewer than 5 waves, and the time to the first
results against the fastest plan's. Pure arithmetic: it runs in seconds.

    python benchmarks/training/planner_feedback.py
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from dataclasses import replace

from hpcopt.core import planner
from hpcopt.core.planner import Allocation, Point, Scaling, Work, simulate

#: Rounds of results bo needs with many trials at once (docs/benchmarks/optimizers.md).
ROUNDS = 5
PRICES = (None, 0.0, 0.02, 0.05, 0.10, 0.25)


def _model(comm: float) -> Scaling:
    # Seconds per sample: 1 of compute shared out, a collective cost ``comm``, a link cost
    # past one node; measured at 1 and 8 ranks, so no width is extrapolated beyond 16.
    return Scaling(1.0, comm, 0.2 * comm, points=(Point(1, 1, 1.0), Point(8, 2, 1.0)))


def cases() -> list[tuple[str, Allocation, Work, Scaling]]:
    out = []
    for world, comm, trials, hours in itertools.product(
        (8, 64, 256, 1000), (0.0, 0.05, 0.5, 2.0), (20, 100, 1000), (None, 24.0)
    ):
        alloc = Allocation(world, 4)
        work = Work(trials=trials, folds=5, epochs=10, train_samples=300, learns=True)
        model = _model(comm)
        if hours is not None:
            work = replace(work, deadline=hours * 3600.0)
        name = f"{world} ranks, comm {comm}, {trials} trials, {'no walltime' if hours is None else f'{hours:g} h'}"
        out.append((name, alloc, work, model))
    return out


def run(price: float | None, case: tuple[str, Allocation, Work, Scaling]) -> planner.Simulation:
    _, alloc, work, model = case
    if price is None:  # the rule before: ties (2 %) go to more trials at once
        return simulate(alloc, replace(work, learns=False), model)
    saved = planner.FEEDBACK
    planner.FEEDBACK = price
    try:
        return simulate(alloc, work, model)
    finally:
        planner.FEEDBACK = saved


def _p90(xs: list[float]) -> float:
    return sorted(xs)[int(0.9 * (len(xs) - 1))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--show", action="store_true", help="print each campaign's waves under each price")
    args = ap.parse_args(argv)
    grid = cases()
    base = {c[0]: run(None, c) for c in grid}
    fastest = {c[0]: min(run(p, c).makespan for p in PRICES) for c in grid}
    print(f"{len(grid)} campaigns; 'before': ties go to more trials at once (the rule before FEEDBACK)\n")
    head = f"{'price':>8} {'time median':>12} {'time p90':>9} {'time worst':>11} {'waves median':>13}"
    head += f" {'< 5 waves':>10} {'first results sooner':>21} {'done by deadline':>17}"
    print(head)
    print("-" * len(head))
    for price in PRICES:
        sims = {c[0]: run(price, c) for c in grid}
        times = [sims[n].makespan / fastest[n] for n in sims]
        waves = [sims[n].waves for n in sims]
        starved = sum(w < ROUNDS for w in waves) / len(waves)
        sooner = sum(sims[n].first_results < base[n].first_results * 0.999 for n in sims) / len(sims)
        later = sum(sims[n].first_results > base[n].first_results * 1.001 for n in sims) / len(sims)
        done = sum(sims[n].completed_by_deadline for n in sims) / sum(base[n].completed_by_deadline for n in sims)
        label = "before" if price is None else f"{price:.0%}"
        print(
            f"{label:>8} {statistics.median(times):>11.3f}x {_p90(times):>8.3f}x {max(times):>10.3f}x "
            f"{statistics.median(waves):>13.0f} "
            f"{starved:>10.0%} {f'{sooner:.0%} (later {later:.0%})':>21} {done:>16.3f}x"
        )
        if args.show:
            for n, sim in sims.items():
                print(
                    f"    {n}: {sim.waves} waves, {sim.makespan / fastest[n]:.3f}x, "
                    + " -> ".join(x.shape() for x in sim.layouts)
                )
    print(
        "\ntime: to finish the campaign, over the fastest of all prices; first results sooner (later): campaigns "
        "whose first trials finish sooner (later) than under the rule before; "
        "done by deadline: trials finished within the walltime, over the rule before's"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
