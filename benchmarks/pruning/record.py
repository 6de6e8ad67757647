r"""Records learning curves of real training once, for the pruning replay (replay.py).

Trains ``--configs`` random configurations of a task with K-fold cross-validation for
``--epochs`` epochs each, with the agent's fold split and the task's own model,
optimizer, loss and evaluation, and writes every (config, fold, epoch) value of the
objective, and the seconds that epoch took to train and evaluate, to
``data/<name>.json.gz`` (or ``--out``). The committed files were made with::

    .venv/bin/python benchmarks/pruning/record.py digits
    .venv/bin/python benchmarks/pruning/record.py diabetes

(about 6 and 2 minutes on one core of the development machine), and the multi-fidelity
benchmark's larger tables (``benchmarks/multifidelity/data``) with::

    .venv/bin/python benchmarks/pruning/record.py digits --configs 300 --seed 1 \
        --out benchmarks/multifidelity/data/digits.json.gz
    .venv/bin/python benchmarks/pruning/record.py diabetes --configs 300 --seed 1 \
        --out benchmarks/multifidelity/data/diabetes.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE)]

from hpcopt_agent.folds import kfold, train_indices  # noqa: E402
from hpcopt_server.optimizers import Problem, RandomSearch, SearchSpace  # noqa: E402

TASKS: dict[str, dict[str, Any]] = {
    "digits": {"metric": "val_loss", "epochs": 20, "stratified": True},
    "diabetes": {"metric": "val_mse", "epochs": 30, "stratified": False},
}


def load(name: str) -> tuple[Any, dict[str, Any]]:
    if name == "digits":
        import yaml

        from examples.digits.task import DigitsTask

        spec = yaml.safe_load((ROOT / "examples/digits/campaign.yaml").read_text())
        return DigitsTask(), spec["space"]
    from diabetes_task import SPACE, DiabetesTask

    return DiabetesTask(), SPACE


def train(
    task: Any, params: dict[str, Any], train_idx: np.ndarray, val_idx: np.ndarray, epochs: int, metric: str, seed: int
) -> tuple[list[float], list[float]]:
    """The objective after each epoch, and each epoch's seconds (training and evaluation)."""
    torch.manual_seed(seed)
    data = task.dataset()
    x, y = data.tensors
    model = task.build(params)
    opt = task.optimizer(params, model)
    bs = task.batch_size(params)
    gen = np.random.default_rng(seed)
    curve, seconds = [], []
    for _ in range(epochs):
        t0 = time.perf_counter()
        model.train()
        order = gen.permutation(train_idx)
        for i in range(0, len(order), bs):
            idx = torch.as_tensor(order[i : i + bs])
            task.train_step(model, opt, (x[idx], y[idx]), params)
        model.eval()
        with torch.no_grad():
            vi = torch.as_tensor(val_idx)
            value = task.evaluate(model, [(x[vi], y[vi])], params)[metric]
        curve.append(value if np.isfinite(value) else float("nan"))
        seconds.append(round(time.perf_counter() - t0, 5))
    return curve, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task", choices=sorted(TASKS))
    ap.add_argument("--configs", type=int, default=80)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="the file to write (default: data/<task>.json.gz)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = TASKS[args.task]
    task, space = load(args.task)
    n = len(task.dataset())
    labels = task.labels() if cfg["stratified"] else None
    folds = kfold(n, args.folds, args.seed, labels)
    configs = RandomSearch(Problem(SearchSpace(space), "minimize", args.seed)).suggest(args.configs, [])
    curves, seconds = [], []
    t0 = time.perf_counter()
    for c, params in enumerate(configs):
        runs = [
            train(task, params, train_indices(n, v), v, cfg["epochs"], cfg["metric"], args.seed * 1000 + c)
            for v in folds
        ]
        curves.append([curve for curve, _ in runs])
        seconds.append([took for _, took in runs])
        final = np.mean([f[-1] for f in curves[-1]])
        print(
            f"{args.task}: config {c + 1}/{len(configs)}: mean final {cfg['metric']} {final:.4g} "
            f"({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    out = args.out or HERE / "data" / f"{args.task}.json.gz"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "task": args.task,
        "metric": cfg["metric"],
        "direction": "minimize",
        "folds": args.folds,
        "epochs": cfg["epochs"],
        "space": space,
        "configs": configs,
        "curves": curves,
        "seconds": seconds,
    }
    with gzip.open(out, "wt") as f:
        json.dump(doc, f)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
