"""Gaussian-process numerics: the Matern-5/2 ARD kernel, the marginal likelihood with its
gradient, and a Cholesky factor that grows by block extension.

Notation (shapes in brackets):

| symbol | meaning |
|---|---|
| n, m   | observations in the model; query points |
| D      | dimension of the encoded unit cube |
| X [n,D], Xs [m,D] | observed and query inputs |
| ell [D], amp, noise | lengthscales, signal variance, homoscedastic noise variance |
| extra [n] | per-point extra noise variance (a trial's fold spread) |
| K [n,n] | amp * R(X, X) + diag(noise + extra) |
| L [n,n] | lower Cholesky factor of K |
| y [n]   | standardized outputs, less the constant prior mean c (``gls_mean``) |
| z [n]   | L^-1 y;  alpha = L^-T z = K^-1 y |

The kernel is k(a, b) = amp (1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r), r^2 = sum_d ((a_d - b_d) / ell_d)^2.
The prior mean is a constant c of largest likelihood, as a GP with a constant mean
fitted by marginal likelihood has it (GPyTorch's ``ConstantMean``, BoTorch's default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.linalg import lapack

SQRT5 = math.sqrt(5.0)


def scaled_sqdist(A: np.ndarray, B: np.ndarray, ell: np.ndarray) -> np.ndarray:
    """r^2 between rows of A [n,D] and B [m,D] with lengthscales ell [D] -> [n,m]."""
    a, b = A / ell, B / ell
    d2 = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    return np.maximum(d2, 0.0)


def matern52(A: np.ndarray, B: np.ndarray, ell: np.ndarray, amp: float) -> np.ndarray:
    """k(A, B) [n,m]."""
    r = np.sqrt(scaled_sqdist(A, B, ell))
    return amp * (1.0 + SQRT5 * r + (5.0 / 3.0) * r * r) * np.exp(-SQRT5 * r)


def matern52_grad_x(x: np.ndarray, X: np.ndarray, ell: np.ndarray, amp: float) -> np.ndarray:
    """d k(X_i, x) / d x [n,D] for one query point x [D].

    dk/dr^2 = -(5/6) amp (1 + sqrt5 r) exp(-sqrt5 r), and d r^2 / dx = 2 (x - X_i) / ell^2.
    """
    diff = (x[None, :] - X) / (ell * ell)
    r = np.sqrt(np.maximum(((x[None, :] - X) ** 2 / (ell * ell)).sum(1), 0.0))
    g = -(5.0 / 3.0) * amp * (1.0 + SQRT5 * r) * np.exp(-SQRT5 * r)
    return g[:, None] * diff


def mean_gradient_frame(
    X: np.ndarray, y: np.ndarray, extra: np.ndarray, theta: np.ndarray, mask: np.ndarray
) -> np.ndarray:
    """An orthonormal frame V [D,D] for the inputs: on the coordinates in ``mask`` the
    eigenvectors of the average outer product of the posterior mean's gradient at X
    [n,D] (y [n] the outputs, the constant mean of largest likelihood profiled out), the
    identity elsewhere. For a quadratic (x - c)^T A (x - c) sampled isotropically around
    c the average is 4 s^2 A^2, whose eigenvectors are A's principal axes, so a rotated
    ill-conditioned valley becomes axis-aligned in X V, where ARD lengthscales fit it
    (the expected gradient outer product of active-subspace methods: Constantine, Dow
    and Wang, SIAM J. Sci. Comput. 2014; Samarov, JASA 1993). O(n^3) for the factor,
    O(n^2 D) for the gradients."""
    n, D = X.shape
    ell, amp, noise = unpack(theta)
    K = matern52(X, X, ell, amp) + np.diag(noise + extra)
    try:
        L = np.linalg.cholesky(K)
    except np.linalg.LinAlgError:
        L = np.linalg.cholesky(K + np.eye(n) * 1e-6 * amp)
    one = lapack.dtrtrs(L, np.ones(n), lower=1)[0]
    z = lapack.dtrtrs(L, y, lower=1)[0]
    alpha = lapack.dtrtrs(L, z - (one @ z) / (one @ one) * one, lower=1, trans=1)[0]
    r = np.sqrt(scaled_sqdist(X, X, ell))
    w = -(5.0 / 3.0) * amp * (1.0 + SQRT5 * r) * np.exp(-SQRT5 * r) * alpha[None, :]  # dk/dr^2 * 2 alpha_j
    cols = np.flatnonzero(mask)
    # The gradient at x_i: sum_j w_ij (x_i - x_j) / ell^2, one coordinate at a time (O(n^2) memory).
    G = np.column_stack([(w * (X[:, c, None] - X[None, :, c])).sum(1) / ell[c] ** 2 for c in cols])
    V = np.eye(D)
    V[np.ix_(cols, cols)] = np.linalg.eigh(G.T @ G / n)[1]
    return V


class LazyCholesky:
    """The lower Cholesky factor of a growing kernel matrix, kept in a preallocated
    Fortran-ordered buffer that grows geometrically, so extending it never copies the
    factor (amortized) and triangular solves run on a view of the buffer (LAPACK's lda).
    """

    def __init__(self, capacity: int = 64):
        self._buf = np.zeros((max(capacity, 1), max(capacity, 1)), order="F")
        self.n = 0

    @classmethod
    def from_factor(cls, L: np.ndarray, headroom: float = 1.5) -> LazyCholesky:
        out = cls(int(L.shape[0] * headroom) + 16)
        out._buf[: L.shape[0], : L.shape[0]] = L
        out.n = L.shape[0]
        return out

    @property
    def nbytes(self) -> int:
        return int(self._buf.nbytes)

    @property
    def L(self) -> np.ndarray:
        """The current factor [n,n] (a view)."""
        return self._buf[: self.n, : self.n]

    def solve(self, B: np.ndarray, *, transpose: bool = False, rows: int | None = None) -> np.ndarray:
        """L^-1 B (or L^-T B) for B [n] or [n,k]; ``rows``: with the factor's leading
        rows x rows block (the factor of the first ``rows`` points) and B [rows] or [rows,k]."""
        n = self.n if rows is None else rows
        if n == 0:
            return np.zeros_like(B)
        vec = B.ndim == 1
        rhs = np.asfortranarray(B.reshape(n, -1))
        # [capacity, n], Fortran-contiguous: LAPACK reads the n x n factor with lda = capacity.
        X, info = lapack.dtrtrs(self._buf[:, :n], rhs, lower=1, trans=1 if transpose else 0, lda=self._buf.shape[0])
        if info != 0:
            raise np.linalg.LinAlgError(f"dtrtrs info={info}")
        return X[:, 0] if vec else X

    def extend(self, K12: np.ndarray, K22: np.ndarray) -> None:
        """Adds k rows: K12 [n,k] = k(old, new), K22 [k,k] = k(new, new) + noise.

        With L21 = (L^-1 K12)^T [k,n] and L22 = chol(K22 - L21 L21^T) [k,k],
        [[L, 0], [L21, L22]] [[L^T, L21^T], [0, L22^T]] = [[K11, K12], [K12^T, K22]]:
        O(k n^2) for the solve and O(k^2 n + k^3) for the rest, instead of O((n+k)^3).
        Raises ``np.linalg.LinAlgError`` when the Schur complement is not positive definite.
        """
        k = K22.shape[0]
        W = self.solve(K12) if self.n else np.zeros((0, k))
        L21 = W.T
        L22 = np.linalg.cholesky(K22 - L21 @ L21.T)
        self._reserve(self.n + k)
        n = self.n
        self._buf[n : n + k, :n] = L21
        self._buf[n : n + k, n : n + k] = L22
        self._buf[:n, n : n + k] = 0.0
        self.n = n + k

    def truncate(self, n: int) -> None:
        """Drops the rows after the first n (fantasies): O(1)."""
        self.n = min(self.n, n)

    def _reserve(self, size: int) -> None:
        cap = self._buf.shape[0]
        if size <= cap:
            return
        new = np.zeros((max(size, int(cap * 1.5) + 16),) * 2, order="F")
        new[: self.n, : self.n] = self.L
        self._buf = new


def gls_mean(factor: LazyCholesky, y: np.ndarray) -> float:
    """The constant prior mean of largest marginal likelihood given the kernel, for the
    first len(y) points of ``factor``: c = 1^T K^-1 y / 1^T K^-1 1 (generalized least
    squares). Two triangular solves, O(n^2).

    Where most losses are poor and the good ones lie in a small region, c lies above
    their mean, so a point far from every observation is expected to be poor, not
    average: with the mean of the outputs as the prior mean, bo spent 40 of Ackley-10's
    last 50 evaluations at corners of the cube, where such a GP promised improvement
    (seed 5 in ``benchmarks/optimizers/quality.py``; BoTorch's fit of the same
    observations put its constant mean 2.3 standard deviations on the poor side)."""
    n = len(y)
    if n == 0:
        return 0.0
    a = factor.solve(np.ones(n), rows=n)
    return float(a @ factor.solve(y, rows=n)) / float(a @ a)


# -- hyper-parameters ------------------------------------------------------------------


def lengthscale_prior(D: int) -> tuple[float, float]:
    """Mean and sd of the normal prior on log lengthscales (inputs in the unit cube):
    median 0.5 * D^(1/4), sd 1 in log space.

    The dimension-scaled prior of Hvarfner et al. (ICML 2024, arXiv:2402.02229),
    BoTorch's default, is LogNormal(sqrt(2) + log(D) / 2, sqrt(3)) on the lengthscale
    itself. Centred at that mean in log space (median lengthscale 13 at D = 10) it made
    near-linear models that sent suggestions to the boundary (Ackley-10 8.2 vs 2.6,
    Levy-8 11.8 vs 0.6 over 6 seeds). BoTorch's MAP fit maximizes the density of the
    lengthscale, whose mode in log space is that mean minus 3 (0.29 at D = 2, 0.65 at
    D = 10): that, with the signal variance pinned at 1 as BoTorch's default kernel has
    it, is level overall, not better (20 seeds, one at a time, paired with this prior:
    lower regret on Levy-8 in 12 seeds and Ackley-10 in 10, but Hartmann6 reached its
    global basin in 7 seeds instead of 12 and was worse in 17).
    """
    return math.log(0.5) + 0.25 * math.log(D), 1.0


NOISE_PRIOR = (math.log(1e-3), 2.0)  # log noise variance, standardized outputs
AMP_PRIOR = (0.0, 1.0)  # log signal variance
BOUNDS_LOG_ELL = (math.log(1e-2), math.log(1e2))
BOUNDS_LOG_AMP = (math.log(5e-2), math.log(2e1))
BOUNDS_LOG_NOISE = (math.log(1e-6), math.log(1.0))


def unpack(theta: np.ndarray) -> tuple[np.ndarray, float, float]:
    return np.exp(theta[:-2]), float(np.exp(theta[-2])), float(np.exp(theta[-1]))


@dataclass(frozen=True)
class Prior:
    """Normal priors on log lengthscales (centre from ``lengthscale_prior``, sd ``ell_sd``),
    log signal variance (0, ``amp_sd``) and log noise (``NOISE_PRIOR``), and the bound on
    the signal variance."""

    ell_sd: float = 1.0
    amp_sd: float = AMP_PRIOR[1]
    amp_max: float = math.exp(BOUNDS_LOG_AMP[1])


#: The default: functions of moderate amplitude and lengthscales near the prior's centre.
TIGHT = Prior()
#: Nearly flat on lengthscales and signal variance: lets a smooth function take the
#: long-lengthscale, large-amplitude fit that extrapolates it like a polynomial.
WIDE = Prior(ell_sd=3.0, amp_sd=3.0, amp_max=1e3)


def neg_log_posterior(
    theta: np.ndarray, X: np.ndarray, y: np.ndarray, extra: np.ndarray, prior: Prior | None = TIGHT
) -> tuple[float, np.ndarray]:
    """Negative log marginal likelihood plus negative log prior of theta =
    [log ell (D), log amp, log noise], and its gradient [D+2] (``prior=None``: the
    likelihood alone)."""
    n, D = X.shape
    ell, amp, noise = unpack(theta)
    diff2 = (X[:, None, :] - X[None, :, :]) ** 2 / (ell * ell)  # [n,n,D]
    r = np.sqrt(diff2.sum(-1))
    e = np.exp(-SQRT5 * r)
    R = (1.0 + SQRT5 * r + (5.0 / 3.0) * r * r) * e
    K = amp * R + np.diag(noise + extra)
    try:
        L = np.linalg.cholesky(K)
    except np.linalg.LinAlgError:
        return 1e25, np.zeros_like(theta)
    Linv = lapack.dtrtri(L, lower=1)[0]
    Kinv = Linv.T @ Linv
    # The constant prior mean of largest likelihood for these hyper-parameters (``gls_mean``),
    # profiled out: the gradient below is that of the profile likelihood (c is optimal).
    k1 = Kinv.sum(1)
    y = y - float(k1 @ y) / float(k1.sum())
    alpha = Kinv @ y
    nll = 0.5 * y @ alpha + np.log(np.diag(L)).sum() + 0.5 * n * math.log(2 * math.pi)
    W = Kinv - np.outer(alpha, alpha)
    M = amp * (5.0 / 3.0) * (1.0 + SQRT5 * r) * e  # dK/dlog ell_d = M * diff2_d
    grad = np.empty_like(theta)
    grad[:-2] = 0.5 * np.einsum("ij,ijd->d", W * M, diff2)
    grad[-2] = 0.5 * np.sum(W * (amp * R))
    grad[-1] = 0.5 * noise * np.trace(W)
    if prior is None:
        return float(nll), grad
    mu_l = lengthscale_prior(D)[0]
    penalty = 0.0
    for sl, mu, sd in (
        (slice(0, -2), mu_l, prior.ell_sd),
        (slice(-2, -1), AMP_PRIOR[0], prior.amp_sd),
        (slice(-1, None), *NOISE_PRIOR),
    ):
        penalty += 0.5 * float(np.sum(((theta[sl] - mu) / sd) ** 2))
        grad[sl] += (theta[sl] - mu) / sd**2
    return float(nll + penalty), grad


def fit_hyperparameters(
    X: np.ndarray,
    y: np.ndarray,
    extra: np.ndarray,
    rng: np.random.Generator,
    warm_start: np.ndarray | None = None,
    restarts: int = 1,
    prior: Prior = TIGHT,
) -> np.ndarray:
    """theta maximizing the log posterior by L-BFGS-B from the warm start and prior draws."""
    from scipy.optimize import minimize

    D = X.shape[1]
    mu_l, sd_l = lengthscale_prior(D)
    bounds = [BOUNDS_LOG_ELL] * D + [(BOUNDS_LOG_AMP[0], math.log(prior.amp_max)), BOUNDS_LOG_NOISE]
    lo, hi = np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])
    starts = []
    if warm_start is not None:
        starts.append(np.clip(warm_start, lo, hi))
    starts.append(np.clip(np.r_[np.full(D, mu_l), 0.0, math.log(1e-3)], lo, hi))
    for _ in range(restarts):
        draw = np.r_[rng.normal(mu_l, sd_l / 2, D), rng.normal(0.0, 0.5), rng.normal(math.log(1e-3), 1.0)]
        starts.append(np.clip(draw, lo, hi))
    best, best_f = starts[0], math.inf
    for s in starts:
        res = minimize(
            neg_log_posterior,
            s,
            args=(X, y, extra, prior),
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={"maxiter": 60},
        )
        if res.fun < best_f:
            best, best_f = res.x, float(res.fun)
    return np.asarray(best)
