"""The multi-fidelity searcher over folds and epochs: which configuration gets the next
fold and the next epochs.

One GP (``gp_model.GPModel``, the lazy Cholesky factor of ``bo``) over (x, z), with
z = log(epochs) / log(training.epochs) the epoch fidelity: its own ARD lengthscale learns
how well a short run predicts a full one. Each finished unit of work adds one row,
O(n^2): an epoch rung the value of fold 0 at that many epochs, a fold rung the mean of
the folds it added (with the folds before it, the same evidence as one row of their
joint mean at 1/folds the variance: the rows are sufficient statistics). A row's noise
is the campaign's pooled fold variance over the folds it holds (``fidelity.Rules.pooled_std``),
so a one-fold estimate counts for less than a K-fold one. Units still running are
fantasised at the posterior mean (kriging believer) at the rung they train to.

The searcher asks its rules (``fidelity.Rules``) who may climb. Promotions go first
(ASHA: a worker never waits for a rung to fill); among several it picks the largest
log expected improvement at full fidelity per second of the climb. With none, a new
configuration starts at the lowest rung: the candidate of largest log EI at full
fidelity, less the log of its predicted seconds per fold-epoch (the geometric mean of the
nearest measured configurations' cost), so a configuration that is as promising but
cheaper goes first. The first ``n_initial`` configurations are drawn at random.

It is pure numerics, driven by ``next`` and ``tell``; ``benchmarks/multifidelity``
replays it on recorded training, and ``mf.py`` runs it as a campaign's ``algorithm: mf``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hpcopt_server import domain as d
from hpcopt_server.optimizers import acquisition as acq
from hpcopt_server.optimizers.encoding import Encoder
from hpcopt_server.optimizers.fidelity import Config, Promotion, Rules, Rung, ladder
from hpcopt_server.optimizers.gp_model import GPModel, select_subset
from hpcopt_server.optimizers.space import SearchSpace

#: Maps a new configuration's parameters to the ones that will be run.
Snapper = Callable[[d.Params], d.Params]
#: Nearest measured configurations whose cost predicts a new one's.
COST_NEIGHBOURS = 5
#: The GP's hyper-parameters are refitted when its rows grew by this share since the last
#: refit (at 2, 3, 4, 5, 6, 8, 10, 12, 15, ... rows); between refits each row extends the
#: factor, O(n^2).
REFIT_GROWTH = 0.2
#: Rows in the marginal-likelihood fit (the best tenth and a seeded rest). The fits were
#: most of a replay's time: a digits replay (compute_to_target.py) went from 138 to 60 s
#: per run going from 300 rows to 150, with the same compute to the target on 5 seeds.
FIT_SUBSAMPLE = 150


@dataclass(frozen=True)
class Work:
    """A unit of work: train ``config``'s folds ``0 .. rung.folds-1`` to ``rung.epochs``."""

    config: int
    rung: Rung
    params: d.Params
    why: str


