"""The parallelism-scheme contract: how the ranks of one fold group train together.

A scheme is built per trial and fold (its knobs may come from the trial's params). The
epoch driver (:mod:`hpcopt_agent.epoch`) is the only code that calls its hooks, and it
fixes their order; the fold trainer and the conformance harness both run it. A scheme
is a small core of epoch hooks and two facets with default objects:

- :class:`Roles` (``scheme.roles``): who trains, who reads samples and which, how an
  epoch's samples are dealt, who serves instead of training (a parameter server's
  master and sub-masters) and how the ranks that train agree on a stop (the vote);
- :class:`Placement` (``scheme.placement``): where the models live and how they are
  built, stepped, evaluated, saved and loaded (a pipeline holds one stage per rank);
- the core, in the driver's order: :meth:`Scheme.wrap` (the models and optimizers the
  task's step uses), then per epoch :meth:`~Scheme.begin_epoch`,
  :meth:`~Scheme.blocks` and :meth:`~Scheme.after_step` around every step,
  :meth:`~Scheme.end_batches`, then :meth:`~Scheme.consensus` (the weights to
  evaluate) and :meth:`~Scheme.end_epoch` (the epoch's loss in, the scheme's figures
  out); :meth:`~Scheme.state`/:meth:`~Scheme.load_state` at checkpoints and
  :meth:`~Scheme.close` at the fold's end.

What a scheme is (a parameter server, a model split into stages, trained through
Horovod) is its :attr:`Scheme.traits`, the same object the spec's checks read
(``hpcopt.core.schemes.TRAITS``); nothing compares scheme names. Register a new scheme in
``hpcopt_agent.schemes.SCHEMES``; its knobs and traits go in ``hpcopt.core.schemes`` so the
server checks them at submission. ``docs/development.md`` says how to add one and
which conformance checks it must pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
import torch
from mpi4py import MPI
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from hpcopt.core.schemes import Traits
from hpcopt_agent.comm import Comms
from hpcopt_agent.task import Task, as_dict, as_user

Models = dict[str, nn.Module]
Optimizers = dict[str, torch.optim.Optimizer]


class Stop(Protocol):
    """A rank's stop signal (SIGTERM/SIGUSR1 on an agent; a planned step in the
    conformance harness): the epoch stops after the batch at which it is requested."""

    @property
    def requested(self) -> bool: ...


class StopVote:
    """A stop signal combined over ``comm`` with a non-blocking allreduce that completes
    by the next vote: every member stops after the same step without a blocking
    collective per step. ``comm`` None: this rank decides alone.

    Members vote every ``every`` steps, not every step: each vote also carries the
    longest time a member took since the last one, and from that agreed figure every
    member sets the same next interval, about :attr:`PERIOD` seconds of steps (at most
    :attr:`MOST` steps). A vote per step crossing a slow inter-node link cost 4% of a
    trial's time there (benchmarks/training/slow_link.py); a stop now waits at most about
    two periods longer."""

    PERIOD = 1.0
    MOST = 256

    def __init__(self, comm: MPI.Comm | None) -> None:
        self.comm = comm if comm is not None and comm.size > 1 else None
        self.send = np.zeros(2, np.float64)  # (stop, seconds since the last vote)
        self.recv = np.zeros(2, np.float64)
        self.pending: MPI.Request | None = None
        self.every, self.steps, self.sent_steps = 1, 0, 1
        self.since = time.perf_counter()

    def step(self, stop: bool) -> bool:
        """After a step: whether all members agreed (at the last vote) to stop."""
        if self.comm is None:
            return stop
        self.steps += 1
        if self.steps < self.every:
            return False
        agreed = False
        if self.pending is not None:
            self.pending.Wait()
            agreed = bool(self.recv[0])
            per_step = float(self.recv[1]) / max(1, self.sent_steps)
            self.every = max(1, min(self.MOST, int(self.PERIOD / per_step) if per_step > 0 else self.MOST))
        if not agreed:
            now = time.perf_counter()
            self.send[:] = (float(stop), now - self.since)
            self.since, self.sent_steps, self.steps = now, self.steps, 0
            self.pending = self.comm.Iallreduce(self.send, self.recv, op=MPI.MAX)
        else:
            self.pending = None
        return agreed

    def finish(self) -> bool:
        """At the end of the batches: the last vote's outcome."""
        if self.pending is None:
            return False
        self.pending.Wait()
        self.pending = None
        return bool(self.recv[0])


