"""Run under mpiexec: the parameter-server schemes against their definitions.

    mpiexec -n 2 python -m mpi4py tests/agent/ps_check.py degenerate  # = sequential rules
    mpiexec -n 3 python -m mpi4py tests/agent/ps_check.py gan         # GANs, order, resume
    mpiexec -n 4 python -m mpi4py tests/agent/ps_check.py tree        # staleness, sub-masters
    mpiexec -n 5 python -m mpi4py tests/agent/ps_check.py hybrid      # workers of several ranks, overlap

Each check drives a scheme through the same calls, in the same order, as the fold loop
(``hpcopt_agent.fold``): begin_epoch, the batch loop with after_step and the stop vote
(or serve on the master), end_batches, consensus; and state/load_state for resume.
Prints one ``OK`` line per check on rank 0; any failure raises (and mpiexec ends the job).
What every scheme promises (coverage, agreement, resume, digits, several models) is in
``scheme_conformance.py``; these are the rules' own properties.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from mpi4py import MPI
from torch import nn

from examples.gan.task import RingGan
from hpcopt.core.schemes import resolve
from hpcopt_agent.checkpoint import save
from hpcopt_agent.comm import Comms, limit_threads, split
from hpcopt_agent.data import Data
from hpcopt_agent.epoch import EpochDriver
from hpcopt_agent.layout import plan
from hpcopt_agent.precision import Precision
from hpcopt_agent.schemes import StopVote, make_scheme
from hpcopt_agent.task import Task, as_dict, as_user
from tests.agent.tasks import Regression, TinyGan
from tests.helpers.env import scaled

world = MPI.COMM_WORLD


def say(text: str) -> None:
    if world.rank == 0:
        print(text, flush=True)


@dataclass
class Stop:
    """A stop signal that arrives at a given step of one rank (as SIGTERM would), or
    of every rank at once (``rank`` None: they stop there, with no vote to agree)."""

    rank: int | None = -1
    at: int = -1
    requested: bool = False


class Digits(Task):
    def __init__(self) -> None:
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
        self.x, self.y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)

    def dataset(self) -> Any:
        return torch.utils.data.TensorDataset(self.x, self.y)

    def build(self, params: dict[str, Any]) -> nn.Module:
        return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))

    def optimizer(self, params: dict[str, Any], model: Any) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=params["lr"])

    def loss(self, output: torch.Tensor, batch: Any) -> torch.Tensor:
        return F.cross_entropy(output, batch[1])

    def evaluate(self, model: Any, batches: Any, params: dict[str, Any]) -> dict[str, float]:
        right = n = 0
        for x, y in batches:
            right += int((model(x).argmax(1) == y).sum())
            n += len(y)
        return {"accuracy": right / n}


class SharedGan(TinyGan):
    """TinyGan plus a ``combined`` model sharing both networks (as NNLO's GAN does):
    the shared parameters must travel once."""

    def build(self, params: dict[str, Any]) -> dict[str, nn.Module]:
        models = super().build(params)
        return {**models, "combined": nn.Sequential(models["generator"], models["critic"])}


@dataclass
class Result:
    central: torch.Tensor  # the master's weights after the last consensus
    metrics: dict[str, float]
    scheme: Any
    models: dict[str, nn.Module]


class Run:
    """One fold of training with a scheme, through the fold loop's own epoch driver."""

    def __init__(
        self, comms: Comms, name: str, knobs: dict[str, Any], task: Task, params: dict[str, Any], epochs: int = 1
    ) -> None:
        resolved = resolve(name, {name: knobs}, comms.fold.size)
        self.scheme = make_scheme(name, comms, resolved, epochs=epochs, timeout=scaled(60))
        torch.manual_seed(0)
        self.models, self.single = self.scheme.placement.build(task, params)
        self.optimizers = as_dict(task.optimizer(params, as_user(self.models, self.single)))
        sm, so = self.scheme.wrap(self.models, self.optimizers)
        precision = Precision("fp32", comms.device)
        self.driver = EpochDriver(
            self.scheme,
            task,
            Data(task.dataset, comms.device),
            params,
            precision,
            as_user(sm, self.single),
            as_user(so, self.single),
        )
        self.task, self.params, self.comms = task, params, comms
        self.epoch, self.batch = 0, 0
        self.steps = 0  # training steps this rank took

    def train(
        self, data: Data, train: np.ndarray, epochs: int, batch: int, stop: Stop | None = None, sleep: float = 0.0
    ) -> bool:
        """Trains to ``epochs``; returns False when the stop cut it short."""
        s, stop = self.scheme, stop or Stop()
        self.driver.data = data

        def each_step(b: int) -> None:
            if sleep:
                time.sleep(sleep)
            self.steps += 1
            here = stop.rank is None or world.rank == stop.rank
            stop.requested = stop.requested or (here and b >= stop.at and self.epoch == 1)

        while self.epoch < epochs:
            size = s.roles.rank_batch(batch)  # before shard, as in the fold loop (a pipeline pads to it)
            vote = None if stop.rank is not None else StopVote(None)
            done = self.driver.batches(
                self.epoch, self.batch, train, self.epoch, size, stop, vote=vote, each_step=each_step
            )
            if done.stop_at is not None:
                self.batch = done.stop_at
            stopped = bool(self.comms.fold.allreduce(done.stop_at is not None, op=MPI.LOR))
            if stopped:
                return False
            losses = done.losses

            def mean_loss(losses: list[float] = losses) -> tuple[dict[str, float], float]:
                total, count = self.comms.fold.allreduce(np.array([sum(losses), len(losses)]), op=MPI.SUM)
                return {}, total / count if count else float("nan")

            self.metrics = self.driver.end(self.epoch, self.models, mean_loss)
            self.epoch, self.batch = self.epoch + 1, 0
        return True

    def checkpoint(self) -> Path:
        """Through the agent's checkpoint calls and format (plain data, read with
        weights_only=True), into a fresh directory shared by the ranks."""
        where = self.comms.fold.bcast(tempfile.mkdtemp(dir=_scratch()) if self.comms.fold.rank == 0 else None)
        path = Path(where) / "fold0.pt"
        held = self.scheme.placement.save_models(path, self.models, self.optimizers)
        parts = self.comms.fold.gather((self.batch, self.scheme.state(), torch.get_rng_state()), root=0)
        if parts is not None:
            save(path, {**held, "epoch": self.epoch, "ranks": parts})
        self.comms.fold.Barrier()
        return path

    def resume(self, path: Path) -> None:
        state = torch.load(path, weights_only=True)
        self.scheme.placement.load_models(path, state, self.models, self.optimizers)
        self.epoch = state["epoch"]
        self.batch, scheme_state, rng = state["ranks"][self.comms.fold.rank]
        self.scheme.load_state(scheme_state)
        torch.set_rng_state(rng)
        self.driver.resumed = True

    def result(self) -> Result:
        central = self.comms.fold.bcast(self.scheme.flat.get() if self.comms.fold.rank == 0 else None, root=0)
        metrics = self.comms.fold.bcast(getattr(self, "metrics", {}), root=0)
        return Result(central, metrics, self.scheme, self.models)


_SCRATCH: list[tempfile.TemporaryDirectory[str]] = []


def _scratch() -> str:
    """This process's folder for checkpoints, removed when it exits (rank 0 makes them;
    the other ranks of a check read them before it ends)."""
    if not _SCRATCH:
        _SCRATCH.append(tempfile.TemporaryDirectory(prefix="ps-check-"))
    return _SCRATCH[0].name


def stopped_and_resumed(
    comms: Comms, name: str, knobs: dict[str, Any], task: Task, data: Data, train: np.ndarray, stop: Stop
) -> tuple[Run, Run]:
    """A run of 3 epochs (batch 12, lr 0.02) cut by ``stop`` and checkpointed, and a new
    run resumed from that checkpoint (not yet trained on): the fold loop's preemption."""
    cut = Run(comms, name, knobs, task, {"lr": 0.02})
    assert not cut.train(data, train, epochs=3, batch=12, stop=stop), f"{name}: the stop did not stop the run"
    blob = cut.checkpoint()
    cut.scheme.close()
    rest = Run(comms, name, knobs, task, {"lr": 0.02})
    rest.resume(blob)
    return cut, rest


def comms_for(rpf: int) -> Comms:
    layout = plan(world.size, 1, rpf, folds=max(1, world.size // rpf))
    return split(layout, world, timeout=scaled(60))


def flat(models: dict[str, nn.Module]) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for m in models.values() for p in m.parameters()])


# -- checks -----------------------------------------------------------------------------


def degenerate(comms: Comms) -> None:
    """One worker, one step per exchange: each rule against its sequential closed form.
    The worker is every rank but the master: with several, they train data-parallel
    (each on its share of every batch) and their leader exchanges."""
    task = Regression()
    data = Data(task.dataset, torch.device("cpu"))
    train = np.arange(200)
    params = {"lr": 0.05}

    def sequential(elastic: bool, momentum: float = 0.0) -> torch.Tensor:
        torch.manual_seed(0)
        model = task.build(params)
        opt = task.optimizer(params, model)
        if momentum:  # EAMSGD's worker step
            opt = torch.optim.SGD(model.parameters(), lr=params["lr"], momentum=momentum, nesterov=True)
        centre = flat({"m": model}).clone()
        for epoch in range(2):
            order = np.random.default_rng(epoch).permutation(train)
            for chunk in data.batches(order, 16):
                task.train_step(model, opt, data.batch(chunk), params)
                if elastic:  # EASGD's alpha = beta / 1 worker = 0.5, both from pre-exchange values
                    x = flat({"m": model}).clone()
                    new_x, centre = x - 0.5 * (x - centre), centre + 0.5 * (x - centre)
                    torch.nn.utils.vector_to_parameters(new_x, model.parameters())
        return centre if elastic else flat({"m": model})

    # name: (scheme, knobs, whether the closed form is elastic, the worker's momentum)
    cases = {
        "downpour": ("downpour", {"sync_every": 1}, False, 0.0),
        "easgd": ("easgd", {"tau": 1, "beta": 0.5}, True, 0.0),
        "eamsgd": ("easgd", {"tau": 1, "beta": 0.5, "momentum": 0.9}, True, 0.9),
        "gem": ("gem", {"sync_every": 1, "momentum": 0.0, "kappa": 1.0}, False, 0.0),
    }
    g = world.size - 1
    for name, (scheme, knobs, elastic, momentum) in cases.items():
        run = Run(comms, scheme, {**knobs, "worker_ranks": g}, task, params)
        assert run.train(data, train, epochs=2, batch=16)
        got = run.result().central
        want = sequential(elastic, momentum)
        err = float((got - want).abs().max())
        assert err <= 1e-6, f"{name}: max |delta| {err:.3g} from the sequential rule"
        say(f"OK degenerate {name}{f' (one worker of {g} ranks)' if g > 1 else ''}: max |delta| = {err:.2g}")
        run.scheme.close()


def gan(comms: Comms) -> None:
    """A dict of models and optimizers with a custom step trains under every scheme;
    shared parameters travel once; round robin is reproducible bit for bit; a stop
    mid-epoch and a resume end where an uninterrupted run does."""
    task = SharedGan()
    data = Data(task.dataset, torch.device("cpu"))
    train = np.arange(200)
    params = {"lr": 0.01}
    unique = sum(p.numel() for k in ("generator", "critic") for p in task.build(params)[k].parameters())
    for name in ("downpour", "easgd", "gem"):
        knobs = {"order": "round_robin"}
        a = Run(comms, name, knobs, task, params)
        assert a.scheme.flat.numel == unique, f"{name}: {a.scheme.flat.numel} weights sent, {unique} unique"
        start = flat(a.models).clone()
        assert a.train(data, train, epochs=3, batch=32)
        ra = a.result()
        a.scheme.close()
        moved = float((flat(ra.models) - start).abs().max())
        assert moved > 1e-4, f"{name}: the GAN did not train"
        b = Run(comms, name, knobs, task, params)
        b.train(data, train, epochs=3, batch=32)
        rb = b.result()
        b.scheme.close()
        assert torch.equal(ra.central, rb.central), f"{name}: round robin differs between two runs"
        # Stop at step 2 of epoch 2 on the last rank, checkpoint, resume in a fresh run.
        c = Run(comms, name, knobs, task, params)
        assert not c.train(data, train, epochs=3, batch=32, stop=Stop(rank=world.size - 1, at=2))
        blob = c.checkpoint()
        c.scheme.close()
        d = Run(comms, name, knobs, task, params)
        d.resume(blob)
        assert d.train(data, train, epochs=3, batch=32)
        rd = d.result()
        d.scheme.close()
        assert torch.equal(ra.central, rd.central), f"{name}: the resumed run ends elsewhere"
        say(
            f"OK gan {name}: {unique} weights per message; trained (max move {moved:.2g}); "
            "round robin identical twice; stop at epoch 2 + resume identical"
        )
    # The example GAN (examples/gan) learns its ring under every scheme.
    ring = RingGan()
    rdata = Data(ring.dataset, torch.device("cpu"))
    for name in ("downpour", "easgd", "gem"):
        params = {"lr_g": 3e-4, "lr_d": 3e-4, "width": 64}
        knobs = {"order": "round_robin", **{"easgd": {"tau": 4}}.get(name, {})}  # gem: the Adam lr as it is
        run = Run(comms, name, knobs, ring, params)
        real = rdata.batch(np.arange(7000, 8192))
        with torch.no_grad():
            before = ring.evaluate(run.models, [real], params)["sliced_w1"]
        run.train(rdata, np.arange(6500), epochs=2, batch=64)
        with torch.no_grad():
            after = ring.evaluate(run.models, [real], params)["sliced_w1"]
        run.scheme.close()
        assert after < 0.8 * before, f"{name}: the example GAN did not learn: sliced W1 {before:.3f} -> {after:.3f}"
        say(f"OK examples/gan {name}: sliced W1 {before:.3f} -> {after:.3f}")


def tree(comms: Comms) -> None:
    """4 ranks: the staleness bound holds where it binds; sub-masters route and train;
    every scheme reaches allreduce's digits accuracy within 3 points."""
    task = Regression()
    data = Data(task.dataset, torch.device("cpu"))
    train = np.arange(240)
    # Every worker sleeps per step, the slow one 10x longer: the epoch's 60 one-step
    # blocks last ~0.3 s for the fast two, so a slow worker a scheduler tick late still
    # gets blocks (without the fast sleep, one fast worker could take them all alone and
    # see no staleness at all).
    slow = 0.1 if world.rank == 1 else 0.01
    for name in ("downpour", "easgd"):
        free = Run(comms, name, {}, task, {"lr": 0.02})
        free.train(data, train, epochs=1, batch=12, sleep=slow)
        unbounded = free.result().metrics["staleness_max"]
        free.scheme.close()
        held = Run(comms, name, {"max_staleness": 2}, task, {"lr": 0.02})
        held.train(data, train, epochs=1, batch=12, sleep=slow)
        bounded = held.result().metrics["staleness_max"]
        held.scheme.close()
        assert unbounded > 2, f"{name}: a slow worker should see staleness > 2 without a bound ({unbounded})"
        assert bounded <= 2, f"{name}: max_staleness 2 not kept: {bounded}"
        say(f"OK staleness {name}: max {unbounded:.0f} unbounded, {bounded:.0f} with max_staleness 2")

    # Synchronous rounds: all 3 workers (staleness 0), or 2 of 3 (NNLO's partial mode: the
    # slow worker's pushes join a later round, a step late).
    seen = {}
    for fraction in (1.0, 0.6):
        run = Run(comms, "downpour", {"synchronous": True, "sync_fraction": fraction}, task, {"lr": 0.02})
        before = evaluate_regression(run, data)
        run.train(data, train, epochs=1, batch=12, sleep=slow)
        seen[fraction] = run.result().metrics["staleness_max"], before, evaluate_regression(run, data)
        run.scheme.close()
    assert seen[1.0][0] == 0 and seen[0.6][0] >= 1, seen
    assert seen[0.6][2] < 0.7 * seen[0.6][1], seen
    say(f"OK synchronous downpour: max staleness {seen[1.0][0]:.0f} waiting for all, {seen[0.6][0]:.0f} for 2 of 3")

    # Sub-masters: master 0 <- sub-master 1 <- workers 2, 3.
    for name in ("downpour", "easgd", "gem"):
        run = Run(comms, name, {"sub_masters": 1, "order": "round_robin"}, task, {"lr": 0.02})
        before = evaluate_regression(run, data)
        run.train(data, train, epochs=2, batch=12)
        after = evaluate_regression(run, data)
        counts = comms.fold.gather(run.scheme.messages, root=0)
        run.scheme.close()
        if counts is not None:
            # The master hears only from the sub-master, once per round of its two workers.
            assert counts[0] == 0 and 0 < counts[1] < counts[2] + counts[3], counts
            assert after < before * 0.7, f"{name} with a sub-master did not train: {before:.3g} -> {after:.3g}"
        say(f"OK sub-master {name}: exchanges per rank {counts}; loss {before:.3g} -> {after:.3g}")

    # DDP (allreduce): a stop anywhere in an epoch (here its last batches) resumes bit
    # for bit, though the resumed fold's DDP is new.
    whole = Run(comms, "allreduce", {}, task, {"lr": 0.02})
    assert whole.train(data, train, epochs=3, batch=12)
    for at in range(14, 20):  # of 20 batches per epoch and rank
        cut, rest = stopped_and_resumed(comms, "allreduce", {}, task, data, train, Stop(rank=None, at=at))
        assert rest.train(data, train, epochs=3, batch=12)
        assert torch.equal(flat(rest.models), flat(whole.models)), (
            f"allreduce resumed at batch {cut.batch}: weights differ"
        )
        rest.scheme.close()
    whole.scheme.close()
    say("OK allreduce resume from each of the last 6 batches of an epoch, bit for bit")


def hybrid(comms: Comms) -> None:
    """5 ranks: one worker of 4 ranks against the sequential rules; a master and two
    workers of 2 ranks train digits, each worker's ranks identical, within 3 points of
    allreduce; a sub-master over a worker of 3 ranks; a stop on a worker's leader and a
    resume end where an uninterrupted run does."""
    assert world.size == 5
    degenerate(comms)
    digits = Digits()
    ddata = Data(digits.dataset, torch.device("cpu"))
    order = np.random.default_rng(0).permutation(len(ddata))
    dtrain, dval = order[:1400], order[1400:]
    acc = {}
    rr = {"order": "round_robin", "worker_ranks": 2}
    cases = (("allreduce", {}), ("downpour", rr), ("easgd", {**rr, "tau": 4}), ("gem", rr))
    for name, knobs in cases:
        run = Run(comms, name, knobs, digits, {"lr": 3e-3})
        run.train(ddata, dtrain, epochs=4, batch=64)
        with torch.no_grad():
            acc[name] = digits.evaluate(run.models["model"], [ddata.batch(dval)], {})["accuracy"]
        if run.scheme.traits.parameter_server:
            # The weights each rank trains on (consensus stashed them): equal within a worker.
            local = run.scheme.stash if run.scheme.stash is not None else run.scheme.flat.get()
            views = comms.fold.allgather(local)
            for leader in run.scheme.layout.workers:
                assert torch.equal(views[leader], views[leader + 1]), f"{name}: worker {leader}'s ranks differ"
            counts = comms.fold.allgather(run.scheme.messages)
            assert counts[2] == counts[4] == 0 < counts[1] * counts[3], f"{name}: only leaders exchange: {counts}"
        run.scheme.close()
    say("digits accuracy, 2 workers of 2 ranks, 4 epochs: " + ", ".join(f"{k} {v:.3f}" for k, v in acc.items()))
    for name in ("downpour", "easgd", "gem"):
        assert acc[name] >= acc["allreduce"] - 0.03, f"{name}: {acc[name]:.3f} vs allreduce {acc['allreduce']:.3f}"
    say("OK hybrid digits: every worker's ranks identical, every scheme within 3 points of allreduce")

    task = Regression()
    data = Data(task.dataset, torch.device("cpu"))
    run = Run(comms, "gem", {"sub_masters": 1, "worker_ranks": 3}, task, {"lr": 0.02})
    before = evaluate_regression(run, data)
    run.train(data, np.arange(240), epochs=2, batch=12)
    after = evaluate_regression(run, data)
    run.scheme.close()
    assert after < before * 0.7, f"gem, a sub-master over a 3-rank worker, did not train: {before:.3g} -> {after:.3g}"
    say(f"OK hybrid sub-master gem: loss {before:.3g} -> {after:.3g}")

    knobs = {"order": "round_robin", "worker_ranks": 2, "tau": 2}
    a = Run(comms, "easgd", knobs, task, {"lr": 0.02})
    assert a.train(data, np.arange(240), epochs=3, batch=12)
    ra = a.result()
    a.scheme.close()
    _, d = stopped_and_resumed(comms, "easgd", knobs, task, data, np.arange(240), Stop(rank=3, at=3))
    assert d.train(data, np.arange(240), epochs=3, batch=12)
    rd = d.result()
    d.scheme.close()
    assert torch.equal(ra.central, rd.central), "hybrid easgd: the resumed run ends elsewhere"
    say("OK hybrid resume: a stop on a worker's leader and a resume end where an uninterrupted run does")
    overlap(comms, acc["allreduce"])


def overlap(comms: Comms, allreduce_acc: float) -> None:
    """``overlap: true``, 5 ranks: one worker of 4 ranks is downpour with each gradient
    one block late (its closed form); two workers of 2 ranks train digits with downpour
    and EASGD, each worker's ranks identical, round robin reproducible; a sub-master
    serves overlapped workers; a stop and a resume train every block exactly once."""
    task = Regression()
    data = Data(task.dataset, torch.device("cpu"))
    train, params = np.arange(200), {"lr": 0.05}

    torch.manual_seed(0)
    master = task.build(params)
    probe = task.build(params)
    opt = task.optimizer(params, master)
    for epoch in range(2):  # the gradient of batch k is taken at the master's weights before batch k-1's
        probe.load_state_dict(master.state_dict())
        for chunk in data.batches(np.random.default_rng(epoch).permutation(train), 16):
            batch = data.batch(chunk)
            probe.zero_grad()
            task.loss(probe(batch[0]), batch).backward()
            before = {k: v.clone() for k, v in master.state_dict().items()}
            for p, q in zip(master.parameters(), probe.parameters(), strict=True):
                p.grad = q.grad.clone()
            opt.step()
            probe.load_state_dict(before)
    want = flat({"m": master})
    run = Run(comms, "downpour", {"sync_every": 1, "overlap": True, "worker_ranks": world.size - 1}, task, params)
    assert run.train(data, train, epochs=2, batch=16)
    err = float((run.result().central - want).abs().max())
    run.scheme.close()
    assert err <= 1e-6, f"overlapped downpour: max |delta| {err:.3g} from the one-block-late rule"
    say(f"OK overlap downpour (one worker of {world.size - 1} ranks) = gradients one block late: {err:.2g}")

    digits = Digits()
    ddata = Data(digits.dataset, torch.device("cpu"))
    order = np.random.default_rng(0).permutation(len(ddata))
    dtrain, dval = order[:1400], order[1400:]
    knobs = {"order": "round_robin", "worker_ranks": 2, "overlap": True}
    for name, extra in (("downpour", {}), ("easgd", {"tau": 4})):
        finals = []
        for _ in range(2):
            run = Run(comms, name, {**knobs, **extra}, digits, {"lr": 3e-3})
            run.train(ddata, dtrain, epochs=4, batch=64)
            finals.append(run.result().central)
            with torch.no_grad():
                acc = digits.evaluate(run.models["model"], [ddata.batch(dval)], {})["accuracy"]
            local = run.scheme.stash if run.scheme.stash is not None else run.scheme.flat.get()
            views = comms.fold.allgather(local)
            for leader in run.scheme.layout.workers:
                assert torch.equal(views[leader], views[leader + 1]), f"{name}: worker {leader}'s ranks differ"
            run.scheme.close()
        assert torch.equal(finals[0], finals[1]), f"overlapped {name} in round robin: two runs differ"
        assert acc >= allreduce_acc - 0.03, f"overlapped {name}: {acc:.3f} vs allreduce {allreduce_acc:.3f}"
        say(f"OK overlap {name} digits {acc:.3f} (allreduce {allreduce_acc:.3f}), reproducible in round robin")

    # A sub-master over three one-rank workers, served in arrival order.
    run = Run(comms, "downpour", {"sub_masters": 1, "overlap": True}, task, {"lr": 0.02})
    before = evaluate_regression(run, data)
    run.train(data, np.arange(240), epochs=2, batch=12)
    after = evaluate_regression(run, data)
    run.scheme.close()
    assert after < before * 0.7, f"overlapped downpour under a sub-master did not train: {before:.3g} -> {after:.3g}"
    say(f"OK overlap sub-master downpour: loss {before:.3g} -> {after:.3g}")

    knobs = {"order": "round_robin", "worker_ranks": 2, "tau": 2, "overlap": True}
    whole = Run(comms, "easgd", knobs, task, {"lr": 0.02})
    assert whole.train(data, np.arange(240), epochs=3, batch=12)
    steps = comms.fold.allreduce(whole.steps)
    whole.scheme.close()
    cut, rest = stopped_and_resumed(comms, "easgd", knobs, task, data, np.arange(240), Stop(rank=3, at=3))
    before = evaluate_regression(rest, data)
    assert rest.train(data, np.arange(240), epochs=3, batch=12)
    after = evaluate_regression(rest, data)
    rest.scheme.close()
    resumed = comms.fold.allreduce(cut.steps + rest.steps)
    assert resumed == steps, f"overlapped easgd: {resumed} steps over the stop and the resume, {steps} without"
    assert after < before, f"overlapped easgd did not train after the resume: {before:.3g} -> {after:.3g}"
    say(f"OK overlap resume: every block trained once ({steps} steps) over a stop and a resume")


def evaluate_regression(run: Run, data: Data) -> float:
    model = run.models["model"]
    with torch.no_grad():
        x, y = data.batch(np.arange(240))
        return float(F.mse_loss(model(x), y))


def main() -> int:
    limit_threads(world, 1)
    check = sys.argv[1]
    comms = comms_for(world.size)
    {"degenerate": degenerate, "gan": gan, "tree": tree, "hybrid": hybrid}[check](comms)
    comms.close()
    say(f"ALL OK {check}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
