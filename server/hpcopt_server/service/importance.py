"""Hyper-parameter importance over a campaign's completed trials, for every algorithm,
by one of two methods (``METHODS``).

``first-order`` (the default) is the first-order (main-effect) share of a functional ANOVA, estimated by
binning rather than by fANOVA's random forest: for each parameter, the trials are put
in bins of that parameter (its choices, or up to 10 quantile bins of its value, on the
log scale for a log parameter), and its importance is the share of the variance of the
objective's *rank* that the bin means explain, corrected for the share that bins
explain by chance (epsilon squared: ``(SS_between - (B - 1) MS_within) / SS_total``,
floored at 0). Ranks make one outlier unable to decide the answer. Shares are then
normalized to sum to 1 over the parameters (``raw`` keeps them unnormalized: a low sum
says interactions or noise dominate). A conditional parameter is judged on the trials
where it is active, as a share of the variance over all trials: the variance its bins
explain among those trials, weighted by how many they are. (As a share of their own
variance, momentum that is active for one optimizer of three would weigh as much as a
parameter with the same effect on every trial.) O(n log n) per parameter.

``permutation`` is permutation importance (Breiman 2001; Fisher, Rudin and Dominici's
"model reliance", 2019) on a surrogate: a k-nearest-neighbour regression of the
objective's rank on the parameters (numbers scaled to [0, 1] over their range, on the log
scale for a log parameter; a choice one-hot, two choices 1 apart; ``NEIGHBOURS``
neighbours), judged leave-one-out. A parameter's importance is how much the
surrogate's mean squared error grows when that parameter's column is shuffled, as a
share of the rank variance (the mean of ``PERMUTATION_REPEATS`` shuffles, floored at 0).
An inactive conditional parameter takes the value of a trial where it is active, drawn
at random (seeded): its column then says nothing about *whether* it is active, which is
its parents' effect. With a value of its own for "inactive" (before 2026-11-29) the
column of sgd's ``momentum`` carried the optimizer's whole effect (inactive for every
other optimizer, and farther from the active values than two choices are from each
other): shuffling it ranked momentum first at 42-45% and the optimizer at 2%, where the
first-order shares give 2% and 38-42% (``tests/server/test_importance_truth.py``).
Unlike first-order shares it counts what a parameter does through interactions too, so
a parameter that matters only together with another shows up here and not there. At
most ``SURROGATE_TRIALS`` trials, and fewer where trials² x parameters x repeats would
pass ``PERMUTATION_BUDGET`` (an even random sample; each parameter's ``trials`` says how
many were judged); the shuffles are seeded by the campaign id, so the same trials give
the same answer. O(n²) per parameter, a few n x n matrices of memory at a time.

The server runs :func:`compute` in a child process with a memory and a time limit
(``worker.py``), holding one of its few slots for costly reads (``heavy.py``): past
them a request waits briefly, then gets 429 with Retry-After. This module itself
imports only numpy; the forkserver that the children are forked from loads it (and its
package) once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

MIN_TRIALS = 10
MAX_BINS = 10
#: Each method's name and what its numbers are (the REST answer's ``description``).
METHODS = {
    "first-order": "first-order variance share of the objective's rank (binned, chance-corrected epsilon squared)",
    "permutation": "permutation importance on a leave-one-out k-nearest-neighbour surrogate of the objective's rank "
    "(the growth of its squared error when the parameter is shuffled, as a share of the rank variance)",
}
SURROGATE_TRIALS = 2000
PERMUTATION_REPEATS = 3
#: The surrogate's k. A mean over many neighbours smooths a continuous parameter's effect
#: and not a choice's (the neighbours of a trial all share its choices), so a larger k
#: ranks choices too high. On lr (log, 0.8 u^2) + optimizer (0.3 / 0 / 0.1) + noise, the
#: ratio of lr's share to the optimizer's is 3.0 with the true function; with k =
#: sqrt(n) it was 0.8-1.2 at 300 trials (the optimizer first in 4 of 6 seeds) and 1.7-2.2
#: at 2,000; with k = 5, 1.4-2.5 and 2.4-3.1 (noise sd 0.15, seeds 0-5).
NEIGHBOURS = 5
#: Trials² x parameters x repeats one permutation answer may cost: 100 parameters judge
#: at most 1,000 trials (2,000 took 404 s and 3.4 GB with every parameter's n x n matrix
#: kept; see ``surrogate_size``).
PERMUTATION_BUDGET = 3e8


@dataclass(frozen=True)
class Importance:
    name: str
    #: Share of the explained rank variance (the shares sum to 1 when any is positive).
    importance: float
    #: Epsilon squared before normalizing.
    raw: float
    #: Trials it was judged on.
    trials: int


def compute(
    space: dict[str, Any], params: list[dict[str, Any]], values: list[float], method: str, seed: int
) -> tuple[list[Importance], int]:
    """Importances of the space's parameters over completed trials (``params[i]`` gave
    ``values[i]``, lower better), by ``method``, most important first; none below
    MIN_TRIALS trials. Pure: the server runs it in a child process (``worker.py``)."""
    if len(params) < MIN_TRIALS:
        return [], len(params)
    v = np.asarray(values, dtype=float)
    if method == "permutation":
        raw, judged = _permutation(space, params, _ranks(v), seed)
        return _shares([Importance(name, 0.0, raw[name], judged) for name in space]), len(params)
    ranks = _ranks(v)
    total = float(((ranks - ranks.mean()) ** 2).sum())
    out = []
    for name, spec in space.items():
        present = [i for i, p in enumerate(params) if p.get(name) is not None]
        if len(present) < MIN_TRIALS:
            out.append(Importance(name, 0.0, 0.0, len(present)))
            continue
        bins = _bins([params[i][name] for i in present], spec)
        out.append(Importance(name, 0.0, _epsilon_squared(ranks[present], bins, total), len(present)))
    return _shares(out), len(params)


def _shares(out: list[Importance]) -> list[Importance]:
    """Normalized to sum to 1 (when any is positive), most important first."""
    total = sum(x.raw for x in out)
    shares = [Importance(x.name, x.raw / total if total > 0 else 0.0, x.raw, x.trials) for x in out]
    shares.sort(key=lambda x: (-x.importance, x.name))
    return shares


def _columns(spec: dict[str, Any], raw: list[Any], rng: np.random.Generator) -> np.ndarray:
    """One parameter's encoding for the surrogate: (n, 1) in [0, 1] for a number, (n,
    choices) one-hot over 1/sqrt(2) for a choice. Where it is inactive (None) it takes the
    value of a random trial where it is active (see the module's docstring)."""
    active = np.flatnonzero([v is not None for v in raw])
    if len(active) == 0:
        return np.zeros((len(raw), 1))
    donors = active[rng.integers(0, len(active), len(raw))]
    filled = [v if v is not None else raw[int(j)] for v, j in zip(raw, donors, strict=True)]
    choices = spec.get("choices")
    if choices is not None:
        labels = [str(c) for c in choices]
        index = [labels.index(str(v)) if str(v) in labels else len(labels) for v in filled]
        hot = np.zeros((len(raw), len(labels) + 1))  # the last: a value outside the choices
        hot[np.arange(len(raw)), index] = math.sqrt(0.5)
        return hot
    x = np.array([float(v) for v in filled])
    log = spec.get("scale") == "log"
    if log:
        x = np.log10(np.maximum(x, 1e-300))
    lo, hi = spec.get("low"), spec.get("high")
    if lo is None or hi is None or (log and (lo <= 0 or hi <= 0)):
        lo, hi = float(x.min()), float(x.max())
    elif log:
        lo, hi = math.log10(lo), math.log10(hi)
    out: np.ndarray = ((x - lo) / (hi - lo) if hi > lo else np.zeros(len(raw)))[:, None]
    return out


def surrogate_size(n: int, params: int) -> int:
    """How many trials the permutation surrogate judges: all ``n`` up to
    SURROGATE_TRIALS, fewer where trials² x parameters x repeats would pass
    PERMUTATION_BUDGET (each shuffle costs an n x n distance matrix and its partition)."""
    fits = math.isqrt(int(PERMUTATION_BUDGET // max(1, params * PERMUTATION_REPEATS)))
    return max(MIN_TRIALS, min(n, SURROGATE_TRIALS, fits))


def _permutation(
    space: dict[str, Any], params: list[dict[str, Any]], ranks: np.ndarray, seed: int
) -> tuple[dict[str, float], int]:
    """Each parameter's permutation importance on a leave-one-out k-NN surrogate of the
    ranks, as a share of their variance (see the module's docstring), and how many trials
    it judged (:func:`surrogate_size`). Memory: a few n x n matrices at a time (the whole
    distance, one parameter's share, one shuffle), whatever the number of parameters."""
    rng = np.random.default_rng(seed)
    n = surrogate_size(len(params), len(space))
    if n < len(params):
        keep = np.sort(rng.choice(len(params), n, replace=False))
        params, ranks = [params[i] for i in keep], _ranks(ranks[keep])
    y = ranks / max(1.0, float(n - 1))
    variance = float(y.var())
    if variance <= 0:
        return dict.fromkeys(space, 0.0), n
    cols = {name: _columns(spec, [p.get(name) for p in params], rng) for name, spec in space.items()}
    k = NEIGHBOURS

    def squared(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # |a_i - b_j|^2, in n x n memory
        d2 = (a * a).sum(axis=1)[:, None] + (b * b).sum(axis=1)[None, :] - 2.0 * (a @ b.T)
        clipped: np.ndarray = np.maximum(d2, 0.0)
        return clipped

    whole = np.zeros((n, n))
    for c in cols.values():
        whole += squared(c, c)

    def error(d2: np.ndarray) -> float:
        np.fill_diagonal(d2, np.inf)  # leave one out: a trial is never its own neighbour
        near = np.argpartition(d2, k - 1, axis=1)[:, :k]
        return float(((y[near].mean(axis=1) - y) ** 2).mean())

    base = error(whole.copy())
    np.fill_diagonal(whole, 0.0)
    out = {}
    for name, c in cols.items():
        without = whole - squared(c, c)
        grown = []
        for _ in range(PERMUTATION_REPEATS):
            shuffled = c[rng.permutation(n)]
            d2 = squared(shuffled, c)
            d2 += without
            grown.append(error(d2))
        out[name] = max(0.0, (float(np.mean(grown)) - base) / variance)
    return out, n


def _ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(len(v), dtype=float)
    return ranks


def _bins(raw: list[Any], spec: dict[str, Any]) -> np.ndarray:
    """A bin index per trial: the choice, or a quantile bin of the (log) value."""
    choices = spec.get("choices")
    if choices is not None:
        labels = [str(c) for c in choices]
        return np.array([labels.index(str(v)) if str(v) in labels else len(labels) for v in raw])
    x = np.array([float(v) for v in raw])
    if spec.get("scale") == "log":
        x = np.log10(np.maximum(x, 1e-300))
    k = max(2, min(MAX_BINS, len(x) // 5))
    edges = np.unique(np.quantile(x, np.linspace(0, 1, k + 1)[1:-1]))
    return np.searchsorted(edges, x, side="right")


def _epsilon_squared(y: np.ndarray, bins: np.ndarray, total_all: float) -> float:
    """Epsilon squared of the bins among these trials' ranks ``y``, as a share of
    ``total_all``, the sum of squares over every trial (``y``'s own where all are active)."""
    n = len(y)
    total = float(((y - y.mean()) ** 2).sum())
    labels, inverse, counts = np.unique(bins, return_inverse=True, return_counts=True)
    b = len(labels)
    if total <= 0 or total_all <= 0 or b < 2 or n <= b:
        return 0.0
    means = np.bincount(inverse, weights=y) / counts
    between = float((counts * (means - y.mean()) ** 2).sum())
    within = (total - between) / (n - b)
    eps = (between - (b - 1) * within) / total_all
    return max(0.0, eps) if math.isfinite(eps) else 0.0
