"""Bayesian optimization (``algorithm: bo``): a GP surrogate with a lazily extended
Cholesky factor (Ram et al., MLHPC 2019), log EI or UCB, and for pending trials
kriging-believer fantasies and local penalization (``_Balls``). The GP may see the
continuous inputs in a rotated frame that follows a valley at an angle to the axes
(``gp_model``); the candidates, the polish and the penalizers work in the space itself.

Options (``algorithm.options``): :attr:`BayesianOptimization.OPTIONS`, listed in the docs'
options reference.

With several objectives (``objectives`` in the spec) bo is ParEGO (Knowles 2006): each
suggestion draws a weight vector uniformly from the simplex (seeded, like the
candidates) and models the augmented Chebyshev scalarization of the objectives, each
scaled to its observed range (``pareto.chebyshev``), so successive suggestions aim at
different parts of the Pareto front. The factor holds no output-dependent noise then
(``fold_noise`` does not apply), so one factor serves every scalarization: a new
weight vector costs two triangular solves, not a refit. The hyper-parameters are fitted
on the equal-weight scalarization.

A PRUNED trial is a censored observation: the value it reached when it was stopped,
floored at the median loss (``gp_model``). Between refits every new observation extends
the factor by one row, O(n^2); a suggestion costs O(m n^2) for m candidates plus the
polishing, never O(n^3).
"""

from __future__ import annotations

import logging
import math
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy.optimize import minimize
from scipy.special import log_ndtr
from scipy.stats import norm, qmc
from threadpoolctl import threadpool_limits

from hpcopt.core.options import Option
from hpcopt_server import domain as d
from hpcopt_server.optimizers import acquisition as acq
from hpcopt_server.optimizers.base import Optimizer, Problem, exhausted, loss_vector, pruned_loss, to_minimize
from hpcopt_server.optimizers.encoding import Encoder
from hpcopt_server.optimizers.gp import SQRT5
from hpcopt_server.optimizers.gp import unpack as gp_unpack
from hpcopt_server.optimizers.gp_model import GPModel, Refit, select_subset
from hpcopt_server.optimizers.pareto import chebyshev, simplex_weights

log = logging.getLogger(__name__)
Rows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
#: A refit (hyper-parameters, output statistics, factor, inputs' frame), the rows it
#: factors, and their indices in the history.
Fit = tuple[Refit, Rows, np.ndarray]

#: The most candidates one suggestion may score (10**7 took 1.9 GB and 30 s under the lock).
MAX_CANDIDATES = 8192
#: Below this many observations every new one refits the hyper-parameters (in the
#: background: 0.57 s at d = 6, 1.42 s at d = 20 at n = 149, three models fitted; up to
#: 0.9 s at d = 6 and 1.4 s at d = 10 where the frame is estimated again, ``gp_model``),
#: whatever ``refit_growth`` says: between refits the model runs on hyper-parameters
#: fitted to a history a fifth smaller, and with 4 evaluations pending that cost the
#: most (``quality.py``, 20 seeds: median regret on Levy-8 5.32 -> 2.07, lower in 17 of
#: 20 seeds; Rosenbrock-4 3.69 -> 2.59, 14 of 20).
DENSE_REFITS = 150
#: ``informative_every``: every k-th suggestion (counting the history and the pending
#: trials) is the best of the points whose posterior variance is at least the model's
#: noise variance, whose measurement can change the model. Log EI alone can settle on
#: a point next to the incumbent, where it is positive only through the noise: on
#: Branin, in 2 of 40 seeds bo spent its last 35 evaluations at (10, 3.00), on the
#: boundary 0.04 (in unit coordinates) from the minimum, and ended at regret 1.55
#: (``quality.py``). The rule costs the converging runs one sub-noise step in four,
#: and measured level there (median regret over 40 seeds 3.9e-05 against 3.3e-05 one
#: at a time, 2.9e-05 against 4.5e-05 with 4 pending). Every fifth left a run pinned.
#: Since the prior mean is the likelihood's constant (``gp.gls_mean``) no Branin seed of
#: 0-79 stays pinned without the rule; it is kept, not measured again.
INFORMATIVE = 4
#: Random points a constrained campaign's fallback chooses the likeliest feasible of.
FALLBACKS = 256


