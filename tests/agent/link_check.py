"""Run under mpiexec through the slow-link harness (``tests/agent/test_slow_link.py``):
prints, on rank 0, one JSON line with each rank's host name and what an MPI and a gloo
allreduce of 2 MB returned, so the test can see the ranks on separate nodes talking."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks/training"))
from plain_ddp import join_gloo

world = MPI.COMM_WORLD
a = np.full(2**18, world.rank + 1.0)  # 2 MB of float64
b = np.zeros_like(a)
world.Allreduce(a, b)
join_gloo(world)  # the plain-DDP peer's rendezvous, at MASTER_ADDR (node 0 under the harness)
t = torch.full((2**19,), float(world.rank + 1))  # 2 MB of float32
dist.all_reduce(t)
dist.destroy_process_group()
rows = world.gather((socket.gethostname(), float(b[0]), float(t[0])))
if world.rank == 0:
    print(json.dumps(rows), flush=True)
