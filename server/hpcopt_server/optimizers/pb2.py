"""PB2's explore step (Parker-Holder et al. 2020, "Provably Efficient Online
Hyperparameter Optimization with Population-Based Bandits", arXiv:2002.02518), for
``algorithm: pbt`` with ``explore: pb2``.

Instead of perturbing the copied hyper-parameters at random, PB2 models how much an
interval improves the objective as a function of its hyper-parameters and of when it
ran, and picks the next ones by an upper confidence bound:

- every COMPLETED interval that started from a completed parent is a data point:
  ``x`` = its ``mutable`` parameters in the unit cube and its start epoch over
  ``training.epochs``; ``y`` = how much better it ended than its parent (the
  improvement, in the loss the campaign minimizes), standardized;
- a Gaussian process (Matern-5/2, ARD, the hyper-parameters fitted by maximum a
  posteriori: ``gp.fit_hyperparameters``) on those points; the time input lets the
  best setting change over the run (PB2 uses a time-varying kernel; an input dimension
  for time is the simpler form of the same idea);
- among 256 scrambled Sobol candidates in the mutable sub-space (and the copied
  setting itself), at the current epoch, the one of largest ``mean + kappa * sd``
  (``kappa`` 2, about a 97.7% bound) is taken; the other parameters come with the
  weights, as in ``perturb``.

With fewer than 4 data points the step falls back to ``perturb``. Categorical
parameters are kept from the parent (PB2 is defined on continuous ones).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from hpcopt_server import domain as d
from hpcopt_server.optimizers.bo import sobol_point
from hpcopt_server.optimizers.gp import fit_hyperparameters, matern52, unpack
from hpcopt_server.optimizers.space import Dimension

MIN_POINTS = 4
CANDIDATES = 256
KAPPA = 2.0


def unit(dim: Dimension, value: d.ParamValue) -> float:
    x, lo, hi = float(value), dim.low, dim.high
    if dim.log:
        x, lo, hi = math.log(x), math.log(lo), math.log(hi)
    return min(max((x - lo) / (hi - lo) if hi > lo else 0.5, 0.0), 1.0)


def choose(
    dims: Sequence[Dimension],
    data: Sequence[tuple[d.Params, float, float]],
    donor: d.Params,
    at: float,
    seed: int,
    draw: int,
) -> d.Params | None:
    """The mutable numeric parameters (``dims``) PB2 picks for an interval starting at
    ``at`` (a fraction of the run), from ``data``: (params, start fraction, improvement)
    of earlier intervals; None when there is too little data."""
    rows = [(p, t, y) for p, t, y in data if all(dim.name in p for dim in dims) and math.isfinite(y)]
    if len(rows) < MIN_POINTS or not dims:
        return None
    X = np.array([[unit(dim, p[dim.name]) for dim in dims] + [t] for p, t, _ in rows])
    y = np.array([v for _, _, v in rows])
    y = (y - y.mean()) / (y.std() or 1.0)
    rng = np.random.default_rng([seed, draw, 3])
    theta = fit_hyperparameters(X, y, np.zeros(len(y)), rng)
    ell, amp, noise = unpack(theta)
    K = matern52(X, X, ell, amp) + np.eye(len(y)) * (noise + 1e-9)
    L = np.linalg.cholesky(K)
    mean0 = float(y.mean())
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, y - mean0))
    cands = np.array([sobol_point(len(dims), seed + draw, k) for k in range(CANDIDATES)])
    here = np.array([[unit(dim, donor[dim.name]) for dim in dims]])
    cands = np.vstack([here, cands])
    Xc = np.hstack([cands, np.full((len(cands), 1), at)])
    Ks = matern52(Xc, X, ell, amp)
    mu = mean0 + Ks @ alpha
    v = np.linalg.solve(L, Ks.T)
    sd = np.sqrt(np.maximum(amp - (v * v).sum(0), 1e-12))
    best = cands[int(np.argmax(mu + KAPPA * sd))]
    return {dim.name: dim.decode(float(u)) for dim, u in zip(dims, best, strict=True)}
