"""The fold pruner: a trial trains its K folds only while it can still matter.

After a trial finishes m of its K folds, compare it fold by fold with the incumbent
(the best COMPLETED trial, which has all K). Paired differences d_j = loss_j(trial) -
loss_j(incumbent) remove what the folds share (fold 3 is harder for everyone). Model
d_j = delta + e_j with e_j ~ N(0, s^2): the trial's final mean differs from the
incumbent's by

    D = (sum of the m seen d_j + sum of the K - m unseen d_j) / K,

and given the seen ones (flat prior on delta)

    D ~ N(mean(d_seen), s^2 ((K - m) / K)^2 (1 / m + 1 / (K - m))).

s, the spread of paired differences over folds, is pooled from the completed trials
(each one's differences from the incumbent, about their own mean; the incumbent itself
excluded). The trial stops when P(D < 0), the chance its final mean beats the
incumbent's, is below ``1 - confidence``. No other pruner uses folds: it is the
decision a K-fold campaign wastes most without.

Within folds another pruner may stop hopeless trials earlier (``within: {name: asha}``).

| option | default | meaning |
|---|---|---|
| confidence | 0.95 | stop when P(beats the incumbent) < 1 - confidence |
| min_trials | 3 | completed trials (incumbent included) before it prunes |
| within | none | ``{name: median or asha, options: {...}}``: prune inside folds too |
"""

from __future__ import annotations

import math
import statistics
from typing import Any, ClassVar

from hpcopt.core.options import Option
from hpcopt.errors import OptionError
from hpcopt_server import domain as d
from hpcopt_server.pruners.base import History, NoPruner, Pruner, PrunerProblem, Verdict, fmt
from hpcopt_server.pruners.steps import AshaPruner, MedianPruner

WITHIN: dict[str, type[Pruner]] = {"none": NoPruner, "median": MedianPruner, "asha": AshaPruner}


class FoldPruner(Pruner):
    OPTIONS: ClassVar[dict[str, Option]] = {
        "confidence": Option(
            0.95, float, 0.5, 0.999999, doc="stop when P(the trial's final mean beats the incumbent's) < 1 - this"
        ),
        "min_trials": Option(3, int, 2, 100_000, doc="completed trials before it judges any"),
        "within": Option(
            "none",
            dict,
            doc="prunes inside folds too: a pruner name (median, asha) or {name, options}",
        ),
    }

    def __init__(self, problem: PrunerProblem):
        super().__init__(problem)
        self.confidence = self.option("confidence")
        self.min_trials = self.option("min_trials")
        self.within = self._within(problem.options.get("within", self.OPTIONS["within"].default))

    def _within(self, value: Any) -> Pruner:
        if isinstance(value, str):
            value = {"name": value}
        if not isinstance(value, dict) or set(value) - {"name", "options"}:
            raise ValueError(f"options.within must be a pruner name or {{name, options}}, got {value!r}")
        name, options = value.get("name", "none"), value.get("options", {})
        if name not in WITHIN:
            raise ValueError(f"options.within.name must be one of {sorted(WITHIN)}, got {name!r}")
        if not isinstance(options, dict):
            raise ValueError(f"options.within.options must be a mapping, got {options!r}")
        try:
            p = self.problem
            return WITHIN[name](PrunerProblem(p.direction, p.folds, options, p.metric, p.epochs))
        except OptionError as exc:
            raise OptionError(f"options.within.{exc.field}", exc.message) from None
        except ValueError as exc:
            raise ValueError(f"options.within.{exc}") from None

    def at_step(self, history: History, trial: d.Trial, fold: int, step: int, value: float) -> Verdict | None:
        return self.within.at_step(history, trial, fold, step, value)

    def at_fold(self, history: History, trial: d.Trial) -> Verdict | None:
        K = self.problem.folds
        seen = {f.index: self.loss(float(f.value)) for f in trial.folds if f.finished and f.value is not None}
        m = len(seen)
        if not 0 < m < K:
            return None
        done = {
            tid: (number, [self.loss(v) for v in values])
            for tid, (number, values) in history.completed_folds().items()
            if len(values) == K
        }
        if len(done) < self.min_trials:
            return None
        best_id = min(done, key=lambda t: (statistics.fmean(done[t][1]), t))
        number, incumbent = done[best_id]
        spread = pooled_spread([values for t, (_, values) in done.items() if t != best_id], incumbent)
        if spread is None:
            return None
        diffs = [seen[j] - incumbent[j] for j in seen]
        mean_diff = statistics.fmean(diffs)
        sd = spread * (K - m) / K * math.sqrt(1.0 / m + 1.0 / (K - m))
        p_better = 0.5 * math.erfc(mean_diff / max(sd, 1e-300) / math.sqrt(2))  # Phi(-d): no SciPy to import
        if p_better >= 1.0 - self.confidence:
            return None
        partial = statistics.fmean(self.sign * v for v in seen.values())
        theirs = statistics.fmean(self.sign * incumbent[j] for j in seen)
        return Verdict(
            partial,
            f"fold: after {m} of {K} folds its mean {self.problem.metric} {fmt(partial)} against {fmt(theirs)} for "
            f"the best trial (#{number}) on the same folds; P(it ends better) = {p_better:.2g} "
            f"< {1.0 - self.confidence:.2g}",
        )


def pooled_spread(trials: list[list[float]], incumbent: list[float]) -> float | None:
    """The pooled standard deviation over folds of each trial's differences from the
    incumbent (about the trial's own mean difference); None without two folds' worth."""
    ss, dof = 0.0, 0
    for values in trials:
        diffs = [v - b for v, b in zip(values, incumbent, strict=True)]
        mean = statistics.fmean(diffs)
        ss += sum((x - mean) ** 2 for x in diffs)
        dof += len(diffs) - 1
    if dof <= 0:
        return None
    return math.sqrt(ss / dof)
