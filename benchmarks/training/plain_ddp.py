"""The peer: what a user writes with plain torch DDP for the same model and data —
gloo process group (rendezvous from MPI, as torch's wheel has no MPI backend), the
fold's training samples sharded like DistributedSampler, evaluation and a checkpoint
every epoch. Prints one JSON line (rank 0).

    mpiexec -n 2 python benchmarks/training/plain_ddp.py --epochs 4 --folds 2
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from mpi4py import MPI
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from task import BATCH, LR, evaluate, make_data, make_model


def join_gloo(world: MPI.Comm) -> None:
    """The ranks' torch threads (the cores shared out) and a gloo process group over
    them, its rendezvous port from rank 0 through MPI (at ``MASTER_ADDR``, torch's
    convention, else loopback)."""
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world.size))
    port = None
    if world.rank == 0:
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
    port = world.bcast(port)
    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{host}:{port}",
        rank=world.rank,
        world_size=world.size,
        timeout=timedelta(seconds=300),
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--folds", type=int, default=2, help="train fold 0 of this K-fold split")
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    t_start = time.perf_counter()
    join_gloo(world)
    data = make_data()
    x, y = data.tensors
    n = len(x)
    val = np.sort(np.array_split(np.random.default_rng(0).permutation(n), args.folds)[0])
    mask = np.ones(n, bool)
    mask[val] = False
    train = np.flatnonzero(mask)
    torch.manual_seed(0)
    model = make_model()
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    per_rank = BATCH // world.size
    epochs = []
    scratch = tempfile.TemporaryDirectory(prefix="hpcopt-plain-")  # removed at the end
    ckpt = Path(scratch.name) / "plain.pt"
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        order = np.random.default_rng(epoch).permutation(train)
        order = np.concatenate([order, order[: (-len(order)) % world.size]])[world.rank :: world.size]
        model.train()
        for i in range(0, len(order), per_rank):
            idx = torch.from_numpy(order[i : i + per_rank])
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(ddp(x[idx]), y[idx]).backward()  # type: ignore[no-untyped-call]
            opt.step()
        model.eval()
        mine = val[world.rank :: world.size]
        with torch.no_grad():
            local = evaluate(
                model,
                (
                    (x[torch.from_numpy(c)], y[torch.from_numpy(c)])
                    for c in np.array_split(mine, max(1, len(mine) // 1024))
                ),
            )
        metrics = world.gather((len(mine), local))
        if world.rank == 0:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch}, ckpt)
        world.Barrier()
        epochs.append({"seconds": time.perf_counter() - t0, "samples": len(order) * world.size, "metrics": metrics})
    total = time.perf_counter() - t_start
    if world.rank == 0:
        print(json.dumps({"epochs": [{k: e[k] for k in ("seconds", "samples")} for e in epochs], "total": total}))
    dist.destroy_process_group()
    scratch.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
