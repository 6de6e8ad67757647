"""Deterministic K-fold splits over samples, or over groups of samples.

The split depends only on the number of samples, K, the seed, the labels and the
groups, so every rank of every agent, and every attempt of a trial, sees the same folds.

- **Samples** (``folds_by: sample``): a seeded permutation cut in K parts; with labels,
  each class is dealt round-robin over the folds (stratified K-fold).
- **Groups** (``folds_by: group``): samples that share a group (a file, a run, a
  simulation job: correlated samples) always land in the same fold, so none of them is
  trained on while another is validated. Groups are dealt largest first to the fold
  with the fewest samples (GroupKFold); with labels, to the fold whose class
  proportions stay closest to the whole's (StratifiedGroupKFold). Ties go by a seeded
  order of the groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def kfold(n: int, k: int, seed: int = 0, labels: Sequence[int] | np.ndarray | None = None) -> list[np.ndarray]:
    """The validation indices of each of the ``k`` folds (sorted, disjoint, covering 0..n-1).

    With ``labels``, each class is dealt round-robin over the folds after a seeded
    shuffle, so every fold has the class proportions of the whole (stratified K-fold).
    """
    if k < 1:
        raise ValueError(f"folds must be >= 1, got {k}")
    if n < k:
        raise ValueError(f"cannot split {n} samples into {k} folds")
    rng = np.random.default_rng(seed)
    if labels is None:
        parts = np.array_split(rng.permutation(n), k)
        return [np.sort(p) for p in parts]
    y = _per_sample(labels, n, "labels")
    buckets: list[list[int]] = [[] for _ in range(k)]
    offset = 0
    for cls in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == cls))
        for i, idx in enumerate(members):
            buckets[(offset + i) % k].append(int(idx))
        offset += len(members)
    return [np.sort(np.asarray(b, dtype=np.int64)) for b in buckets]


def group_kfold(
    groups: Sequence[Any] | np.ndarray, k: int, seed: int = 0, labels: Sequence[int] | np.ndarray | None = None
) -> list[np.ndarray]:
    """The validation indices of each of the ``k`` folds, every group whole in one fold."""
    if k < 1:
        raise ValueError(f"folds must be >= 1, got {k}")
    g = np.asarray(groups)
    if g.ndim != 1:
        raise ValueError(f"Task.groups() must give one group per sample, got shape {g.shape}")
    names, member = np.unique(g, return_inverse=True)
    if len(names) < k:
        raise ValueError(
            f"folds_by: group needs at least as many groups as folds: {len(names)} group(s) for {k} folds "
            "(use fewer folds, or folds_by: sample)"
        )
    sizes = np.bincount(member, minlength=len(names))
    order = np.random.default_rng(seed).permutation(len(names))  # the seeded tie-break
    fold_of = np.empty(len(names), dtype=np.int64)
    if labels is None:
        # Largest group first, to the fold with the fewest samples so far.
        filled = np.zeros(k, dtype=np.int64)
        for grp in order[np.argsort(-sizes[order], kind="stable")]:
            f = int(np.argmin(filled))
            fold_of[grp] = f
            filled[f] += sizes[grp]
    else:
        y = _per_sample(labels, len(g), "labels")
        classes, label = np.unique(y, return_inverse=True)
        counts = np.zeros((len(names), len(classes)), dtype=np.int64)
        np.add.at(counts, (member, label), 1)
        whole = counts.sum(axis=0)
        # Groups whose class mix is most lopsided go first (they constrain the most).
        spread = np.std(counts / np.maximum(counts.sum(axis=1, keepdims=True), 1), axis=1)
        per_fold = np.zeros((k, len(classes)), dtype=np.int64)
        for grp in order[np.lexsort((-sizes[order], -spread[order]))]:
            best, best_cost = 0, np.inf
            for f in range(k):
                per_fold[f] += counts[grp]
                # How far each class's share over the folds is from even, summed.
                cost = float(np.mean(np.std(per_fold / np.maximum(whole, 1), axis=0)))
                per_fold[f] -= counts[grp]
                if cost < best_cost - 1e-12 or (
                    abs(cost - best_cost) <= 1e-12 and per_fold[f].sum() < per_fold[best].sum()
                ):
                    best, best_cost = f, cost
            fold_of[grp] = best
            per_fold[best] += counts[grp]
    samples = fold_of[member]
    folds = [np.flatnonzero(samples == f) for f in range(k)]
    empty = [f for f, v in enumerate(folds) if not len(v)]
    if empty:
        raise ValueError(f"folds_by: group left fold {empty[0]} without samples ({len(names)} groups for {k} folds)")
    return folds


def train_indices(n: int, validation: np.ndarray) -> np.ndarray:
    """The complement of one fold's validation indices."""
    mask = np.ones(n, dtype=bool)
    mask[validation] = False
    return np.flatnonzero(mask)


def splits(
    n: int,
    k: int,
    seed: int = 0,
    labels: Sequence[int] | np.ndarray | None = None,
    groups: Sequence[Any] | np.ndarray | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, validation) indices per fold, over samples or (with ``groups``) over
    groups. With ``folds: 1`` there is nothing to cross over: the one fold holds out a
    fifth of the samples (of the groups), stratified with labels."""
    if groups is not None:
        g = _per_sample(groups, n, "groups")
        parts = group_kfold(g, 5 if k == 1 else k, seed, labels)
    else:
        parts = kfold(n, 5 if k == 1 else k, seed, labels)
    if k == 1:
        parts = parts[:1]
    return [(train_indices(n, v), v) for v in parts]


def _per_sample(values: Sequence[Any] | np.ndarray, n: int, what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.shape != (n,):
        raise ValueError(f"Task.{what}() must give one entry per sample ({n}), got shape {arr.shape}")
    return arr


def encode(parts: list[tuple[np.ndarray, np.ndarray]], n: int) -> np.ndarray:
    """The validation fold of each sample (-1: in no fold's validation), the compact form
    one rank computes and broadcasts."""
    fold_of = np.full(n, -1, dtype=np.int16)
    for f, (_, validation) in enumerate(parts):
        fold_of[validation] = f
    return fold_of


def decode(fold_of: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (train, validation) indices of each of ``k`` folds from :func:`encode`."""
    out = []
    for f in range(k):
        validation = np.flatnonzero(fold_of == f)
        out.append((train_indices(len(fold_of), validation), validation))
    return out
