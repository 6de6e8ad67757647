"""What one permutation-importance answer costs the server, in-process, on synthetic
campaigns of the issue's sizes (100 parameters x 2,000 trials; 20 x 10,000):

    python benchmarks/importance_cost.py

Prints the trials the surrogate judged (its sample under the work budget), the wall
time and the peak RSS of this process before and after. Before the budget, 100 x 2,000
took 404 s and 3.4 GB in the server. Nothing is asserted.
"""

from __future__ import annotations

import resource
import time

import numpy as np

from hpcopt_server.service.importance import _permutation, _ranks


def main() -> None:
    for p, n in ((100, 2000), (20, 10000)):
        rng = np.random.default_rng(0)
        space = {f"x{i}": {"type": "real", "low": 0.0, "high": 1.0} for i in range(p)}
        params = [{f"x{i}": float(rng.random()) for i in range(p)} for _ in range(n)]
        y = np.array([q["x0"] + 0.5 * q["x1"] ** 2 + 0.1 * rng.random() for q in params])
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t0 = time.perf_counter()
        raw, judged = _permutation(space, params, _ranks(y), 1)
        dt = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        top = sorted(raw, key=lambda name: raw[name], reverse=True)[:2]
        size = f"{p} params x {n} trials"
        print(f"{size}: judged {judged}, {dt:.1f} s, peak RSS {peak:.0f} MB (before {base:.0f}), top {top}")


if __name__ == "__main__":
    main()
