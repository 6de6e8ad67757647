"""Run under mpiexec -n 4: DASO and the pipeline scheme against their definitions (the
ps_check harness drives them the way the fold loop does).

    mpiexec -n 4 python -m mpi4py tests/agent/hier_check.py daso|pipeline|hier  (hier: both)

- one node (node_size 4) is ``allreduce`` bit for bit;
- 2 x 2 in blocking mode (warm-up covers every epoch) equals allreduce to 1e-6 (SGD);
- one loss check per epoch keeps the global skip through short epochs;
- digits at 2 x 2 (warm-up 1, cool-down 1, 4 epochs) with bf16 global syncs within 3
  points of allreduce.

Resume and fp32 digits, which every scheme owes, are in ``scheme_conformance.py``.

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
from hpcopt_agent.schemes.pipeline import materialize
from hpcopt_agent.task import Task
from tests.agent.ps_check import Digits, Run, comms_for, evaluate_regression, flat, say, world
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
    with torch.device("meta"):  # the pipeline's initialization, here of every stage
        model = task.build({})
    materialize(model, model, torch.device("cpu"), 0)
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


def whole(run: Run) -> torch.Tensor:
    """The whole model's weights from the ranks that hold its stages (each rank holds
    only its own): every replica's copy of a stage must be equal."""
    mine = {k: v for k, v in run.models["model"].state_dict().items() if not v.is_meta}
    held = world.allgather(mine)
    found: dict[str, torch.Tensor] = {}
    for part in held:
        for k, v in part.items():
            assert k not in found or torch.equal(found[k], v), f"replicas of a stage disagree on {k}"
            found[k] = v
    names = [k for k, _ in run.models["model"].named_parameters()]
    return torch.cat([found[k].reshape(-1) for k in names])


class DeepMlp(Mlp):
    """8 equal hidden layers: what the stages split evenly."""

    def build(self, params: dict[str, Any]) -> nn.Module:
        layers: list[nn.Module] = [nn.Linear(8, 128), nn.Tanh()]
        for _ in range(6):
            layers += [nn.Linear(128, 128), nn.Tanh()]
        return nn.Sequential(*layers, nn.Linear(128, 1))

    def optimizer(self, params: dict[str, Any], model: Any) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=1e-3)