class Roles:
    """Who trains, reads, serves and votes. The default: every rank of the fold group
    trains data-parallel on its share of every batch and reads its own samples."""

    def __init__(self, fold: MPI.Comm, train_rank: int | None = None, train_size: int | None = None) -> None:
        self.fold = fold
        #: This rank's place among the ranks that train, and how many there are.
        self.train_rank = fold.rank if train_rank is None else train_rank
        self.train_size = fold.size if train_size is None else train_size

    @property
    def trains(self) -> bool:
        """Whether this rank runs the batch loop (else it serves the epoch)."""
        return True

    @property
    def reads(self) -> bool:
        """Whether this rank reads samples (trains on them and evaluates a share)."""
        return self.trains

    def reader(self) -> tuple[int, int]:
        """(this rank's index among the ranks that read, how many read): its share of
        the validation samples."""
        return self.train_rank, self.train_size

    def shard(self, indices: np.ndarray, seed: int) -> np.ndarray:
        """This rank's training samples for one epoch: a seeded shuffle of the fold's
        training indices, padded (by wrapping) to a multiple of the training ranks so
        every one takes the same number of steps, then dealt round-robin."""
        if not self.trains:
            return indices[:0]
        order = np.random.default_rng(seed).permutation(indices)
        pad = (-len(order)) % self.train_size
        if pad:
            order = np.concatenate([order, order[:pad]])
        return order[self.train_rank :: self.train_size]

    def rank_batch(self, batch_size: int) -> int:
        """Samples per training rank and step for a fold's global batch size."""
        return max(1, batch_size // self.train_size)

    def vote(self) -> StopVote:
        """The stop vote of the ranks that train."""
        return StopVote(self.fold)

    def serve(self, stop: Stop) -> bool:
        """The epoch on a rank that does not train; returns whether it ended in a stop."""
        raise NotImplementedError("every rank trains")


class Placement:
    """Where the models live and how they are built, stepped, evaluated, saved and
    loaded. The default: every rank holds the whole of every model on its device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.ddps: list[DistributedDataParallel] = []  # what :meth:`ddp` wrapped
        #: A comm hook's state kept across :meth:`prime`: (save, restore, blank: what
        #: the priming pass starts from), or None.
        self._hook_state: tuple[Callable[[], Any], Callable[[Any], None], Callable[[], None]] | None = None

    def build(self, task: Task, params: dict[str, Any]) -> tuple[Models, bool]:
        """The task's models on this rank's device, and whether ``build`` returned one
        model (not a dict). A placement that shards the model materializes only this
        rank's part of it."""
        built = task.build(params)
        return {k: m.to(self.device) for k, m in as_dict(built).items()}, isinstance(built, nn.Module)

    def ddp(self, models: Models, pg: Any) -> Models:
        """Each trainable model in DistributedDataParallel over the torch process group
        ``pg`` (gradients averaged over its ranks in every backward pass)."""
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        wrapped = {
            name: DistributedDataParallel(model, device_ids=device_ids, process_group=pg)
            if any(p.requires_grad for p in model.parameters())
            else model
            for name, model in models.items()
        }
        self.ddps = [m for m in wrapped.values() if isinstance(m, DistributedDataParallel)]
        return wrapped

    def prime(self, task: Task, batch: Any) -> None:
        """A fold resumed from a checkpoint, before its first step: one forward and
        backward through its new DDP on that step's batch, the gradients dropped and the
        buffers and RNG as they were. DDP reorders its gradient buckets after its first
        backward, so without this the resumed step would sum gradients in another order
        than the uninterrupted run (whose DDP reordered at its first step) and the fold
        would end a rounding error away; with it, bit for bit. Done for the default
        ``train_step`` (one model, ``task.loss(model(batch[0]), batch)``); a task with its
        own step resumes to within rounding. A comm hook with state of its own (allreduce's
        PowerSGD) would take that pass for a step, on memories keyed by the reordered
        buckets: ``_hook_state`` saves its state, blanks it for the pass and restores it."""
        if len(self.ddps) != 1 or type(task).train_step is not Task.train_step:
            return
        saved = self._hook_state[0]() if self._hook_state else None
        if self._hook_state:
            self._hook_state[2]()
        [ddp] = self.ddps
        buffers = [b.clone() for b in ddp.module.buffers()]
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.autograd.backward(task.loss(ddp(batch[0]), batch))
        with torch.no_grad():
            for b, kept in zip(ddp.module.buffers(), buffers, strict=True):
                b.copy_(kept)
        ddp.module.zero_grad(set_to_none=True)
        if self._hook_state:
            self._hook_state[1](saved)

    def step(self, task: Task, models: Any, optimizers: Any, batch: Any, params: dict[str, Any]) -> float | None:
        """One training step of this rank (the task's ``train_step``; a pipeline runs its
        schedule instead); returns the batch's loss, or None where this rank has none."""
        return task.train_step(models, optimizers, batch, params)

    def takes_part(self, share: int, read: int) -> bool:
        """Whether this rank takes part in evaluating its share (``share`` samples, of
        which it reads ``read``)."""
        return read > 0

    def evaluate(
        self, task: Task, models: Models, single: bool, batches: Iterator[Any], params: dict[str, Any]
    ) -> dict[str, float]:
        """Collective: the task's metrics over this rank's validation ``batches`` (empty
        on a rank that does not read)."""
        found = task.evaluate(as_user(models, single), batches, params)
        return {k: float(v) for k, v in found.items()}

    def evaluated(self, read: int) -> int:
        """How many validation samples this rank's metrics stand for, having read ``read``."""
        return read

    def save_models(self, path: Path, models: Models, optimizers: Optimizers) -> dict[str, Any]:
        """Collective, at a checkpoint to ``path``: what the fold leader's file holds of
        the models and optimizers (``models`` and ``optimizers`` state dicts). A
        placement that shards the model writes each shard beside ``path`` itself."""
        return {
            "models": {k: m.state_dict() for k, m in models.items()},
            "optimizers": {k: o.state_dict() for k, o in optimizers.items()},
        }

    def load_models(self, path: Path, state: dict[str, Any], models: Models, optimizers: Optimizers) -> None:
        """Restores what :meth:`save_models` wrote (before the scheme's wrap)."""
        for name, model in models.items():
            model.load_state_dict(state["models"][name])
        for name, opt in optimizers.items():
            opt.load_state_dict(state["optimizers"][name])


def average_buffers(models: Models, comm: Any, mine: bool = True, count: int | None = None) -> None:
    """Every buffer of ``models`` averaged over ``comm``'s ranks, in place: BatchNorm's
    running means and variances, and its ``num_batches_tracked`` (integer buffers are
    rounded back). A rank with ``mine`` False adds nothing, and the sum is divided by
    ``count`` (default: every rank): a parameter server's master, which trains on
    nothing, takes the workers' mean. Collective; the buffers travel as float64 through
    host memory (a few numbers per normalised channel)."""
    buffers = list({id(b): b for m in models.values() for b in m.buffers() if not b.is_meta}.values())
    if not buffers:
        return
    with torch.no_grad():
        flat = torch.cat([b.detach().reshape(-1).to("cpu", torch.float64) for b in buffers])
        if not mine:
            flat.zero_()
        total = np.empty_like(flat.numpy())
        comm.Allreduce(flat.numpy(), total, op=MPI.SUM)
        total /= count or comm.size
        at = 0
        for b in buffers:
            part = torch.from_numpy(total[at : at + b.numel()]).view(b.shape)
            b.copy_(part if b.is_floating_point() else part.round())
            at += b.numel()


class Scheme:
    """The core of a scheme: its name and traits, and the epoch hooks the driver calls
    (:mod:`hpcopt_agent.epoch`), with the :class:`Roles` and :class:`Placement` facets.
    A subclass overrides the hooks it needs and replaces a facet where its ranks differ
    from plain data parallelism."""

    name: ClassVar[str]
    #: What the scheme is: ``hpcopt.core.schemes.TRAITS[name]``, the table the spec checks read.
    traits: ClassVar[Traits] = Traits()

    def __init__(self, comms: Comms, knobs: dict[str, Any], epochs: int, timeout: float = 300.0) -> None:
        self.comms = comms
        self.timeout = timeout  # seconds a rank may wait for another (the collective timeout)
        self.fold = comms.fold
        self.rank = comms.fold.rank
        self.size = comms.fold.size
        self.knobs = knobs
        self.epochs = epochs
        self.roles = Roles(comms.fold)
        self.placement = Placement(comms.device)

    @classmethod
    def accepts(cls, task: Task) -> bool:
        """Whether this scheme can train ``task`` (refused when the agent starts): a
        scheme that runs the loss through its own step cannot use a custom
        ``train_step``."""
        return not cls.traits.own_step or type(task).train_step is Task.train_step

    def wrap(self, models: Models, optimizers: Optimizers) -> tuple[Models, Optimizers]:
        """The models and optimizers the task's training step uses; the originals in
        ``models`` keep the weights that are evaluated and checkpointed."""
        return models, optimizers

    # -- one epoch, in the driver's order ----------------------------------------------

    def begin_epoch(self, epoch: int, start: int, n_batches: int, stop: Stop) -> None:
        """Before the epoch's batches (``start`` > 0 when resuming mid-epoch; ``stop``
        is this rank's stop signal)."""

    def blocks(self, n_batches: int, start: int) -> Iterator[range]:
        """The batches (indices into the epoch's ``n_batches``) this rank trains, in
        order, as runs known in advance (the next run may depend on the last step)."""
        if start < n_batches:
            yield range(start, n_batches)

    def after_step(self, step: int, loss: float) -> None:
        """After every training step of this rank."""

    def end_batches(self, stopped: bool, failed: bool = False) -> bool:
        """After this rank's last batch of the epoch or the agreed stop (``stopped``);
        returns whether the epoch stops here. ``failed``: this rank failed in the
        batches; tell peers that wait for it without a collective (the others may be
        anywhere)."""
        return stopped

    def consensus(self, models: Models) -> None:
        """Collective: leaves in ``models`` on every rank the weights to evaluate. Here
        the weights already agree; the buffers each rank updated on its own shard
        (BatchNorm's running statistics) are averaged over the fold group. A scheme
        that splits the model has no whole-model buffers to average."""
        if not self.traits.splits_model:
            average_buffers(models, self.fold)

    def end_epoch(self, epoch: int, train_loss: float) -> dict[str, float]:
        """Collective, after evaluation, with the fold group's mean training loss of the
        epoch: the scheme's own figures for the epoch (on fold rank 0; {} elsewhere)."""
        return {}

    # -- checkpoints and the end -------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """This rank's scheme state for a checkpoint (gathered to the fold leader)."""
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state` on resume (after the models and optimizers are)."""

    def close(self) -> None:
        """The fold is over: free what the scheme made."""
