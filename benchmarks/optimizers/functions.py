"""Test functions with known minima, on their usual domains."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TestFunction:
    name: str
    bounds: list[tuple[float, float]]
    minimum: float
    budget: int
    f: Callable[[np.ndarray], float]

    @property
    def dim(self) -> int:
        return len(self.bounds)

    def space(self) -> dict[str, dict[str, object]]:
        return {f"x{i}": {"type": "real", "low": lo, "high": hi} for i, (lo, hi) in enumerate(self.bounds)}

    def __call__(self, params: dict[str, float]) -> float:
        return self.f(np.array([float(params[f"x{i}"]) for i in range(self.dim)]))


def branin(x: np.ndarray) -> float:
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return float((x[1] - b * x[0] ** 2 + c * x[0] - 6) ** 2 + 10 * (1 - t) * math.cos(x[0]) + 10)


_H6_A = np.array(
    [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
)
_H6_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                         [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])  # fmt: skip
_H6_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def hartmann6(x: np.ndarray) -> float:
    return float(-np.sum(_H6_ALPHA * np.exp(-np.sum(_H6_A * (x - _H6_P) ** 2, axis=1))))


def rosenbrock(x: np.ndarray) -> float:
    return float(np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2))


def ackley(x: np.ndarray) -> float:
    d = len(x)
    return float(-20 * math.exp(-0.2 * math.sqrt(np.sum(x * x) / d)) - math.exp(np.sum(np.cos(2 * math.pi * x)) / d)
                 + 20 + math.e)  # fmt: skip


def levy(x: np.ndarray) -> float:
    w = 1 + (x - 1) / 4
    head = math.sin(math.pi * w[0]) ** 2
    mid = np.sum((w[:-1] - 1) ** 2 * (1 + 10 * np.sin(math.pi * w[:-1] + 1) ** 2))
    tail = (w[-1] - 1) ** 2 * (1 + math.sin(2 * math.pi * w[-1]) ** 2)
    return float(head + mid + tail)


_ROTATION = np.linalg.qr(np.random.default_rng(12345).normal(size=(5, 5)))[0]
_SCALES = 10.0 ** np.linspace(0, 4, 5)  # curvatures 1 .. 10^4: condition number 10^4


def ellipsoid(x: np.ndarray) -> float:
    """A rotated ill-conditioned quadratic (condition number 10^4), minimum 0 at 1.5:
    long narrow valleys not aligned with the axes, which ARD lengthscales cannot fix."""
    z = _ROTATION @ (x - 1.5)
    return float(np.sum(_SCALES * z * z) / 100.0)


FUNCTIONS = {
    "branin": TestFunction("branin", [(-5.0, 10.0), (0.0, 15.0)], 0.397887, 50, branin),
    "hartmann6": TestFunction("hartmann6", [(0.0, 1.0)] * 6, -3.32237, 50, hartmann6),
    "rosenbrock4": TestFunction("rosenbrock4", [(-2.0, 2.0)] * 4, 0.0, 50, rosenbrock),
    "ackley10": TestFunction("ackley10", [(-5.0, 5.0)] * 10, 0.0, 100, ackley),
    "levy8": TestFunction("levy8", [(-10.0, 10.0)] * 8, 0.0, 100, levy),
    "ellipsoid5": TestFunction("ellipsoid5", [(-5.0, 5.0)] * 5, 0.0, 60, ellipsoid),
}
