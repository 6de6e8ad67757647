"""Seconds per Hessian-vector product at 1, 2 and 4 ranks: the fold's samples dealt over
the ranks, each rank's products summed over gloo, as the agent does at a fold's end.

    python benchmarks/curvature/ranks.py [--reps 5] [--samples 2048]

Each repetition launches ``mpiexec -n R`` for R = 1, 2, 4 in turn (interleaved); inside
a launch, a 20-step Lanczos on the digits MLP (26,122 parameters) is timed 3 times after
a warm-up and the median kept. The table gives the median [min-max] over repetitions
and the speed-up over 1 rank. One thread per rank: on a machine with fewer cores than
ranks the ranks share them, which the table's core count says.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def worker(samples: int) -> None:
    import time

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from mpi4py import MPI

    sys.path.insert(0, str(ROOT))
    from examples.digits.task import DigitsTask
    from hpcopt_agent.comm import rendezvous
    from hpcopt_agent.curvature.lanczos import top_eigen
    from hpcopt_agent.curvature.loss import FoldLoss

    world = MPI.COMM_WORLD
    torch.set_num_threads(1)
    host, port = rendezvous(world, "127.0.0.1")
    dist.init_process_group(
        "gloo", init_method=f"tcp://{host}:{port}", rank=world.rank, world_size=world.size, timeout=timedelta(minutes=5)
    )
    task = DigitsTask()
    torch.manual_seed(0)
    model = task.build({"width": 128, "depth": 2, "activation": "relu", "dropout": 0.0}).eval()
    x = task.x.repeat((samples + len(task.x) - 1) // len(task.x), 1)[:samples]
    y = task.y.repeat((samples + len(task.y) - 1) // len(task.y))[:samples]
    mine = torch.arange(samples)[world.rank :: world.size]
    batches = [(x[mine[i : i + 256]], y[mine[i : i + 256]]) for i in range(0, len(mine), 256)]

    def reduce(t: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(t)
        return t

    op = FoldLoss(model, lambda m, b: F.cross_entropy(m(b[0]), b[1]), batches, reduce)
    top_eigen(op.hvp, op.size, 3, 5, seed=0)  # warm-up
    times = []
    for rep in range(3):
        world.Barrier()
        t = time.perf_counter()
        top_eigen(op.hvp, op.size, 3, 20, seed=rep)
        times.append((time.perf_counter() - t) / 20)
    slowest = world.reduce(statistics.median(times), op=MPI.MAX, root=0)
    if world.rank == 0:
        print(f"SECONDS_PER_HVP {slowest:.6f}", flush=True)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.samples)
        return
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    widths = (1, 2, 4)
    seconds: dict[int, list[float]] = {r: [] for r in widths}
    for rep in range(args.reps):
        for r in widths:
            cmd = [
                mpiexec,
                "-n",
                str(r),
                sys.executable,
                "-m",
                "mpi4py",
                __file__,
                "--worker",
                "--samples",
                str(args.samples),
            ]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
            if out.returncode != 0:
                raise SystemExit(f"{r} ranks failed:\n{out.stderr[-3000:]}")
            line = next(ln for ln in out.stdout.splitlines() if ln.startswith("SECONDS_PER_HVP"))
            seconds[r].append(float(line.split()[1]))
            print(f"repetition {rep + 1}/{args.reps}, {r} rank(s): {seconds[r][-1] * 1e3:.2f} ms per HVP", flush=True)
    base = statistics.median(seconds[1])
    print(f"\nSeconds per HVP over {args.samples} samples, digits MLP, {os.cpu_count()} cores, one thread per rank")
    print(f"{'ranks':>6}{'ms per HVP (median [min-max])':>34}{'speed-up':>10}")
    for r in widths:
        xs = seconds[r]
        med = statistics.median(xs)
        print(f"{r:>6}{f'{med * 1e3:.2f} [{min(xs) * 1e3:.2f}-{max(xs) * 1e3:.2f}]':>34}{base / med:>10.2f}")


if __name__ == "__main__":
    main()
