"""Acquisition functions for minimization, as pure functions of the posterior.

log EI follows Ament et al., "Unexpected Improvements to Expected Improvement for
Bayesian Optimization" (NeurIPS 2023, arXiv:2310.20708): EI = sigma h(z) with
z = (best - mu) / sigma and h(z) = phi(z) + z Phi(z), and log h evaluated without
underflow far below the incumbent, so the optimizer still sees a slope there.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import erfcx, log_ndtr, ndtr

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def log_h(z: np.ndarray) -> np.ndarray:
    """log(phi(z) + z Phi(z)), accurate for every finite z."""
    z = np.asarray(z, dtype=float)
    out = np.empty_like(z)
    hi = z > -1.0
    zh = z[hi]
    out[hi] = np.log(zh * ndtr(zh) + np.exp(-0.5 * zh * zh - LOG_SQRT_2PI))
    mid = (~hi) & (z > -40.0)
    zm = -z[mid]  # > 1
    # h(z) = phi(z) (1 - |z| Phi(z)/phi(z)) and Phi(z)/phi(z) = sqrt(pi/2) erfcx(|z|/sqrt2)
    out[mid] = -0.5 * zm * zm - LOG_SQRT_2PI + np.log1p(-zm * math.sqrt(math.pi / 2) * erfcx(zm / math.sqrt(2)))
    lo = z <= -40.0
    zl = -z[lo]
    # asymptotic series: h(z) ~ phi(z) / z^2 (1 - 3/z^2 + 15/z^4)
    out[lo] = -0.5 * zl * zl - LOG_SQRT_2PI - 2 * np.log(zl) + np.log1p(-3 / zl**2 + 15 / zl**4)
    return out


def log_ei(mu: np.ndarray, var: np.ndarray, best: float) -> np.ndarray:
    sigma = np.sqrt(np.maximum(var, 1e-18))
    return np.log(sigma) + log_h((best - mu) / sigma)


def log_ei_grad(mu: float, var: float, best: float, dmu: np.ndarray, dvar: np.ndarray) -> tuple[float, np.ndarray]:
    """log EI at one point and its gradient, from the posterior's gradients [D].

    d logEI/d mu = -Phi(z) / (sigma h(z)),  d logEI/d sigma = phi(z) / (sigma h(z)).
    """
    var = max(var, 1e-18)
    sigma = math.sqrt(var)
    z = (best - mu) / sigma
    lh = float(log_h(np.array([z]))[0])
    value = math.log(sigma) + lh
    d_mu = -math.exp(float(log_ndtr(z)) - lh) / sigma
    d_sigma = math.exp(-0.5 * z * z - LOG_SQRT_2PI - lh) / sigma
    return value, d_mu * dmu + d_sigma * dvar / (2 * sigma)


def neg_lcb(mu: np.ndarray, var: np.ndarray, beta: float) -> np.ndarray:
    """-(mu - beta sigma): the UCB of the negated objective, to be maximized."""
    return -(mu - beta * np.sqrt(np.maximum(var, 0.0)))


def neg_lcb_grad(mu: float, var: float, beta: float, dmu: np.ndarray, dvar: np.ndarray) -> tuple[float, np.ndarray]:
    sigma = math.sqrt(max(var, 1e-18))
    return -(mu - beta * sigma), -dmu + beta * dvar / (2 * sigma)
