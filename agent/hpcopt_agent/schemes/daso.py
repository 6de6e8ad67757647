"""DASO, Distributed Asynchronous and Selective Optimization (Coquelin et al., 2022; HeAT's
``DASO`` optimizer), written for CPUs (gloo process groups) and GPUs (NCCL).

A fold group of R ranks is N nodes x L local ranks (``daso.node_size`` = L, else the
ranks sharing a host). Every step is synchronous inside a node (DDP on the node's
process group). Across nodes only one rank per node talks, and rarely:

- every ``global_skip`` batches the node's *sender* (its local rank ``send_mod``, which
  rotates) starts a non-blocking ``Iallreduce`` of its flat weights with the other
  nodes' senders;
- ``S`` (``batches_to_wait``) batches later it takes the sum and merges it with the
  weights it has trained since, the local ones doubly weighted as in HeAT:
  ``theta = (2 S theta_local + sum_nodes theta_sent) / (2 S + N)``;
- then broadcasts theta inside its node.

``local_skips: true`` adds HeAT's local skipping: DDP syncs a node's gradients only on
every ``local_skip``-th batch (and the epoch's last); in between each rank steps on its
own gradients, and the node agrees again when a merge broadcasts the sender's weights.

With ``global_skip`` = 0 (warm-up and cool-down epochs) every batch ends with a blocking
average over the nodes, which is synchronous data parallelism over all R ranks. The
last batch of every epoch (and a stop) always ends with a blocking average, so every
epoch ends with the same weights on every rank: evaluation and checkpoints need no
other consensus. :class:`Schedule` is HeAT's ``epoch_loss_logic``: between warm-up and
cool-down the skips start at (global_skip 4, S 1) and halve (S decreases by one) each
time the epoch loss is stable, until a reset to ``max_global_skips``.

The exchanges go through torch process groups on the weights where they live: NCCL on
GPUs (the weights never cross to the host, and the global ``Iallreduce`` runs on its
own stream while the node trains), gloo on CPUs (its threads move the bytes while
the rank computes). One node (N = 1) is exactly ``allreduce``: nothing is exchanged.
"""

from __future__ import annotations

import logging
import math
import socket
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI

from hpcopt.core.schemes import TRAITS
from hpcopt_agent.comm import Comms
from hpcopt_agent.schemes.base import Models, Optimizers, Scheme, Stop
from hpcopt_agent.schemes.daso_powersgd import WeightsPowerSGD
from hpcopt_agent.schemes.flat import Flat

log = logging.getLogger("hpcopt_agent")