def pipeline(comms: Comms) -> None:
    task = Mlp()
    data = Data(task.dataset, torch.device("cpu"))
    train = np.arange(240)  # 7.5 batches of 32
    for knobs, replicas in (
        ({"stages": 4, "schedule": "gpipe", "microbatches": 8}, 1),
        ({"stages": 2, "schedule": "1f1b", "microbatches": 4}, 2),
        ({"stages": 2, "schedule": "1f1b", "microbatches": 4, "recompute": True}, 2),
    ):
        run = Run(comms, "pipeline", knobs, task, {}, epochs=2)
        run.train(data, train, epochs=2, batch=32)
        run.scheme.close()
        gap = float((whole(run) - sequential(task, data, train, 2, 32, replicas)).abs().max())
        assert gap <= 1e-6, (knobs, gap)
        extra = " with recompute" if knobs.get("recompute") else ""
        say(f"OK pipeline {knobs['stages']} stages x {replicas} {knobs['schedule']}{extra} = sequential SGD: {gap:.1e}")

    base = {"stages": 2, "microbatches": 2}
    reference = Run(comms, "pipeline", base, task, {}, epochs=3)
    reference.train(data, train, epochs=3, batch=32)
    reference.scheme.close()
    want = whole(reference)
    first = Run(comms, "pipeline", base, task, {}, epochs=3)
    first.train(data, train, epochs=1, batch=32)
    saved = first.checkpoint()
    first.scheme.close()
    files = sorted(p.name for p in saved.parent.iterdir())
    assert files == ["fold0.pt", "fold0.stage0-of-2.pt", "fold0.stage1-of-2.pt"], files
    for stages in (2, 4):
        later = Run(comms, "pipeline", {**base, "stages": stages, "microbatches": stages}, task, {}, epochs=3)
        later.resume(saved)
        later.train(data, train, epochs=3, batch=32)
        later.scheme.close()
        gap = float((whole(later) - want).abs().max())
        assert gap <= (0.0 if stages == 2 else 1e-6), (stages, gap)
        say(f"OK pipeline resume with {stages} stages (was 2, one file per stage): max |diff| {gap:.1e}")

    # Memory: each rank allocates only its stage; parameters and Adam's state fall as 1/stages.
    deep = DeepMlp()
    ddata = Data(deep.dataset, torch.device("cpu"))
    held = {}
    for stages in (1, 2, 4):
        run = Run(comms, "pipeline", {"stages": stages, "microbatches": 4}, deep, {}, epochs=1)
        run.train(ddata, train, epochs=1, batch=32)
        held[stages] = comms.fold.bcast(run.metrics, root=0)["pipeline_stage_mb"]
        run.scheme.close()
    say(
        "pipeline memory per rank (params, grads, Adam state; the largest stage): "
        + ", ".join(f"{k} stage(s) {v:.3f} MB" for k, v in held.items())
    )
    for stages in (2, 4):
        assert held[stages] <= held[1] / stages * 1.35, held
    say("OK pipeline memory falls as 1/stages")

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

    # HeAT's once-per-epoch stability check: the skip stays 4 through 3 short epochs.
    cycling = {"node_size": 2, "warmup_epochs": 0, "cooldown_epochs": 0, "max_global_skips": 4, "checks_per_epoch": 1}
    whole = Run(comms, "daso", cycling, task, params, epochs=3)
    whole.train(data, train, epochs=3, batch=16)
    whole.scheme.close()
    exchanges = comms.fold.bcast(whole.metrics, root=0)["daso_exchanges"]
    assert exchanges == 4, exchanges  # 15 batches: after batches 4, 8, 12 (skip 4) and the epoch's last
    views = comms.fold.allgather(flat(whole.models))
    assert all(torch.equal(v, views[0]) for v in views), "ranks disagree after the epoch's last sync"
    say("OK daso one check per epoch: 4 exchanges in 15 batches at skip 4; ranks agree")

    # The default checks the loss ~16 times while cycling: in a short trial the skips move.
    adaptive = {k: v for k, v in cycling.items() if k != "checks_per_epoch"}
    seen = []
    run = Run(comms, "daso", adaptive, task, params, epochs=3)
    for epoch in range(3):
        run.train(data, train, epochs=epoch + 1, batch=16)
        seen.append(comms.fold.bcast(run.metrics, root=0)["daso_exchanges"])
    run.scheme.close()
    views = comms.fold.allgather(flat(run.models))
    assert all(torch.equal(v, views[0]) for v in views), "ranks disagree with sub-epoch checks"
    assert max(seen) > 4, f"the skips never shrank within the short trial: exchanges per epoch {seen}"
    say(f"OK daso checks the loss within epochs: exchanges per epoch {seen} (4 with one check per epoch)")

    # Local skips (HeAT's): in a cycle reset to global skip 8, the node syncs gradients
    # every 2nd batch (and the last); the merges bring the node's ranks back together.
    reset = {**cycling, "max_global_skips": 8}
    ends = {}
    for skipping in (False, True):
        run = Run(comms, "daso", {**reset, "local_skips": skipping}, task, params, epochs=1)
        sched = run.scheme.schedule
        sched.global_skip, sched.batches_to_wait, sched.local_skip = 8, 2, 2  # as right after a reset
        before = evaluate_regression(run, data)
        run.train(data, train, epochs=1, batch=12)  # 20 batches per rank
        after = evaluate_regression(run, data)
        syncs = comms.fold.allgather(run.scheme.local_syncs)
        run.scheme.close()
        ends[skipping] = views = comms.fold.allgather(flat(run.models))
        assert all(torch.equal(v, views[0]) for v in views), f"local_skips {skipping}: ranks disagree at the epoch end"
        assert after < 0.5 * before, f"local_skips {skipping}: did not train ({before:.3g} -> {after:.3g})"
    assert syncs == [11] * 4, f"20 batches at local skip 2 sync 11 inside the node (even ones, the last), not {syncs}"
    assert not torch.equal(ends[True][0], ends[False][0]), "local skips changed nothing"
    say("OK daso local skips: a node syncs 11 of 20 batches at local skip 2; its ranks agree after the epoch")

    digits = Digits()
    ddata = Data(digits.dataset, torch.device("cpu"))
    order = np.random.default_rng(0).permutation(len(ddata))
    dtrain, dval = order[:1400], order[1400:]
    acc, skips = {}, {}
    short = {"node_size": 2, "warmup_epochs": 1, "cooldown_epochs": 1}
    for label, name, knobs in (
        ("allreduce", "allreduce", {}),
        ("daso bf16", "daso", {**short, "global_dtype": "bf16"}),
    ):
        run = Run(comms, name, knobs, digits, {"lr": 3e-3}, epochs=4)
        run.train(ddata, dtrain, epochs=4, batch=64)
        skips[label] = run.metrics.get("daso_global_skip")
        with torch.no_grad():
            acc[label] = digits.evaluate(run.models["model"], [ddata.batch(dval)], {})["accuracy"]
        run.scheme.close()
    say("digits accuracy after 4 epochs: " + ", ".join(f"{k} {v:.3f}" for k, v in acc.items()))
    assert acc["daso bf16"] >= acc["allreduce"] - 0.03, acc
    say("OK daso digits within 3 points of allreduce with bf16 global syncs")


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
