"""Fidelities of a K-fold trial, and the rules of asynchronous promotion over them.

A unit of work is (configuration, folds, epochs): the configuration's folds ``0 ..
folds-1`` trained to ``epochs``. The *ladder* is the sequence of rungs a configuration
climbs: first epochs on one fold (``min_epochs``, ``min_epochs * eta``, ... up to the
campaign's ``training.epochs``), then folds at all epochs (1, ``eta``, ``eta**2``, ... up
to K). A rung whose resource is less than 1.5 times the one below it is left out (18
epochs below 20 is not a rung of its own); the ladder is said once, in
:mod:`hpcopt.core.fidelity`, which the planner reads too. Climbing is incremental: a promoted
configuration trains only the new fold-epochs, from its own checkpoints.

Promotion is asynchronous successive halving (ASHA, Li et al. 2020), so no worker waits
for a rung to fill: a configuration that finished a rung may climb once it is in the best
``1/eta`` of the configurations that finished that rung. Where the climb adds *folds*
(the rung has all epochs) it must also be able to change the answer: the chance that its
K-fold mean beats the incumbent's must be at least ``p_more_folds`` (a normal reading of
its fold mean, with the standard error of its own fold spread, or the campaign's pooled
spread while it has one fold). So more folds go where the spread is large against the
configuration's gap to the incumbent, and none to a configuration that is clearly worse.

The *incumbent* is the best configuration at the top rung: all K folds, all epochs.
Nothing below the top rung is ever reported as a result.

The stop rule, in the spirit of PASHA (Bohdal et al. 2023): once the ranking at the top
two rungs is stable (Spearman correlation over the configurations that reached both at
least ``stable_rank``, and the incumbent unchanged over the last ``patience`` arrivals
at the top), a configuration climbs to the top only if it is ahead of the incumbent on
the rung below: it could take the lead. Otherwise the searcher spends its compute on new
configurations instead of confirming ones the ranking already places below.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from hpcopt.core.fidelity import MIN_STEP as MIN_STEP
from hpcopt.core.fidelity import Rung as Rung
from hpcopt.core.fidelity import ladder as ladder
from hpcopt_server import domain as d


@dataclass
class Config:
    """One configuration's climb: its observations by rung (the mean over its folds at the
    rung's epochs, and each fold's value), the fold-epoch seconds it has used, and the rung
    it is now promoted to (None: none beyond the last it finished)."""

    index: int
    x: np.ndarray
    params: d.Params
    folds: dict[int, list[float]] = field(default_factory=dict)  # rung -> values of folds 0..f-1
    seconds: float = 0.0
    fold_epochs: int = 0
    done: int = -1  # the highest rung finished
    running: int | None = None  # the rung it is trained to now
    failed: bool = False  # a unit of it ended without a result: it climbs no further
    start: int = 0  # the rung its first unit trains to (``Rules.first_rung`` when it was made)
    #: Each rung's mean, kept once computed: a rung's fold values are told once and
    #: never change, and the rules read every configuration's means at every decision.
    _means: dict[int, float] = field(default_factory=dict, repr=False, compare=False)

    def mean(self, rung: int) -> float:
        found = self._means.get(rung)
        if found is None:
            found = self._means[rung] = float(np.mean(self.folds[rung]))
        return found

    @property
    def next_rung(self) -> int:
        """The rung its next unit trains to: one above its last, or where it starts."""
        return self.done + 1 if self.done >= 0 else self.start


@dataclass(frozen=True)
class Promotion:
    config: int
    rung: Rung
    why: str


def top_share(values: Sequence[float], eta: float) -> float:
    """The threshold of the best ``1/eta`` of ``values`` (losses); -inf when fewer than
    ``eta`` have arrived (no configuration is in the best ``1/eta`` of fewer)."""
    k = int(len(values) / eta)
    if k < 1:
        return -math.inf
    return float(np.sort(values)[k - 1])


def chance_better(mean: float, se: float, incumbent: float) -> float:
    """P(true mean < incumbent) under a normal reading with standard error ``se``."""
    if se <= 0:
        return 1.0 if mean < incumbent else 0.0
    return float(0.5 * math.erfc((mean - incumbent) / (se * math.sqrt(2.0))))


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    ra = np.argsort(np.argsort(a)).astype(float)
    rb = np.argsort(np.argsort(b)).astype(float)
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


class Rules:
    """Who may climb: the ladder's promotion rules over the configurations' state."""

    def __init__(self, rungs: Sequence[Rung], eta: float, p_more_folds: float, stable_rank: float, patience: int):
        self.rungs = tuple(rungs)
        self.eta = eta
        self.p_more_folds = p_more_folds
        self.stable_rank = stable_rank
        self.patience = patience
        self.top = len(self.rungs) - 1
        #: The incumbent after each arrival at the top rung (config index), oldest first.
        self.leaders: list[int] = []

    def incumbent(self, configs: Iterable[Config]) -> Config | None:
        best = [c for c in configs if c.done == self.top and not c.failed]
        return min(best, key=lambda c: (c.mean(self.top), c.index)) if best else None

    def arrived(self, configs: Sequence[Config]) -> None:
        """Records the incumbent after a configuration reached the top rung."""
        inc = self.incumbent(configs)
        if inc is not None:
            self.leaders.append(inc.index)

    def pooled_std(self, configs: Iterable[Config]) -> float:
        """The campaign's fold spread: the root mean within-configuration variance of the
        configurations with at least two folds at all epochs (0 with none)."""
        var, dof = 0.0, 0
        for c in configs:
            for r in range(c.done, -1, -1):
                values = c.folds.get(r)
                if values is not None and len(values) > 1 and self.rungs[r].epochs == self.rungs[-1].epochs:
                    var += float(np.var(values, ddof=1)) * (len(values) - 1)
                    dof += len(values) - 1
                    break
        return math.sqrt(var / dof) if dof else 0.0

    def first_rung(self, configs: Sequence[Config], min_rank: float, pairs: int = 6) -> int:
        """The rung a new configuration starts at: above every epoch rung whose ranking
        the rung after it does not confirm (Spearman below ``min_rank`` over at least
        ``pairs`` configurations that finished both). Where a short run says little about
        a longer one (an SGD regression whose first epochs rank by learning rate alone),
        screening there only discards the configurations that would have won."""
        start = 0
        for r in range(self.top):
            if self.rungs[r].epochs == self.rungs[-1].epochs:
                break  # fold rungs average noise; they do not reorder by budget
            both = [c for c in configs if r in c.folds and r + 1 in c.folds]
            if len(both) >= pairs and spearman([c.mean(r) for c in both], [c.mean(r + 1) for c in both]) < min_rank:
                start = r + 1
        return start

    def stable(self, configs: Sequence[Config]) -> bool:
        """The ranking at the top two rungs has settled (the module's stop rule)."""
        if self.top < 1 or len(self.leaders) < self.patience:
            return False
        if len(set(self.leaders[-self.patience :])) > 1:
            return False
        both = [c for c in configs if c.done == self.top and self.top - 1 in c.folds]
        if len(both) < 4:
            return False
        below = [c.mean(self.top - 1) for c in both]
        return spearman(below, [c.mean(self.top) for c in both]) >= self.stable_rank

    def promotable(self, configs: Sequence[Config], drained: bool = False) -> list[Promotion]:
        """Every configuration that may climb one rung now, with why. ``drained``: no
        new configuration may start (the campaign's max_trials are all created), so the
        best waiting one at the highest rung with any waiting climbs even where the
        rung's share would not let it."""
        out = self._promotable(configs)
        if out or not drained:
            return out
        inc = self.incumbent(configs)
        pooled = self.pooled_std(configs)
        for r in range(self.top - 1, -1, -1):
            waiting = [c for c in configs if c.done == r and c.running is None and not c.failed]
            if not waiting:
                continue
            c = min(waiting, key=lambda c: (c.mean(r), c.index))
            if self._fold_rung(r) and inc is not None and self._chance(c, r, inc, pooled) < self.p_more_folds:
                continue
            why = "the best waiting at its rung, with no new configuration left"
            return [Promotion(c.index, self.rungs[r + 1], why)]
        return []

    def _fold_rung(self, r: int) -> bool:
        """Whether climbing from rung ``r`` adds folds (it has all epochs already)."""
        return self.rungs[r].epochs == self.rungs[-1].epochs and r < self.top

    def _chance(self, c: Config, r: int, inc: Config, pooled: float) -> float:
        """P(``c``'s K-fold mean beats the incumbent's), from its folds at rung ``r``
        (one fold: the campaign's ``pooled`` spread)."""
        values = c.folds[r]
        std = float(np.std(values, ddof=1)) if len(values) > 1 else pooled
        return chance_better(c.mean(r), std / math.sqrt(len(values)), inc.mean(self.top))

    def _promotable(self, configs: Sequence[Config]) -> list[Promotion]:
        out: list[Promotion] = []
        inc = self.incumbent(configs)
        stable = self.stable(configs)
        pooled = self.pooled_std(configs)
        for r in range(self.top):
            at = [c for c in configs if c.done >= r and r in c.folds]
            waiting = [c for c in at if c.done == r and c.running is None and not c.failed]
            if not waiting:
                continue
            nxt = self.rungs[r + 1]
            fold_rung = self._fold_rung(r) and inc is not None
            cut = top_share([c.mean(r) for c in at], self.eta)
            if self._fold_rung(r) and inc is None and not any(c.running is not None and c.running > r for c in at):
                # No configuration has all folds yet, and none is on its way: the best at
                # the first rung with all epochs goes on, to make an incumbent.
                cut = max(cut, min(c.mean(r) for c in at))
            for c in waiting:
                mean = c.mean(r)
                if mean > cut:
                    continue
                why = f"in the best 1/{self.eta:g} of the {len(at)} at {self.rungs[r].label()}"
                if fold_rung:
                    assert inc is not None
                    p = self._chance(c, r, inc, pooled)
                    if p < self.p_more_folds:
                        continue
                    why += f", with a {p:.0%} chance to beat the incumbent #{inc.index} on all folds"
                if r + 1 == self.top and stable and inc is not None and not mean < inc.mean(r):
                    continue  # the ranking is settled and it is behind the incumbent below the top
                out.append(Promotion(c.index, nxt, why))
        return out
