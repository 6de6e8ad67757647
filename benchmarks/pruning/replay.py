"""Pruning on recorded learning curves: epochs spent and the best value found, for no
pruning, hpcopt's median, ASHA, fold and fold+ASHA pruners, and Optuna's MedianPruner
and SuccessiveHalvingPruner, on the same curves in the same order.

The curves (``data/*.json.gz``, made once by ``record.py`` from real training) hold
every configuration's validation value after each epoch of each of its K folds. A
replay runs a campaign over all the configurations in a seeded order with ``--workers``
trials in flight at once: every epoch of every running trial is one event, taken in
time order, so pruners see the history exactly as a server would. A trial trains its
folds one after another; a pruned one stops at once. hpcopt's pruners are the server's
own classes (``hpcopt_server.pruners``) on an in-memory history; Optuna's get each
report as step ``fold * epochs + epoch``, what an Optuna user with K folds would do.

The best value is the mean final value over K folds of the best *completed* trial;
without pruning every configuration completes, so "no pruning" finds the best of all.
Run::

    .venv/bin/python benchmarks/pruning/replay.py            # both tasks, 10 seeds
"""

from __future__ import annotations

import argparse
import gzip
import heapq
import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from hpcopt_server import domain as d  # noqa: E402
from hpcopt_server.pruners import make_pruner  # noqa: E402

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class Memory:
    """hpcopt_server.pruners.History over the replay's state."""

    def __init__(self) -> None:
        self.at: dict[tuple[int, int], dict[int, float]] = {}
        self.curves: dict[tuple[int, int], list[tuple[int, float]]] = {}
        self.state: dict[int, d.TrialState] = {}
        self.done: dict[int, tuple[int, list[float]]] = {}

    def values_at(self, fold: int, step: int, states: Sequence[d.TrialState]) -> dict[int, float]:
        return {t: v for t, v in self.at.get((fold, step), {}).items() if self.state[t] in states}

    def curve(self, trial_id: int, fold: int) -> list[tuple[int, float]]:
        return self.curves.get((trial_id, fold), [])

    def completed_folds(self) -> dict[int, tuple[int, list[float]]]:
        return self.done


class Hpcopt:
    def __init__(self, spec: dict[str, Any], folds: int, epochs: int):
        self.pruner = make_pruner(
            {
                "objective": {"direction": "minimize", "metric": "loss"},
                "folds": folds,
                "training": {"epochs": epochs},
                "pruner": spec,
            }
        )
        self.mem = Memory()
        self.folds: dict[int, dict[int, float]] = {}

    def start(self, tid: int) -> None:
        self.mem.state[tid] = d.TrialState.RUNNING
        self.folds[tid] = {}

    def _trial(self, tid: int) -> d.Trial:
        folds = tuple(d.Fold(k, True, v, {}, "", 1) for k, v in sorted(self.folds[tid].items()))
        return d.Trial(tid, 1, tid, d.TrialState.RUNNING, 1, {}, NOW, folds=folds)

    def report(self, tid: int, fold: int, epoch: int, value: float, last: bool) -> bool:
        """False: pruned."""
        self.mem.at.setdefault((fold, epoch), {})[tid] = value
        self.mem.curves.setdefault((tid, fold), []).append((epoch, value))
        if self.pruner.at_step(self.mem, self._trial(tid), fold, epoch, value) is not None:
            self.mem.state[tid] = d.TrialState.PRUNED
            return False
        if last:
            self.folds[tid][fold] = value
            if len(self.folds[tid]) < self.pruner.problem.folds and self.pruner.at_fold(self.mem, self._trial(tid)):
                self.mem.state[tid] = d.TrialState.PRUNED
                return False
        return True

    def complete(self, tid: int, values: list[float]) -> None:
        self.mem.state[tid] = d.TrialState.COMPLETED
        self.mem.done[tid] = (tid, values)


class Optuna:
    def __init__(self, make: Callable[[], Any], epochs: int):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.create_study(direction="minimize", pruner=make())
        self.epochs = epochs
        self.trials: dict[int, Any] = {}

    def start(self, tid: int) -> None:
        self.trials[tid] = self.study.ask()

    def report(self, tid: int, fold: int, epoch: int, value: float, last: bool) -> bool:
        trial = self.trials[tid]
        trial.report(value, fold * self.epochs + epoch)
        if trial.should_prune():
            import optuna

            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return False
        return True

    def complete(self, tid: int, values: list[float]) -> None:
        self.study.tell(self.trials[tid], statistics.fmean(values))


