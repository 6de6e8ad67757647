"""DASO against allreduce over an emulated slow link between nodes.

    python benchmarks/training/daso.py [--reps 7] [--epochs 4] [--link 0.02]

4 ranks in one fold group as 2 nodes x 2 ranks (daso.node_size 2) on this one machine.
The slow link is emulated, and only where traffic crosses it: ``--link`` seconds of
latency are added to every exchange between the two "nodes", i.e. to each DASO global
sync (a non-blocking one completes no earlier than that after it started, so DASO can
hide it behind its S batches; a blocking one sleeps it) and to every allreduce step (the
gradient allreduce of each step crosses the link; DDP's node-local part is free here as
it is with DASO). Bandwidth is not capped: the benchmark model is 1.2 M parameters, so
latency dominates a real inter-node exchange of it too.

Same model, data, epochs and seeds for both; DASO with warm-up 1 and cool-down 1 (the
defaults for short trials scale with the epochs). Prints epoch time (s per epoch after
the first, as the agent logs it: training, evaluation, checkpoint) and final validation accuracy, per scheme, and
DASO's speed-up over allreduce per repetition (the two interleaved, >= 7 reps for a
figure near 1).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from run import Server
from schemes import run

SAMPLES = 32768


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--link", type=float, default=0.02, help="seconds of latency per exchange across nodes")
    ap.add_argument("--small", action="store_true", help="2,048 samples: a smoke run, not a measurement")
    args = ap.parse_args()
    samples = 2048 if args.small else SAMPLES
    os.environ["HPCOPT_BENCH_SAMPLES"] = str(samples)
    daso = {"daso": {"node_size": 2, "warmup_epochs": 1, "cooldown_epochs": 1}}
    workdir = Path(tempfile.mkdtemp(prefix="hpcopt-daso-"))
    server = Server(workdir)
    rows: dict[str, dict[str, list[float]]] = {n: {"epoch_s": [], "acc": []} for n in ("allreduce", "daso")}
    speedups = []
    try:
        for rep in range(args.reps):
            got = {}
            order = ["allreduce", "daso"] if rep % 2 == 0 else ["daso", "allreduce"]
            for name in order:
                link = {"HPCOPT_BENCH_LINK_S": str(args.link)}
                if name == "allreduce":
                    link["HPCOPT_BENCH_LINK_EVERY_STEP"] = "1"
                _, acc, epoch_s = run(server, name, 4, args.epochs, workdir, 0.0, daso if name == "daso" else {}, link)
                got[name] = epoch_s
                rows[name]["epoch_s"].append(epoch_s)
                rows[name]["acc"].append(acc)
                print(f"rep {rep + 1}/{args.reps} {name}: {epoch_s:.2f} s/epoch, val_acc {acc:.3f}",
                      file=sys.stderr, flush=True)  # fmt: skip
            speedups.append(got["allreduce"] / got["daso"])
    finally:
        server.close()
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"\nDASO vs allreduce: 4 ranks as 2 nodes x 2, {args.epochs} epochs, {samples} samples, emulated "
          f"inter-node latency {args.link * 1000:g} ms per crossing exchange, {args.reps} reps")  # fmt: skip
    print(f"{'scheme':10} {'s/epoch':>8} {'spread':>15} {'val_acc':>8} {'spread':>15}")
    for name, r in rows.items():
        e, a = r["epoch_s"], r["acc"]
        print(f"{name:10} {statistics.median(e):>8.2f} {min(e):>7.2f}-{max(e):<7.2f} "
              f"{statistics.median(a):>8.3f} {min(a):>7.3f}-{max(a):<7.3f}")  # fmt: skip
    print(f"DASO speed-up (allreduce s/epoch over DASO's, per rep): median {statistics.median(speedups):.2f}x, "
          f"range {min(speedups):.2f}-{max(speedups):.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
