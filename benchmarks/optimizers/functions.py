"""Test functions with known minima, on their usual domains: ``FUNCTIONS``, the suite
``quality.py`` runs by default, ``HELD_OUT``, eight more that no option of ``bo``
was chosen on, to check a change against problems it was not tuned for
(``quality.py --functions held-out``), and ``MANY_PEAKED``, three with many local
optima of random heights, where a method that settles in the first good basin loses
(``quality.py --functions many-peaked``)."""

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


H6_A = np.array(
    [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
)
H6_P = 1e-4 * np.array(
    [
        [1312, 1696, 5569, 124, 8283, 5886],
        [2329, 4135, 8307, 3736, 1004, 9991],
        [2348, 1451, 3522, 2883, 3047, 6650],
        [4047, 8828, 8732, 5743, 1091, 381],
    ]
)
H6_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def hartmann6(x: np.ndarray) -> float:
    return float(-np.sum(H6_ALPHA * np.exp(-np.sum(H6_A * (x - H6_P) ** 2, axis=1))))


def rosenbrock(x: np.ndarray) -> float:
    return float(np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2))


def ackley(x: np.ndarray) -> float:
    d = len(x)
    return float(
        -20 * math.exp(-0.2 * math.sqrt(np.sum(x * x) / d))
        - math.exp(np.sum(np.cos(2 * math.pi * x)) / d)
        + 20
        + math.e
    )


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


# -- held out: never used to choose an option ------------------------------------------


def styblinski_tang(x: np.ndarray) -> float:
    return float(0.5 * np.sum(x**4 - 16 * x**2 + 5 * x))


def six_hump_camel(x: np.ndarray) -> float:
    a, b = x
    return float((4 - 2.1 * a * a + a**4 / 3) * a * a + a * b + (-4 + 4 * b * b) * b * b)


def griewank(x: np.ndarray) -> float:
    return float(np.sum(x * x) / 4000 - np.prod(np.cos(x / np.sqrt(np.arange(1, len(x) + 1)))) + 1)


def michalewicz(x: np.ndarray) -> float:
    i = np.arange(1, len(x) + 1)
    return float(-np.sum(np.sin(x) * np.sin(i * x * x / math.pi) ** 20))


_SHEKEL_A = np.array(
    [
        [4, 4, 4, 4],
        [1, 1, 1, 1],
        [8, 8, 8, 8],
        [6, 6, 6, 6],
        [3, 7, 3, 7],
        [2, 9, 2, 9],
        [5, 5, 3, 3],
        [8, 1, 8, 1],
        [6, 2, 6, 2],
        [7, 3.6, 7, 3.6],
    ],
    dtype=float,
)
_SHEKEL_C = np.array([1, 2, 2, 4, 4, 6, 3, 7, 5, 5], dtype=float) / 10


def shekel(x: np.ndarray) -> float:
    return float(-np.sum(1.0 / (np.sum((x - _SHEKEL_A) ** 2, axis=1) + _SHEKEL_C)))


def powell(x: np.ndarray) -> float:
    a, b, c, e = x.reshape(-1, 4).T
    return float(np.sum((a + 10 * b) ** 2 + 5 * (c - e) ** 2 + (b - 2 * c) ** 4 + 10 * (a - e) ** 4))


def rastrigin(x: np.ndarray) -> float:
    return float(10 * len(x) + np.sum(x * x - 10 * np.cos(2 * math.pi * x)))


def dixon_price(x: np.ndarray) -> float:
    i = np.arange(2, len(x) + 1)
    return float((x[0] - 1) ** 2 + np.sum(i * (2 * x[1:] ** 2 - x[:-1]) ** 2))