def replay(curves: np.ndarray, order: Sequence[int], workers: int, pruner: Any) -> tuple[int, float]:
    """(epochs trained, best completed mean) for one campaign over ``order``."""
    _, K, E = curves.shape
    queue = list(order)
    events: list[tuple[int, int, int, int]] = []  # (time, trial, fold, epoch): that epoch ends then
    spent, best = 0, np.inf

    def launch(at: int) -> None:
        if queue:
            tid = queue.pop(0)
            pruner.start(tid)
            heapq.heappush(events, (at + 1, tid, 0, 1))

    for _ in range(workers):
        launch(0)
    while events:
        t, tid, fold, epoch = heapq.heappop(events)
        spent += 1
        last = epoch == E
        if not pruner.report(tid, fold, epoch, float(curves[tid, fold, epoch - 1]), last):
            launch(t)
        elif not last:
            heapq.heappush(events, (t + 1, tid, fold, epoch + 1))
        elif fold + 1 < K:
            heapq.heappush(events, (t + 1, tid, fold + 1, 1))
        else:
            values = [float(v) for v in curves[tid, :, -1]]
            pruner.complete(tid, values)
            best = min(best, statistics.fmean(values))
            launch(t)
    return spent, best


def methods(folds: int, epochs: int) -> dict[str, Callable[[], Any]]:
    import optuna

    return {
        "none": lambda: Hpcopt({"name": "none"}, folds, epochs),
        "median": lambda: Hpcopt({"name": "median"}, folds, epochs),
        "asha": lambda: Hpcopt({"name": "asha"}, folds, epochs),
        "fold": lambda: Hpcopt({"name": "fold"}, folds, epochs),
        "fold+median": lambda: Hpcopt({"name": "fold", "options": {"within": {"name": "median"}}}, folds, epochs),
        "fold+asha": lambda: Hpcopt({"name": "fold", "options": {"within": {"name": "asha"}}}, folds, epochs),
        "optuna median": lambda: Optuna(lambda: optuna.pruners.MedianPruner(), epochs),
        "optuna SH": lambda: Optuna(lambda: optuna.pruners.SuccessiveHalvingPruner(), epochs),
    }


def load(path: Path) -> tuple[dict[str, Any], np.ndarray]:
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    curves = np.array(doc["curves"], dtype=float)
    curves[~np.isfinite(curves)] = 1e6  # a diverged run: a very bad value, as the agent would fail it
    return doc, curves


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tasks", nargs="*", default=["digits", "diabetes"])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    warnings.filterwarnings("ignore", category=Warning, module="optuna")
    for task in args.tasks:
        doc, curves = load(HERE / "data" / f"{task}.json.gz")
        n, K, E = curves.shape
        finals = curves[:, :, -1].mean(1)
        optimum = float(finals.min())
        se = float(curves[int(finals.argmin()), :, -1].std(ddof=1) / np.sqrt(K))
        print(
            f"\n## {task}: {n} configurations x {K} folds x {E} epochs ({doc['metric']}), "
            f"{args.workers} workers, {args.seeds} seeds; best of all {optimum:.4f} "
            f"(its standard error over folds: {se:.4f})\n"
        )
        print(
            "| pruner | epochs (median of seeds) | of no pruning | best found: median | worst | "
            "seeds that found the overall best | s per replay |"
        )
        print("|---|---|---|---|---|---|---|")
        full = n * K * E
        for name, make in methods(K, E).items():
            spent, found, secs = [], [], []
            for seed in range(args.seeds):
                order = np.random.default_rng(seed).permutation(n).tolist()
                t0 = time.perf_counter()
                s, b = replay(curves, order, args.workers, make())
                secs.append(time.perf_counter() - t0)
                spent.append(s)
                found.append(b)
            hits = sum(abs(b - optimum) < 1e-12 for b in found)
            print(
                f"| {name} | {statistics.median(spent):.0f} | {statistics.median(spent) / full:.2f} | "
                f"{statistics.median(found):.4f} | {max(found):.4f} | {hits}/{args.seeds} | "
                f"{statistics.median(secs):.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
