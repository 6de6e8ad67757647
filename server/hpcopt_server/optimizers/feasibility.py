"""What the search knows about a campaign's constraints: a Gaussian process per
constraint over the encoded parameters, and from them each configuration's probability
of feasibility.

This is the constraint model of Gardner, Kusner, Xu, Weinberger and Cunningham,
"Bayesian Optimization with Inequality Constraints" (ICML 2014): each constraint value
c_k(x) (<= 0 holds; ``hpcopt.core.constraints``) has its own GP, independent of the
objective's and of each other, and a configuration is feasible with probability
PoF(x) = prod_k Phi(-mu_k(x) / sigma_k(x)). ``bo`` multiplies its expected improvement
over the best *feasible* trial by PoF (adds log PoF to log EI); until a trial is
feasible it maximizes PoF alone (Gelbart, Snoek and Adams, "Bayesian Optimization with
Unknown Constraints", UAI 2014, section 3: with no feasible incumbent the improvement is
undefined, and the first aim is to find a feasible point). The other algorithms screen
their suggestions with it (``screen``), and the server refuses to launch a trial whose
resource constraints it predicts broken with confidence (:meth:`Feasibility.refuse`,
called by ``OptimizerCache`` in ``service/suggestions.py``). ``bo``'s polish climbs log
EI + log PoF with PoF's gradient (:meth:`Feasibility.log_pof_grad`).

What each GP is fitted to, per constraint k:

- a COMPLETED trial's value c_k, divided by the bound's magnitude (so 0.1 means "10 %
  over the limit", whatever the unit);
- a trial that FAILED because it exhausted resource k: +0.1, 10 % over the bound
  (``constraints.EXHAUSTED``). The failure says it did not fit, not by how much;
- a configuration refused before launch (:meth:`Feasibility.refuse`): the value the
  model predicted, so that the search moves away from it;
- nothing for a constraint a trial did not measure.

The outputs are centred and scaled by their spread, but by no less than
:data:`MIN_SCALE` (half the bound), and the hyper-parameters (the objective GP's Matern 5/2
kernel, priors and fit, ``gp.fit_hyperparameters``) are refitted at every new
observation of that constraint while there are fewer than :data:`REFIT_BELOW`, then at
every 10 %, on the latest :data:`FIT_POINTS` (each step of the fit is O(n^3)); the
factor holds at most :data:`MAX_POINTS` (the most recent).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.linalg import solve_triangular
from scipy.special import log_ndtr
from scipy.stats import norm

from hpcopt.core import constraints
from hpcopt_server import domain as d
from hpcopt_server.optimizers.encoding import Encoder
from hpcopt_server.optimizers.gp import fit_hyperparameters, matern52, matern52_grad_x, unpack

#: Below this many observations of a constraint its GP is refitted at every new one.
REFIT_BELOW = 100
#: The most observations one constraint's GP factors (the latest).
MAX_POINTS = 600
#: The most (latest) observations its hyper-parameters are fitted to.
FIT_POINTS = 100
#: The smallest output scale of a constraint's GP, in units of its bound.
MIN_SCALE = 0.5
#: A screened suggestion (``screen``) is kept once its probability of feasibility is at
#: least this.
SCREEN_AT = 0.5
#: Hard limits before launch (:meth:`Feasibility.refuse`): a configuration is not started
#: when the probability that a resource constraint holds is below this ...
HARD_BELOW = 0.05
#: ... by a model of at least this many measurements (or exhausted trials) of it.
HARD_AFTER = 3


class _ConstraintGP:
    """One constraint's GP: (x, c / scale) pairs, refitted as they come."""

    def __init__(self, dim: int, seed: int, index: int):
        self.dim = dim
        self.seed, self.index = seed, index
        self.X: list[np.ndarray] = []
        self.y: list[float] = []
        self._fitted_at = 0
        self._theta: np.ndarray | None = None
        self._L: np.ndarray | None = None
        self._alpha = np.zeros(0)
        self._Xf = np.zeros((0, dim))
        self._shift, self._scale = 0.0, 1.0

    def add(self, x: np.ndarray, value: float) -> None:
        self.X.append(x)
        self.y.append(value)

    def _refit(self) -> None:
        n = len(self.y)
        due = n < REFIT_BELOW or n >= math.ceil(self._fitted_at * 1.1)
        X = np.array(self.X[-MAX_POINTS:]).reshape(-1, self.dim)
        y = np.array(self.y[-MAX_POINTS:])
        self._shift = float(np.mean(y))
        # At least half the bound: a few alike observations (a run of failures, each
        # EXHAUSTED) say little about the rest of the space, and a scale fitted to their
        # spread alone made the model certain of it everywhere.
        self._scale = max(float(np.std(y)), MIN_SCALE)
        z = (y - self._shift) / self._scale
        if due or self._theta is None:
            rng = np.random.default_rng([self.seed, 7, self.index, n])
            fit = slice(-FIT_POINTS, None)
            self._theta = fit_hyperparameters(X[fit], z[fit], np.zeros(len(z[fit])), rng, warm_start=self._theta)
            self._fitted_at = n
        ell, amp, noise = unpack(self._theta)
        K = matern52(X, X, ell, amp) + (noise + 1e-9) * np.eye(len(X))
        self._L = np.linalg.cholesky(K)
        self._alpha = np.linalg.solve(self._L.T, np.linalg.solve(self._L, z))
        self._Xf = X

    def ready(self) -> bool:
        return len(self.y) >= 2

    def log_pof_grad(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """log P(c(x) <= 0) at one encoded point and its gradient [D] (bo's polish)."""
        if self._L is None:
            self._refit()
        assert self._theta is not None and self._L is not None
        ell, amp, _ = unpack(self._theta)
        k = matern52(x[None, :], self._Xf, ell, amp)[0]
        dk = matern52_grad_x(x, self._Xf, ell, amp)  # [n, D]
        v = solve_triangular(self._L, k, lower=True)
        var = max(amp - float(v @ v), 1e-12)
        w = solve_triangular(self._L.T, v, lower=False)  # K^-1 k
        mu = self._shift + self._scale * float(k @ self._alpha)
        sigma = self._scale * math.sqrt(var)
        dmu = self._scale * (dk.T @ self._alpha)
        dsigma = self._scale * (-2.0 * (dk.T @ w)) / (2.0 * math.sqrt(var))
        z = -mu / sigma
        value = float(log_ndtr(z))
        ratio = math.exp(float(norm.logpdf(z)) - value)  # phi(z) / Phi(z)
        dz = -(dmu * sigma - mu * dsigma) / (sigma * sigma)
        return value, ratio * dz

    def predict(self, Xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of c / scale at the rows of Xs."""
        if self._L is None:
            self._refit()
        assert self._theta is not None and self._L is not None
        ell, amp, _ = unpack(self._theta)
        Ks = matern52(Xs, self._Xf, ell, amp)
        mu = Ks @ self._alpha
        v = np.linalg.solve(self._L, Ks.T)
        var = np.maximum(amp - (v * v).sum(0), 1e-12)
        return self._shift + self._scale * mu, self._scale * np.sqrt(var)


class Feasibility:
    """The campaign's constraint models; ``None`` of it exists without constraints."""

    def __init__(self, encoder: Encoder, constraints: Sequence[Mapping[str, Any]], seed: int):
        self.encoder = encoder
        self.constraints = [dict(c) for c in constraints]
        self.models = [_ConstraintGP(encoder.dim, seed, k) for k in range(len(self.constraints))]

    def observe(self, trials: Sequence[d.Trial]) -> None:
        """Takes finished trials: each measured constraint value (and each exhausted
        resource) becomes an observation of that constraint's GP."""
        for t in trials:
            values = t.constraint_values
            if values is None or len(values) != len(self.constraints):
                continue
            x = self.encoder.encode(t.params)
            for k, (c, value) in enumerate(zip(self.constraints, values, strict=True)):
                if value is None:
                    continue
                # An exhausted trial's value is EXHAUSTED of its bound; one not started,
                # the value predicted when it was refused (``refuse``).
                self.models[k].add(x, float(value) / constraints.scale(c))
            for m in self.models:
                m._L = None  # refitted (or refactored) at the next prediction

    def ready(self) -> bool:
        """Whether any constraint has a model yet (two observations)."""
        return any(m.ready() for m in self.models)

    def log_pof(self, X: np.ndarray, only: Sequence[int] | None = None) -> np.ndarray:
        """log P(every constraint holds) at the encoded rows of X (constraints without a
        model count as holding); ``only``: of these constraints' indices."""
        out = np.zeros(len(X))
        for k, m in enumerate(self.models):
            if (only is not None and k not in only) or not m.ready():
                continue
            mu, sigma = m.predict(X)
            out += log_ndtr(-mu / sigma)
        return out

    def log_pof_grad(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """:meth:`log_pof` at one encoded point, and its gradient (bo's polish)."""
        value, grad = 0.0, np.zeros(len(x))
        for m in self.models:
            if m.ready():
                v, g = m.log_pof_grad(x)
                value, grad = value + v, grad + g
        return value, grad

    def predict(self, params: d.Params, k: int) -> tuple[float, float] | None:
        """Constraint ``k``'s predicted metric at ``params`` in its own unit (mean, sd),
        None without a model: the value ``c`` is metric - max (or min - metric)."""
        m = self.models[k]
        if not m.ready():
            return None
        mu, sigma = m.predict(self.encoder.encode(params)[None, :])
        c = self.constraints[k]
        scale = constraints.scale(c)
        side, limit = constraints.bound(c)
        shift = scale * float(mu[0])
        return (limit + shift if side == "max" else limit - shift), scale * float(sigma[0])

    def pof(self, params: d.Params) -> float:
        return float(np.exp(self.log_pof(self.encoder.encode(params)[None, :])[0]))

    def _hard(self) -> list[int]:
        """The constraints whose models may refuse a launch: the resources
        (``hpcopt.core.constraints.RESOURCES``) measured at least :data:`HARD_AFTER`
        times, within and beyond their bound both (a model that has seen one side only
        knows nothing of where the boundary lies)."""
        out = []
        for k, (c, m) in enumerate(zip(self.constraints, self.models, strict=True)):
            if c["metric"] in constraints.RESOURCES and len(m.y) >= HARD_AFTER and min(m.y) <= 0 < max(m.y):
                out.append(k)
        return out

    def refused(self, X: np.ndarray) -> np.ndarray:
        """Which encoded rows of X :meth:`refuse` would not start (bo scores them out)."""
        out = np.zeros(len(X), bool)
        for k in self._hard():
            mu, sigma = self.models[k].predict(X)
            out |= log_ndtr(-mu / sigma) < math.log(HARD_BELOW)
        return out

    def refuse(self, params: d.Params) -> constraints.Outcome | None:
        """The outcome of not starting ``params``: None when it may start; otherwise each
        resource constraint its model (:meth:`_hard`) predicts broken with probability
        above 1 - :data:`HARD_BELOW`, at its predicted value, and why."""
        x = self.encoder.encode(params)[None, :]
        values: list[float | None] = [None] * len(self.constraints)
        why = []
        for k in self._hard():
            c, m = self.constraints[k], self.models[k]
            mu, sigma = m.predict(x)
            if float(log_ndtr(-mu[0] / sigma[0])) >= math.log(HARD_BELOW):
                continue
            scale = constraints.scale(c)
            value = values[k] = float(mu[0]) * scale
            side, limit = constraints.bound(c)
            shown = limit + value if side == "max" else limit - value
            why.append(
                f"{c['metric']} predicted {shown:.6g} (± {float(sigma[0]) * scale:.2g}) "
                f"{'>' if side == 'max' else '<'} {limit:.6g}, from {len(m.y)} measured"
            )
        if not why:
            return None
        violation = sum(v / constraints.scale(c) for c, v in zip(self.constraints, values, strict=True) if v)
        return constraints.Outcome(tuple(values), violation, "not started: " + "; ".join(why))


def screen(made: list[d.Params], feasibility: Feasibility | None, again: Any, tries: int = 16) -> list[d.Params]:
    """``made`` with each suggestion whose probability of feasibility is below
    :data:`SCREEN_AT` replaced by the best of up to ``tries`` more (``again(k)`` makes
    one more, k counting those made so far): how the algorithms without a model of their
    own (random, ea, skopt) skip what the constraint models deem infeasible."""
    if feasibility is None or not feasibility.ready():
        return made
    out = []
    extra = 0
    for params in made:
        best, best_p = params, feasibility.pof(params)
        for _ in range(tries):
            if best_p >= SCREEN_AT:
                break
            other = again(extra)
            extra += 1
            p = feasibility.pof(other)
            if p > best_p:
                best, best_p = other, p
        out.append(best)
    return out