#: Multimodal (Styblinski-Tang: 2^4 basins; Griewank, Rastrigin: a grid of them;
#: Michalewicz: steep narrow valleys; Shekel: ten narrow wells) and smooth (Powell, a
#: singular quartic; Dixon-Price, a curved valley); the domains of Griewank and
#: Rastrigin are shifted so the minimum is not at the centre.
HELD_OUT = {
    "styblinski4": TestFunction("styblinski4", [(-5.0, 5.0)] * 4, -39.16616570377142 * 4, 60, styblinski_tang),
    "camel": TestFunction("camel", [(-3.0, 3.0), (-2.0, 2.0)], -1.0316284535, 40, six_hump_camel),
    "griewank6": TestFunction("griewank6", [(-20.0, 30.0)] * 6, 0.0, 80, griewank),
    "michalewicz5": TestFunction("michalewicz5", [(0.0, math.pi)] * 5, -4.68765817908813, 80, michalewicz),
    "shekel10": TestFunction("shekel10", [(0.0, 10.0)] * 4, -10.53640981669204, 60, shekel),
    "powell8": TestFunction("powell8", [(-4.0, 5.0)] * 8, 0.0, 80, powell),
    "rastrigin4": TestFunction("rastrigin4", [(-4.12, 5.12)] * 4, 0.0, 60, rastrigin),
    "dixon6": TestFunction("dixon6", [(-10.0, 10.0)] * 6, 0.0, 60, dixon_price),
}
#: Every function by name.
# -- many peaks of random heights -------------------------------------------------------

_GALLAGHER_RNG = np.random.default_rng(2026)
_GALLAGHER_PEAKS = _GALLAGHER_RNG.uniform(-4.0, 4.0, size=(21, 5))
# The global peak 10, the others 1.1 .. 9.1 (BBOB f22's heights), each with its own
# per-axis widths (curvatures 10^-1 .. 10^1): a landscape of 21 basins.
_GALLAGHER_HEIGHTS = np.r_[10.0, 1.1 + 8.0 * np.arange(20) / 19]
_GALLAGHER_CURVATURE = 10.0 ** _GALLAGHER_RNG.uniform(-1.0, 1.0, size=(21, 5))


def gallagher(x: np.ndarray) -> float:
    """Gallagher's Gaussian peaks (after BBOB f22, without its rotation): 10 minus the
    highest of 21 peaks at random places with random heights and widths; minimum 0 at
    the highest peak."""
    d2 = (_GALLAGHER_CURVATURE * (x - _GALLAGHER_PEAKS) ** 2).sum(1) / (2 * len(x))
    return float(10.0 - np.max(_GALLAGHER_HEIGHTS * np.exp(-d2)))


def schwefel(x: np.ndarray) -> float:
    """Schwefel's function on [-500, 500]^d: the best local optimum lies far from the
    next best, near the domain's corner; minimum about 0 at 420.9687 on every axis."""
    return float(418.9828872724338 * len(x) - np.sum(x * np.sin(np.sqrt(np.abs(x)))))


_RUGGED_RNG = np.random.default_rng(7)
_RUGGED_CENTRE = _RUGGED_RNG.uniform(-1.5, 1.5, size=6)
_RUGGED_WAVES = _RUGGED_RNG.normal(size=(12, 6)) * 2.5  # random directions, frequencies ~2.5 * sqrt(6)


def rugged(x: np.ndarray) -> float:
    """A bowl under random high-frequency ripples (12 cosines in random directions, all
    in phase at the centre): hundreds of local minima; minimum 0 at the centre."""
    z = x - _RUGGED_CENTRE
    return float(z @ z / len(x) + 1.0 - np.mean(np.cos(_RUGGED_WAVES @ z)))


MANY_PEAKED = {
    "gallagher5": TestFunction("gallagher5", [(-5.0, 5.0)] * 5, 0.0, 80, gallagher),
    "schwefel4": TestFunction("schwefel4", [(-500.0, 500.0)] * 4, schwefel(np.full(4, 420.968746)), 80, schwefel),
    "rugged6": TestFunction("rugged6", [(-3.0, 3.0)] * 6, 0.0, 80, rugged),
}

ALL_FUNCTIONS = {**FUNCTIONS, **HELD_OUT, **MANY_PEAKED}
