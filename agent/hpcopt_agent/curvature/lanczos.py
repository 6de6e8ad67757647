"""Lanczos on Hessian-vector products: the top eigenvalues of a fold's Hessian, and its
spectral density by stochastic Lanczos quadrature (SLQ).

- :func:`lanczos` runs ``steps`` iterations from a start vector with full
  reorthogonalisation (each new vector is orthogonalised against all before it, twice),
  so the Ritz values do not repeat as they do in plain Lanczos; it keeps the ``steps``
  basis vectors, ``steps x parameters`` numbers.
- :func:`top_eigen` returns the ``k`` largest Ritz values with each one's residual bound
  ``|beta_m s_m|`` (how far it may be from an eigenvalue of H), and optionally the Ritz
  vectors (the landscape's eigen-directions).
- :func:`density` is SLQ (Lin, Saad and Yang 2016; Ghorbani, Krishnan and Xiao 2019):
  for each of ``samples`` Rademacher start vectors, the eigenvalues of the tridiagonal
  matrix are quadrature nodes and the squared first components of its eigenvectors their
  weights; the density is their Gaussian-smoothed sum, averaged over the samples.

Every rank runs the same iterations on the same vectors (the start vectors come from a
seeded generator on the CPU), so only the Hessian-vector products cross ranks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

MatVec = Callable[[torch.Tensor], torch.Tensor]

#: A new Lanczos vector shorter than this (relative to the Hessian's scale) means the
#: Krylov space is exhausted: the Ritz values found are exact eigenvalues.
BREAKDOWN = 1e-10


@dataclass(frozen=True)
class Tridiagonal:
    """The Lanczos recurrence's coefficients and basis (``alpha``: its diagonal,
    ``beta``: the off-diagonal, ``beta[-1]`` the norm of the next, unused vector)."""

    alpha: torch.Tensor  # float64 (m,)
    beta: torch.Tensor  # float64 (m,)
    basis: torch.Tensor  # (m, n), the model's dtype

    @property
    def steps(self) -> int:
        return len(self.alpha)

    def eigh(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The Ritz values (ascending) and the tridiagonal matrix's eigenvectors."""
        m = self.steps
        t = torch.diag(self.alpha)
        if m > 1:
            off = self.beta[: m - 1]
            t += torch.diag(off, 1) + torch.diag(off, -1)
        return torch.linalg.eigh(t)  # type: ignore[no-any-return]


def start_vector(n: int, seed: int, *, rademacher: bool = False, device: torch.device | None = None) -> torch.Tensor:
    """A unit start vector, the same on every rank for a given seed (float64, drawn on
    the CPU, then moved to ``device``)."""
    g = torch.Generator().manual_seed(seed)
    if rademacher:
        v = torch.randint(0, 2, (n,), generator=g, dtype=torch.float64) * 2 - 1
    else:
        v = torch.randn(n, generator=g, dtype=torch.float64)
    unit: torch.Tensor = v / v.norm()
    return unit.to(device or torch.device("cpu"))


def lanczos(matvec: MatVec, start: torch.Tensor, steps: int) -> Tridiagonal:
    """``steps`` Lanczos iterations of ``matvec`` from ``start`` (fewer if the Krylov
    space is exhausted first), with full reorthogonalisation."""
    if steps < 1:
        raise ValueError(f"steps: at least 1 Lanczos iteration is needed, not {steps}")
    q = (start / start.norm()).to(torch.float64)
    n = len(q)
    steps = min(steps, n)
    basis = torch.empty(steps, n, dtype=torch.float64, device=q.device)  # filled row by row
    alpha: list[float] = []
    beta: list[float] = []
    scale = 0.0
    for j in range(steps):
        basis[j] = q
        w = matvec(q).to(torch.float64)
        a = float(w @ q)
        alpha.append(a)
        done = basis[: j + 1]
        for _ in range(2):  # classical Gram-Schmidt twice: orthogonal to working precision
            w = w - done.T @ (done @ w)
        b = float(w.norm())
        beta.append(b)
        scale = max(scale, abs(a), b)
        if b <= BREAKDOWN * max(scale, 1e-300):
            break
        q = w / b
    return Tridiagonal(
        torch.tensor(alpha, dtype=torch.float64), torch.tensor(beta, dtype=torch.float64), basis[: len(alpha)]
    )


