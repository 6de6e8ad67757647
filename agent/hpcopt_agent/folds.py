"""Deterministic K-fold splits over sample indices (stratified on request).

The split depends only on the number of samples, K, the seed and the labels, so every
rank of every agent, and every attempt of a trial, sees the same folds.
"""

from __future__ import annotations

from collections.abc import Sequence

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
    y = np.asarray(labels)
    if y.shape != (n,):
        raise ValueError(f"labels must have one entry per sample ({n}), got shape {y.shape}")
    buckets: list[list[int]] = [[] for _ in range(k)]
    offset = 0
    for cls in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == cls))
        for i, idx in enumerate(members):
            buckets[(offset + i) % k].append(int(idx))
        offset += len(members)
    return [np.sort(np.asarray(b, dtype=np.int64)) for b in buckets]


def train_indices(n: int, validation: np.ndarray) -> np.ndarray:
    """The complement of one fold's validation indices."""
    mask = np.ones(n, dtype=bool)
    mask[validation] = False
    return np.flatnonzero(mask)


def splits(
    n: int, k: int, seed: int = 0, labels: Sequence[int] | np.ndarray | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, validation) indices per fold. With ``folds: 1`` there is nothing to cross
    over: the one fold holds out a fifth of the samples (stratified with labels)."""
    if k == 1:
        validation = kfold(n, 5, seed, labels)[0]
        return [(train_indices(n, validation), validation)]
    return [(train_indices(n, v), v) for v in kfold(n, k, seed, labels)]
