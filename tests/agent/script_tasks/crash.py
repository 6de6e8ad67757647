"""Rank 1 fails in its second epoch; rank 0 goes on into an all-reduce that would wait
for rank 1 forever (gloo's default timeout is 30 minutes)."""

import sys

import torch
import torch.distributed as dist

from hpcopt_agent import trial

dist.init_process_group("gloo")
for epoch in range(1, trial.epochs + 1):
    t = torch.ones(1)
    dist.all_reduce(t)
    if epoch == 2 and dist.get_rank() == 1:
        print("about to fail", file=sys.stderr)
        raise RuntimeError("rank 1 ran out of patience")
    trial.report(epoch, val_loss=1.0 / epoch)
dist.destroy_process_group()
