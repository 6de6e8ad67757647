"""A fold's analysis at 1, 2 and 4 ranks is the same to numerical precision: the
Hessian-vector products are sums over the fold's samples, each rank adding its share
(``curvature_check.py`` under the real mpiexec)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.helpers.agents import mpi_env, mpiexec_path
from tests.helpers.env import ROOT, scaled


def _run(ranks: int) -> dict[str, Any]:
    cmd = [mpiexec_path(), "-n", str(ranks), sys.executable, "-m", "mpi4py", "tests/agent/curvature_check.py"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(300), env=mpi_env(), cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    return json.loads(line[len("RESULT ") :])  # type: ignore[no-any-return]


def _numbers(x: Any) -> list[float]:
    if isinstance(x, dict):
        return [v for k in sorted(x) for v in _numbers(x[k])]
    if isinstance(x, list):
        return [v for item in x for v in _numbers(item)]
    return [float(x)] if isinstance(x, int | float) and not isinstance(x, bool) else []


@pytest.mark.mpi
def test_the_analysis_is_the_same_at_one_two_and_four_ranks() -> None:
    one = _run(1)
    assert one["samples"] == 300 and one["cost"]["hvps"] == 24 + 12 + 2 * 24
    base = _numbers(one)
    for ranks in (2, 4):
        got = _run(ranks)
        assert got["cost"] == one["cost"] and got["landscape"]["directions"] == "eigen"
        values = _numbers(got)
        assert len(values) == len(base)
        scale = max(abs(v) for v in base)
        worst = max(abs(a - b) for a, b in zip(values, base, strict=True))
        assert worst <= 1e-9 * scale, (ranks, worst, scale)
        # Eigenvalues themselves, relatively (each as sure as its own residual says).
        for a, b in zip(got["hessian"]["eigenvalues"], one["hessian"]["eigenvalues"], strict=True):
            assert a == pytest.approx(b, rel=1e-9)
