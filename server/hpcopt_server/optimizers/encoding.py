"""The unit-cube encoding the GP works in: one coordinate per real or int parameter (on
a log axis for ``scale: log``), one-hot coordinates per categorical.

An int v in [low, high] owns the bin [v - 1/2, v + 1/2] of the (log-)interval
[low - 1/2, high + 1/2]; ``project`` moves any point to the centre of its bin and to an
exact one-hot vector, so the GP is always asked about points that can be evaluated.

Conditional parameters (``when``) are imputed where inactive: a continuous coordinate
sits at 0.5, a categorical block is all zeros (no choice). ``project`` imputes them too,
so a candidate is scored exactly as it will be stored, and two candidates that differ
only in inactive coordinates are the same point (the duplicate check sees it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hpcopt_server import domain as d
from hpcopt_server.optimizers.space import Dimension, SearchSpace


@dataclass(frozen=True)
class _Slot:
    dim: Dimension
    start: int
    width: int  # 1, or the number of choices
    lo: float = 0.0  # of the (log-)interval, ints widened by half a step
    hi: float = 1.0


class Encoder:
    def __init__(self, space: SearchSpace):
        self.space = space
        slots, start = [], 0
        for dim in space.dims:
            if dim.type == "categorical":
                slots.append(_Slot(dim, start, len(dim.choices)))
                start += len(dim.choices)
                continue
            lo, hi = (dim.low - 0.5, dim.high + 0.5) if dim.type == "int" else (dim.low, dim.high)
            if dim.log:
                lo = max(lo, dim.low / 2) if dim.type == "int" else lo
                lo, hi = math.log(lo), math.log(hi)
            slots.append(_Slot(dim, start, 1, lo, hi))
            start += 1
        self.slots = tuple(slots)
        self.dim = start
        self.continuous = np.array([s.dim.type != "categorical" for s in slots for _ in range(s.width)])
        by_name = {s.dim.name: s for s in slots}
        # Per conditional slot: (slot, [(parent slot, indices of the parent's choices that activate it)]).
        self._conditions = [
            (s, [(by_name[p], [list(by_name[p].dim.choices).index(v) for v in values]) for p, values in s.dim.when])
            for s in slots
            if s.dim.when
        ]

    def encode(self, params: d.Params) -> np.ndarray:
        x = np.zeros(self.dim)
        for s in self.slots:
            v = params.get(s.dim.name)
            if v is None:  # inactive: imputed
                x[s.start] = 0.0 if s.dim.type == "categorical" else s.dim.IMPUTED
            elif s.dim.type == "categorical":
                x[s.start + list(s.dim.choices).index(v)] = 1.0
            else:
                t = math.log(float(v)) if s.dim.log else float(v)
                x[s.start] = (t - s.lo) / (s.hi - s.lo)
        return x

    def decode(self, x: np.ndarray) -> d.Params:
        out: d.Params = {}
        for s in self.slots:
            if s.dim.type == "categorical":
                out[s.dim.name] = s.dim.choices[int(np.argmax(x[s.start : s.start + s.width]))]
                continue
            t = s.lo + float(np.clip(x[s.start], 0.0, 1.0)) * (s.hi - s.lo)
            v = math.exp(t) if s.dim.log else t
            if s.dim.type == "int":
                out[s.dim.name] = int(min(max(round(v), s.dim.low), s.dim.high))
            else:
                out[s.dim.name] = float(min(max(v, s.dim.low), s.dim.high))
        return self.space.active(out) if self.space.conditional else out

    def project(self, X: np.ndarray) -> np.ndarray:
        """Rows of X [m,D] moved onto evaluable points (int bin centres, exact one-hots)."""
        X = np.clip(np.array(X, dtype=float), 0.0, 1.0)
        for s in self.slots:
            if s.dim.type == "categorical":
                block = X[:, s.start : s.start + s.width]
                hot = np.zeros_like(block)
                hot[np.arange(len(block)), block.argmax(1)] = 1.0
                X[:, s.start : s.start + s.width] = hot
            elif s.dim.type == "int":
                t = s.lo + X[:, s.start] * (s.hi - s.lo)
                v = np.clip(np.round(np.exp(t) if s.dim.log else t), s.dim.low, s.dim.high)
                t = np.log(v) if s.dim.log else v
                X[:, s.start] = (t - s.lo) / (s.hi - s.lo)
        for s, parents in self._conditions:
            active = np.ones(len(X), dtype=bool)
            for p, indices in parents:
                active &= np.isin(X[:, p.start : p.start + p.width].argmax(1), indices)
            X[~active, s.start : s.start + s.width] = 0.0 if s.dim.type == "categorical" else s.dim.IMPUTED
        return X

    def random(self, m: int, rng: np.random.Generator, u: np.ndarray | None = None) -> np.ndarray:
        """m points [m,D]: continuous coordinates from ``u`` [m, n_params] in [0,1) (or
        uniform), categoricals one-hot with the choice taken from the same column."""
        if u is None:
            u = rng.random((m, len(self.slots)))
        X = np.zeros((m, self.dim))
        for j, s in enumerate(self.slots):
            if s.dim.type == "categorical":
                idx = np.minimum((u[:, j] * s.width).astype(int), s.width - 1)
                X[np.arange(m), s.start + idx] = 1.0
            else:
                X[:, s.start] = u[:, j]
        return self.project(X)
