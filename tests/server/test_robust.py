"""The value axes' robust limit (``service/robust.py``): a far-out fence on the worse
side, adjusted for skew by the medcouple, so that it cuts the runs that diverged and not
the ordinary tail of a skewed objective (the review: 7% flagged where about 1% had
diverged)."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from hpcopt_server.service.robust import medcouple, robust_limit


def _medcouple_by_definition(values: list[float]) -> float:
    """Every pair, as Brys, Hubert and Struyf (2004) define it."""
    m = statistics.median(values)
    up, lo = [x for x in values if x >= m], [x for x in values if x <= m]
    p = values.count(m)
    kernel = [((xi - m) - (m - xj)) / (xi - xj) for xi in up for xj in lo if not xi == xj == m]
    kernel += [float((a + b + 1 > p) - (a + b + 1 < p)) for a in range(p) for b in range(p)]
    return statistics.median(kernel)


@pytest.mark.parametrize("n", [21, 50, 301])
def test_the_medcouple_is_the_papers_with_and_without_ties(n: int) -> None:
    rng = random.Random(n)
    values = sorted(math.exp(rng.gauss(0.0, 1.0)) for _ in range(n))
    tied = sorted(round(v, 1) for v in values)
    assert medcouple(values) == pytest.approx(_medcouple_by_definition(values))
    assert medcouple(tied) == pytest.approx(_medcouple_by_definition(tied))
    assert medcouple(sorted(-v for v in values)) == pytest.approx(-medcouple(values)), "mirrored: negated"


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_symmetric_values_get_tukeys_far_fence_on_the_worse_side(direction: str) -> None:
    s = 1.0 if direction == "minimize" else -1.0
    rng = random.Random(1)
    bulk = [rng.gauss(10.0, 1.0) for _ in range(999)]
    values = sorted(s * v for v in [*bulk, 1e6])
    q1, q3 = statistics.quantiles(bulk, n=4, method="inclusive")[::2]
    tukey = s * (q3 + 3 * (q3 - q1))  # maximizing: the mirror image
    assert robust_limit(values, direction) == pytest.approx(tukey, rel=0.03)
    assert robust_limit(values[:19], direction) is None, "fewer than 20 trials: every value"
    assert robust_limit(sorted(s * v for v in bulk), direction) is None, "nothing past it"
    assert robust_limit([1.0] * 30 + [s * 9.0], direction) is None, "no spread: every value"
    # The better side is never cut: a very good trial stays on the axis.
    better = robust_limit(sorted([*values, s * -1e6]), direction)
    assert better == pytest.approx(robust_limit(values, direction), rel=0.05)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 1.3, 2.0])
def test_skewed_losses_lose_the_diverged_runs_and_keep_their_tail(sigma: float) -> None:
    """Log-normal losses, 1% diverged to 10 to 100 times the worst ordinary loss: every
    diverged run is cut and at most 1.5% of the others (Tukey's fence cut 5.4% at sigma
    1.3 and 8.3% at sigma 2)."""
    rng = random.Random(int(sigma * 10))
    losses = [math.exp(rng.gauss(0.0, sigma)) for _ in range(1980)]
    diverged = [max(losses) * rng.uniform(10, 100) for _ in range(20)]
    values = sorted(losses + diverged)
    limit = robust_limit(values, "minimize")
    assert limit is not None and limit < min(diverged)
    assert sum(v > limit for v in losses) <= 0.015 * len(losses)
    # Maximized (an accuracy, skewed to the left): 1% at chance level.
    accs = sorted([1 - math.exp(rng.gauss(-3.0, sigma / 2)) for _ in range(1980)] + [0.1] * 20)
    low = robust_limit(accs, "maximize")
    assert low is not None and low > 0.1 and sum(0.1 < v < low for v in accs) <= 0.015 * 1980
