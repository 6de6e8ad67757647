"""A memory limit the agent measures, on a space where a third of the configurations do
not fit: how many launches exceed it once the search has seen its first failures, and
the best feasible accuracy at equal compute, for our constrained ``bo`` next to ``bo``
without the constraint (out-of-memory failures imputed, as before constraints) and
Optuna 5's ``GPSampler`` with ``trial.set_constraint``, on the same replayed data.

    python benchmarks/constraints_memory.py --record      # once: ~10 min, writes the data
    python benchmarks/constraints_memory.py [--seeds 10] [--limit 0.33]

**The data (``--record``).** The digits MLP (``examples/digits/task.py``, AdamW, ReLU,
no dropout) over width 64..2048 (6 powers of two), depth 1..3, batch 32..512 (3) and
learning rate 1e-3..3e-2 (4): 216 configurations, each trained for 8 epochs on 80 % of
the digits and scored on the rest, one process per (width, depth, batch). Each
configuration's peak resident memory is measured the agent's way
(``hpcopt_agent.peaks``: the high-water mark reset at each epoch's start, read at its
end, the largest over epochs), with its validation accuracy and its seconds.

**The replay.** The searched space is the recorded grid, as integers in order (width
64·2^k, batch 32·4^k, the k-th learning rate, depth): every suggestion is a recorded
configuration. (A continuous space snapped to the grid made flat plateaus that a GP
reads as one point: bo kept suggesting distinct points of one recorded configuration.) The memory limit is set so
that ``--limit`` (default a third) of the configurations exceed it. A configuration
over it fails as the agent reports an allocation the host refused (``MemoryError:
Unable to allocate ...``) after its first epoch's seconds; one under it completes with
its accuracy and its ``peak_host_memory_mb``. Ours run through the embedded study (the
real server: constraint models, screening and the hard limits before launch; a
configuration refused before launch costs nothing). Optuna is told an out-of-memory
trial as complete at accuracy 0 with its constraint broken by 10 % of the limit (what
ours records), so it learns from it as ours does.

Every method runs until it has spent the same compute (the seconds of 80 median
configurations, about 32 s of the recorded training) or made 200 trials. The table
gives, over ``--seeds`` seeds: launches over the limit after the method's first 10
out-of-memory failures (the goal is 0), all launches over it, the best feasible
accuracy at that compute (median and IQR, and wins against ours by seed), and
configurations refused before launch. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "constraints_data" / "digits_memory.json"
WIDTHS = [64, 128, 256, 512, 1024, 2048]
DEPTHS = [1, 2, 3]
BATCHES = [32, 128, 512]
LRS = [1e-3, 3e-3, 1e-2, 3e-2]
EPOCHS = 8
METHODS = ("bo", "bo unconstrained", "optuna-gp", "random")
MAX_TRIALS = 200
#: The compute each method gets: the seconds of this many median configurations.
BUDGET = 80

# -- recording ---------------------------------------------------------------------------

_RECORD_ONE = r"""
import json, sys, time
import torch
from hpcopt_agent.peaks import host_peak_mb, reset_host_peak
sys.path.insert(0, "examples/digits")
from task import DigitsTask
torch.set_num_threads(1)
width, depth, batch = (int(a) for a in sys.argv[1:4])
lrs = [float(a) for a in sys.argv[4].split(",")]
epochs = int(sys.argv[5])
task = DigitsTask()
g = torch.Generator().manual_seed(0)
order = torch.randperm(len(task.y), generator=g)
cut = int(0.8 * len(order))
tr, va = order[:cut], order[cut:]
out = []
for lr in lrs:
    torch.manual_seed(0)
    params = {"width": width, "depth": depth, "activation": "relu", "dropout": 0.0, "lr": lr, "weight_decay": 0.0}
    model = task.build(params)
    opt = task.optimizer(params, model)
    peak, t0, first = 0.0, time.perf_counter(), None
    for epoch in range(epochs):
        reset_host_peak()
        model.train()
        perm = tr[torch.randperm(len(tr), generator=g)]
        for i in range(0, len(perm), batch):
            idx = perm[i : i + batch]
            opt.zero_grad()
            loss = task.loss(model(task.x[idx]), (task.x[idx], task.y[idx]))
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            acc = task.evaluate(model, [(task.x[va], task.y[va])], params)["val_accuracy"]
        peak = max(peak, host_peak_mb())
        if first is None:
            first = time.perf_counter() - t0
    out.append({"width": width, "depth": depth, "batch": batch, "lr": lr, "val_accuracy": acc,
                "peak_host_memory_mb": peak, "seconds": time.perf_counter() - t0, "first_epoch_seconds": first})
    del model, opt
