"""The script-task side of ``script_overhead.py``: the same model, data, batch,
evaluation and checkpoint per epoch as ``plain_ddp.py``, written as a user's training
script for hpcopt (``training.task: {script: ...}``): torchrun's environment, the fold
from ``trial.split``, a report per epoch with the epoch's samples/s."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from hpcopt_agent import trial

sys.path.insert(0, str(Path(__file__).resolve().parent))
from task import BATCH, LR, evaluate, make_data, make_model


def main() -> int:
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    x, y = make_data().tensors
    train, val = trial.split(len(x))
    torch.manual_seed(0)
    model = make_model()
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    per_rank = BATCH // size
    t0 = time.perf_counter()
    for epoch in range(trial.epochs):
        order = np.random.default_rng(epoch).permutation(train)
        order = np.concatenate([order, order[: (-len(order)) % size]])[rank::size]
        model.train()
        for i in range(0, len(order), per_rank):
            idx = torch.from_numpy(order[i : i + per_rank])
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(ddp(x[idx]), y[idx]).backward()  # type: ignore[no-untyped-call]
            opt.step()
        model.eval()
        mine = val[rank::size]
        with torch.no_grad():
            local = evaluate(model, ((x[c], y[c]) for c in np.array_split(mine, max(1, len(mine) // 1024))))
        sums = torch.tensor([local["val_loss"] * len(mine), local["val_accuracy"] * len(mine), len(mine)])
        dist.all_reduce(sums)
        if rank == 0 and trial.checkpoint_dir:
            state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch + 1}
            torch.save(state, trial.checkpoint_dir / "state.pt")
        now = time.perf_counter()  # the epoch: training, evaluation, checkpoint and the last report
        rate = len(order) * size / (now - t0)
        answer = trial.report(
            epoch + 1, val_loss=float(sums[0] / sums[2]), val_accuracy=float(sums[1] / sums[2]), samples_per_second=rate
        )
        t0 = now
        if answer != "continue":
            break
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
