"""Pareto numerics for multi-objective campaigns: dominance, the non-dominated front,
NSGA-II's order (fronts, then crowding distance) and the hypervolume.

Every function takes losses ``L`` [n, m]: each objective as a value to minimize (a
maximized objective negated, ``losses``). Point a dominates b when a <= b in every
objective and a < b in one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def losses(values: Sequence[Sequence[float]], directions: Sequence[str]) -> np.ndarray:
    """Objective values [n, m] as losses (maximized columns negated)."""
    sign = np.array([1.0 if d == "minimize" else -1.0 for d in directions])
    return np.asarray(values, dtype=float).reshape(-1, len(directions)) * sign


def nondominated(L: np.ndarray) -> np.ndarray:
    """A mask [n] of the points no other point dominates (of exact duplicates, the first
    only). O(n log n) for two objectives; for more, O(n m) pivots and then O(k f) for
    the k points they leave (f: the front's size)."""
    n, m = L.shape
    mask = np.zeros(n, bool)
    if n == 0:
        return mask
    order = np.lexsort(L.T[::-1])  # by the first objective, ties by the next ...
    S = L[order]
    if m == 1:
        mask[order[0]] = True
        return mask
    if m == 2:
        # Sorted by f1, a point is on the front when its f2 beats every earlier f2.
        earlier = np.r_[np.inf, np.minimum.accumulate(S[:-1, 1])]
        mask[order[S[:, 1] < earlier]] = True
        return mask
    # A point minimizing a positively weighted sum is on the front: a few such pivots
    # (each objective weighted up in turn, then all alike) remove most dominated points
    # at O(n m) each; what is left is filtered one by one.
    scale = np.ptp(S, axis=0)
    Z = (S - S.min(axis=0)) / np.where(scale > 0, scale, 1.0)
    alive = np.ones(n, bool)
    for w in [*(1.0 + 9.0 * np.eye(m)), np.ones(m)]:
        p = S[int(np.argmin(np.where(alive, Z @ w, np.inf)))]
        alive &= ~(np.all(p <= S, axis=1) & np.any(p < S, axis=1))
    # In lexicographic order no point is dominated by a later one, so a point is on the
    # front when no earlier point is <= it everywhere (an earlier exact duplicate counts):
    # chunks against the front so far, then within the chunk, vectorized.
    rest = np.flatnonzero(alive)
    F = np.zeros((0, m))
    on: list[np.ndarray] = []
    for start in range(0, len(rest), 128):
        idx = rest[start : start + 128]
        C = S[idx]
        ok = ~np.all(F[None, :, :] <= C[:, None, :], axis=2).any(axis=1) if len(F) else np.ones(len(C), bool)
        earlier = np.tri(len(C), k=-1, dtype=bool) & ok[None, :]
        ok &= ~(np.all(C[None, :, :] <= C[:, None, :], axis=2) & earlier).any(axis=1)
        F = np.vstack([F, C[ok]])
        on.append(idx[ok])
    mask[order[np.concatenate(on)]] = True
    return mask


def crowding(L: np.ndarray) -> np.ndarray:
    """NSGA-II's crowding distance [n] within one front: the boundary points infinite."""
    n, m = L.shape
    out = np.zeros(n)
    if n <= 2:
        return np.full(n, np.inf)
    for j in range(m):
        order = np.argsort(L[:, j], kind="stable")
        span = L[order[-1], j] - L[order[0], j]
        out[order[0]] = out[order[-1]] = np.inf
        if span > 0:
            out[order[1:-1]] += (L[order[2:], j] - L[order[:-2], j]) / span
    return out


def nsga_fronts(L: np.ndarray, count: int | None = None) -> list[np.ndarray]:
    """NSGA-II's fronts (indices), the most isolated (crowding) first within each; only
    as many fronts as the first ``count`` points need."""
    n = len(L)
    count = n if count is None else min(count, n)
    left = np.arange(n)
    out: list[np.ndarray] = []
    taken = 0
    while taken < count and len(left):
        mask = nondominated(L[left])
        # Exact duplicates of a front point are not on it (nondominated keeps the first):
        # they join the next front.
        front = left[mask]
        dist = crowding(L[front])
        out.append(front[np.lexsort((front, -dist))])
        taken += len(front)
        left = left[~mask]
    return out


def nsga_order(L: np.ndarray, count: int | None = None) -> np.ndarray:
    """Indices in NSGA-II's order: front by front, the most isolated first within a
    front (``nsga_fronts``), cut at ``count``."""
    fronts = nsga_fronts(L, count)
    return np.concatenate(fronts)[:count] if fronts else np.zeros(0, int)


def hypervolume(L: np.ndarray, ref: Sequence[float] | np.ndarray) -> float:
    """The volume dominated by the points of L and bounded by ``ref`` (points not better
    than ``ref`` in every objective count nothing). Exact: a sweep for two objectives,
    slicing along the first for more (fine for fronts of hundreds of points)."""
    r = np.asarray(ref, dtype=float)
    L = L[np.all(r > L, axis=1)]
    if len(L) == 0:
        return 0.0
    L = L[nondominated(L)]
    if L.shape[1] == 1:
        return float(r[0] - L[:, 0].min())
    if L.shape[1] == 2:
        S = L[np.argsort(L[:, 0])]
        xs = np.r_[S[1:, 0], r[0]]
        return float(((xs - S[:, 0]) * (r[1] - S[:, 1])).sum())
    S = L[np.argsort(L[:, 0])]
    total = 0.0
    for i in range(len(S)):
        upper = S[i + 1, 0] if i + 1 < len(S) else r[0]
        if upper > S[i, 0]:
            total += (upper - S[i, 0]) * hypervolume(S[: i + 1, 1:], r[1:])
    return total


def chebyshev(L: np.ndarray, weights: np.ndarray, rho: float = 0.05) -> np.ndarray:
    """ParEGO's augmented Chebyshev scalarization (Knowles 2006) [n]: each objective
    scaled to [0, 1] by the observed range, then max_j w_j f_j + rho sum_j w_j f_j.
    Rows with a NaN (failed trials) stay NaN."""
    ok = np.all(np.isfinite(L), axis=1)
    if not ok.any():
        return np.full(len(L), np.nan)
    lo, hi = L[ok].min(0), L[ok].max(0)
    F = (L - lo) / np.where(hi > lo, hi - lo, 1.0)
    out = (F * weights).max(1) + rho * (F * weights).sum(1)
    return np.where(ok, out, np.nan)


def simplex_weights(m: int, rng: np.random.Generator) -> np.ndarray:
    """A weight vector drawn uniformly from the simplex (m objectives)."""
    return rng.dirichlet(np.ones(m))
