"""Ray Tune's PBT on the same schedule task and budget as ``pbt.py``, for the peer
column of that benchmark. It runs in an environment of its own (Ray is not a
dependency of hpcopt):

    python3 -m venv /tmp/ray && /tmp/ray/bin/pip install torch==2.13.0 "ray[tune]" scikit-learn
    /tmp/ray/bin/python benchmarks/optimizers/pbt_ray.py [--seeds 5] [--epochs 24] [--interval 3]

The trainable is ``examples/pbt/task.py``'s model in plain PyTorch: the same MLP, SGD with the
trial's learning rate and momentum, dropout, batch 32, and a member's score the mean
validation loss over 2 stratified folds (scikit-learn's split, not hpcopt's: the same
sizes, other samples). PBT as Ray documents it: population 8, ``perturbation_interval``
``--interval`` epochs, quantile 0.25, resample probability 0.25, perturbation factors
1.2 and 0.8, checkpoints written every interval through ``tune.report`` and restored
with ``tune.get_checkpoint``. Printed per seed and overall: the best member's final
validation loss and the epochs every process trained (a restore that lost its
checkpoint trains more).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from ray import tune  # type: ignore[import-not-found]
from ray.tune.schedulers import PopulationBasedTraining  # type: ignore[import-not-found]
from sklearn.datasets import load_digits
from sklearn.model_selection import StratifiedKFold
from torch import nn

FOLDS, POPULATION, BATCH = 2, 8, 32


def model(dropout: float) -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, 128),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(128, 128),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(128, 10),
    )


def trainable(config: dict[str, Any]) -> None:
    torch.set_num_threads(1)
    x, y = load_digits(return_X_y=True)
    xt, yt = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    splits = list(StratifiedKFold(FOLDS, shuffle=True, random_state=config["seed"]).split(x, y))
    models = [model(config["dropout"]) for _ in range(FOLDS)]
    opts = [torch.optim.SGD(m.parameters(), lr=config["lr"], momentum=config["momentum"]) for m in models]
    epoch = 0
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = torch.load(Path(d) / "state.pt", weights_only=True)
        epoch = int(state["epoch"])
        for m, o, ms, os_ in zip(models, opts, state["models"], state["opts"], strict=True):
            m.load_state_dict(ms)
            o.load_state_dict(os_)
            for g in o.param_groups:  # the explored values, not the copied ones
                g["lr"], g["momentum"] = config["lr"], config["momentum"]
    for m in models:
        for mod in m.modules():
            if isinstance(mod, nn.Dropout):
                mod.p = config["dropout"]
    rng = np.random.default_rng([config["seed"], epoch])
    trained = 0
    while epoch < config["epochs"]:
        losses = []
        for (tr, va), m, o in zip(splits, models, opts, strict=True):
            m.train()
            order = rng.permutation(tr)
            for i in range(0, len(order), BATCH):
                b = order[i : i + BATCH]
                o.zero_grad(set_to_none=True)
                F.cross_entropy(m(xt[b]), yt[b]).backward()  # type: ignore[no-untyped-call]
                o.step()
            m.eval()
            with torch.no_grad():
                losses.append(float(F.cross_entropy(m(xt[va]), yt[va])))
        epoch += 1
        trained += 1
        with open(config["counter"], "a") as fh:  # every epoch any process trains, restores included
            fh.write("1\n")
        metrics = {"val_loss": statistics.fmean(losses), "epoch": epoch, "trained_here": trained}
        if epoch % config["interval"] == 0 or epoch == config["epochs"]:
            with tempfile.TemporaryDirectory() as d:
                torch.save(
                    {
                        "epoch": epoch,
                        "models": [m.state_dict() for m in models],
                        "opts": [o.state_dict() for o in opts],
                    },
                    Path(d) / "state.pt",
                )
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))
        else:
            tune.report(metrics)


def run(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    space = {
        "lr": tune.loguniform(1e-3, 1.0),
        "momentum": tune.uniform(0.0, 0.99),
        "dropout": tune.uniform(0.0, 0.6),
    }
    scheduler = PopulationBasedTraining(
        time_attr="epoch",
        perturbation_interval=args.interval,
        hyperparam_mutations=space,
        quantile_fraction=0.25,
        resample_probability=0.25,
        perturbation_factors=(1.2, 0.8),
        synch=False,
    )
    counter = Path(args.storage) / f"epochs-{seed}.txt"
    counter.parent.mkdir(parents=True, exist_ok=True)
    counter.write_text("")
    config = {**space, "seed": seed, "epochs": args.epochs, "interval": args.interval, "counter": str(counter)}
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 0.5}),
        param_space=config,
        tune_config=tune.TuneConfig(
            metric="val_loss",
            mode="min",
            scheduler=scheduler,
            num_samples=POPULATION,
            max_concurrent_trials=4,
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(storage_path=args.storage, name=f"pbt-{seed}", verbose=0),
    )
    results = tuner.fit()
    finals = [float(r.metrics["val_loss"]) for r in results if r.metrics and r.metrics.get("epoch") == args.epochs]
    trained = len(counter.read_text().splitlines())
    return {"algorithm": "ray-pbt", "seed": seed, "val_loss": min(finals), "epochs": trained * FOLDS}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=24)
    ap.add_argument("--interval", type=int, default=3)
    ap.add_argument("--storage", default=os.path.join(tempfile.gettempdir(), "ray-pbt-bench"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        row = run(seed, args)
        rows.append(row)
        print(f"seed {seed} ray-pbt val_loss {row['val_loss']:.4f} epochs {row['epochs']}", flush=True)
    loss = [r["val_loss"] for r in rows]
    print(
        f"\nray-pbt: best val loss {statistics.fmean(loss):.4f} ({min(loss):.4f}-{max(loss):.4f}) "
        f"over {len(rows)} seeds"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