@dataclass(frozen=True)
class Eigen:
    """The top Ritz values of a Hessian, largest first, with their residual bounds."""

    values: list[float]
    residuals: list[float]  # |beta_m s_m|: each value is within this of an eigenvalue of H
    vectors: torch.Tensor | None  # (k, n) unit Ritz vectors when asked for
    steps: int


def top_eigen(
    matvec: MatVec, n: int, k: int, steps: int, seed: int, *, vectors: bool = False, device: torch.device | None = None
) -> Eigen:
    """The ``k`` largest eigenvalues by ``steps`` Lanczos iterations (``steps`` HVPs)."""
    if k < 1:
        raise ValueError(f"top_k: at least 1 eigenvalue, not {k}")
    if steps < k:
        raise ValueError(f"steps: the Lanczos iterations ({steps}) must be at least top_k ({k})")
    tri = lanczos(matvec, start_vector(n, seed, device=device), steps)
    theta, s = tri.eigh()
    order = torch.argsort(theta, descending=True)[: min(k, tri.steps)]
    last_beta = float(tri.beta[-1])
    values = [float(theta[i]) for i in order]
    residuals = [abs(last_beta * float(s[-1, i])) for i in order]
    vecs = None
    if vectors:
        vecs = torch.stack([s[:, i].to(tri.basis.device) @ tri.basis for i in order])
        vecs = vecs / vecs.norm(dim=1, keepdim=True)
    return Eigen(values, residuals, vecs, tri.steps)


@dataclass(frozen=True)
class Density:
    """SLQ's quadrature (per sample: nodes and weights, each sample's weights summing to
    1) and its smoothed density on a grid."""

    nodes: list[list[float]]
    weights: list[list[float]]
    grid: list[float]
    density: list[float]
    sigma: float


def slq_moment(nodes: list[list[float]], weights: list[list[float]], p: int = 1) -> float:
    """SLQ's estimate of ``tr(H^p) / n``: each start vector's quadrature of ``x^p``
    (for ``p = 1``, exactly ``v^T H v``), averaged over the start vectors."""
    pairs = zip(nodes, weights, strict=True)
    per = [sum(w * x**p for x, w in zip(xs, ws, strict=True)) for xs, ws in pairs]
    return sum(per) / len(per)


def density(
    matvec: MatVec,
    n: int,
    samples: int,
    steps: int,
    seed: int,
    *,
    points: int = 200,
    sigma: float | None = None,
    device: torch.device | None = None,
) -> Density:
    """The spectral density by SLQ: ``samples`` x ``steps`` HVPs. ``sigma`` (the Gaussian
    kernel's width) defaults to 1% of the spectrum's span, the grid extends 3 sigma
    past the extreme nodes."""
    if samples < 1:
        raise ValueError(f"density_samples: at least 1, not {samples}")
    nodes, weights = [], []
    for i in range(samples):
        tri = lanczos(matvec, start_vector(n, seed + 1 + i, rademacher=True, device=device), steps)
        theta, s = tri.eigh()
        nodes.append([float(x) for x in theta])
        weights.append([float(x) for x in s[0, :] ** 2])
    lo = min(min(x) for x in nodes)
    hi = max(max(x) for x in nodes)
    width = sigma if sigma is not None else max(0.01 * (hi - lo), 1e-12 * max(abs(lo), abs(hi), 1.0))
    grid = torch.linspace(lo - 3 * width, hi + 3 * width, points, dtype=torch.float64)
    dens = torch.zeros(points, dtype=torch.float64)
    norm = 1.0 / (width * math.sqrt(2 * math.pi) * samples)
    for xs, ws in zip(nodes, weights, strict=True):
        x = torch.tensor(xs, dtype=torch.float64)
        w = torch.tensor(ws, dtype=torch.float64)
        dens += (w[None, :] * torch.exp(-0.5 * ((grid[:, None] - x[None, :]) / width) ** 2)).sum(1) * norm
    return Density(nodes, weights, grid.tolist(), dens.tolist(), width)