def blas_threads(n: int) -> threadpool_limits:
    """One BLAS thread below n = 2000: on small matrices OpenBLAS threads cost more than
    they give (a 2-core machine: p50 step at n = 1000 went from 41 to 29 ms, the first
    fit at n = 100 from 3.3 to 0.45 s)."""
    return threadpool_limits(limits=1 if n < 2000 else None, user_api="blas")


def sobol_point(dims: int, seed: int, index: int) -> np.ndarray:
    """Point ``index`` of a scrambled Sobol sequence in [0,1)^dims."""
    sampler = qmc.Sobol(dims, scramble=True, seed=seed)
    if index:
        sampler.fast_forward(index)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # balance warnings for non-powers of two
        return np.asarray(sampler.random(1)[0])


class BayesianOptimization(Optimizer):
    models_constraints = True
    # The cost of a suggestion grows with candidates, polish, fit_subsample and
    # max_points, under the campaign's lock: each is bounded.
    OPTIONS: ClassVar[dict[str, Option]] = {
        "n_initial": Option(10, int, 1, 100_000, doc="Sobol points before the GP takes over"),
        "acquisition": Option("logei", str, choices=("logei", "ucb"), doc="log expected improvement, or UCB"),
        "ucb_beta": Option(2.0, float, 0.0, 1e6, doc="exploration weight of UCB"),
        "candidates": Option(
            512,
            int,
            8,
            MAX_CANDIDATES,
            doc="quasi-random and local candidates scored per suggestion (128 past 300 observations)",
        ),
        "polish": Option(2, int, 0, 16, doc="best candidates refined by L-BFGS-B"),
        "refit_growth": Option(
            0.2,
            float,
            0.0,
            100.0,
            doc="from 150 observations on, the GP is refitted when n grew by this fraction (below: every one)",
        ),
        "fit_subsample": Option(300, int, 10, 2000, doc="at most this many points in the marginal-likelihood fit"),
        "background_refit": Option(
            True, bool, doc="refit in a thread; the fit is used from a fixed later history size on"
        ),
        "fold_noise": Option(True, bool, doc="a trial's fold spread (value_std² / K) adds to its observation noise"),
        "max_points": Option(3000, int, 200, 20_000, doc="past this many observations the GP factors a subset"),
        "batch": Option(
            "penalize",
            str,
            choices=("believer", "penalize"),
            doc="pending trials: believer (at the posterior mean), or penalize also near them",
        ),
        "informative_every": Option(
            INFORMATIVE, int, 0, 1_000_000, doc="every k-th suggestion must be worth measuring; 0: none"
        ),
    }

    def __init__(self, problem: Problem):
        super().__init__(problem)
        self.n_initial = self.option("n_initial")
        self.acquisition = self.option("acquisition")
        self.ucb_beta = self.option("ucb_beta")
        self.candidates = self.option("candidates")
        self.polish = self.option("polish")
        self.refit_growth = self.option("refit_growth")
        self.fit_subsample = self.option("fit_subsample")
        self.background = self.option("background_refit")
        self.fold_noise = self.option("fold_noise")
        self.max_points = self.option("max_points")
        self.batch = self.option("batch")
        self.informative_every = self.option("informative_every")
        self.encoder = Encoder(self.space)
        self.model = GPModel(self.encoder.dim, rotatable=self.encoder.continuous)
        self.rng = np.random.default_rng([self.seed, 1])  # reseeded per suggestion
        self._n_seen = 0  # finished trials observed, failed ones included
        # Every observation (X, loss or NaN, extra noise, censored), in order: the model
        # factors all of them up to max_points, a subset past it.
        self._rows: list[tuple[np.ndarray, float, float, bool]] = []
        # Whether each row's trial may be the incumbent: every completed one without
        # constraints; with them, the feasible ones only (constrained EI improves on the
        # best feasible value).
        self._feasible: list[bool] = []
        # Multi-objective: each row's loss vector (NaN for a failed trial), the history
        # index of each real row of the model, and the scalarization of this suggestion.
        self._vectors: list[np.ndarray] = []
        self._model_rows = np.zeros(0, int)
        self._raw: np.ndarray | None = None
        self._n_finite = 0
        self._schedule = [2]  # refit points (see _points)
        self._fit_at = 0  # the refit point whose fit the model uses
        self._job: _Refit | None = None

    # -- observations ---------------------------------------------------------------------

    def observe(self, trials: Sequence[d.Trial]) -> None:
        with blas_threads(self.model.n_real + len(trials)):
            self._observe(trials)

    def _observe(self, trials: Sequence[d.Trial]) -> None:
        rows = []
        for t in trials:
            self._n_seen += 1
            if t.state == d.TrialState.CANCELLED or exhausted(t):
                continue  # says nothing about the objective (an exhausted one: its constraint's model)
            self._feasible.append(not self.problem.constraints or bool(t.feasible))
            if self.problem.multi_objective:
                # A placeholder loss (0: measured, NaN: failed); _fit and suggest scalarize.
                vector = loss_vector(t, self.problem.directions)
                self._vectors.append(
                    np.full(len(self.problem.directions), np.nan) if vector is None else np.array(vector)
                )
                rows.append((self.encoder.encode(t.params), np.nan if vector is None else 0.0, 0.0, False))
                continue
            loss = to_minimize(t, self.direction)
            extra = 0.0
            if loss is not None and self.fold_noise and t.value_std and self.problem.folds > 1:
                extra = t.value_std**2 / self.problem.folds
            pruned = pruned_loss(t, self.direction)
            if pruned is not None:
                loss = pruned
            rows.append((self.encoder.encode(t.params), np.nan if loss is None else loss, extra, pruned is not None))
        if not rows:
            return
        self._rows += rows
        self._n_finite += sum(np.isfinite(r[1]) for r in rows)
        if not self._refits():  # a refit installed holds the new rows already
            with self.model.lock:
                self.model.drop_fantasies()
                self.model.add(*self._arrays(len(self._rows) - len(rows), len(self._rows)))
                self._model_rows = np.r_[self._model_rows, np.arange(len(self._rows) - len(rows), len(self._rows))]

    def _n_ok(self) -> int:
        return self._n_finite

    # -- refits: a deterministic function of the history ---------------------------------

    def _points(self, upto: int) -> list[int]:
        """Refit points up to ``upto``: every history size below ``DENSE_REFITS``, then
        s_j+1 = max(ceil(s_j (1 + refit_growth)), s_j + 1); past ``max_points`` one every
        max_points / 4 observations (each refit selects a new subset, and the factor never
        holds more than about max_points)."""
        while self._schedule[-1] < upto:
            last = self._schedule[-1]
            if last < DENSE_REFITS:
                step = 1
            elif last > self.max_points:
                step = self.max_points // 4
            else:
                step = max(math.ceil(last * self.refit_growth), 1)
            self._schedule.append(last + step)
        return [p for p in self._schedule if p <= upto]

    def due(self, point: int) -> int:
        """The history size at which the fit of the first ``point`` observations is used.
        In the background a refit has one observation's time to finish below
        ``DENSE_REFITS`` and ``refit_growth * point / 2`` observations' time past it; a
        suggestion that comes before it does waits for it. The first fit, and every fit
        without ``background_refit``, is used at once."""
        if not self.background or point == self._schedule[0]:
            return point
        if point < DENSE_REFITS:
            return point + 1
        if point > self.max_points:
            return point + self.max_points // 8
        return point + max(1, int(self.refit_growth * point / 2))

    def _refits(self) -> bool:
        """Installs the latest fit that is due (True if it did) and starts the next one.

        The model a suggestion uses is the fit of the first s_j observations for the
        largest s_j due by now, extended by the rest: the same history gives the same
        model whatever the timing. A fit starts from the prior's centre and two draws
        from a generator seeded by (seed, s_j), never from the previous fit, so a server
        that rebuilds the optimizer after a restart computes only the last one."""
        n = len(self._rows)
        points = [p for p in self._points(n) if p > self._fit_at]
        due = [p for p in points if self.due(p) <= n]
        installed = False
        if due:
            target = due[-1]
            job = self._job
            result = job.result() if job is not None and job.point == target else self._fit(target)
            if job is not None and job.point <= target:
                self._job = None
            if result is not None:
                with self.model.lock:
                    self.model.drop_fantasies()
                    self.model.install(*result[:2])
                    self._model_rows = result[2]
                    if n > target:
                        self.model.add(*self._arrays(target, n))
                        self._model_rows = np.r_[self._model_rows, np.arange(target, n)]
                installed = True
                if target > self.max_points >= self._fit_at:
                    log.info(
                        "bo: %d observations; the GP now factors a subset of %d (max_points %d)",
                        target,
                        len(result[1][0]),
                        self.max_points,
                    )
            self._fit_at = target
            points = [p for p in points if p > target]
        if points and self._job is None:
            self._job = _Refit(points[0], self._fit, self.background)
        return installed

    def _arrays(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        rows = self._rows[start:stop]
        X, y, extra, censored = (np.array(col) for col in zip(*rows, strict=True))
        return X.reshape(len(rows), self.encoder.dim), y, extra, censored.astype(bool)

    def _fit(self, point: int) -> Fit | None:
        """The fit of the first ``point`` observations (past max_points: of a subset of
        max_points / 2 of them, ``select_subset``), with its rows."""
        X, y, extra, censored = self._arrays(0, point)
        if int(np.isfinite(y).sum()) < 2:
            return None
        if self.problem.multi_objective:  # the equal-weight scalarization
            m = len(self.problem.directions)
            y = chebyshev(np.array(self._vectors[:point]), np.full(m, 1.0 / m))
        rng = np.random.default_rng([self.seed, 3, point])
        idx = np.arange(point)
        if point > self.max_points:
            idx = select_subset(X, y, censored, self.max_points // 2, rng)
            X, y, extra, censored = X[idx], y[idx], extra[idx], censored[idx]
        with blas_threads(len(X)):
            refit = self.model.compute_refit(
                X,
                y,
                extra,
                censored,
                rng,
                subsample=self.fit_subsample,
                # ParEGO's other scalarizations are warped (GPModel.outputs): its fit is too.
                select_output=not self.problem.multi_objective,
            )
        return refit, (X, y, extra, censored), idx

    def memory_bytes(self) -> int:
        """What this optimizer holds: the model's arrays and factor buffer, and the
        history rows (about 300 bytes each as Python objects)."""
        m = self.model
        arrays = sum(a.nbytes for a in (m.X, m.y_raw, m.extra_raw, m.censored)) + m.factor.nbytes
        return int(arrays + 300 * len(self._rows))

    def settle(self) -> None:
        self.wait_for_refit()

    def wait_for_refit(self) -> None:
        """Blocks until a background refit is done (tests and benchmarks); it is used
        when its history size is due, as always."""
        if self._job is not None:
            self._job.wait()

    # -- suggestions -----------------------------------------------------------------------

    def suggest(self, n: int, pending: Sequence[d.Params]) -> list[d.Params]:
        # Candidates from a generator seeded by the history's size and the pending count:
        # the same history and pending trials give the same suggestions, even after a restart.
        self.rng = np.random.default_rng([self.seed, 1, len(self._rows), len(pending)])
        out: list[d.Params] = []
        made = self._n_seen + len(pending)
        while len(out) < n and (made + len(out) < self.n_initial or self._n_ok() < 2):
            out.append(self.space.decode(sobol_point(len(self.space), self.seed, made + len(out))))
        if len(out) == n:
            return out
        with self.model.lock, blas_threads(self.model.n_real + len(pending)):
            try:
                if not self.problem.multi_objective:
                    return out + self._suggest_gp(n - len(out), [*pending, *out])
                while len(out) < n:  # a weight vector per suggestion (ParEGO)
                    self._raw = self._scalarized(len(pending) + len(out))
                    out += self._suggest_gp(1, [*pending, *out])
                return out
            finally:
                self._raw = None
                self.model.drop_fantasies()

    def _scalarized(self, k: int) -> np.ndarray:
        """The model's real rows under a weight vector seeded by (seed, history size, k)."""
        rng = np.random.default_rng([self.seed, 4, len(self._rows), k])
        weights = simplex_weights(len(self.problem.directions), rng)
        return chebyshev(np.array(self._vectors)[self._model_rows], weights)

    def _suggest_gp(self, n: int, pending: Sequence[d.Params]) -> list[d.Params]:
        m = self.model
        m.drop_fantasies()
        penalize = self.batch == "penalize" and self.acquisition == "logei"
        y = m.outputs(self._raw)
        balls = _Balls.empty(self.encoder.dim, float(y.min()))  # the incumbent of the real rows
        if pending:
            Xp = np.array([self.encoder.encode(p) for p in pending])
            mu, var = m.predict(Xp, y)
            if penalize:
                balls = balls.plus(Xp, mu, np.sqrt(var))
            m.fantasize(Xp, mu)
        out = []
        for j in range(n):
            index = len(self._rows) + len(pending) + j  # a function of the history and the pending trials
            informative = self.informative_every > 0 and index % self.informative_every == 0
            x = self._maximize_acquisition(balls if penalize else None, informative)
            out.append(self.encoder.decode(x))
            mu, var = m.predict(x[None, :], m.outputs(self._raw))
            if penalize:
                balls = balls.plus(x[None, :], mu, np.sqrt(var))
            m.fantasize(x[None, :], mu)
        return out

    def _maximize_acquisition(self, balls: _Balls | None = None, informative: bool = False) -> np.ndarray:
        """The candidate of highest acquisition, polished; ``informative``: of those whose
        posterior variance is at least the noise variance if there are any
        (``INFORMATIVE``)."""
        m = self.model
        y = m.outputs(self._raw)
        best = float(y.min())  # fantasies count: the believer treats them as observed
        constrained = self.feasibility is not None and self.feasibility.ready()
        ok = None
        if constrained:
            # Constrained EI (Gardner et al. 2014): improvement over the best feasible
            # trial, times the probability of feasibility; with none feasible yet, that
            # probability alone (Gelbart et al. 2014).
            ok = np.array([self._feasible[i] for i in self._model_rows], bool)
            best = float(y[: m.n_real][ok].min()) if ok.any() else math.nan
        X_taken = m.X[: m.n]
        # Fewer candidates as n grows: scoring costs O(candidates n^2).
        floor = 128 if m.n < 2000 else 64
        count = int(np.clip(self.candidates * (300.0 / max(m.n, 1)) ** 2, floor, self.candidates))
        C = self._candidates(count, y, ok)
        mu, var = m.predict(C, y)
        alpha = m.alpha(y)
        if balls is not None and len(balls.centres):
            balls.lipschitz = self._lipschitz(C, alpha)
        scores = self._constrained(C, self._score(mu, var, best) if math.isfinite(best) else 0.0)
        scores = scores + (balls.log_penalty(C) if balls else 0.0)
        noise = gp_unpack(m.theta)[2]
        # Where the noise exceeds what the model can still learn anywhere (a loss that is
        # mostly noise), no point qualifies and the ordinary choice stands.
        informative = informative and bool((var >= noise).any())
        if informative:
            scores = np.where(var >= noise, scores, -np.inf)
        order = np.argsort(-scores)
        finalists = []
        for i in order[: max(self.polish, 1)]:
            x = self._polish(C[i], alpha, best, balls) if self.polish and math.isfinite(best) else C[i]
            finalists.append(x)
        finalists += [C[i] for i in order[: 4 * max(self.polish, 1)]]
        F = self.encoder.project(np.array(finalists))
        fmu, fvar = m.predict(F, y)
        fscores = self._constrained(F, self._score(fmu, fvar, best) if math.isfinite(best) else 0.0)
        fscores = fscores + (balls.log_penalty(F) if balls else 0.0)
        for i in np.argsort(-fscores):
            if informative and not fvar[i] >= noise:
                continue
            if np.min(np.abs(X_taken - F[i]).sum(1), initial=np.inf) > 1e-9:
                return np.asarray(F[i])
        # Everything near the optimum is taken (or, informative, known within the noise):
        # fall back to a fresh random point; with constraints, the likeliest to hold of
        # FALLBACKS random points, and never one the server would refuse to launch (on a
        # small integer grid bo ran out of untaken points near its optimum, and 1 in 4 of
        # its random fallbacks was refused: benchmarks/constraints_memory.py).
        if self.feasibility is not None and self.feasibility.ready():
            R = self.encoder.project(self.encoder.random(FALLBACKS, self.rng))
            return np.asarray(R[int(np.argmax(self._constrained(R, 0.0)))])
        return np.asarray(self.encoder.random(1, self.rng)[0])

    def _lipschitz(self, C: np.ndarray, alpha: np.ndarray) -> float:
        """The largest norm of the posterior mean's gradient over the candidates (Gonzalez
        et al. 2016's estimate of the objective's Lipschitz constant, in model units), in
        chunks of about a million kernel terms, so memory stays bounded at large n."""
        ell, amp, _ = gp_unpack(self.model.theta)
        X = self.model.frame(self.model.X[: self.model.n])  # the kernel's frame: norms are the same
        C = self.model.frame(C)
        chunk = max(1, 1_000_000 // max(1, X.size))
        steepest = 1e-7
        for start in range(0, len(C), chunk):
            diff = (C[start : start + chunk, None, :] - X[None, :, :]) / (ell * ell)  # [c, n, D]
            r = np.sqrt(np.maximum((diff * diff * (ell * ell)).sum(2), 0.0))
            g = -(5.0 / 3.0) * amp * (1.0 + SQRT5 * r) * np.exp(-SQRT5 * r)  # dk/dr^2 [c, n]
            grads = np.einsum("cn,cnd->cd", g * alpha[None, :], diff)
            steepest = max(steepest, float(np.sqrt((grads * grads).sum(1)).max()))
        return steepest

    def _constrained(self, C: np.ndarray, scores: np.ndarray | float) -> np.ndarray:
        """``scores`` (log EI) plus the log probability that C's rows are feasible; -inf
        where the server would refuse to launch them (``Feasibility.refused``)."""
        if self.feasibility is None or not self.feasibility.ready():
            return np.broadcast_to(np.asarray(scores, float), (len(C),))
        out = np.asarray(scores, float) + self.feasibility.log_pof(C)
        return np.where(self.feasibility.refused(C), -np.inf, out)

    def _score(self, mu: np.ndarray, var: np.ndarray, best: float) -> np.ndarray:
        if self.acquisition == "ucb":
            return acq.neg_lcb(mu, var, self.ucb_beta)
        return acq.log_ei(mu, var, best)

    def _candidates(self, count: int, y: np.ndarray, feasible: np.ndarray | None = None) -> np.ndarray:
        """Half scrambled Sobol over the space, half Gaussian steps around the best points."""
        m = self.model
        n_global = count // 2
        sobol = qmc.Sobol(len(self.encoder.slots), scramble=True, seed=self.rng)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            G = self.encoder.random(n_global, self.rng, u=sobol.random(n_global))
        order = np.argsort(y[: m.n_real])
        if feasible is not None and feasible.any():
            # Around the best feasible points: where the optimum lies on a constraint's
            # boundary, the best infeasible ones are on the wrong side of it.
            order = order[feasible[order]]
        top = m.X[: m.n_real][order[:5]]
        parents = top[self.rng.integers(0, len(top), count - n_global)]
        sigma = self.rng.choice([0.01, 0.05, 0.15], size=(len(parents), 1))
        local = parents + self.rng.normal(size=parents.shape) * sigma * self.encoder.continuous
        flip = self.rng.random(len(parents)) < 0.2  # sometimes try another category too
        if flip.any() and not self.encoder.continuous.all():
            other = self.encoder.random(int(flip.sum()), self.rng)
            local[flip] = np.where(self.encoder.continuous, local[flip], other)
        return np.vstack([G, self.encoder.project(local)])

    def _polish(self, x0: np.ndarray, alpha: np.ndarray, best: float, balls: _Balls | None = None) -> np.ndarray:
        """L-BFGS-B on the continuous coordinates (categoricals stay as they are)."""
        mask = self.encoder.continuous
        if not mask.any():
            return x0
        constrained = self.feasibility is not None and self.feasibility.ready()

        def negative(u: np.ndarray) -> tuple[float, np.ndarray]:
            x = x0.copy()
            x[mask] = u
            mu, var, dmu, dvar = self.model.predict_grad(x, alpha)
            if self.acquisition == "ucb":
                value, grad = acq.neg_lcb_grad(mu, var, self.ucb_beta, dmu, dvar)
            else:
                value, grad = acq.log_ei_grad(mu, var, best, dmu, dvar)
            if balls:
                pv, pg = balls.log_penalty_grad(x)
                value, grad = value + pv, grad + pg
            if constrained:  # constrained EI: log EI + log P(feasible)
                fv, fg = self.feasibility.log_pof_grad(x)  # type: ignore[union-attr]
                value, grad = value + fv, grad + fg
            return -value, -grad[mask]

        # Each step reads the whole factor (two triangular solves): fewer steps at large n.
        steps = 15 if self.model.n < 2000 else 5
        res = minimize(
            negative,
            x0[mask],
            jac=True,
            method="L-BFGS-B",
            bounds=[(0.0, 1.0)] * int(mask.sum()),
            options={"maxiter": steps},
        )
        x = x0.copy()
        x[mask] = res.x
        return x


@dataclass
class _Balls:
    """Local penalizers around pending points (Gonzalez, Dai, Hennig and Lawrence, "Batch
    Bayesian Optimization via Local Penalization", AISTATS 2016), on top of the kriging
    believer (as in Alvi et al., "Asynchronous Batch Bayesian Optimisation with Improved
    Local Penalisation", ICML 2019). A pending point x_j with posterior N(mu_j, sigma_j^2)
    rules out a ball of radius (mu_j - best) / L around it, L the largest slope of the
    posterior mean: log EI gains sum_j log Phi((L |x - x_j| - mu_j + best) / sigma_j)."""

    centres: np.ndarray  # [p, D]
    mu: np.ndarray  # [p]
    sigma: np.ndarray  # [p]
    best: float
    lipschitz: float = 1.0

    @classmethod
    def empty(cls, dim: int, best: float) -> _Balls:
        return cls(np.zeros((0, dim)), np.zeros(0), np.zeros(0), best)

    def plus(self, X: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> _Balls:
        return _Balls(
            np.vstack([self.centres, X]), np.r_[self.mu, mu], np.r_[self.sigma, sigma], self.best, self.lipschitz
        )

    def __len__(self) -> int:
        return len(self.centres)

    def _u(self, C: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        diff = C[:, None, :] - self.centres[None, :, :]  # [m, p, D]
        dist = np.sqrt((diff**2).sum(2))
        sigma = np.maximum(self.sigma, 1e-6)
        return (self.lipschitz * dist - self.mu + self.best) / sigma, diff, dist

    def log_penalty(self, C: np.ndarray) -> np.ndarray:
        """sum_j log Phi(u_j) at each row of C [m, D]."""
        u, _, _ = self._u(C)
        return np.asarray(log_ndtr(u).sum(1))

    def log_penalty_grad(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        u, diff, dist = self._u(x[None, :])
        u, diff, dist = u[0], diff[0], np.maximum(dist[0], 1e-12)
        ratio = np.exp(norm.logpdf(u) - log_ndtr(u))  # phi / Phi
        du = (self.lipschitz / np.maximum(self.sigma, 1e-6))[:, None] * diff / dist[:, None]
        return float(log_ndtr(u).sum()), (ratio[:, None] * du).sum(0)


class _Refit:
    """One hyper-parameter refit, in a thread (``background``) or at once.

    The thread is not a daemon: a process that ends during a refit waits for it
    (``DENSE_REFITS`` says what one costs). A daemon thread was ended by the exiting
    interpreter with ``pthread_exit`` when it took the GIL back inside numpy's C++ code
    (``np.unique``), and the unwinding aborted the whole process ("terminate called
    without an active exception", exit 134; ``tests/optimizers/test_refit_thread.py``)."""

    def __init__(self, point: int, fit: Callable[[int], object], background: bool):
        self.point = point
        self._value: object = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fit,), name=f"gp-refit-{point}")
        self._thread.start()
        if not background:
            self._thread.join()

    def _run(self, fit: Callable[[int], object]) -> None:
        try:
            self._value = fit(self.point)
        except BaseException as exc:  # handed to the thread that installs it
            self._error = exc

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value