class MultiFidelitySearch:
    def __init__(
        self,
        space: SearchSpace,
        *,
        folds: int,
        epochs: int,
        seed: int,
        min_epochs: int = 1,
        eta: float = 3.0,
        n_initial: int = 10,
        fold_promotion: bool = True,
        p_more_folds: float = 0.05,
        stable_rank: float = 0.9,
        patience: int = 3,
        min_rank: float = 0.5,
        candidates: int = 512,
        max_points: int = 2000,
    ):
        self.encoder = Encoder(space)
        self.rungs = ladder(epochs, folds, min_epochs, eta, fold_promotion)
        self.rules = Rules(self.rungs, eta, p_more_folds, stable_rank, patience)
        self.epochs = epochs
        self.seed = seed
        self.n_initial = n_initial
        self.min_rank = min_rank
        self.n_candidates = candidates
        self.max_points = max_points
        self.configs: list[Config] = []
        rotatable = np.r_[self.encoder.continuous, False]
        self.model = GPModel(self.encoder.dim + 1, rotatable=rotatable)
        self._rows: list[tuple[np.ndarray, float, float]] = []  # (x with z, value, fold count)
        self._refit_at = 0
        self._asked = 0

    # -- results ----------------------------------------------------------------------

    def z(self, rung: Rung) -> float:
        return math.log(rung.epochs) / math.log(self.epochs) if self.epochs > 1 else 1.0

    def tell(self, config: int, rung: int, fold_values: Sequence[float], seconds: float) -> None:
        """``config`` finished ``rung``: the values of its folds ``0 .. folds-1`` at the
        rung's epochs, and the seconds the new fold-epochs took."""
        c = self.configs[config]
        r = self.rungs[rung]
        if len(fold_values) != r.folds:
            raise ValueError(f"{r.label()} has {r.folds} folds; got {len(fold_values)} values")
        if rung != c.next_rung:
            raise ValueError(f"configuration {config} trains to rung {c.next_rung}; rung {rung} is not it")
        before = self.rungs[c.done] if c.done >= 0 else Rung(-1, 0, 0)
        added = r.resource - before.resource
        c.folds[rung] = [float(v) for v in fold_values]
        c.done, c.running = rung, None
        c.seconds += seconds
        c.fold_epochs += added
        # The new evidence: the folds this rung added (a fold rung), or fold 0 at more epochs.
        new = c.folds[rung][before.folds :] if before.epochs == r.epochs else c.folds[rung][:1]
        finite = [v for v in new if math.isfinite(v)]
        value = float(np.mean(finite)) if finite else math.nan
        self._rows.append((np.r_[c.x, self.z(r)], value, float(len(new))))
        self._update()
        if rung == self.rules.top:
            self.rules.arrived(self.configs)

    def forget(self, config: int) -> None:
        """The unit running for ``config`` ended without a result (failed, cancelled): it
        stays at the rung it last finished and climbs no further."""
        c = self.configs[config]
        c.running, c.failed = None, True

    def incumbent(self) -> Config | None:
        """The best configuration with all K folds and all epochs (None before one)."""
        return self.rules.incumbent(self.configs)

    # -- the model --------------------------------------------------------------------

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        X = np.array([r[0] for r in self._rows])
        y = np.array([r[1] for r in self._rows])
        pooled = self.rules.pooled_std(self.configs) ** 2
        extra = np.array([pooled / r[2] for r in self._rows])
        return X, y, extra, np.zeros(len(y), bool)

    def _update(self) -> None:
        n = len(self._rows)
        if n < 2:
            return
        with self.model.lock:
            self.model.drop_fantasies()
            if n >= self._refit_at * (1 + REFIT_GROWTH) or self.model.n_real == 0:
                X, y, extra, cens = self._arrays()
                rng = np.random.default_rng([self.seed, n])
                idx = select_subset(X, y, cens, self.max_points, rng)
                rows = (X[idx], y[idx], extra[idx], cens[idx])
                refit = self.model.compute_refit(*rows, rng, subsample=FIT_SUBSAMPLE, select_output=False)
                self.model.install(refit, rows)
                self._refit_at = n
            elif n <= self.max_points:  # the new row only: O(n^2), no arrays of the whole history
                x, value, folds = self._rows[-1]
                noise = self.rules.pooled_std(self.configs) ** 2 / folds
                self.model.add(x[None, :], np.array([value]), np.array([noise]), np.zeros(1, bool))

    def _ready(self) -> bool:
        return self.model.n_real >= 2 and sum(1 for c in self.configs if c.done >= 0) >= self.n_initial

    def _log_ei(self, X: np.ndarray, z: float = 1.0) -> np.ndarray:
        """log EI of configurations X [m, D] at fidelity ``z``, against the best posterior
        mean there over the configurations measured so far."""
        y = self.model.outputs()
        mu, var = self.model.predict(np.c_[X, np.full(len(X), z)], y)
        seen = np.array([c.x for c in self.configs if c.done >= 0])
        # The incumbent's mean needs no variance: O(m n) over every configuration seen.
        best = float(self.model.mean(np.c_[seen, np.full(len(seen), z)], y).min())
        return np.asarray(acq.log_ei(mu, var, best))

    def _screening_z(self) -> float:
        """The fidelity a new configuration is chosen at: that of the highest rung with
        epochs of its own that ``n_initial`` configurations have finished (as BOHB
        models the largest budget with enough observations). Far from its data the GP's
        trend in z is a guess; on the digits table EI at full fidelity chose no better
        than random (compute to the target 94 against 93 fold-epoch seconds, 5 seeds),
        and this rule measured level with both (97): kept as the established choice,
        not as a measured gain."""
        z = self.z(self.rungs[0])
        for r in self.rungs:
            if sum(1 for c in self.configs if c.done >= r.index) >= self.n_initial:
                z = self.z(r)
        return z

    def _cost(self, X: np.ndarray) -> np.ndarray:
        """Predicted seconds per fold-epoch of X [m, D] (1 before anything is measured)."""
        measured = [c for c in self.configs if c.fold_epochs > 0 and c.seconds > 0]
        if not measured:
            return np.ones(len(X))
        M = np.array([c.x for c in measured])
        logs = np.log([c.seconds / c.fold_epochs for c in measured])
        d2 = ((X[:, None, :] - M[None, :, :]) ** 2).sum(-1)
        k = min(COST_NEIGHBOURS, len(measured))
        near = np.argpartition(d2, k - 1, axis=1)[:, :k]
        return np.exp(logs[near].mean(1))

    @staticmethod
    def _own_cost(c: Config) -> float:
        return c.seconds / c.fold_epochs if c.fold_epochs and c.seconds > 0 else 1.0

    def _fantasise(self) -> None:
        running = [(c.x, c.running) for c in self.configs if c.running is not None]
        if not running:
            return
        Xf = np.array([np.r_[x, self.z(self.rungs[r])] for x, r in running])
        mu, _ = self.model.predict(Xf, self.model.outputs())
        self.model.fantasize(Xf, mu)

    # -- the next unit ----------------------------------------------------------------

    def promotions(self, drained: bool = False) -> list[Promotion]:
        return self.rules.promotable(self.configs, drained)

    def next(self, *, new: bool = True, snap: Snapper | None = None, drained: bool | None = None) -> Work | None:
        """The next unit of work: a promotion if one is due, else (``new``) a new
        configuration; None when neither (nothing may climb now, and no new one is
        allowed). ``snap`` maps a new configuration's parameters to the ones that will be
        run (a tabular benchmark's nearest configuration); the model records those.
        ``drained`` (default: ``not new``): the rules' last resort, the best waiting
        configuration climbs (``fidelity.Rules.promotable``)."""
        with self.model.lock:
            try:
                if self._ready():
                    self._fantasise()
                work = self._promote(not new if drained is None else drained) or (self._start(snap) if new else None)
            finally:
                self.model.drop_fantasies()
        if work is not None:
            self.configs[work.config].running = work.rung.index
        return work

    def _promote(self, drained: bool) -> Work | None:
        due = self.promotions(drained)
        if not due:
            return None
        if len(due) > 1 and self._ready():
            X = np.array([self.configs[p.config].x for p in due])
            # Its own measured seconds per fold-epoch (every promotable one has some).
            cost = np.array([self._own_cost(self.configs[p.config]) for p in due])
            steps = np.array([p.rung.resource - self.rungs[p.rung.index - 1].resource for p in due])
            score = self._log_ei(X) - np.log(cost * steps)
            pick = due[int(np.argmax(score))]
        else:  # before the model: the lowest rung first, then the best there
            pick = min(due, key=lambda p: (p.rung.index, self.configs[p.config].mean(p.rung.index - 1)))
        c = self.configs[pick.config]
        return Work(c.index, pick.rung, c.params, pick.why)

    def _start(self, snap: Snapper | None) -> Work:
        rng = np.random.default_rng([self.seed, 2, self._asked])
        self._asked += 1
        if not self._ready():
            return self._new(self.encoder.random(1, rng)[0], "at random (initial design)", snap)
        X = self._pool(rng)
        z = self._screening_z()
        score = self._log_ei(X, z) - np.log(self._cost(X))
        why = f"largest expected improvement per second at {self._epochs_at(z)} epochs"
        return self._new(X[int(np.argmax(score))], why, snap)

    def _epochs_at(self, z: float) -> int:
        return round(math.exp(z * math.log(self.epochs))) if self.epochs > 1 else 1

    def _pool(self, rng: np.random.Generator) -> np.ndarray:
        """Random points of the space and, around the five best configurations so far at
        their highest rung, Gaussian steps (sd 0.05 in the unit cube)."""
        X = self.encoder.random(self.n_candidates, rng)
        seen = sorted((c for c in self.configs if c.done >= 0), key=lambda c: (-c.done, c.mean(c.done)))[:5]
        if seen:
            local = np.repeat(np.array([c.x for c in seen]), 32, axis=0)
            local = self.encoder.project(local + rng.normal(0, 0.05, local.shape))
            X = np.vstack([X, local])
        return X

    def _new(self, x: np.ndarray, why: str, snap: Snapper | None) -> Work:
        params = self.encoder.decode(x)
        if snap is not None:
            params = snap(params)
        start = self.rules.first_rung(self.configs, self.min_rank)
        c = Config(len(self.configs), self.encoder.encode(params), dict(params), start=start)
        self.configs.append(c)
        if start:
            why += f"; it starts at {self.rungs[start].label()}, since the rungs below rank unlike the ones above"
        return Work(c.index, self.rungs[start], c.params, why)