@dataclass
class Schedule:
    """The skips of each epoch (HeAT's ``epoch_loss_logic``, no MPI): ``global_skip`` 0
    means a blocking average after every batch."""

    epochs: int
    max_global_skips: int = 8
    warmup_epochs: int | None = None
    cooldown_epochs: int | None = None
    stability_level: float = 0.05
    patience: int = 2
    local_skip_factor: int = 4
    skip_reduction_factor: int = 2
    global_skip: int = 0
    batches_to_wait: int = 0
    local_skip: int = 0  # batches between node-local gradient syncs (0 or 1: every batch)
    best: float = math.inf  # the plateau detector (relative threshold, like ReduceLROnPlateau)
    bad_epochs: int = 0

    def __post_init__(self) -> None:
        default = min(4, self.epochs // 4)
        self.warmup = default if self.warmup_epochs is None else self.warmup_epochs
        self.cooldown = self.warmup if self.cooldown_epochs is None else self.cooldown_epochs
        self.start(0)

    def blocking(self, epoch: int) -> bool:
        return epoch < self.warmup or epoch >= self.epochs - self.cooldown

    def start(self, epoch: int) -> None:
        """The skips of a first epoch (a fresh trial: no loss seen yet)."""
        if self.blocking(epoch):
            self.global_skip, self.batches_to_wait, self.local_skip = 0, 0, 0
        else:
            self.global_skip, self.batches_to_wait, self.local_skip = min(4, self.max_global_skips), 1, 1

    def stable(self, loss: float) -> bool:
        """Whether the loss has not improved by ``stability_level`` (relative) for more
        than ``patience`` epochs; a plateau resets the count."""
        if math.isfinite(loss) and loss < self.best * (1 - self.stability_level if self.best > 0 else 1):
            self.best, self.bad_epochs = loss, 0
            return False
        self.bad_epochs += 1
        if self.bad_epochs > self.patience:
            self.bad_epochs = 0
            return True
        return False

    def checks_per_epoch(self, given: int | None) -> int:
        """Stability checks per epoch: ``given``, else enough for about 16 while cycling
        (HeAT checks once per epoch of long trainings; a 6-epoch HPO trial would never
        see its loss plateau, so the skips would never move)."""
        if given is not None:
            return given
        cycling = max(1, self.epochs - self.warmup - self.cooldown)
        return max(1, -(-16 // cycling))

    def check(self, loss: float) -> None:
        """A stability check while cycling: on a plateau the skips shrink, and a plateau
        at skip 1 starts the cycle over at ``max_global_skips``."""
        if self.global_skip == 0 or not self.stable(loss):
            return
        if self.global_skip == 1:  # the cycle starts over
            self.global_skip = self.max_global_skips
            self.batches_to_wait = max(1, self.max_global_skips // self.local_skip_factor)
            self.local_skip = max(1, self.max_global_skips // self.local_skip_factor)
            self.best = math.inf
        else:
            self.global_skip = max(1, self.global_skip // self.skip_reduction_factor)
            self.batches_to_wait = max(1, self.batches_to_wait - 1)
            self.local_skip = max(1, self.local_skip // self.skip_reduction_factor)

    def end_epoch(self, epoch: int, loss: float) -> None:
        """Sets the skips of epoch ``epoch + 1`` from the training loss of ``epoch`` (or
        of its last check's window)."""
        following = epoch + 1
        if self.blocking(following):
            self.global_skip, self.batches_to_wait, self.local_skip = 0, 0, 0
        elif self.global_skip == 0:  # warm-up is over
            self.start(following)
        else:
            self.check(loss)

    def state(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k in STATE}

    def syncs_locally(self, batch: int, n_batches: int) -> bool:
        """Whether batch ``batch`` syncs gradients inside the node (HeAT's local
        skipping): every ``local_skip``-th batch, and the epoch's last."""
        return self.local_skip <= 1 or batch % self.local_skip == 0 or batch == n_batches - 1


STATE = ("global_skip", "batches_to_wait", "local_skip", "best", "bad_epochs")


@dataclass
class _Pending:
    work: Any  # the sender's torch Work, else None
    buffer: torch.Tensor | None  # the sum, on the sender (PowerSGD's [P..., vectors] when compressed)
    sent_at: int  # batch index
    wait: int  # S
    compressed: bool = False  # by ``daso_powersgd.WeightsPowerSGD``


class DASO(Scheme):
    name = "daso"
    traits = TRAITS[name]

    def __init__(self, comms: Comms, knobs: dict[str, Any], epochs: int, timeout: float = 300.0) -> None:
        super().__init__(comms, knobs, epochs, timeout)
        self.node, self.local, self.node_size = _placement(self.fold, knobs.get("node_size"))
        self.nodes = self.size // self.node_size
        if self.nodes == 1 and self.size > 1 and knobs.get("node_size") is None and self.rank == 0:
            _warn_once(
                f"daso: the fold group's {self.size} ranks share one host and training.options.daso.node_size is "
                "not set, so there is no inter-node link to skip: DASO runs as allreduce (DDP every batch). Set "
                "daso.node_size to the ranks per node to emulate nodes on one host, or run on several nodes"
            )
        self.schedule = Schedule(
            epochs,
            knobs["max_global_skips"],
            knobs["warmup_epochs"],
            knobs["cooldown_epochs"],
            knobs["stability_level"],
            knobs["patience"],
            knobs["local_skip_factor"],
            knobs["skip_reduction_factor"],
        )
        # One rank per node with the same local index talk across nodes; a node's ranks among themselves.
        placed = self.fold.allgather((comms.world.rank, self.node, self.local))
        #: World rank of each local index of this node (torch names a broadcast's source by it).
        self.node_ranks = [w for _, w in sorted((local, w) for w, node, local in placed if node == self.node)]
        peers = sorted(w for w, _, local in placed if local == self.local)
        self.across = comms.subgroup(peers) if self.nodes > 1 else None
        self.pg = comms.pg if self.nodes == 1 else comms.subgroup(self.node_ranks) if self.node_size > 1 else None
        #: The dtype of the non-blocking global syncs (bf16 halves what crosses nodes).
        self.global_dtype = torch.bfloat16 if knobs.get("global_dtype") == "bf16" else torch.float32
        #: ``global_compression: powersgd``: the channel's PowerSGD state (built at ``wrap``).
        self.powersgd_rank = int(knobs["global_powersgd_rank"]) if knobs.get("global_compression") == "powersgd" else 0
        self.compressor: WeightsPowerSGD | None = None
        #: HeAT's local skipping: between global syncs, node-local gradient syncs only
        #: every ``local_skip`` batches (the node's ranks drift apart until the next
        #: merge gives them the sender's weights).
        self.local_skips = bool(knobs.get("local_skips", False))
        self.checks = self.schedule.checks_per_epoch(knobs.get("checks_per_epoch"))
        self.window = np.zeros(2)  # training loss sum and steps since the last check
        self.window_loss = math.nan  # the fold's mean loss over the epoch's last window
        self.send_mod = 0
        self.n_batches = 0
        self.pending: _Pending | None = None
        self.flat: Flat | None = None
        self.exchanges = 0
        self.local_syncs = 0  # batches this epoch whose gradients were synced inside the node

    # -- wrapping ------------------------------------------------------------------------

    def wrap(self, models: Models, optimizers: Optimizers) -> tuple[Models, Optimizers]:
        self.flat = Flat(models, optimizers)
        if self.powersgd_rank and self.nodes > 1:
            # Every rank built the same weights from the fold's seed (or read them from one
            # checkpoint, whose compressor state then replaces this): the first reference.
            self.compressor = WeightsPowerSGD([p.shape for p in self.flat.params], self.powersgd_rank)
            self.compressor.agree(self.flat.get(host=False))
        if self.pg is None:
            return models, optimizers
        return self.placement.ddp(models, self.pg), optimizers

    # -- the epoch -----------------------------------------------------------------------

    def begin_epoch(self, epoch: int, start: int, n_batches: int, stop: Stop) -> None:
        self.n_batches = n_batches
        self.exchanges = 0
        self.local_syncs = 0
        self._sync_locally(start)

    def _sync_locally(self, batch: int) -> None:
        """Sets whether DDP syncs batch ``batch``'s gradients inside the node."""
        if self.local_skips and self.nodes > 1 and batch < self.n_batches:
            sync = self.schedule.syncs_locally(batch, self.n_batches)
            for model in self.placement.ddps:
                model.require_backward_grad_sync = sync
            self.local_syncs += int(sync)

    def after_step(self, step: int, loss: float) -> None:
        if self.nodes == 1:
            return
        self._sync_locally(step + 1)
        if math.isfinite(loss):
            self.window += (loss, 1)
        if self.pending is not None and step - self.pending.sent_at >= self.pending.wait:
            self._receive()
        if step == self.n_batches - 1:
            return  # end_batches averages after the last batch
        every = max(1, self.n_batches // self.checks)
        if self.checks > 1 and (step + 1) % every == 0:
            self.schedule.check(self._window_mean())
        gs = self.schedule.global_skip
        if gs == 0:
            self._blocking()
        elif (step + 1) % gs == 0 and self.pending is None:
            self._send(step, self.schedule.batches_to_wait)

    def end_batches(self, stopped: bool, failed: bool = False) -> bool:
        """Every rank gets here after the same batch (the last one, or the agreed stop):
        the exchange in flight is merged, then a blocking average leaves the same weights
        on every rank of the fold group. After an error on this rank (``failed``), no
        collective: its peers stop on the timeout."""
        if failed:
            self.pending = None
        elif self.nodes > 1:
            if self.pending is not None:
                self._receive()
            self._blocking()
            self.window_loss = self._window_mean()
        return stopped

    def _window_mean(self) -> float:
        """The fold group's mean training loss since the last check (every rank gets the
        same, so all change their skips at the same step)."""
        total = np.zeros(2)
        self.fold.Allreduce(self.window, total, op=MPI.SUM)
        self.window[:] = 0
        return float(total[0] / total[1]) if total[1] else math.nan

    def end_epoch(self, epoch: int, train_loss: float) -> dict[str, float]:
        """The epoch's skips and exchanges (as trained), then the schedule moves on."""
        out: dict[str, float] = {}
        if self.rank == 0:
            out = {"daso_global_skip": float(self.schedule.global_skip), "daso_exchanges": float(self.exchanges)}
            if self.local_skips:
                out["daso_local_skip"] = float(self.schedule.local_skip)
        self.schedule.end_epoch(epoch, self.window_loss if self.checks > 1 else train_loss)
        return out

    # -- exchanges -----------------------------------------------------------------------

    def _send(self, step: int, wait: int) -> None:
        assert self.flat is not None
        buffer, work = None, None
        compressed = self.compressor is not None and self.compressor.ready
        if self.local == self.send_mod:
            if compressed:
                assert self.compressor is not None
                buffer, work = self.compressor.start(self.flat.get(host=False), self.across)
            else:
                buffer = self.flat.get(host=False).to(self.global_dtype)
                work = dist.all_reduce(buffer, group=self.across, async_op=True)
        self.pending = _Pending(work, buffer, step, wait, compressed)
        self.exchanges += 1

    def _receive(self) -> None:
        """Merges the exchange in flight: ``(2 S theta_local + sum) / (2 S + N)`` on the
        sender, then the sender's weights to its node."""
        p, self.pending = self.pending, None
        assert p is not None and self.flat is not None
        if p.work is not None:
            p.work.wait()
        sender = self.send_mod
        if self.local == sender and p.buffer is not None:
            local = self.flat.get(host=False)
            weight = 2.0 * p.wait
            total = p.buffer
            if p.compressed:  # the channel's agreed mean, times the nodes
                assert self.compressor is not None
                total = self.compressor.finish(p.buffer, self.across, self.nodes) * self.nodes
            self.flat.set((weight * local + total.to(local.dtype)) / (weight + self.nodes))
        self._to_node(sender)
        self.send_mod = (sender + 1) % self.node_size

    def _blocking(self) -> None:
        """The senders' weights averaged over the nodes (and floating buffers, so
        BatchNorm statistics agree too), then given to every rank of each node."""
        assert self.flat is not None
        sender = self.send_mod
        if self.local == sender:
            weights = self.flat.get(host=False)
            buffers = self.flat.get_buffers(host=False)
            both = torch.cat([weights.to(torch.float64), buffers]) if len(buffers) else weights
            dist.all_reduce(both, group=self.across)
            both /= self.nodes
            self.flat.set(both[: self.flat.numel].to(weights.dtype))
            if len(buffers):
                self.flat.set_buffers(both[self.flat.numel :])
        self._to_node(sender, buffers=True)
        if self.compressor is not None:  # every rank holds the exact mean: the channels' reference
            self.compressor.agree(self.flat.get(host=False))
        self.exchanges += 1

    def _to_node(self, sender: int, buffers: bool = False) -> None:
        assert self.flat is not None
        if self.node_size == 1:
            return
        weights = self.flat.get(host=False)
        dist.broadcast(weights, src=self.node_ranks[sender], group=self.pg)
        if self.local != sender:
            self.flat.set(weights)
        if buffers and self.flat.buffers:
            values = self.flat.get_buffers(host=False)
            dist.broadcast(values, src=self.node_ranks[sender], group=self.pg)
            if self.local != sender:
                self.flat.set_buffers(values)

    # -- checkpoints ---------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        out = {**self.schedule.state(), "send_mod": self.send_mod}
        if self.compressor is not None:
            out["global_powersgd"] = self.compressor.state()
        return out

    def load_state(self, state: dict[str, Any]) -> None:
        for key in STATE:
            if key in state:
                setattr(self.schedule, key, state[key])
        self.send_mod = int(state.get("send_mod", 0)) % self.node_size
        if self.compressor is not None and isinstance(state.get("global_powersgd"), dict):
            self.compressor.load_state(state["global_powersgd"])


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    """A warning on the agent's log, once per agent process (not once per fold)."""
    if message not in _warned:
        _warned.add(message)
        log.warning(message)


def _placement(fold: MPI.Comm, node_size: int | None) -> tuple[int, int, int]:
    """(node index, local index, ranks per node) of this rank in its fold group: by
    ``node_size`` (contiguous fold ranks), else by host name."""
    if node_size is not None:
        return fold.rank // node_size, fold.rank % node_size, node_size
    hosts = fold.allgather(socket.gethostname())
    order = list(dict.fromkeys(hosts))
    sizes = {h: hosts.count(h) for h in order}
    if len(set(sizes.values())) > 1:
        raise ValueError(
            f"daso: the fold group's ranks are spread unevenly over hosts ({sizes}); "
            "set training.options.daso.node_size (it must divide ranks_per_fold)"
        )
    me = hosts[fold.rank]
    return order.index(me), hosts[: fold.rank].count(me), sizes[me]
