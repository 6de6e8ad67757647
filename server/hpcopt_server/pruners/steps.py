"""Pruners that compare learning curves at the same (fold, epoch): ``median`` and ``asha``.

Both compare a trial only with other trials on the same fold: folds are different data
splits, so fold 2's loss at epoch 3 says nothing against fold 0's. With K folds trained
one after another every fold gets its own comparison, and a trial that survived fold 0
can still be stopped in fold 1.
"""

from __future__ import annotations

import statistics
from typing import ClassVar

from hpcopt.core.options import Option
from hpcopt_server import domain as d
from hpcopt_server.pruners.base import History, Pruner, PrunerProblem, Verdict, fmt

#: Trials whose reports count as competitors for a rung (ASHA counts every trial that
#: reached it, pruned ones included: they were compared there too).
RUNG_STATES = (
    d.TrialState.RUNNING,
    d.TrialState.COMPLETED,
    d.TrialState.PRUNED,
    d.TrialState.QUEUED,
    d.TrialState.PREEMPTED,
)


class MedianPruner(Pruner):
    """Optuna's median rule, per fold: after ``n_warmup_steps`` epochs of a fold, a trial
    whose best value so far in that fold is worse than the median of the COMPLETED
    trials' values at the same (fold, epoch) stops. Needs ``n_startup_trials`` completed
    trials with a value there before it prunes anything.
    """

    OPTIONS: ClassVar[dict[str, Option]] = {
        "n_startup_trials": Option(
            5, int, 1, 100_000, doc="completed trials with a value at (fold, epoch) before pruning"
        ),
        "n_warmup_steps": Option(1, int, 0, 1_000_000, doc="epochs of each fold that are never pruned"),
        "interval_steps": Option(1, int, 1, 1_000_000, doc="judge every this many epochs"),
    }

    def __init__(self, problem: PrunerProblem):
        super().__init__(problem)
        self.n_startup = self.option("n_startup_trials")
        self.warmup = self.option("n_warmup_steps")
        self.interval = self.option("interval_steps")

    def at_step(self, history: History, trial: d.Trial, fold: int, step: int, value: float) -> Verdict | None:
        if step <= self.warmup or (step - self.warmup) % self.interval:
            return None
        others = history.values_at(fold, step, (d.TrialState.COMPLETED,))
        others.pop(trial.id, None)
        if len(others) < self.n_startup:
            return None
        median = statistics.median(self.loss(v) for v in others.values())
        best = min(self.loss(v) for _, v in history.curve(trial.id, fold) or [(step, value)])
        if best <= median:
            return None
        return Verdict(
            value,
            f"median: its best {self.problem.metric} in fold {fold} up to epoch {step} ({fmt(self.sign * best)}) "
            f"is worse than the median {fmt(self.sign * median)} of {len(others)} completed trials there",
        )


class AshaPruner(Pruner):
    """Asynchronous successive halving (Li et al., MLSys 2020). A trial's resource is
    every epoch it trains, fold after fold: with E epochs per fold, epoch e of fold k is
    resource k E + e. Rungs sit at resources ``min_epochs * reduction_factor ** (s + j)``
    (s: ``min_early_stopping_rate``). A trial reaching a rung goes on only if its value
    there is among the best ``1 / reduction_factor`` of every value recorded at that
    rung so far (at least the best one); it never waits for a rung to fill, which is what
    makes it asynchronous. Every trial trains the folds in the same order, so the values
    at one rung are all on the same fold and epoch. (Rungs repeated in every fold would
    cut survivors again and again: on the digits replay that kept 5% of the epochs and
    lost the best configuration in every seed.)
    """

    OPTIONS: ClassVar[dict[str, Option]] = {
        "min_epochs": Option(
            None,
            int,
            1,
            1_000_000,
            derived="training.epochs / 4 (at least 1; 1 without training.epochs)",
            doc="the first rung",
        ),
        "reduction_factor": Option(3, int, 2, 1000, doc="η: a rung keeps the best 1/η"),
        "min_early_stopping_rate": Option(0, int, 0, 60, doc="s: skips the first s rungs"),
        "bootstrap_count": Option(0, int, 0, 100_000, doc="values a rung needs before it stops anyone"),
    }

    def __init__(self, problem: PrunerProblem):
        super().__init__(problem)
        self.min_epochs = self.option("min_epochs", max(1, problem.epochs // 4))
        self.eta = self.option("reduction_factor")
        self.rate = self.option("min_early_stopping_rate")
        self.bootstrap = self.option("bootstrap_count")

    def resource(self, fold: int, step: int) -> int:
        return fold * self.problem.epochs + step if self.problem.epochs else step

    def rung(self, resource: int) -> int | None:
        """The rung index at ``resource``, or None."""
        r, k = self.min_epochs * self.eta**self.rate, 0
        while r < resource:
            r, k = r * self.eta, k + 1
        return k if r == resource else None

    def at_step(self, history: History, trial: d.Trial, fold: int, step: int, value: float) -> Verdict | None:
        k = self.rung(self.resource(fold, step))
        if k is None:
            return None
        rung = history.values_at(fold, step, RUNG_STATES)
        rung[trial.id] = value
        if len(rung) <= self.bootstrap:
            return None
        losses = sorted(self.loss(v) for v in rung.values())
        keep = max(1, len(losses) // self.eta)
        if self.loss(value) <= losses[keep - 1]:
            return None
        return Verdict(
            value,
            f"asha: {self.problem.metric} {fmt(value)} at rung {k} (fold {fold}, epoch {step}) is not among the "
            f"best {keep} of the {len(losses)} trials that reached it (1/{self.eta} go on)",
        )