print(json.dumps(out))
"""


def record(path: Path) -> None:
    rows: list[dict[str, Any]] = []
    combos = list(itertools.product(WIDTHS, DEPTHS, BATCHES))
    t0 = time.perf_counter()
    for k, (w, dpt, b) in enumerate(combos, 1):
        cmd = [sys.executable, "-c", _RECORD_ONE, str(w), str(dpt), str(b), ",".join(map(str, LRS)), str(EPOCHS)]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        got = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, check=True)
        rows += json.loads(got.stdout.strip().splitlines()[-1])
        print(
            f"[{k}/{len(combos)} {time.perf_counter() - t0:.0f}s] width {w} depth {dpt} batch {b}: "
            f"peak {rows[-1]['peak_host_memory_mb']:.0f} MiB, acc {max(r['val_accuracy'] for r in rows[-4:]):.3f}",
            file=sys.stderr,
            flush=True,
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"epochs": EPOCHS, "recorded": time.strftime("%Y-%m-%d"), "configurations": rows}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {len(rows)} configurations to {path}", file=sys.stderr)


# -- the replay --------------------------------------------------------------------------


class Replay:
    def __init__(self, rows: list[dict[str, Any]], share_over: float):
        self.rows = rows
        self.by_key = {(r["width"], r["depth"], r["batch"], r["lr"]): r for r in rows}
        peaks = sorted(r["peak_host_memory_mb"] for r in rows)
        self.limit = float(np.quantile(peaks, 1 - share_over))
        self.budget = BUDGET * float(np.median([r["seconds"] for r in rows]))
        fits = [r for r in rows if r["peak_host_memory_mb"] <= self.limit]
        self.best_feasible = max(r["val_accuracy"] for r in fits)
        self.best_any = max(r["val_accuracy"] for r in rows)

    def run(self, params: dict[str, Any]) -> dict[str, Any]:
        """The recorded configuration at the grid's indices ``params``."""
        key = (
            WIDTHS[int(params["width_step"])],
            DEPTHS[int(params["depth"]) - DEPTHS[0]],
            BATCHES[int(params["batch_step"])],
            LRS[int(params["lr_step"])],
        )
        return self.by_key[key]

    @staticmethod
    def space() -> dict[str, Any]:
        """The recorded grid as integers, in order: width 64 * 2^k, batch 32 * 4^k, the
        k-th learning rate (a log scale each), depth."""
        return {
            "width_step": {"type": "int", "low": 0, "high": len(WIDTHS) - 1},
            "depth": {"type": "int", "low": DEPTHS[0], "high": DEPTHS[-1]},
            "batch_step": {"type": "int", "low": 0, "high": len(BATCHES) - 1},
            "lr_step": {"type": "int", "low": 0, "high": len(LRS) - 1},
        }


OOM = (
    "fold 0, epoch 1: Traceback (most recent call last):\n"
    '  File "examples/digits/task.py", line 44, in build\n'
    "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 512. MiB for an array"
)


def run_ours(replay: Replay, seed: int, constrained: bool, algorithm: str = "bo") -> list[dict[str, Any]]:
    """Our search through the embedded study (the real server, on a scratch SQLite file)."""
    from hpcopt_server import Study

    spec: dict[str, Any] = {
        "name": f"memory-{seed}",
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
        "space": replay.space(),
        "algorithm": {"name": algorithm, "seed": seed},
        "budget": {"max_trials": MAX_TRIALS, "max_parallel": 1},
        "training": {"task": "examples/digits/task.py:task", "epochs": EPOCHS},
        # Without the constraint, out-of-memory failures in a row pause a campaign (they
        # are failures); a user who expects them turns that off.
        "pause_after_failures": 0,
    }
    if constrained:
        spec["constraints"] = [{"metric": "peak_host_memory_mb", "max": replay.limit}]
    events: list[dict[str, Any]] = []
    spent = 0.0
    with tempfile.TemporaryDirectory() as scratch, Study(Path(scratch) / "replay.db", spec) as study:
        while spent < replay.budget:
            trial = study.ask()
            if trial is None:
                break
            row = replay.run(trial.params)
            over = row["peak_host_memory_mb"] > replay.limit
            cost = row["first_epoch_seconds"] if over else row["seconds"]
            spent += cost
            events.append({"over": over, "acc": None if over else row["val_accuracy"], "spent": spent})
            if over:
                study.tell(trial, state="FAILED", reason=OOM)
            else:
                measured = {"val_accuracy": row["val_accuracy"], "peak_host_memory_mb": row["peak_host_memory_mb"]}
                study.tell(trial, measured)
        refused = sum(1 for t in study.trials if t.broken.startswith("not started"))
    events.append({"refused": refused})
    return events


