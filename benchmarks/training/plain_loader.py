"""The peer of ``input_pipeline.py``: what a user writes with plain torch for the same
GAN on the same shards — a per-sample HDF5 ``Dataset`` that opens its files lazily in
each worker, ``DistributedSampler``, a ``DataLoader`` with the same worker count and
prefetch as the hpcopt run (persistent workers), DDP over gloo (rendezvous from MPI).
Trains a (K - 1) / K share of the showers; prints one JSON line (rank 0): the samples/s
of each epoch's batch loop (samples of all ranks over the slowest rank's loop time).

    CALO_DATA=showers mpiexec -n 2 python benchmarks/training/plain_loader.py --epochs 3 --workers 1

On a GPU (``--device cuda``) each rank takes GPU ``rank % count``, batches are pinned
and copied without blocking, and ``--precision bf16`` wraps the step in
``torch.autocast`` (what a user adds for bf16; no loss scaling is needed). gloo still
carries DDP's allreduce, as in the hpcopt run it is compared with on one GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plain_ddp import join_gloo
from showers import STEP, Showers, feed_step, open_slow


class ShowerFiles(Dataset[Any]):
    """One shower per ``__getitem__``; each worker opens the files it reads itself."""

    def __init__(self, files: list[str]) -> None:
        self.files = files
        self.where: list[tuple[int, int]] = []
        for s, path in enumerate(files):
            with open_slow(path) as f:
                self.where += [(s, i) for i in range(f["energy"].shape[0])]
        self.open: dict[int, Any] = {}

    def __len__(self) -> int:
        return len(self.where)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        s, row = self.where[i]
        if s not in self.open:
            self.open[s] = open_slow(self.files[s])
        f = self.open[s]
        return torch.from_numpy(f["ecal"][row]), torch.tensor(f["energy"][row])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--folds", type=int, default=2, help="train a (K - 1) / K share")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32, help="global batch")
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    join_gloo(world)
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", world.rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    cast = torch.autocast(device.type, dtype=torch.bfloat16) if args.precision == "bf16" else contextlib.nullcontext()
    task = Showers()
    data = ShowerFiles(task.data.files)
    n = len(data)
    train = np.sort(np.random.default_rng(0).permutation(n)[: n * (args.folds - 1) // args.folds])
    subset = Subset(data, train.tolist())
    sampler: DistributedSampler[Any] = DistributedSampler(
        subset, num_replicas=world.size, rank=world.rank, shuffle=True, seed=0
    )
    extra = {"prefetch_factor": args.prefetch, "persistent_workers": True} if args.workers else {}
    loader = DataLoader(
        subset,
        batch_size=args.batch // world.size,
        sampler=sampler,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
        **extra,
    )
    params = {"lr_g": 1e-3, "lr_d": 1e-3, "width": args.width, "latent": 16, "aux_weight": 0.5}
    torch.manual_seed(0)
    models = {k: m.to(device) for k, m in task.build(params).items()}
    optimizers = task.optimizer(params, models)
    wrapped = {k: DistributedDataParallel(m) for k, m in models.items()}
    epochs = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        world.Barrier()
        t0 = time.perf_counter()
        samples = 0
        for batch in loader:
            batch = [b.to(device, non_blocking=True) for b in batch]
            if STEP == "feed":
                feed_step(batch)
            else:
                with cast:
                    task.train_step(wrapped, optimizers, batch, params)
            samples += len(batch[0])
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        total = world.allreduce(samples)
        slowest = world.allreduce(seconds, op=MPI.MAX)
        epochs.append({"samples": total, "seconds": slowest})
    if world.rank == 0:
        print(json.dumps({"epochs": epochs}))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
