"""The ladder of a multi-fidelity (``algorithm: mf``) campaign: the rungs of (folds,
epochs) a configuration climbs.

Said once here, for the server's searcher (``hpcopt_server.optimizers.fidelity``) and
the planner (``hpcopt.core.planner``), which sizes an ``mf`` campaign's work by it.

The ladder goes epochs first on one fold (``min_epochs``, ``min_epochs * eta``, ... up
to ``training.epochs``), then folds at all epochs (1, ``eta``, ``eta**2``, ... up to K).
A rung whose resource is less than :data:`MIN_STEP` times the one below it is left out
(18 epochs below 20 is not a rung of its own).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: A rung is kept only if its resource (folds x epochs) is this many times the one below.
MIN_STEP = 1.5
#: The defaults of the options that shape the ladder (``algorithm.options`` of ``mf``).
MIN_EPOCHS, ETA, FOLD_PROMOTION = 1, 3.0, True


@dataclass(frozen=True)
class Rung:
    index: int
    folds: int
    epochs: int

    @property
    def resource(self) -> int:
        """Fold-epochs a configuration has trained once it finished this rung."""
        return self.folds * self.epochs

    def label(self) -> str:
        return f"rung {self.index} ({self.folds} fold{'s' if self.folds > 1 else ''}, {self.epochs} epochs)"


def ladder(epochs: int, folds: int, min_epochs: int, eta: float, fold_promotion: bool = True) -> tuple[Rung, ...]:
    """The rungs, lowest first; the last is (K folds, all epochs). ValueError naming the
    option when they cannot be built."""
    if epochs < 1:
        raise ValueError("training.epochs: the multi-fidelity searcher needs a training section with epochs >= 1")
    if min_epochs > epochs:
        raise ValueError(f"options.min_epochs: must be at most training.epochs ({epochs}); got {min_epochs}")
    steps: list[tuple[int, int]] = []
    e = float(min_epochs)
    while e < epochs:
        steps.append((1, round(e)))
        e *= eta
    steps.append((1, epochs))
    if folds > 1:
        f = eta if fold_promotion else float(folds)
        while f < folds:
            steps.append((round(f), epochs))
            f *= eta
        steps.append((folds, epochs))
    kept: list[tuple[int, int]] = [steps[-1]]
    for step in reversed(steps[:-1]):  # from the top down: the top rung always stays
        if kept[-1][0] * kept[-1][1] >= MIN_STEP * step[0] * step[1]:
            kept.append(step)
    return tuple(Rung(i, f, e) for i, (f, e) in enumerate(reversed(kept)))


@dataclass(frozen=True)
class Climb:
    """The work of reaching ``rung`` from the one below: ``folds`` folds trained
    ``epochs`` epochs each (the longest of them, where old folds train on and new ones
    start), by at most ``reach`` of the configurations (``eta ** -rung``: asynchronous
    successive halving lets the best ``1/eta`` of a rung climb; the fold test and the
    stop rule let fewer)."""

    rung: Rung
    folds: int
    epochs: int
    reach: float


@dataclass(frozen=True)
class Ladder:
    rungs: tuple[Rung, ...]
    eta: float

    def climbs(self) -> tuple[Climb, ...]:
        """What each rung adds, lowest first: a promotion trains only the new fold-epochs."""
        out, below = [], Rung(-1, 0, 0)
        for r in self.rungs:
            on = r.epochs - below.epochs if r.epochs > below.epochs else 0  # old folds train on
            folds = (below.folds if on else 0) + (r.folds - below.folds)
            out.append(Climb(r, folds, r.epochs if r.folds > below.folds else on, self.eta**-r.index))
            below = r
        return tuple(out)


def ladder_of(spec: dict[str, Any]) -> Ladder | None:
    """The ladder of a campaign spec (a dict as submitted), or None when it is not an
    ``mf`` campaign. The spec is taken as the server accepted it (a bad option was
    refused at submission); ValueError where the ladder cannot be built."""
    algorithm = spec.get("algorithm") or {}
    if algorithm.get("name") != "mf":
        return None
    opts = algorithm.get("options") or {}
    training = spec.get("training") or {}
    eta = float(opts.get("eta", ETA))
    rungs = ladder(
        int(training.get("epochs", 10)),
        int(spec.get("folds", 1)),
        int(opts.get("min_epochs", MIN_EPOCHS)),
        eta,
        bool(opts.get("fold_promotion", FOLD_PROMOTION)),
    )
    return Ladder(rungs, eta)


__all__ = ["ETA", "FOLD_PROMOTION", "MIN_EPOCHS", "MIN_STEP", "Climb", "Ladder", "Rung", "ladder", "ladder_of"]
