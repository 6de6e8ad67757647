"""Run under mpiexec -n 4: DASO and the pipeline scheme against their definitions (the
ps_check harness drives them the way the fold loop does).

    mpiexec -n 4 python -m mpi4py tests/agent/hier_check.py daso|pipeline|hier  (hier: both)

- one node (node_size 4) is ``allreduce`` bit for bit;
- 2 x 2 in blocking mode (warm-up covers every epoch) equals allreduce to 1e-6 (SGD);
- a checkpoint at an epoch end resumes to the weights of an uninterrupted run, bit for bit;
- digits at 2 x 2 (warm-up 1, cool-down 1, 4 epochs) within 3 points of allreduce.

Pipeline:

- 4 stages (GPipe) and 2 stages x 2 replicas (1F1B) equal sequential SGD on the same
  batches to 1e-6, on 240 samples (not a multiple of the batch: the last batch is padded);
- a checkpoint at an epoch end resumes with the same and with another stage count to the
  weights of an uninterrupted run;
- a dict of models is refused with a message that says why.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hpcopt_agent.comm import Comms, limit_threads
from hpcopt_agent.data import Data
from hpcopt_agent.task import Task
from tests.agent.ps_check import Digits, Run, comms_for, flat, say, world
from tests.agent.tasks import Regression, TinyGan


class Mlp(Task):
    """A 5-layer MLP (no BatchNorm) with the default train_step: what a pipeline can cut."""

    def __init__(self) -> None:
        self.data = Regression().dataset()

    def dataset(self) -> Any:
        return self.data

    def build(self, params: dict[str, Any]) -> nn.Module:
        return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))

    def optimizer(self, params: dict[str, Any], model: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.05)

    def loss(self, output: torch.Tensor, batch: Any) -> torch.Tensor:
        return F.mse_loss(output, batch[1])


def sequential(task: Mlp, data: Data, train: np.ndarray, epochs: int, batch: int, replicas: int) -> torch.Tensor:
    """Plain SGD on the batches the pipeline's replicas train together (the same padded,
    seeded order; replica r takes every r-th sample)."""
    torch.manual_seed(0)
    model = task.build({})
    opt = task.optimizer({}, model)
    for epoch in range(epochs):
        order = np.random.default_rng(epoch).permutation(train)
        order = np.concatenate([order, order[: (-len(order)) % batch]])
        parts = [order[r::replicas] for r in range(replicas)]
        share = batch // replicas
        for b in range(len(parts[0]) // share):
            x, y = data.batch(np.concatenate([p[b * share : (b + 1) * share] for p in parts]))
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
    return flat({"model": model})


def pipeline(comms: Comms) -> None:
    task = Mlp()
    data = Data(task.dataset, torch.device("cpu"))
    train = np.arange(240)  # 7.5 batches of 32
    for knobs, replicas in (({"stages": 4, "schedule": "gpipe", "microbatches": 8}, 1),
                            ({"stages": 2, "schedule": "1f1b", "microbatches": 4}, 2)):  # fmt: skip
        run = Run(comms, "pipeline", knobs, task, {}, epochs=2)
        run.train(data, train, epochs=2, batch=32)
        run.scheme.close()
        got = flat(run.models)
        views = comms.fold.allgather(got)
        assert all(torch.equal(v, views[0]) for v in views), "ranks disagree after the epoch's consensus"
        gap = float((got - sequential(task, data, train, 2, 32, replicas)).abs().max())
        assert gap <= 1e-6, (knobs, gap)
        say(f"OK pipeline {knobs['stages']} stages x {replicas} {knobs['schedule']} = sequential SGD: {gap:.1e}")

    base = {"stages": 2, "microbatches": 2}
    whole = Run(comms, "pipeline", base, task, {}, epochs=3)
    whole.train(data, train, epochs=3, batch=32)
    whole.scheme.close()
    first = Run(comms, "pipeline", base, task, {}, epochs=3)
    first.train(data, train, epochs=1, batch=32)
    blob = first.checkpoint()
    first.scheme.close()
    for stages in (2, 4):
        later = Run(comms, "pipeline", {**base, "stages": stages, "microbatches": stages}, task, {}, epochs=3)
        later.resume(blob)
        later.train(data, train, epochs=3, batch=32)
        later.scheme.close()
        gap = float((flat(later.models) - flat(whole.models)).abs().max())
        assert gap <= (0.0 if stages == 2 else 1e-6), (stages, gap)
        say(f"OK pipeline resume with {stages} stages (was 2): max |diff| {gap:.1e}")

    gan = TinyGan()
    try:
        Run(comms, "pipeline", {"stages": 4}, gan, {"lr": 0.01})
    except ValueError as exc:
        assert "scheme pipeline trains one model" in str(exc), exc
        say("OK pipeline refuses a dict of models")
    else:
        raise AssertionError("a dict of models was accepted")


def daso(comms: Comms) -> None:
    task = Regression()
    data = Data(task.dataset, torch.device("cpu"))
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
    ddata = Data(digits.dataset, torch.device("cpu"))
    order = np.random.default_rng(0).permutation(len(ddata))
    dtrain, dval = order[:1400], order[1400:]
    acc, skips = {}, {}
    for name, knobs in (("allreduce", {}), ("daso", {"node_size": 2, "warmup_epochs": 1, "cooldown_epochs": 1})):
        run = Run(comms, name, knobs, digits, {"lr": 3e-3}, epochs=4)
        run.train(ddata, dtrain, epochs=4, batch=64)
        skips[name] = run.metrics.get("daso_global_skip")
        with torch.no_grad():
            acc[name] = digits.evaluate(run.models["model"], [ddata.batch(dval)], {})["accuracy"]
        run.scheme.close()
    say("digits accuracy after 4 epochs: " + ", ".join(f"{k} {v:.3f}" for k, v in acc.items()))
    assert acc["daso"] >= acc["allreduce"] - 0.03, acc
    say("OK daso digits within 3 points of allreduce")


def main() -> int:
    limit_threads(world, 1)
    comms = comms_for(world.size)
    check = sys.argv[1]
    for name in ("daso", "pipeline") if check == "hier" else (check,):
        {"daso": daso, "pipeline": pipeline}[name](comms)
    comms.close()
    say(f"ALL OK {check}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
