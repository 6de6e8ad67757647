"""Run under mpiexec -n 4: what every scheme in ``SCHEMES`` promises, checked the same way
for each (the ps_check harness drives them the way the fold loop does).

    mpiexec -n 4 python -m mpi4py tests/agent/scheme_conformance.py [horovod]

For each scheme, with the fold group the 4 ranks (a parameter server: a master and 3
workers; DASO: 2 nodes of 2; a pipeline: 2 stages x 2 replicas):

- **coverage**: in an epoch the ranks that read samples train on every training sample,
  and on no other (padding repeats at most one batch's worth);
- **agreement**: after an epoch's consensus, ranks that hold the same weights hold them
  bit for bit (a pipeline's replicas of a stage; everyone, elsewhere);
- **resume**: a stop on one rank mid-epoch, a checkpoint and a resume in a new run end
  bit for bit where an uninterrupted run ends (so runs are reproducible too);
- **learning**: digits within 3 points of allreduce after 4 epochs;
- **several models**: a GAN (two models, two optimizers) trains and its ranks agree, or
  the scheme refuses it before training with a message that names the field;
- **batchnorm**: before the epoch's evaluation every rank holds the mean of the trained
  ranks' BatchNorm running statistics and batch counts (a pipeline's stages keep their
  own).

Then every scheme once more in 2 fold groups of 2 on different samples: they train
separately. Each variant of ``scheme_variants.py`` (allreduce with PowerSGD) runs the
coverage, resume and digits checks under its label.

A scheme added to ``SCHEMES`` runs here without an edit; ``CONFORMANCE_KNOBS`` may
give it a layout for 4 ranks. Horovod runs when asked (``horovod``: it needs
Horovod installed and initialized), otherwise it is named as not run.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from hpcopt.core.schemes import TRAITS
from hpcopt_agent.comm import Comms, limit_threads
from hpcopt_agent.data import Data
from hpcopt_agent.schemes import SCHEMES
from tests.agent.ps_check import (
    Digits,
    Run,
    Stop,
    comms_for,
    evaluate_regression,
    flat,
    say,
    stopped_and_resumed,
    world,
)
from tests.agent.scheme_variants import VARIANTS
from tests.agent.tasks import Normalised, Regression, TinyGan

#: Knobs for 4 ranks in one fold group (and what makes a run reproducible: a parameter
#: server serving its workers in rank order).
CONFORMANCE_KNOBS: dict[str, dict[str, Any]] = {
    "downpour": {"order": "round_robin"},
    "easgd": {"order": "round_robin", "tau": 2},
    "gem": {"order": "round_robin"},
    "daso": {"node_size": 2, "warmup_epochs": 0, "cooldown_epochs": 0},
    "pipeline": {"stages": 2, "microbatches": 2},
}
#: For digits with Adam: GEM's own step size (its default suits SGD).
DIGITS_KNOBS: dict[str, dict[str, Any]] = {"gem": {"lr": 0.1}}


def held(run: Run) -> dict[str, torch.Tensor]:
    """This rank's weights by name (a pipeline stage holds only its layers; the others
    are on the meta device)."""
    return {
        f"{m}.{k}": v.detach().clone()
        for m, model in run.models.items()
        for k, v in model.state_dict().items()
        if not v.is_meta
    }


def agreed(comms: Comms, run: Run, label: str) -> torch.Tensor:
    """The fold group's weights, checked equal on every rank that holds them."""
    found: dict[str, torch.Tensor] = {}
    for part in comms.fold.allgather(held(run)):
        for k, v in part.items():
            assert k not in found or torch.equal(found[k], v), f"{label}: ranks disagree on {k} after the consensus"
            found[k] = v
    return torch.cat([found[k].reshape(-1).float() for k in sorted(found)])


