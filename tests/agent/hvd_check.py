"""Run under mpiexec when Horovod is installed (``make horovod``): the Horovod backend
of allreduce against DDP, in fold groups of RPF ranks (one Horovod process set each;
RPF = the world size is the plain layout, where the fold group is Horovod's global set).

    mpiexec -n 4 python -m mpi4py tests/agent/hvd_check.py horovod RPF

- weights identical within each fold group, and equal to the DDP backend to 1e-6;
- a GAN (two optimizers; the generator's backward reaches the critic's parameters)
  trains, identical within the fold group and equal to DDP to 1e-6;
- ``scheme: horovod`` is the same scheme.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from hpcopt_agent.comm import limit_threads
from hpcopt_agent.data import Data
from tests.agent.ps_check import Run, comms_for, flat, say, world
from tests.agent.tasks import Regression, TinyGan


def main() -> int:
    limit_threads(world, 1)
    rpf = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    comms = comms_for(rpf)
    comms.init_horovod()
    for label, task, params in (("regression", Regression(), {"lr": 0.05}), ("gan", TinyGan(), {"lr": 0.01})):
        data = Data(task.dataset, torch.device("cpu"))
        train = np.arange(len(data) - len(data) % 8)
        got = {}
        for name, knobs in (("allreduce", {}), ("hvd", {"backend": "horovod"}), ("horovod", {})):
            run = Run(comms, "allreduce" if name == "hvd" else name, knobs, task, params, epochs=2)
            run.train(data, train, epochs=2, batch=16)
            run.scheme.close()
            got[name] = flat(run.models)
            views = comms.fold.allgather(got[name])
            assert all(torch.equal(v, views[0]) for v in views), f"{label} {name}: ranks of a fold group disagree"
        gap = float((got["hvd"] - got["allreduce"]).abs().max())
        assert gap <= 1e-6, (label, gap)
        assert torch.equal(got["hvd"], got["horovod"]), label
        say(f"OK horovod {label} {world.size // rpf}x{rpf}: identical in the fold group; vs DDP max |diff| {gap:.1e}")
    comms.close()
    say("ALL OK horovod")
    return 0


if __name__ == "__main__":
    sys.exit(main())
