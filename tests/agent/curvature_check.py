"""Run under mpiexec -n 1, 2 or 4: one fold's analysis with its samples dealt over the
ranks (the fold group), Hessian-vector products summed over gloo. Rank 0 prints the
result as one JSON line after ``RESULT``; ``test_curvature_ranks.py`` compares the
rank counts.

    mpiexec -n 4 python -m mpi4py tests/agent/curvature_check.py
"""

from __future__ import annotations

import json
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from mpi4py import MPI
from torch import nn

from hpcopt.core.analysis import check
from hpcopt_agent.comm import rendezvous
from hpcopt_agent.curvature.analysis import analyse
from hpcopt_agent.curvature.loss import FoldLoss


def main() -> None:
    world = MPI.COMM_WORLD
    host, port = rendezvous(world, "127.0.0.1")
    address, timeout = f"tcp://{host}:{port}", timedelta(seconds=120)
    dist.init_process_group("gloo", init_method=address, rank=world.rank, world_size=world.size, timeout=timeout)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (300,), generator=g)
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 3)).double()
    with torch.no_grad():  # running statistics that are not the defaults
        model[1].running_mean.uniform_(-0.5, 0.5)  # type: ignore[operator]
        model[1].running_var.uniform_(0.5, 2.0)  # type: ignore[operator]
    mine = torch.arange(300)[world.rank :: world.size]
    batches = [(x[mine[i : i + 32]], y[mine[i : i + 32]]) for i in range(0, len(mine), 32)]

    def reduce(t: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(t)
        return t

    op = FoldLoss(model, lambda m, b: F.cross_entropy(m(b[0]), b[1]), batches, reduce)
    options = check(
        {
            "hessian": {"top_k": 3, "steps": 24, "density_samples": 1, "density_steps": 12, "trace": True},
            "landscape": {"directions": "eigen", "points": 5, "grid": 3},
        }
    )
    w = op.weights()
    out = analyse(op, options, seed=11, checkpoints=[w * 1.1, w * 1.05])
    out["cost"].pop("seconds")
    outs = world.gather(out, root=0)
    if world.rank == 0:
        assert outs is not None and all(o == outs[0] for o in outs), "the ranks disagree"
        print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