def run_optuna(replay: Replay, seed: int) -> list[dict[str, Any]]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.GPSampler(seed=seed))
    space = replay.space()
    dists: dict[str, optuna.distributions.BaseDistribution] = {
        name: optuna.distributions.IntDistribution(p["low"], p["high"]) for name, p in space.items()
    }
    events: list[dict[str, Any]] = []
    spent = 0.0
    while spent < replay.budget and len(events) < MAX_TRIALS:
        trial = study.ask(dists)
        row = replay.run(trial.params)
        over = row["peak_host_memory_mb"] > replay.limit
        spent += row["first_epoch_seconds"] if over else row["seconds"]
        events.append({"over": over, "acc": None if over else row["val_accuracy"], "spent": spent})
        if over:  # what ours records for it: broken by 10 % of the limit, no accuracy
            trial.set_constraint("memory", 0.1 * replay.limit)
            study.tell(trial, 0.0)
        else:
            trial.set_constraint("memory", row["peak_host_memory_mb"] - replay.limit)
            study.tell(trial, row["val_accuracy"])
    events.append({"refused": 0})
    return events


def summarize(events: list[dict[str, Any]], budget: float) -> dict[str, Any]:
    launches = [e for e in events if "over" in e]
    refused = events[-1]["refused"]
    failures, late = 0, 0
    for e in launches:
        if e["over"]:
            late += failures >= 10
            failures += 1
    within = [e for e in launches if e["spent"] <= budget]
    accs = [e["acc"] for e in within if e["acc"] is not None]
    return {
        "launches": len(launches),
        "over": failures,
        "late_over": late,
        "best": max(accs) if accs else math.nan,
        "refused": refused,
    }


def one(method: str, replay: Replay, seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    if method == "bo":
        events = run_ours(replay, seed, constrained=True)
    elif method == "bo unconstrained":
        events = run_ours(replay, seed, constrained=False)
    elif method == "random":
        events = run_ours(replay, seed, constrained=True, algorithm="random")
    else:
        events = run_optuna(replay, seed)
    return {"method": method, "seed": seed, **summarize(events, replay.budget), "seconds": time.perf_counter() - t0}


def table(rows: list[dict[str, Any]], methods: list[str], replay: Replay) -> str:
    lines = [
        f"limit {replay.limit:.0f} MiB ({sum(r['peak_host_memory_mb'] > replay.limit for r in replay.rows)} of "
        f"{len(replay.rows)} configurations over it); compute {replay.budget:.0f} s each; best feasible accuracy "
        f"{replay.best_feasible:.4f} (best over the limit {replay.best_any:.4f})",
        "",
        "| method | launches over the limit after 10 failures | all launches over it | launches | refused before "
        "launch | best feasible accuracy, median (IQR) | ours higher / lower / same |",
        "|---|---|---|---|---|---|---|",
    ]
    ours = {r["seed"]: r["best"] for r in rows if r["method"] == "bo"}
    for m in methods:
        rs = [r for r in rows if r["method"] == m]
        best = [r["best"] for r in rs]
        q1, q2, q3 = (float(np.nanquantile(best, q)) for q in (0.25, 0.5, 0.75))
        pair = ""
        if m != "bo":
            higher = sum(ours[r["seed"]] > r["best"] for r in rs)
            lower = sum(ours[r["seed"]] < r["best"] for r in rs)
            pair = f"{higher} / {lower} / {len(rs) - higher - lower}"
        lines.append(
            f"| {m} | {sum(r['late_over'] for r in rs)} (max {max(r['late_over'] for r in rs)}) | "
            f"{np.median([r['over'] for r in rs]):.0f} median | {np.median([r['launches'] for r in rs]):.0f} median | "
            f"{np.median([r['refused'] for r in rs]):.0f} median | {q2:.4f} ({q1:.4f}-{q3:.4f}) | {pair} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", action="store_true", help=f"train every configuration and write {DATA.name}")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--limit", type=float, default=1 / 3, help="the share of configurations over the memory limit")
    ap.add_argument("--only", default=",".join(METHODS), help=f"methods, of {', '.join(METHODS)}")
    ap.add_argument("--out", type=Path, default=None, help="also write every run as JSON here")
    args = ap.parse_args()
    if args.record:
        record(DATA)
        return
    if not DATA.exists():
        ap.error(f"{DATA} is missing: record it first (--record)")
    replay = Replay(json.loads(DATA.read_text())["configurations"], args.limit)
    methods = [m.strip() for m in args.only.split(",") if m.strip()]
    for m in methods:
        if m not in METHODS:
            ap.error(f"--only: {m!r} is not one of {', '.join(METHODS)}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rows = []
    t0 = time.perf_counter()
    for seed in range(args.seeds):  # interleaved: every method's seed before the next seed
        for m in methods:
            rows.append(one(m, replay, seed))
            r = rows[-1]
            print(
                f"[{time.perf_counter() - t0:.0f}s] {m} seed {seed}: best {r['best']:.4f}, {r['over']} over "
                f"({r['late_over']} after 10 failures), {r['launches']} launches, {r['refused']} refused",
                file=sys.stderr,
                flush=True,
            )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    print(table(rows, methods, replay))


if __name__ == "__main__":
    main()
