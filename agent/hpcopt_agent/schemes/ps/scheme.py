"""The parameter-server scheme: its roles, its state at the epoch's boundaries and in
checkpoints.

Layout of a fold group (:class:`hpcopt.core.schemes.PsLayout`): fold rank 0 is the master
(and the fold leader, so it evaluates, checkpoints and reports), ranks 1..M are
sub-masters, the rest are workers (``worker_ranks`` ranks each) dealt round-robin to
them. Serving ranks run :class:`~.serving.Server`, workers :class:`~.worker.Worker`;
the rule (:mod:`.rules`) is what differs between the schemes.

Epochs stay synchronous: the master serves until every worker has been told "no more
blocks", and :meth:`ParameterServer.consensus` gives every rank the central weights to
evaluate (each rank keeps its own to go on training).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import torch
from mpi4py import MPI

from hpcopt.core.schemes import PsLayout
from hpcopt_agent.comm import Comms
from hpcopt_agent.schemes.base import Models, Optimizers, Roles, Scheme, Stop, StopVote, average_buffers
from hpcopt_agent.schemes.flat import Collect, Flat
from hpcopt_agent.schemes.ps.protocol import Link, NoVote
from hpcopt_agent.schemes.ps.rules import Rule
from hpcopt_agent.schemes.ps.serving import Server
from hpcopt_agent.schemes.ps.worker import Worker


class _PsRoles(Roles):
    """Workers train and read; the master and sub-masters serve the epoch instead."""

    def __init__(self, ps: ParameterServer, train_rank: int, train_size: int) -> None:
        super().__init__(ps.fold, train_rank, train_size)
        self.ps = ps

    @property
    def trains(self) -> bool:
        return self.ps.is_worker

    def shard(self, indices: np.ndarray, seed: int) -> np.ndarray:
        """Every rank sees the epoch's whole order: workers take blocks of its batches
        from their parent as they go, so a fast worker trains more of the epoch than a
        slow one instead of waiting for it. In a worker of several ranks, each takes
        every ``worker_ranks``-th sample (the order padded by wrapping, so all ranks
        count the same batches): its share of each batch the worker trains."""
        order = np.random.default_rng(seed).permutation(indices)
        g, leader = self.ps.layout.worker_ranks, self.ps.leader
        if g == 1:
            return order
        pad = (-len(order)) % g
        if pad:
            order = np.concatenate([order, order[:pad]])
        return order[(self.fold.rank - leader) if leader is not None else 0 :: g]

    def vote(self) -> StopVote:
        return NoVote(None)  # stops travel in the headers: the parent answers "no more blocks"

    def serve(self, stop: Stop) -> bool:
        assert self.ps.server is not None
        return self.ps.server.serve(stop)


class ParameterServer(Scheme):
    rule_class: ClassVar[type[Rule]]

    def __init__(self, comms: Comms, knobs: dict[str, Any], epochs: int, timeout: float = 300.0) -> None:
        super().__init__(comms, knobs, epochs, timeout)
        self.layout = PsLayout(self.size, knobs["sub_masters"], knobs.get("worker_ranks", 1))
        self.parent = self.layout.parent(self.rank)
        self.leader = self.layout.leader(self.rank)
        self.is_worker = self.leader is not None  # every rank of every worker trains
        training = self.layout.training_ranks
        self.roles = _PsRoles(self, training.index(self.rank) if self.is_worker else 0, len(training))
        # A worker of several ranks: an MPI communicator (the leader passes replies on)
        # and a torch process group (DDP) of its ranks; collective over the fold group.
        self.team: MPI.Comm | None = None
        self.team_pg: Any = None
        if self.layout.worker_ranks > 1:
            team = self.fold.Split(MPI.UNDEFINED if self.leader is None else self.leader, self.rank)
            self.team = None if team == MPI.COMM_NULL else team
            if self.team is not None and self.leader is not None:
                fold_world = comms.layout.fold_ranks(comms.group_index, comms.fold_index)
                self.team_pg = comms.subgroup([fold_world[r] for r in self.layout.members(self.leader)])
        self.every = int(knobs.get("sync_every", knobs.get("tau", 1)))  # batches per block
        self.link = Link(self.fold, self.parent, timeout) if self.parent is not None else None
        self.worker = Worker(self, self.link) if self.is_worker else None
        self.server = None if self.is_worker else Server(self, self.link)
        self.rule = self.rule_class(self)
        self.signal: Stop | None = None  # this rank's stop signal (set per epoch)
        self.flat: Flat | None = None
        self.stash: torch.Tensor | None = None  # training weights while the central ones are evaluated
        self.resumed = False
        self.models: Models = {}
        self.optimizers: Optimizers = {}
        self.proxies: dict[str, Collect] = {}  # a worker's optimizers that collect gradients
        self.acc: torch.Tensor | None = None

    def wrap(self, models: Models, optimizers: Optimizers) -> tuple[Models, Optimizers]:
        optimizers = self.rule.optimizers(optimizers)
        self.models, self.optimizers = models, optimizers
        self.flat = Flat(models, optimizers)
        step_models = self.placement.ddp(models, self.team_pg) if self.team_pg is not None else models
        step_optimizers = optimizers
        if self.is_worker and self.rule.collects:
            self.acc = self.flat.zeros(grads=True)
            self.proxies = {
                name: Collect(optimizers[name], self.acc[part], self.knobs.get("local_lr", 0.0))
                for name, _, part in self.flat.segments
            }
            step_optimizers = dict(self.proxies)
        self.rule.bind()
        return step_models, step_optimizers

    @property
    def messages(self) -> int:
        """Messages this rank sent its parent in the epoch (0 on the master)."""
        return self.link.messages if self.link is not None else 0

    def forget(self) -> None:
        """A worker's other rank after its leader pushed: what it collected was pushed."""
        if self.acc is not None:
            self.acc.zero_()
        for proxy in self.proxies.values():
            proxy.steps = 0

    # -- the epoch -----------------------------------------------------------------------

    def begin_epoch(self, epoch: int, start: int, n_batches: int, stop: Stop) -> None:
        assert self.flat is not None
        if self.stash is not None:
            self.flat.set(self.stash)
            self.stash = None
        self.signal = stop
        if self.server is not None:
            self.server.begin_epoch(-(-n_batches // self.every), self.resumed)
        if self.link is not None:
            if not self.resumed:
                self.link.messages = 0
            self.link.stop = False
        if self.worker is not None:
            self.worker.begin_epoch()
        self.resumed = False
        self.rule.begin_epoch()

    def blocks(self, n_batches: int, start: int) -> Iterator[range]:
        assert self.worker is not None
        return self.worker.blocks(n_batches)

    def after_step(self, step: int, loss: float) -> None:
        assert self.worker is not None
        self.worker.after_step(step)

    def end_batches(self, stopped: bool, failed: bool = False) -> bool:
        if self.worker is None:
            return False
        self.worker.end()
        return self.worker.stop

    def consensus(self, models: Models) -> None:
        """The master's weights to every rank (the others keep theirs to go on
        training); buffers (BatchNorm statistics and batch counts) averaged over the workers."""
        assert self.flat is not None
        central = self.flat.get() if self.rank == 0 else self.flat.zeros()
        self.fold.Bcast(central.numpy(), root=0)
        if self.rank != 0:
            self.stash = self.flat.get()
            self.flat.set(central)
        self.rule.on_consensus(central)
        average_buffers(models, self.fold, mine=self.is_worker, count=self.roles.train_size)

    def end_epoch(self, epoch: int, train_loss: float) -> dict[str, float]:
        """``staleness_mean``/``staleness_max``: master updates between a child's pull
        and its push, over the epoch's pushes."""
        staleness = self.server.staleness if self.server is not None else []
        mine = (sum(staleness), len(staleness), max(staleness, default=0), self.messages)
        parts = self.fold.gather(mine, root=0)
        if parts is None:
            return {}
        n = sum(p[1] for p in parts)
        if not n:
            return {}
        return {
            "staleness_mean": sum(p[0] for p in parts) / n,
            "staleness_max": float(max(p[2] for p in parts)),
        }

    # -- checkpoints ---------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        assert self.flat is not None
        server = self.server
        s: dict[str, Any] = {
            "clock": server.clock if server else 0,
            "child_clock": dict(server.child_clock) if server else {},
            "rr": (server.rr_resume if server.rr_resume is not None else server.rr) if server else 0,
            "next": server.next if server else 0,
            "served": server.served if server else 0,
            "staleness": list(server.staleness) if server else [],
            "messages": self.messages,
            "up_acc": self.rule.up_acc,
            "acc": self.acc.clone() if self.acc is not None else None,
            "steps": {k: p.steps for k, p in self.proxies.items()},
        }
        if self.rank != 0:  # the master's weights and optimizers are the fold's own
            s["local"] = self.stash if self.stash is not None else self.flat.get()
            s["optimizers"] = {k: o.state_dict() for k, o in self.optimizers.items()}
        s.update(self.rule.state())
        return s

    def load_state(self, state: dict[str, Any]) -> None:
        if not state:
            return
        if self.server is not None:
            server = self.server
            server.clock, server.rr, server.served = state["clock"], state["rr"], state["served"]
            server.next = state["next"]
            server.child_clock = {int(k): v for k, v in state["child_clock"].items()}
            server.staleness = list(state["staleness"])
        if self.link is not None:
            self.link.messages = state["messages"]
        self.rule.up_acc = state["up_acc"]
        if self.acc is not None and state["acc"] is not None:
            self.acc.copy_(state["acc"])
        for k, steps in state["steps"].items():
            if k in self.proxies:
                self.proxies[k].steps = steps
        if "local" in state:
            self.stash = state["local"]
            for k, o in self.optimizers.items():
                o.load_state_dict(state["optimizers"][k])
        self.rule.load_state(state)
        self.resumed = True
