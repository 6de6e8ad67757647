"""Population-based training against bo and random search at equal total epochs, on a
task where the schedule matters (``examples/pbt/task.py``: SGD on the digits MLP; learning rate,
momentum and dropout), every campaign run end to end by a real agent job.

    python benchmarks/optimizers/pbt.py [--seeds 5] [--ranks 4] [--epochs 24]

Per seed, interleaved: ``pbt`` with a population of 8 trained in intervals of
``--interval`` epochs (8 x epochs/interval trials), and ``bo`` and ``random`` with 8
trials of ``--epochs`` epochs each: the same epochs in all, each with 2 folds. The
score of a campaign is its best final validation loss (the fold mean): for pbt the best
member at its last epoch, for the others the best trial. Printed: per algorithm the
mean and spread over seeds, the epochs trained (counted from the learning curves), the
wall time, and pbt's share of seeds on which it beat each peer.

``--json FILE`` also writes every run (Ray Tune's PBT runs in its own environment:
``pbt_ray.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
from run import ROOT, Server, agent_cmd, env, mpi_cmd

TASK = "examples/pbt/task.py:ScheduleDigits"
SPACE = {
    "lr": {"type": "real", "low": 1e-3, "high": 1.0, "scale": "log"},
    "momentum": {"type": "real", "low": 0.0, "high": 0.99},
    "dropout": {"type": "real", "low": 0.0, "high": 0.6},
}
POPULATION, FOLDS = 8, 2


def spec(algorithm: str, seed: int, epochs: int, interval: int, explore: str = "perturb") -> dict[str, Any]:
    algo: dict[str, Any] = {"name": algorithm, "seed": seed}
    trials = POPULATION
    if algorithm == "pbt":
        algo["options"] = {"population": POPULATION, "interval": interval, "explore": explore}
        trials = POPULATION * -(-epochs // interval)
    return {
        "name": f"pbt-bench-{algorithm}-{seed}",
        "objective": {"metric": "val_loss", "direction": "minimize"},
        "space": SPACE,
        "algorithm": algo,
        "budget": {"max_trials": trials, "max_parallel": POPULATION},
        "folds": FOLDS,
        "training": {"task": TASK, "epochs": epochs, "ranks_per_fold": 1, "options": {"seed": seed}},
    }


def run(server: Server, algorithm: str, seed: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from hpcopt import Client

    with Client(server.target) as c:
        cid = int(c.create_campaign(spec(algorithm, seed, args.epochs, args.interval, args.explore)).id)
    cmd = [*mpi_cmd(args.ranks), *agent_cmd(server.target, cid, workdir / "ckpt"), "--groups", str(args.ranks)]
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=3600)
    wall = time.monotonic() - t0
    if out.returncode != 0:
        raise SystemExit(f"{algorithm} seed {seed}: agent failed ({out.returncode}):\n{out.stderr[-4000:]}")
    trials = server.get(f"/campaigns/{cid}/trials?limit=1000")["trials"]
    done = [t for t in trials if t["state"] == "COMPLETED"]
    if algorithm == "pbt":
        done = [t for t in done if t["lineage"] and t["lineage"]["stop_epoch"] == args.epochs]
    best = min(done, key=lambda t: t["value"])
    epochs = 0
    for t in trials:
        lin = t["lineage"]
        span = (lin["stop_epoch"] - lin["start_epoch"]) if lin else args.epochs
        epochs += span * len([f for f in t["folds"] if f["finished"]])
    accuracy = statistics.fmean(f["metrics"]["val_accuracy"] for f in best["folds"])
    exploits = sum(1 for t in trials if t["lineage"] and t["lineage"]["exploited"])
    return {
        "algorithm": algorithm,
        "seed": seed,
        "val_loss": best["value"],
        "val_accuracy": accuracy,
        "epochs": epochs,
        "wall_s": wall,
        "exploits": exploits,
        "params": best["params"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=24)
    ap.add_argument("--interval", type=int, default=3)
    ap.add_argument("--only", default="pbt,bo,random")
    ap.add_argument("--explore", default="perturb", choices=["perturb", "pb2"], help="pbt's explore step")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    algorithms = args.only.split(",")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp))
        try:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                for algorithm in algorithms:  # interleaved: one seed of each, then the next
                    row = run(server, algorithm, seed, args, Path(tmp))
                    rows.append(row)
                    print(
                        f"seed {seed} {algorithm:6s} val_loss {row['val_loss']:.4f} acc {row['val_accuracy']:.4f} "
                        f"epochs {row['epochs']} wall {row['wall_s']:.0f} s exploits {row['exploits']}",
                        flush=True,
                    )
        finally:
            server.close()
    print(f"\n{args.seeds} seeds, {POPULATION} x {args.epochs} epochs x {FOLDS} folds per campaign")
    print("| algorithm | best val loss, mean (min-max) | val accuracy, mean | epochs trained | wall s, mean |")
    print("|---|---|---|---|---|")
    for a in algorithms:
        mine = [r for r in rows if r["algorithm"] == a]
        loss = [r["val_loss"] for r in mine]
        print(
            f"| {a} | {statistics.fmean(loss):.4f} ({min(loss):.4f}-{max(loss):.4f}) | "
            f"{statistics.fmean(r['val_accuracy'] for r in mine):.4f} | {sorted({r['epochs'] for r in mine})} | "
            f"{statistics.fmean(r['wall_s'] for r in mine):.0f} |"
        )
    if "pbt" in algorithms:
        pbt = {r["seed"]: r["val_loss"] for r in rows if r["algorithm"] == "pbt"}
        for a in algorithms:
            if a == "pbt":
                continue
            other = {r["seed"]: r["val_loss"] for r in rows if r["algorithm"] == a}
            wins = sum(pbt[s] < other[s] for s in pbt)
            ratio = statistics.fmean(pbt.values()) / statistics.fmean(other.values())
            print(f"pbt vs {a}: lower loss on {wins}/{len(pbt)} seeds; mean loss ratio pbt/{a} {ratio:.3f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