class Recording(Run):
    """A run that records the samples its rank trains on in each epoch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[int] = []

    def train(self, data: Data, train: np.ndarray, epochs: int, batch: int, **kw: Any) -> bool:
        original = data.read

        def read(batches: Any) -> Any:
            if self.scheme.roles.reads:
                self.seen.extend(int(i) for b in batches for i in b)
            return original(batches)

        data.read = read  # type: ignore[method-assign]
        try:
            return super().train(data, train, epochs, batch, **kw)
        finally:
            data.read = original  # type: ignore[method-assign]


def coverage(comms: Comms, name: str, knobs: dict[str, Any], label: str = "") -> None:
    task = Regression()
    data = Data(task.dataset, torch.device("cpu"))
    train = np.arange(10, 230)  # 220 of 240: not a multiple of the batch, and not every sample
    run = Recording(comms, name, knobs, task, {"lr": 0.02})
    whole = not run.scheme.traits.splits_model  # a pipeline stage holds part of the model: no loss on one rank
    before = evaluate_regression(run, data) if whole else None
    assert run.train(data, train, epochs=1, batch=16)
    run.scheme.close()
    seen = [i for part in comms.fold.allgather(run.seen) for i in part]
    counts = np.bincount(seen, minlength=240)
    assert set(np.flatnonzero(counts)) == set(train.tolist()), f"{name}: trained on other samples than the fold's"
    extra = len(seen) - len(train)
    assert 0 <= extra < 16 and counts.max() <= 2, f"{name}: {extra} samples repeated in an epoch of 220"
    agreed(comms, run, name)
    after = evaluate_regression(run, data) if whole else None
    assert before is None or after is None or after < before, (
        f"{name}: one epoch did not lower the loss ({before:.3g} -> {after:.3g})"
    )
    say(f"OK {label or name} coverage: every training sample once per epoch ({extra} padded); ranks agree")


def resume(comms: Comms, name: str, knobs: dict[str, Any], label: str = "", task: Any = None) -> None:
    """A fold stopped mid-epoch on one rank and resumed ends bit for bit where an
    uninterrupted one does; ``task`` (default: the regression) may be ``Wide``, whose
    512 x 512 layer a compressor compresses (the regression's layers are too small to)."""
    task = task or Regression()
    data = Data(task.dataset, torch.device("cpu"))
    train = np.arange(240)
    whole = Run(comms, name, knobs, task, {"lr": 0.02})
    assert whole.train(data, train, epochs=3, batch=12)
    want = agreed(comms, whole, name)
    whole.scheme.close()
    # A stop that arrives at one worker's 6th batch of the second epoch (as SIGTERM would).
    cut, rest = stopped_and_resumed(comms, name, knobs, task, data, train, Stop(rank=comms.fold.size - 1, at=5))
    assert rest.train(data, train, epochs=3, batch=12)
    got = agreed(comms, rest, name)
    rest.scheme.close()
    gap = float((got - want).abs().max())
    assert torch.equal(got, want), f"{name}: resumed from batch {cut.batch} of epoch 1, max |diff| {gap:.2g}"
    model = "" if type(task) is Regression else f" ({type(task).__name__.lower()} model)"
    say(f"OK {label or name} resume{model}: stopped mid-epoch on one rank, resumed bit for bit")


def digits(comms: Comms, names: list[str], acc: dict[str, float], knobs: dict[str, Any]) -> None:
    """Each scheme's digits accuracy into ``acc``, checked against allreduce's there."""
    task = Digits()
    data = Data(task.dataset, torch.device("cpu"))
    order = np.random.default_rng(0).permutation(len(data))
    train, val = order[:1400], order[1400:]
    reference = "allreduce"  # plain DDP: the accuracy every scheme is held to
    for name in [n for n in (reference,) if n not in acc] + [n for n in names if n != reference]:
        given = {**(knobs if name in names else {}), **DIGITS_KNOBS.get(name, {})}
        run = Run(comms, name, given, task, {"lr": 3e-3}, epochs=4)
        run.train(data, train, epochs=4, batch=64)
        run.scheme.close()
        if run.scheme.traits.splits_model:  # each stage holds its layers: evaluate through the schedule
            acc[name] = float(comms.fold.bcast(pipeline_accuracy(run, data, val), root=0))
        else:
            with torch.no_grad():
                acc[name] = task.evaluate(run.models["model"], [data.batch(val)], {})["accuracy"]
        assert acc[name] >= acc[reference] - 0.03, f"{name}: {acc[name]:.3f} vs {reference} {acc[reference]:.3f}"
        say(f"OK {name} digits {acc[name]:.3f} after 4 epochs, within 3 points of {reference} {acc[reference]:.3f}")


def pipeline_accuracy(run: Run, data: Data, val: np.ndarray) -> float | None:
    """The whole model, put together from the stages, on rank 0."""
    model = Digits().build({})
    parts = {k.removeprefix("model."): v for k, v in held(run).items()}
    every = run.comms.fold.gather(parts, root=0)
    if every is None:
        return None
    model.load_state_dict({k: v for part in every for k, v in part.items()})
    with torch.no_grad():
        return float(Digits().evaluate(model, [data.batch(val)], {})["accuracy"])


def several_models(comms: Comms, name: str, knobs: dict[str, Any], label: str = "") -> None:
    task = TinyGan()
    data = Data(task.dataset, torch.device("cpu"))
    try:
        run = Run(comms, name, knobs, task, {"lr": 0.01})
    except Exception as exc:  # a refusal must say what and why, before any training
        assert "model" in str(exc) and len(str(exc)) > 40, f"{name}: an unclear refusal: {exc!r}"
        say(f"OK {label or name} several models: refused at start ({str(exc)[:60]}...)")
        return
    before = flat(run.models).clone()
    assert run.train(data, np.arange(len(data) - len(data) % 8), epochs=1, batch=16)
    run.scheme.close()
    agreed(comms, run, name)
    assert not torch.equal(flat(run.models), before), f"{name}: the GAN's weights did not move"
    say(f"OK {label or name} several models: a GAN trains; ranks agree")


def batchnorm(comms: Comms, name: str, knobs: dict[str, Any]) -> None:
    """BatchNorm's running statistics, each rank's from its own shard, are averaged over
    the ranks that trained before the epoch's evaluation, ``num_batches_tracked`` too:
    every rank then evaluates with the same buffers, the mean of what they had."""
    task = Normalised()
    data = Data(task.dataset, torch.device("cpu"))
    run = Run(comms, name, knobs, task, {"lr": 0.02})
    if run.scheme.traits.splits_model:
        run.scheme.close()
        say(f"OK {name} batchnorm: not whole on a rank (each stage keeps its own statistics)")
        return
    seen: list[dict[str, torch.Tensor]] = []
    consensus = run.scheme.consensus

    def recorded(models: Any) -> None:
        seen.append({f"{m}.{k}": b.detach().clone() for m, model in models.items() for k, b in model.named_buffers()})
        consensus(models)

    run.scheme.consensus = recorded  # type: ignore[method-assign]
    assert run.train(data, np.arange(240), epochs=1, batch=12)
    run.scheme.close()
    agreed(comms, run, name)  # weights and buffers alike
    trained = [b for b, reads in comms.fold.allgather((seen[-1], run.scheme.roles.reads)) if reads]
    after = {f"{m}.{k}": b for m, model in run.models.items() for k, b in model.named_buffers()}
    for key, value in after.items():
        mean = torch.stack([b[key].double() for b in trained]).mean(0)
        want = mean if value.is_floating_point() else mean.round()
        assert torch.allclose(value.double(), want, atol=1e-6), f"{name}: {key} is not the trained ranks' mean"
    assert all(int(v) > 0 for k, v in after.items() if k.endswith("num_batches_tracked")), f"{name}: no batch counted"
    say(f"OK {name} batchnorm: running statistics and batch counts averaged over {len(trained)} ranks")


def separate_fold_groups(names: list[str]) -> None:
    """2 fold groups of 2 ranks on different samples: agreement within, different weights across."""
    comms = comms_for(2)
    task = Regression()
    data = Data(task.dataset, torch.device("cpu"))
    for name in names:
        knobs = {k: v for k, v in CONFORMANCE_KNOBS.get(name, {}).items() if k not in ("node_size", "stages")}
        run = Run(comms, name, knobs, task, {"lr": 0.02})
        train = np.arange(240)[comms.fold_index :: 2]  # each fold group its own samples
        assert run.train(data, train, epochs=1, batch=12)
        run.scheme.close()
        mine = agreed(comms, run, name)
        views = comms.world.allgather(mine if comms.fold.rank == 0 else None)
        leaders = [v for v in views if v is not None]
        assert len(leaders) == 2 and not torch.equal(leaders[0], leaders[1]), f"{name}: fold groups trained as one"
        say(f"OK {name} in 2 fold groups of 2: ranks agree within a group, groups train apart")
    comms.close()


@contextlib.contextmanager
def checking(name: str) -> Iterator[None]:
    """A failure names its scheme (on the rank that failed) and ends the launch: the
    other ranks may be waiting in a collective for it."""
    try:
        yield
    except BaseException:
        print(f"FAIL {name} (world rank {world.rank}):\n{traceback.format_exc()}", flush=True)
        world.Abort(1)


def knobs_for(name: str, size: int) -> dict[str, Any]:
    """The conformance knobs at ``size`` ranks: DASO's nodes are halves of the fold group."""
    knobs = dict(CONFORMANCE_KNOBS.get(name, {}))
    if "node_size" in knobs:
        knobs["node_size"] = max(1, size // 2)
    return knobs


class Wide(Regression):
    """The regression through two hidden layers of 512: 1.1 MB of gradients."""

    def build(self, params: dict[str, Any]) -> torch.nn.Module:
        nn = torch.nn
        return nn.Sequential(nn.Linear(8, 512), nn.Tanh(), nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 1))


def buckets(comms: Comms, name: str, knobs: dict[str, Any], label: str) -> None:
    """A model whose gradients fill several DDP buckets (the first holds 1 MB): each
    bucket's exchange ends on every rank, step after step. torch's own PowerSGD hook
    hung here under gloo at the first compressed step (its callbacks start the next
    allreduce, on whichever thread finished the last, so ranks could start them in
    different orders)."""
    task = Wide()
    data = Data(task.dataset, torch.device("cpu"))
    run = Run(comms, name, knobs, task, {"lr": 1e-3})
    assert run.train(data, np.arange(240), epochs=1, batch=12)
    run.scheme.close()
    agreed(comms, run, label)
    say(f"OK {label} several gradient buckets: every step's exchange ended; ranks agree")


def variant(comms: Comms, label: str, name: str, knobs: dict[str, Any], acc: dict[str, float]) -> None:
    """A variant (``scheme_variants.py``): coverage, resume, several gradient buckets,
    several models and digits against the plain scheme's accuracy (``acc[name]``, from its own run)."""
    with checking(label):
        coverage(comms, name, knobs, label)
        resume(comms, name, knobs, label)
        resume(comms, name, knobs, label, task=Wide())  # a layer a compressor compresses
        buckets(comms, name, knobs, label)
        several_models(comms, name, knobs, label)
        task = Digits()
        data = Data(task.dataset, torch.device("cpu"))
        order = np.random.default_rng(0).permutation(len(data))
        run = Run(comms, name, {**knobs, **DIGITS_KNOBS.get(name, {})}, task, {"lr": 3e-3}, epochs=4)
        run.train(data, order[:1400], epochs=4, batch=64)
        run.scheme.close()
        with torch.no_grad():
            got = task.evaluate(run.models["model"], [data.batch(order[1400:])], {})["accuracy"]
        assert got >= acc[name] - 0.03, f"{label}: {got:.3f} vs {name} {acc[name]:.3f}"
        say(f"OK {label} digits {got:.3f} after 4 epochs, within 3 points of {name} {acc[name]:.3f}")


def conforms(comms: Comms, names: list[str], acc: dict[str, float]) -> None:
    for name in names:
        knobs = knobs_for(name, comms.fold.size)
        with checking(name):
            coverage(comms, name, knobs)
            resume(comms, name, knobs)
            several_models(comms, name, knobs)
            batchnorm(comms, name, knobs)
            digits(comms, [name], acc, knobs)


def main() -> int:
    from mpi4py import MPI

    limit_threads(MPI.COMM_WORLD, 1)
    with_horovod = sys.argv[1:] == ["horovod"]
    assert set(SCHEMES) == set(TRAITS), f"the agent's SCHEMES {sorted(SCHEMES)} and hpcopt.core.schemes.TRAITS differ"
    names = [n for n in SCHEMES if not SCHEMES[n].traits.horovod]
    comms = comms_for(MPI.COMM_WORLD.size)
    acc: dict[str, float] = {}
    conforms(comms, names, acc)
    for label, (name, knobs) in VARIANTS.items():
        variant(comms, label, name, {**knobs_for(name, comms.fold.size), **knobs}, acc)
    comms.close()
    if world.size >= 4:
        separate_fold_groups(names)
    else:
        say(f"not run: fold groups apart (2 fold groups of 2 need 4 ranks, not {world.size})")
    horovod = [n for n in SCHEMES if SCHEMES[n].traits.horovod]
    if with_horovod:  # last: Horovod's background thread slows what runs after its start
        comms = comms_for(MPI.COMM_WORLD.size)
        comms.init_horovod()
        conforms(comms, horovod, acc)
        comms.close()
        names += horovod
    else:
        say(f"not run: {', '.join(horovod)} (pass 'horovod' with Horovod installed)")
    say(f"ALL OK conformance at {world.size} ranks: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
