"""Run under mpiexec: the allreduce scheme keeps a fold group's weights identical after
every step while its ranks train on different shards; different fold groups differ.

    mpiexec -n 4 python tests/agent/ddp_check.py RANKS_PER_FOLD
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from mpi4py import MPI

from hpcopt_agent.comm import limit_threads, split
from hpcopt_agent.layout import plan
from hpcopt_agent.schemes import make_scheme


def main() -> int:
    world = MPI.COMM_WORLD
    rpf = int(sys.argv[1])
    layout = plan(world.size, 1, rpf, folds=max(1, world.size // rpf))
    limit_threads(world, 1)
    comms = split(layout, world, timeout=60)
    scheme = make_scheme("allreduce", comms, {}, epochs=1)
    torch.manual_seed(100 + comms.fold_index)  # fold groups start apart on purpose
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    wrapped = scheme.wrap({"model": model}, {"model": opt})[0]["model"]
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 6, generator=g), torch.randn(64, 1, generator=g)
    mine = scheme.shard(np.arange(64), seed=5)
    shards = comms.fold.allgather(sorted(mine.tolist()))
    assert all(not set(a) & set(b) for i, a in enumerate(shards) for b in shards[i + 1 :]), "shards overlap"
    for step in range(5):
        idx = torch.from_numpy(mine[step * 4 : step * 4 + 4])
        opt.zero_grad()
        torch.nn.functional.mse_loss(wrapped(x[idx]), y[idx]).backward()
        opt.step()
        flat = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy()
        views = comms.fold.allgather(flat)
        for other in views[1:]:
            np.testing.assert_array_equal(views[0], other, err_msg=f"fold group weights differ after step {step}")
        leaders = world.allgather(flat if comms.is_fold_leader else None)
        distinct = {leaders[r].tobytes() for r in range(0, world.size, rpf)}
        assert len(distinct) == world.size // rpf, "fold groups should train separately"
    comms.close()
    if world.rank == 0:
        print(f"OK: {world.size} ranks, fold groups of {rpf}: weights identical within, distinct across")
    return 0


if __name__ == "__main__":
    sys.exit(main())
