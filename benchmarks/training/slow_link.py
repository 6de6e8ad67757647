"""Training schemes over a real slow link: 2 nodes x 2 ranks on this machine, each node
a network namespace whose egress goes through a rate-limited queue (``netns.py``).

    sudo .venv/bin/python benchmarks/training/slow_link.py [--rate 1gbit] [--reps 7]

Three comparisons, each side run in turn within every repetition (the order alternating),
as whole-trial times: an hpcopt trial from acquire to complete on the server's clock,
plain DDP from its process group to its last checkpoint.

- ``ddp``: hpcopt's ``allreduce`` against plain torch DDP (``plain_ddp.py``, the same
  model, data, split, batch, evaluation and checkpoint each epoch), target >= 0.95;
- ``daso``: DASO (its global syncs in fp32, and in bf16) against ``allreduce``, with the
  validation accuracy each ends at (target >= 1.3x at equal accuracy; the HeAT paper
  reports up to 34% over Horovod);
- ``async``: ``downpour``, ``easgd`` and ``gem`` against ``allreduce`` with one node
  slowed (both its ranks sleep ``--slow`` seconds per step; a master, the PS schemes'
  rank 0, sits on the fast node), and downpour and easgd with ``overlap: true``.

The model is the training benchmark's MLP (1.2 M parameters, 4.8 MB of fp32 gradients)
with global batch 256, so each allreduce step moves about 7 MB across the link. Why
1 Gbit/s: a step of this MLP on 64 samples takes ~10-20 ms on a shared CPU core here,
and the link time of one allreduce step at 1 Gbit/s is ~60 ms: about the ratio of an
A100's step to a 100 Gbit/s interconnect's (100x faster compute, 100x faster link),
the communication-bound regime DASO is for. Prints the rate it ran at.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netns import SERVER_ADDR, SlowLink
from run import HERE, ROOT, Server, env, mpi_cmd
from schemes import SCHEMES, run

RANKS, PER_NODE = 4, 2


def spread(values: list[float], fmt: str = ".1f") -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def plain(link: SlowLink, epochs: int) -> float:
    """Plain DDP's whole run (seconds), fold 0 of 5 as hpcopt's one fold is."""
    cmd = [
        *mpi_cmd(RANKS),
        *link.launcher(PER_NODE),
        sys.executable,
        str(HERE / "plain_ddp.py"),
        "--epochs",
        str(epochs),
        "--folds",
        "5",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, env=link.rank_env(env()), cwd=ROOT, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"plain DDP failed ({out.returncode}):\n{out.stderr[-4000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["total"])


Runs = dict[str, list[tuple[float, float]]]  # per side: (seconds, accuracy) of each run


def interleave(reps: int, sides: dict[str, Callable[[], tuple[float, float]]], what: str) -> Runs:
    """Each side once per repetition, the order rotating; (seconds, accuracy) per run."""
    names = list(sides)
    got: Runs = {n: [] for n in names}
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            got[name].append(sides[name]())
        line = ", ".join(f"{n} {got[n][-1][0]:.1f} s" for n in names)
        print(f"{what} rep {rep + 1}/{reps}: {line}", file=sys.stderr, flush=True)
    return got


def table(title: str, got: Runs, base: str, accuracy: bool = True) -> None:
    print(f"\n{title}")
    w = max(12, *(len(n) for n in got))
    head = f"{'':{w}} {'trial s, median (min-max)':>28}"
    print(head + (f" {'val acc':>20}" if accuracy else "") + f" {'speed-up vs ' + base + ', per rep':>34}")
    for name, runs in got.items():
        secs = [s for s, _ in runs]
        ratios = [b[0] / s for b, (s, _) in zip(got[base], runs, strict=True)]
        acc = f" {spread([a for _, a in runs], '.3f'):>20}" if accuracy else ""
        print(f"{name:{w}} {spread(secs):>28}{acc} {spread(ratios, '.2f'):>34}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", default="1gbit", help="each node's egress rate (tc syntax); default 1gbit")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--epochs", type=int, default=6, help="epochs per trial (an HPO trial's length)")
    ap.add_argument("--samples", type=int, default=16384)
    ap.add_argument("--slow", type=float, default=0.05, help="seconds slept per step by the slowed node's ranks")
    ap.add_argument("--only", default="ddp,daso,async", help="comma-separated: ddp, daso, async")
    args = ap.parse_args()
    os.environ["HPCOPT_BENCH_SAMPLES"] = str(args.samples)
    only = args.only.split(",")
    workdir = Path(tempfile.mkdtemp(prefix="hpcopt-link-"))
    results = {}
    with SlowLink(nodes=RANKS // PER_NODE, rate=args.rate) as link:
        server = Server(workdir, host=SERVER_ADDR)
        launcher, extra = link.launcher(PER_NODE), link.rank_env({})

        def trial(
            scheme: str, options: dict[str, Any] | None = None, slow: float = 0.0
        ) -> Callable[[], tuple[float, float]]:
            def go() -> tuple[float, float]:
                t = run(server, scheme, RANKS, args.epochs, workdir, slow, options, extra, launcher, slow_ranks="2,3")
                return t.wall_s, t.acc

            return go

        try:
            if "ddp" in only:
                sides = {"allreduce": trial("allreduce"), "plain DDP": lambda: (plain(link, args.epochs), 0.0)}
                results["ddp"] = interleave(args.reps, sides, "ddp")
            if "daso" in only:
                daso = {"daso": {"node_size": PER_NODE}}  # the hosts say so too; explicit for the record
                bf16 = {"daso": {**daso["daso"], "global_dtype": "bf16"}}
                sides = {"allreduce": trial("allreduce"), "daso": trial("daso", daso), "daso bf16": trial("daso", bf16)}
                results["daso"] = interleave(args.reps, sides, "daso")
            if "async" in only:
                sides = {s: trial(s, slow=args.slow) for s in ("allreduce", "downpour", "easgd", "gem")}
                for s in ("downpour", "easgd"):  # the exchange on a communication thread while training on
                    sides[f"{s} overlap"] = trial(s, {s: {**SCHEMES[s][s], "overlap": True}}, slow=args.slow)
                results["async"] = interleave(args.reps, sides, "async")
            sent = link.sent_bytes()
        finally:
            server.close()
            shutil.rmtree(workdir, ignore_errors=True)

    print(
        f"\nslow link: {RANKS} ranks as {RANKS // PER_NODE} nodes x {PER_NODE} (network namespaces), each node's "
        f"egress at {args.rate} (tbf); {args.epochs} epochs of {args.samples} samples x 4/5, batch 256, "
        f"{args.reps} interleaved reps; {sum(sent) / 1e9:.1f} GB crossed the link"
    )
    if "ddp" in results:
        got = results["ddp"]
        table("allreduce (hpcopt trial) vs plain torch DDP", got, "plain DDP", accuracy=False)
        ratio = [p / h for (h, _), (p, _) in zip(got["allreduce"], got["plain DDP"], strict=True)]
        print(f"hpcopt / plain DDP speed (plain s / hpcopt s) per rep: {spread(ratio, '.3f')}  (target >= 0.95)")
    if "daso" in results:
        table("DASO vs allreduce (target >= 1.3x at equal accuracy)", results["daso"], "allreduce")
    if "async" in results:
        table(
            f"one node slowed by {args.slow:g} s per step: the asynchronous schemes vs allreduce",
            results["async"],
            "allreduce",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
