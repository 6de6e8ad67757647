"""Script-task overhead: the same model, data, batch, evaluation and checkpoint per
epoch trained as a ``Task`` (``task.py:Synthetic``) and as a training script the agent
starts per fold (``script_ddp.py``), on the same ranks, interleaved.

    python benchmarks/training/script_overhead.py [--ranks 2] [--epochs 4] [--reps 7]

Two figures per repetition, script over Task (target >= 0.95 for the first):

1. samples/s of an epoch (training, evaluation, checkpoint; epochs 2.. of fold 0,
   median), the agent's log for the Task and the script's own report for the script;
2. samples/s of the whole trial (K folds x epochs x training samples over the trial's
   wall time on the server's clock, acquire to complete): what the script's process
   start (Python and torch imported once per fold) costs.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import ROOT, Server, agent_cmd, env, mpi_cmd

TASK = "benchmarks/training/task.py:Synthetic"
SCRIPT = {"script": "benchmarks/training/script_ddp.py"}
TASK_RATE = re.compile(r"fold 0 epoch (\d+)/\d+: .*?, ([\d.]+) samples/s\)")
SCRIPT_RATE = re.compile(r"fold 0 epoch (\d+)/\d+: .*?samples_per_second=([\d.e+]+)")


def trial(server: Server, task: Any, ranks: int, folds: int, epochs: int, workdir: Path) -> tuple[float, float]:
    """(median samples/s of fold 0's epochs after the first, whole-trial samples/s)."""
    from hpcopt import Client

    spec = {
        "name": "script-overhead",
        "objective": {"metric": "val_loss"},
        "space": {"unused": {"type": "categorical", "choices": [0]}},
        "budget": {"max_trials": 1, "max_parallel": 1},
        "folds": folds,
        "training": {"task": task, "epochs": epochs, "ranks_per_fold": ranks},
    }
    with Client(server.target) as c:
        cid = int(c.create_campaign(spec).id)
    cmd = [*mpi_cmd(ranks), *agent_cmd(server.target, cid, workdir / "ckpt"), "--groups", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"agent failed ({out.returncode}):\n{out.stderr[-4000:]}")
    [t] = server.get(f"/campaigns/{cid}/trials")["trials"]
    if t["state"] != "COMPLETED":
        raise SystemExit(f"trial {t['id']} is {t['state']}: {t.get('error')}")
    wall = (datetime.fromisoformat(t["finished_at"]) - datetime.fromisoformat(t["started_at"])).total_seconds()
    pattern = SCRIPT_RATE if isinstance(task, dict) else TASK_RATE
    rates = [float(r) for e, r in pattern.findall(out.stderr) if int(e) > 1]
    if not rates:
        raise SystemExit(f"no epoch rates in the agent's log:\n{out.stderr[-3000:]}")
    samples = int(os.environ.get("HPCOPT_BENCH_SAMPLES", "32768"))
    train = samples - samples // folds  # every fold trains on the others
    return statistics.median(rates), folds * epochs * train / wall


def spread(values: list[float], fmt: str = ".0f") -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--folds", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--small", action="store_true", help="2,048 samples: a smoke run, not a measurement")
    args = ap.parse_args()
    if args.small:
        os.environ["HPCOPT_BENCH_SAMPLES"] = "2048"
    workdir = Path(tempfile.mkdtemp(prefix="hpcopt-script-bench-"))
    server = Server(workdir)
    rows: dict[str, list[tuple[float, float]]] = {"task": [], "script": []}
    try:
        for rep in range(args.reps):
            order = ["task", "script"] if rep % 2 == 0 else ["script", "task"]  # drift hits both sides
            for side in order:
                task = TASK if side == "task" else SCRIPT
                rows[side].append(trial(server, task, args.ranks, args.folds, args.epochs, workdir))
            print(f"rep {rep + 1}/{args.reps} done ({time.strftime('%H:%M:%S')})", file=sys.stderr, flush=True)
    finally:
        server.close()
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"\n{args.ranks} ranks per fold (DDP, gloo), K={args.folds} folds in turn, {args.epochs} epochs, "
        f"{args.reps} repetitions interleaved; median (min-max)"
    )
    print(f"{'':28} {'epoch samples/s':>22} {'trial samples/s':>22}")
    for side, label in (("task", "Task (agent's loop)"), ("script", "script task (its own loop)")):
        epoch = [r[0] for r in rows[side]]
        whole = [r[1] for r in rows[side]]
        print(f"{label:28} {spread(epoch):>22} {spread(whole):>22}")
    per_epoch = [s[0] / t[0] for s, t in zip(rows["script"], rows["task"], strict=True)]
    per_trial = [s[1] / t[1] for s, t in zip(rows["script"], rows["task"], strict=True)]
    print(f"script / Task, per repetition: epoch {spread(per_epoch, '.3f')} (target >= 0.95), ", end="")
    print(f"whole trial {spread(per_trial, '.3f')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
