"""Run under mpiexec -n 4: DASO against its definition (the ps_check harness drives it
the way the fold loop does).

    mpiexec -n 4 python -m mpi4py tests/agent/daso_check.py

- one node (node_size 4) is ``allreduce`` bit for bit;
- 2 x 2 in blocking mode (warm-up covers every epoch) equals allreduce to 1e-6 (SGD);
- a checkpoint at an epoch end resumes to the weights of an uninterrupted run, bit for bit;
- digits at 2 x 2 (warm-up 1, cool-down 1, 6 epochs) within 3 points of allreduce.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from hpcopt_agent.comm import limit_threads
from hpcopt_agent.data import Data
from tests.agent.ps_check import Digits, Run, comms_for, flat, say, world
from tests.agent.tasks import Regression


def main() -> int:
    limit_threads(world, 1)
    comms = comms_for(world.size)
    task = Regression()
    data = Data(task.dataset(), torch.device("cpu"))
    train, params = np.arange(240), {"lr": 0.05}

    def weights(name: str, knobs: dict, epochs: int = 2) -> torch.Tensor:
        run = Run(comms, name, knobs, task, params, epochs=epochs)
        run.train(data, train, epochs=epochs, batch=16)
        run.scheme.close()
        return flat(run.models)

    reference = weights("allreduce", {})
    one_node = weights("daso", {"node_size": 4, "warmup_epochs": 0, "cooldown_epochs": 0})
    assert torch.equal(one_node, reference), float((one_node - reference).abs().max())
    say("OK daso one node = allreduce bit for bit")

    blocking = weights("daso", {"node_size": 2, "warmup_epochs": 2})
    gap = float((blocking - reference).abs().max())
    assert gap <= 1e-6, gap
    say(f"OK daso blocking 2x2 = allreduce: max |diff| {gap:.1e}")

    cycling = {"node_size": 2, "warmup_epochs": 0, "cooldown_epochs": 0, "max_global_skips": 4}
    whole = Run(comms, "daso", cycling, task, params, epochs=3)
    whole.train(data, train, epochs=3, batch=16)
    whole.scheme.close()
    exchanges = comms.fold.bcast(whole.metrics, root=0)["daso_exchanges"]
    assert exchanges == 4, exchanges  # 15 batches: after batches 4, 8, 12 (skip 4) and the epoch's last
    views = comms.fold.allgather(flat(whole.models))
    assert all(torch.equal(v, views[0]) for v in views), "ranks disagree after the epoch's last sync"
    first = Run(comms, "daso", cycling, task, params, epochs=3)
    first.train(data, train, epochs=1, batch=16)
    blob = first.checkpoint()
    first.scheme.close()
    later = Run(comms, "daso", cycling, task, params, epochs=3)
    later.resume(blob)
    later.train(data, train, epochs=3, batch=16)
    later.scheme.close()
    assert torch.equal(flat(later.models), flat(whole.models)), "resume differs from the uninterrupted run"
    say("OK daso resume at an epoch end = uninterrupted, bit for bit; ranks agree")

    digits = Digits()
    ddata = Data(digits.dataset(), torch.device("cpu"))
    order = np.random.default_rng(0).permutation(len(ddata))
    dtrain, dval = order[:1400], order[1400:]
    acc, skips = {}, {}
    for name, knobs in (("allreduce", {}), ("daso", {"node_size": 2, "warmup_epochs": 1, "cooldown_epochs": 1})):
        run = Run(comms, name, knobs, digits, {"lr": 3e-3}, epochs=6)
        run.train(ddata, dtrain, epochs=6, batch=64)
        skips[name] = run.metrics.get("daso_global_skip")
        with torch.no_grad():
            acc[name] = digits.evaluate(run.models["model"], [ddata.batch(dval)], {})["accuracy"]
        run.scheme.close()
    say("digits accuracy after 6 epochs: " + ", ".join(f"{k} {v:.3f}" for k, v in acc.items()))
    assert acc["daso"] >= acc["allreduce"] - 0.03, acc
    say("OK daso digits within 3 points of allreduce")
    comms.close()
    say("ALL OK daso")
    return 0


if __name__ == "__main__":
    sys.exit(main())
