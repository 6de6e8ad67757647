"""Loss surfaces around a fold's final weights, and its training trajectory on the same
plane.

- Directions are filter-normalised random directions (Li, Xu, Taylor, Studer and
  Goldstein 2018, "Visualizing the loss landscape of neural nets"): a Gaussian
  direction whose every filter (a slice along a weight's first dimension) is rescaled to
  the norm of the same filter of the weights, so that a step of 1 is as large as the
  weights in every layer, whatever its scale. Biases and other one-dimensional
  parameters (BatchNorm's) get no displacement, as in that paper. Or they are the top
  Hessian eigenvectors (from :func:`lanczos.top_eigen`), each scaled to the norm of the
  whole weight vector, so that the two kinds of plot share their units.
- A surface is the loss on a grid ``w + a d1`` (1-D) or ``w + a d1 + b d2`` (2-D): one
  pass over the samples per grid point, the grid's size bounded before it starts.
- The trajectory (the weights at each epoch's checkpoint) is projected on the plane by
  least squares; the share of each displacement off the plane is reported with it:
  with random directions in many dimensions most of a trajectory lies off any plane,
  which is why the source projects on principal or eigen-directions instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from hpcopt_agent.curvature.loss import FoldLoss


def random_direction(op: FoldLoss, seed: int) -> torch.Tensor:
    """A filter-normalised Gaussian direction, the same on every rank for ``seed``."""
    g = torch.Generator().manual_seed(seed)
    parts = []
    for p in op.params:
        w = p.detach()
        if w.dim() <= 1:
            parts.append(torch.zeros(w.numel(), dtype=op.dtype, device=op.device))
            continue
        d = torch.randn(w.shape, generator=g, dtype=torch.float64).to(device=op.device, dtype=op.dtype)
        dims = tuple(range(1, w.dim()))
        filt = w.norm(dim=dims, keepdim=True) / d.norm(dim=dims, keepdim=True).clamp_min(1e-30)
        parts.append((d * filt).reshape(-1))
    return torch.cat(parts)


def eigen_direction(op: FoldLoss, vector: torch.Tensor) -> torch.Tensor:
    """A unit eigenvector scaled to the norm of the weights."""
    v = vector.to(device=op.device, dtype=op.dtype)
    scaled: torch.Tensor = v / v.norm() * op.weights().norm()
    return scaled


def grid(extent: float, points: int) -> list[float]:
    """``points`` offsets evenly from ``-extent`` to ``extent`` (0 among them when odd)."""
    if points < 2:
        raise ValueError(f"points: a surface needs at least 2 grid points per axis, not {points}")
    return [-extent + 2 * extent * i / (points - 1) for i in range(points)]


def _finite(x: float) -> float | None:
    """A loss that overflowed far from the weights is None (JSON has no infinity)."""
    return x if math.isfinite(x) else None


def surface_1d(op: FoldLoss, d: torch.Tensor, offsets: Sequence[float]) -> list[float | None]:
    """The loss at ``w + a d`` for each offset ``a`` (one pass each; None where it is
    not finite)."""
    w = op.weights()
    out = []
    for a in offsets:
        with op.at(w + a * d):
            out.append(_finite(op.value()))
    return out


def surface_2d(
    op: FoldLoss, d1: torch.Tensor, d2: torch.Tensor, xs: Sequence[float], ys: Sequence[float]
) -> list[list[float | None]]:
    """The loss at ``w + a d1 + b d2``: row ``j`` is ``b = ys[j]`` over ``a`` in ``xs``."""
    w = op.weights()
    rows = []
    for b in ys:
        row = []
        for a in xs:
            with op.at(w + a * d1 + b * d2):
                row.append(_finite(op.value()))
        rows.append(row)
    return rows


@dataclass(frozen=True)
class Projection:
    """Each checkpoint's coordinates ``(a, b)`` on the plane, and the share of its
    displacement from the final weights that lies off the plane (0: on it)."""

    xs: list[float]
    ys: list[float]
    off_plane: list[float]


def project(final: torch.Tensor, points: Sequence[torch.Tensor], d1: torch.Tensor, d2: torch.Tensor) -> Projection:
    """Least-squares coordinates of ``point - final`` on ``span(d1, d2)``."""
    basis = torch.stack([d1, d2]).to(torch.float64)
    gram = basis @ basis.T
    xs, ys, off = [], [], []
    for p in points:
        delta = (p - final).to(device=basis.device, dtype=torch.float64)
        coef = torch.linalg.solve(gram, basis @ delta)
        rest = delta - coef @ basis
        norm = float(delta.norm())
        xs.append(float(coef[0]))
        ys.append(float(coef[1]))
        off.append(float(rest.norm()) / norm if norm > 0 else 0.0)
    return Projection(xs, ys, off)
