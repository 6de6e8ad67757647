"""Gradient compression judged by time to accuracy: allreduce in fp32, with the bf16
hook, and with PowerSGD at ranks 1, 2 and 4, and DASO (its global syncs in bf16, or as
PowerSGD factors of the weights' moves; ``daso`` in fp32 with ``--only``), on a real
slow link (``netns.py``) or on the fast loopback.

    sudo .venv/bin/python benchmarks/training/compression.py [--nodes 2] [--rate 100mbit] [--reps 7]
    .venv/bin/python benchmarks/training/compression.py --rate loopback [--reps 7]

Every side is one hpcopt trial of one fold on 4 ranks (``--nodes`` nodes of 4 / nodes
ranks each; on the loopback one node), the training benchmark's MLP (1.2 M parameters,
4.8 MB of fp32 gradients per step) on its synthetic data, batch 256, SGD. Each side runs
once per repetition, the order rotating. A side's figure is the seconds from the trial's
acquire to the end of the first epoch whose validation accuracy reaches ``--target``
(the trial's time outside its epochs counted once), and the accuracy it ends at: a
compressor that is fast per step but needs more epochs shows it here, where samples/s
would hide it.

The fair baseline is the 16-bit hook, not fp32 (Agarwal et al., MLSys 2022; arXiv
2407.01378): the goal is the best PowerSGD rank reaching the target >= 1.3x sooner than
bf16 on the slow link at equal final accuracy, and no gain on the loopback, where the
bytes cost little and PowerSGD's compute is extra.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from netns import SERVER_ADDR, SlowLink
from run import Server
from schemes import Trial, run

RANKS = 4
#: Each side: its scheme and that scheme's knobs. DASO's nodes are the link's (2 ranks
#: each on 2 nodes; on 4 nodes of 1 rank it syncs every exchange across the link).
SIDES: dict[str, tuple[str, dict[str, Any]]] = {
    "fp32": ("allreduce", {}),
    "bf16 hook": ("allreduce", {"compression": "bf16"}),
    **{
        f"powersgd r{r}": ("allreduce", {"compression": "powersgd", "powersgd_rank": r, "powersgd_start": 10})
        for r in (1, 2, 4)
    },
    "daso": ("daso", {"node_size": 2}),
    "daso bf16": ("daso", {"node_size": 2, "global_dtype": "bf16"}),
    "daso powersgd": ("daso", {"node_size": 2, "global_compression": "powersgd"}),
}
#: The sides run unless --only says otherwise.
DEFAULT_SIDES = ("fp32", "bf16 hook", "powersgd r1", "powersgd r2", "powersgd r4", "daso bf16", "daso powersgd")


def spread(values: list[float], fmt: str = ".1f") -> str:
    shown = [v for v in values if math.isfinite(v)]
    if len(shown) < len(values):
        return f"{len(values) - len(shown)} of {len(values)} never"
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


@contextmanager
def place(nodes: int, rate: str) -> Iterator[tuple[SlowLink | None, str]]:
    """The link (None on the loopback) and the address the server listens on."""
    if rate == "loopback":
        yield None, "127.0.0.1"
        return
    with SlowLink(nodes=nodes, rate=rate) as link:
        yield link, SERVER_ADDR


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", default="100mbit", help="each node's egress (tc syntax), or 'loopback'")
    ap.add_argument("--nodes", type=int, default=2, choices=(2, 4), help="nodes the 4 ranks are spread over")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--samples", type=int, default=8192)
    ap.add_argument("--target", type=float, default=0.8, help="the validation accuracy to reach")
    ap.add_argument("--only", default=",".join(DEFAULT_SIDES), help=f"comma-separated sides of: {', '.join(SIDES)}")
    args = ap.parse_args()
    os.environ["HPCOPT_BENCH_SAMPLES"] = str(args.samples)
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(SIDES))
    if unknown:
        raise SystemExit(f"--only: unknown side(s) {unknown}; choose from {list(SIDES)}")
    workdir = Path(tempfile.mkdtemp(prefix="hpcopt-compress-"))
    got: dict[str, list[Trial]] = {n: [] for n in names}
    sent = 0.0
    try:
        with place(args.nodes, args.rate) as (link, host):
            server = Server(workdir, host=host)
            launcher = link.launcher(RANKS // args.nodes) if link else []
            extra = link.rank_env({}) if link else {}

            def side(name: str) -> Callable[[], Trial]:
                scheme, knobs = SIDES[name]
                options = {scheme: knobs}
                return lambda: run(server, scheme, RANKS, args.epochs, workdir, 0.0, options, extra, launcher)

            try:
                for rep in range(args.reps):
                    order = names[rep % len(names) :] + names[: rep % len(names)]
                    for name in order:
                        got[name].append(side(name)())
                    line = ", ".join(
                        f"{n} {got[n][-1].seconds_to(args.target):.1f} s/{got[n][-1].acc:.3f}" for n in names
                    )
                    print(f"rep {rep + 1}/{args.reps}: {line}", file=sys.stderr, flush=True)
                sent = sum(link.sent_bytes()) / 1e9 if link else 0.0
            finally:
                server.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    where = f"{args.nodes} nodes, each node's egress {args.rate}"
    if args.rate == "loopback":
        where = "the loopback (one node)"
    print(
        f"\ncompression: {RANKS} ranks on {where}; {args.epochs} epochs of {args.samples} x 4/5 samples, "
        f"batch 256; target val accuracy {args.target}; {args.reps} interleaved reps"
        + (f"; {sent:.2f} GB crossed the link" if sent else "")
    )
    w = max(len(n) for n in names) + 1
    print(
        f"{'':{w}} {'s to target, median (min-max)':>30} {'final val acc':>22} {'samples/s':>10}"
        f" {'vs fp32, per rep':>20} {'vs bf16, per rep':>20} {'train s to target':>22} {'vs bf16':>20}"
    )
    for name in names:
        secs = [t.seconds_to(args.target) for t in got[name]]
        cols = []
        for base in ("fp32", "bf16 hook"):
            ratios = [b.seconds_to(args.target) / s for b, s in zip(got.get(base, []), secs, strict=False)]
            cols.append(spread(ratios, ".2f") if base in got and all(map(math.isfinite, secs)) else "-")
        # The epochs' seconds alone: close to the trial's seconds_to_target (training.target).
        train = [t.train_seconds_to(args.target) for t in got[name]]
        ratios = [b.train_seconds_to(args.target) / s for b, s in zip(got.get("bf16 hook", []), train, strict=False)]
        cols.append(spread(ratios, ".2f") if "bf16 hook" in got and all(map(math.isfinite, train)) else "-")
        rate = statistics.median(t.rate for t in got[name])
        accs = [t.acc for t in got[name]]
        print(
            f"{name:{w}} {spread(secs):>30} {spread(accs, '.3f'):>22} {rate:>10.0f} {cols[0]:>20} {cols[1]:>20}"
            f" {spread(train):>22} {cols[2]:>20}"
        )
    psgd = [n for n in names if n.startswith("powersgd")]
    if psgd and "bf16 hook" in got:
        best = min(psgd, key=lambda n: statistics.median(t.seconds_to(args.target) for t in got[n]))
        ratios = [
            b.seconds_to(args.target) / p.seconds_to(args.target)
            for b, p in zip(got["bf16 hook"], got[best], strict=True)
        ]
        print(f"\nbest PowerSGD ({best}) vs the bf16 hook, time to target per rep: {spread(ratios, '.2f')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
