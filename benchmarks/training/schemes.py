"""Training-scheme benchmark: allreduce (DDP) against the parameter-server schemes
(downpour, EASGD, GEM) on the same model, data, ranks and epochs, with every rank at
full speed and with one training rank slowed by a sleep per step.

    python benchmarks/training/schemes.py [--ranks 4] [--epochs 3] [--reps 1] [--slow 0.05]

For each scheme, one trial of one fold (hpcopt's agent under mpiexec, ranks_per_fold
= --ranks): samples/s of the epochs after the first (training + evaluation +
checkpoint; the samples every rank trained) and the validation accuracy after the
last epoch. The slowed run sleeps --slow seconds per step on the last rank (a worker in
every scheme). Asynchronous schemes should lose less throughput to the slow rank than
allreduce, whose every step waits for it.

On a 2-core machine 4 ranks are oversubscribed: absolute rates and the schemes' order
reflect the OS scheduler as much as the schemes; the slowed/normal ratios are the
figure to read.
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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from run import ROOT, TASK, Server, agent_cmd, env, mpi_cmd

SCHEMES: dict[str, dict[str, Any]] = {
    "allreduce": {},
    "downpour": {"downpour": {"sync_every": 1}},
    "easgd": {"easgd": {"tau": 4}},
    "gem": {},  # the task optimizer (Adam) with its lr: GEM's default
}


@dataclass
class Trial:
    rate: float  # median samples/s of epochs 2..
    acc: float  # validation accuracy at the end
    wall_s: float  # the whole trial, acquire to complete (the server's clock)
    curve: list[tuple[float, float]]  # per epoch: (its seconds, its validation accuracy)

    def train_seconds_to(self, target: float) -> float:
        """The epochs' seconds (as the agent logs them: training, evaluation, the
        checkpoint and the report) to the end of the first epoch at ``target`` accuracy
        or more, without the trial's time outside them; close to the agent's
        ``seconds_to_target`` (``training.target``), which leaves out the checkpoint and
        the report; inf if never."""
        spent = 0.0
        for seconds, acc in self.curve:
            spent += seconds
            if acc >= target:
                return spent
        return float("inf")

    def seconds_to(self, target: float) -> float:
        """Seconds from acquire to the end of the first epoch at ``target`` accuracy or
        more (the trial's overhead outside its epochs counted once); inf if never."""
        outside = self.wall_s - sum(s for s, _ in self.curve)
        spent = 0.0
        for seconds, acc in self.curve:
            spent += seconds
            if acc >= target:
                return outside + spent
        return float("inf")


def run(
    server: Server,
    scheme: str,
    ranks: int,
    epochs: int,
    workdir: Path,
    slow: float,
    options: dict[str, Any] | None = None,
    extra_env: dict[str, str] | None = None,
    launcher: Sequence[str] = (),
    slow_ranks: str | None = None,
    training: dict[str, Any] | None = None,
) -> Trial:
    """One trial of ``scheme`` on ``ranks`` ranks (each started through ``launcher``:
    the slow-link harness's ``on_node.sh``), ``slow`` seconds slept per step on the
    ranks ``slow_ranks`` (default: the last); ``training``: more of the spec's training
    fields (``precision``)."""
    from hpcopt import Client

    spec = {
        "name": f"bench-{scheme}",
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
        "space": {"unused": {"type": "categorical", "choices": [0]}},
        "budget": {"max_trials": 1, "max_parallel": 1},
        "folds": 1,
        "training": {
            "task": TASK,
            "scheme": scheme,
            "epochs": epochs,
            "ranks_per_fold": ranks,
            "options": {"checkpoint_every": 1, **(SCHEMES[scheme] if options is None else options)},
            **(training or {}),
        },
    }
    with Client(server.target) as c:
        cid = int(c.create_campaign(spec).id)
    cmd = [*mpi_cmd(ranks), *launcher, *agent_cmd(server.target, cid, workdir / "ckpt"), "--threads", "1"]
    slowed = str(ranks - 1) if slow_ranks is None else slow_ranks
    e = dict(env(), HPCOPT_BENCH_SLOW_S=str(slow), HPCOPT_BENCH_SLOW_RANK=slowed, **(extra_env or {}))
    out = subprocess.run(cmd, capture_output=True, text=True, env=e, cwd=ROOT, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{scheme}: agent failed ({out.returncode}):\n{out.stderr[-4000:]}")
    epochs_seen = re.findall(r"epoch \d+/\d+: (.*?) \(([\d.]+) s, ([\d.]+) samples/s\)", out.stderr)
    rates = [float(r) for _, _, r in epochs_seen]
    curve = [(float(s), float(re.findall(r"val_accuracy=([\d.]+)", m)[0])) for m, s, _ in epochs_seen]
    [trial] = server.get(f"/campaigns/{cid}/trials")["trials"]
    if trial["state"] != "COMPLETED":
        raise SystemExit(f"{scheme}: trial {trial['id']} is {trial['state']}: {trial.get('error')}")
    wall = (datetime.fromisoformat(trial["finished_at"]) - datetime.fromisoformat(trial["started_at"])).total_seconds()
    return Trial(statistics.median(rates[1:] or rates), float(trial["value"]), wall, curve)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--slow", type=float, default=0.05, help="seconds slept per step on the last rank")
    ap.add_argument("--schemes", default=",".join(SCHEMES), help="comma-separated (default: all)")
    ap.add_argument("--small", action="store_true", help="2,048 samples: a smoke run, not a measurement")
    args = ap.parse_args()
    if args.small:
        os.environ["HPCOPT_BENCH_SAMPLES"] = "2048"
    names = args.schemes.split(",")
    workdir = Path(tempfile.mkdtemp(prefix="hpcopt-schemes-"))
    server = Server(workdir)
    rows: dict[str, dict[str, list[float]]] = {n: {"rate": [], "acc": [], "slow": [], "slow_acc": []} for n in names}
    try:
        for rep in range(args.reps):
            # Rotate the order every repetition so drift on a noisy machine spreads evenly.
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for name in order:
                normal = run(server, name, args.ranks, args.epochs, workdir, 0.0)
                slowed = run(server, name, args.ranks, args.epochs, workdir, args.slow)
                rate, acc, slow_rate, slow_acc = normal.rate, normal.acc, slowed.rate, slowed.acc
                for key, value in (("rate", rate), ("acc", acc), ("slow", slow_rate), ("slow_acc", slow_acc)):
                    rows[name][key].append(value)
                print(
                    f"rep {rep + 1}/{args.reps} {name}: {rate:.0f} samples/s, slowed {slow_rate:.0f}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        server.close()
        shutil.rmtree(workdir, ignore_errors=True)

    print(
        f"\nschemes: {args.ranks} ranks in one fold group, {args.epochs} epochs, {args.reps} run(s) each; "
        f"slowed: +{args.slow:g} s per step on rank {args.ranks - 1}"
    )
    print(
        f"{'scheme':10} {'samples/s':>10} {'val_acc':>8} {'slowed':>10} {'val_acc':>8} {'kept':>6} {'vs allreduce':>13}"
    )
    base = rows.get("allreduce", {}).get("rate")
    for name in names:
        r = rows[name]
        rate, slow = statistics.median(r["rate"]), statistics.median(r["slow"])
        versus = f"{rate / statistics.median(base):.2f}x" if base else "-"
        print(
            f"{name:10} {rate:>10.0f} {statistics.median(r['acc']):>8.3f} {slow:>10.0f} "
            f"{statistics.median(r['slow_acc']):>8.3f} {slow / rate:>6.2f} {versus:>13}"
        )
    print("kept: slowed samples/s over normal samples/s (1.00: the slow rank costs nothing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
