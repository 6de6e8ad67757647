"""Run under mpiexec through the slow-link harness (``tests/agent/test_slow_link.py``):
prints, on rank 0, one JSON line with each rank's host name and what an MPI and a gloo
allreduce of 2 MB returned, so the test can see the ranks on separate nodes talking."""

from __future__ import annotations

import json
import os
import socket
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI

world = MPI.COMM_WORLD
a = np.full(2**18, world.rank + 1.0)  # 2 MB of float64
b = np.zeros_like(a)
world.Allreduce(a, b)
port = None
if world.rank == 0:
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
port = world.bcast(port)
dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{port}", rank=world.rank,
                        world_size=world.size, timeout=timedelta(seconds=120))  # fmt: skip
t = torch.full((2**19,), float(world.rank + 1))  # 2 MB of float32
dist.all_reduce(t)
dist.destroy_process_group()
rows = world.gather((socket.gethostname(), float(b[0]), float(t[0])))
if world.rank == 0:
    print(json.dumps(rows), flush=True)
