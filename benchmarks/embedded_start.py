"""What an Optuna user pays to start: importing the embedded mode and running Optuna's
quick start, against Optuna itself, as fresh processes, interleaved.

    python benchmarks/embedded_start.py [--reps 9]

1. ``import optuna`` against ``from hpcopt_server import optuna`` (goal: <= 1.5x);
2. Optuna's quick start (100 trials of a quadratic, its default sampler, in memory)
   against the same script with only its import line changed, which runs hpcopt's
   default (``random``) on a SQLite file in memory (goal: <= 2x).

Each figure is a process's wall time, median (min-max) over the repetitions, and the
ratio per repetition.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUICKSTART = """{import_line}


def objective(trial):
    x = trial.suggest_float("x", -10, 10)
    return (x - 2) ** 2


study = optuna.create_study()
study.optimize(objective, n_trials=100)
print(study.best_params)
"""
SIDES = {"optuna": "import optuna", "hpcopt": "from hpcopt_server import optuna"}


def wall(argv: list[str], cwd: str) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=600)
    took = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{argv} failed:\n{out.stderr[-3000:]}")
    return took


def spread(values: list[float], fmt: str = ".2f") -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    times: dict[tuple[str, str], list[float]] = {(k, s): [] for k in ("import", "quickstart") for s in SIDES}
    with tempfile.TemporaryDirectory(prefix="hpcopt-start-") as work:
        scripts = {}
        for side, line in SIDES.items():
            scripts[side] = Path(work) / f"quickstart_{side}.py"
            scripts[side].write_text(QUICKSTART.format(import_line=line))
        for _ in range(2):  # warm the page cache for both sides: not measured
            for line in SIDES.values():
                wall([sys.executable, "-c", line], work)
        for rep in range(args.reps):
            order = list(SIDES) if rep % 2 == 0 else list(reversed(SIDES))
            for side in order:
                times[("import", side)].append(wall([sys.executable, "-c", SIDES[side]], work))
                times[("quickstart", side)].append(wall([sys.executable, str(scripts[side])], work))
            print(f"rep {rep + 1}/{args.reps}", file=sys.stderr, flush=True)
    print(f"\nfresh processes, seconds of wall time, median (min-max) over {args.reps} interleaved repetitions")
    print(f"{'':34} {'Optuna':>18} {'hpcopt':>18} {'hpcopt / Optuna':>22}")
    for kind, goal in (("import", 1.5), ("quickstart", 2.0)):
        ours, theirs = times[(kind, "hpcopt")], times[(kind, "optuna")]
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
        label = "import" if kind == "import" else "quick start (100 trials)"
        print(f"{label:34} {spread(theirs):>18} {spread(ours):>18} {spread(ratios):>22}  (goal <= {goal})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
