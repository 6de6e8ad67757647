"""The parameter-server family (MPI-Learn/NNLO): a master holds the central weights,
workers train blocks of the epoch and exchange with it; the rule of the exchange is the
scheme (:mod:`.rules`: downpour, EASGD, GEM).

Layout of a fold group (:class:`hpcopt.schemes.PsLayout`): fold rank 0 is the master
(and the fold leader, so it evaluates, checkpoints and reports), ranks 1..M are
sub-masters, the rest are workers dealt round-robin to them. A sub-master serves its
workers with the scheme's rule on its own copy and, after each round of its workers'
updates, exchanges with the master as a worker would.

A worker is ``worker_ranks`` ranks (NNLO's hybrid layout: N_GPU ranks per worker). They
train data-parallel, DDP over the worker's own process group, each on its share of
every batch, so their weights stay equal; the worker's first rank (its leader) alone
talks to the parent and passes each reply's block and weights on to the others
(:meth:`ParameterServer._share`).

Transport is MPI point-to-point on the fold communicator: a 2-integer header (kind,
flags), then one flat buffer (:mod:`.flat`); replies carry the parent's clock, a stop
flag and the worker's next block of batches, then the weights. Serving ranks poll with
short sleeps, so waiting costs no core that oversubscribed workers need.

Workers take blocks of ``sync_every``/``tau`` batches of the epoch from their parent as
they go (sub-masters share the blocks out), so a slow worker trains less of the epoch
instead of holding the others back. Epochs stay synchronous: the master serves until
every worker has been told "no more blocks", and :meth:`consensus` gives every rank
the central weights to evaluate. A stop (a signal on any rank) travels in the headers;
the parent answers it with "no more blocks", after the push it came with is applied.

``overlap: true`` (downpour and easgd) overlaps a worker's exchange with its compute,
as Dean et al.'s downpour fetches and pushes while it trains: a communication thread
sends the push at a block's end while the worker trains its next block (known one
ahead: it asks for two blocks at the epoch's start, and each reply assigns the block
after next), and the reply lands at that block's end, applied to the weights the push
was computed from plus what the worker moved since (:meth:`ParameterServer._land`).
Every push is thus one block staler; a serving rank then counts a worker out only at
its END message, since a worker told "no more blocks" still has one push on its way.

Staleness (master updates between a child's last reply and its push) is recorded per
push; ``max_staleness`` holds back a push that would leave another child unable to keep
the bound; ``order: round_robin`` serves children in rank order, which makes runs (and
preempted, resumed runs) reproducible bit for bit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from mpi4py import MPI

from hpcopt.schemes import PsLayout
from hpcopt_agent.comm import Comms
from hpcopt_agent.schemes.base import Models, Optimizers, Roles, Scheme, Stop, StopVote
from hpcopt_agent.schemes.flat import Collect, Flat

HDR, DATA, RHDR, RDATA = 7201, 7202, 7203, 7204
#: Header kinds: a push (an update; the reply has the weights and the next block), a
#: pull (just the weights), a request for a block of batches, an early end (an error).
PUSH, PULL, END, WORK = 1, 2, 3, 4
#: Header flags: the sender was signalled to stop; a sub-master's last push of the epoch.
STOP_FLAG, DONE_FLAG = 1, 2
NO_BLOCK = -2  # a reply that assigns nothing (a pull, a sub-master's push)
POLL = 0.0005


class _NoVote(StopVote):
    def step(self, stop: bool) -> bool:
        return False

    def finish(self) -> bool:
        return False


class Halted(RuntimeError):
    """A peer went silent past the collective timeout."""


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
        return _NoVote(None)  # stops travel in the headers: the parent answers "no more blocks"

    def serve(self, stop: Stop) -> bool:
        return self.ps.serve(stop)


class ParameterServer(Scheme):
    #: The worker pulls the central weights before computing its push (GEM).
    pulls_first = False
    #: Workers step through Collect proxies (their gradients are pushed).
    collects = True
    #: Pushes are in the gradient layout (else the weights layout).
    grad_payload = True

    def __init__(self, comms: Comms, knobs: dict[str, Any], epochs: int, timeout: float = 300.0) -> None:
        super().__init__(comms, knobs, epochs, timeout)
        self.layout = PsLayout(self.size, knobs["sub_masters"], knobs.get("worker_ranks", 1))
        self.parent = self.layout.parent(self.rank)
        self.children = self.layout.children(self.rank)
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
        self.round_robin = knobs["order"] == "round_robin"
        self.bound: int | None = knobs["max_staleness"]
        self.every = int(knobs.get("sync_every", knobs.get("tau", 1)))
        self.remote_stop = False  # a reply said stop
        self.signal: Any = None  # this rank's stop signal (set per epoch)
        self.stopping = False  # a serving rank answers "stop" from now on
        self.flat: Flat | None = None
        self.stash: torch.Tensor | None = None  # training weights while the central ones are evaluated
        self.resumed = False
        # worker
        self.proxies: dict[str, Collect] = {}
        self.acc: torch.Tensor | None = None
        self.block, self.block_end, self.released = -1, 0, False
        #: Exchanges overlap compute (a communication thread); serving ranks then
        #: count a worker out at its END, not at its first "no more blocks".
        self.overlap = bool(knobs.get("overlap", False))
        self.ahead: list[int] = []  # overlap: the blocks this worker knows it trains next
        self.inflight: Future[torch.Tensor] | None = None  # overlap: the push on its way
        self.pushed: torch.Tensor | None = None  # overlap: the weights that push was computed from
        self.expect = False  # overlap, a worker's other rank: its leader has a push on its way
        self.comm_thread: ThreadPoolExecutor | None = None
        # serving ranks
        self.clock = 0
        self.child_clock: dict[int, int] = {}
        self.rr = 0
        self.rr_resume: int | None = None  # the child that got the first "stop": round robin resumes there
        self.queue: list[int] = []  # the blocks this serving rank hands out, and the next one
        self.next = 0
        self.served = 0  # updates served since the last exchange with the parent
        self.up_acc: torch.Tensor | None = None
        self.staleness: list[int] = []
        self.messages = 0

    # -- wrapping ----------------------------------------------------------------------

    def wrap(self, models: Models, optimizers: Optimizers) -> tuple[Models, Optimizers]:
        self.models, self.optimizers = models, optimizers
        self.flat = Flat(models, optimizers)
        step_models = self.placement.ddp(models, self.team_pg) if self.team_pg is not None else models
        if not (self.is_worker and self.collects):
            return step_models, optimizers
        self.acc = self.flat.zeros(grads=True)
        self.proxies = {
            name: Collect(optimizers[name], self.acc[part], self.knobs.get("local_lr", 0.0))
            for name, _, part in self.flat.segments
        }
        return step_models, dict(self.proxies)

    def alpha(self, node: int) -> float:
        """EASGD's moving rate at a serving rank: alpha, else beta over its children."""
        a = self.knobs.get("alpha")
        return float(a) if a is not None else float(self.knobs.get("beta", 0.9)) / len(self.layout.children(node))

    # -- rules (the subclasses) --------------------------------------------------------

    def payload(self, pulled: torch.Tensor | None) -> torch.Tensor:
        """A worker's push."""
        raise NotImplementedError

    def adopt(self, reply: torch.Tensor) -> None:
        """A worker's weights after the reply to its push."""
        raise NotImplementedError

    def apply(self, payloads: list[torch.Tensor]) -> torch.Tensor:
        """A serving rank applies children's pushes to its copy; returns the reply."""
        raise NotImplementedError

    def up_payload(self) -> torch.Tensor:
        """A sub-master's push to the master (what it served since the last one)."""
        raise NotImplementedError

    def up_adopt(self, reply: torch.Tensor) -> None:
        raise NotImplementedError

    # -- workers -------------------------------------------------------------------------

    def begin_epoch(self, epoch: int, start: int, n_batches: int, stop: Stop) -> None:
        assert self.flat is not None
        if self.stash is not None:
            self.flat.set(self.stash)
            self.stash = None
        self.signal = stop
        blocks = list(range(-(-n_batches // self.every)))
        if self.rank == 0 and self.layout.sub_masters:
            self.queue = []  # the sub-masters hand out the blocks
        elif self.rank == 0 or not self.is_worker:
            m = self.layout.sub_masters
            self.queue = blocks[self.rank - 1 :: m] if self.rank and m else blocks
        if not self.resumed:
            self.child_clock = dict.fromkeys(self.children, self.clock)
            self.rr, self.next = 0, 0
            self.staleness = []
            self.messages = 0
        self.resumed = False
        self.remote_stop = False
        self.stopping = False
        self.rr_resume = None
        self.released = False

    def blocks(self, n_batches: int, start: int) -> Iterator[range]:
        """The batches this worker trains: block after block, as its parent assigns
        them (the input pipeline reads each block ahead once it is known)."""
        if self.overlap:
            yield from self._blocks_ahead(n_batches)
            return
        block = self._work() if self.parent is not None else self._follow(False)
        while block >= 0:
            yield self._block(block, n_batches)
            block = self.block  # the reply to the exchange at the block's end

    def _block(self, block: int, n_batches: int) -> range:
        lo = block * self.every
        self.block_end = min(lo + self.every, n_batches)
        return range(lo, self.block_end)

    def _blocks_ahead(self, n_batches: int) -> Iterator[range]:
        """Overlap: two blocks known at the start, then each landed reply names the one
        after next; once none is left, the last push's reply lands and the worker's
        leader says END."""
        lead = self.parent is not None
        self.comm_thread = ThreadPoolExecutor(1, thread_name_prefix="hpcopt-ps") if lead else None
        try:
            self.ahead = [self._work() if lead else self._follow(False)]
            if self.ahead[0] >= 0:
                self.ahead.append(self._work() if lead else self._follow(False))
            self.expect = False
            while self.ahead and self.ahead[0] >= 0:
                yield self._block(self.ahead.pop(0), n_batches)
            if lead:
                self._land()
                self._end(False)
            elif self.expect:
                self._follow(True)
            self.released = True
        finally:
            if self.comm_thread is not None:  # an error: a push on its way ends with its reply, or times out
                self.comm_thread.shutdown(wait=False)
                self.comm_thread = None

    def after_step(self, step: int, loss: float) -> None:
        if step + 1 < self.block_end:
            return
        if self.overlap:
            self._exchange_ahead()
        elif self.parent is not None:
            self._exchange()
        else:
            self._follow(True)

    def end_batches(self, stopped: bool, failed: bool = False) -> bool:
        if self.is_worker and self.parent is not None and not self.released:  # left early (an error)
            self._end(True)
            self.released = True
        return self.remote_stop

    def _work(self) -> int:
        """Asks the parent for a block of batches (-1: none left, or stop)."""
        self._call(WORK, None)
        self._share(False)
        return self.block

    def _exchange(self) -> None:
        """One exchange of a worker with its parent at the end of a block."""
        assert self.parent is not None
        pulled = self._call(PULL, None) if self.pulls_first else None
        reply = self._call(PUSH, self.payload(pulled))
        self.adopt(reply)
        self._share(True)

    def _exchange_ahead(self) -> None:
        """Overlap, at a block's end: the last push's reply lands (naming the block
        after next), then this block's push leaves on the communication thread."""
        if self.parent is None:  # a worker's other rank follows what its leader lands
            if self.expect:
                self.ahead.append(self._follow(True))
            self.expect = True
            return
        self._land()
        assert self.flat is not None
        payload = self.payload(None)
        self.pushed = self.flat.get()
        assert self.comm_thread is not None
        self.inflight = self.comm_thread.submit(self._call, PUSH, payload)

    def _land(self) -> None:
        """Overlap: waits for the push on its way; its reply applies to the weights the
        push was computed from, and what the worker moved since is added back (the
        worker's own steps, EASGD's or downpour's ``local_lr``)."""
        if self.inflight is None:
            return
        assert self.flat is not None and self.pushed is not None
        reply = self.inflight.result()  # re-raises the thread's error (a silent parent)
        self.inflight = None
        now = self.flat.get()
        self.flat.set(self.pushed)
        self.adopt(reply)
        moved = now - self.pushed
        if bool(moved.any()):
            self.flat.set(self.flat.get() + moved)
        self.pushed = None
        self.ahead.append(self.block)
        self._share(True)

    def _share(self, weights: bool) -> None:
        """A worker's leader passes the reply it got (the next block, a stop and, after
        an exchange, its new weights) on to the worker's other ranks."""
        if self.team is None:
            return
        assert self.flat is not None
        self._team_bcast(np.array([self.block, int(self.remote_stop)], np.int64))
        if weights:
            self._team_bcast(self.flat.get().numpy())

    def _follow(self, weights: bool) -> int:
        """A worker's other rank: takes what its leader got (:meth:`_share`); returns
        the next block."""
        assert self.flat is not None and self.team is not None
        hdr = np.zeros(2, np.int64)
        self._team_bcast(hdr)
        if weights:
            new = self.flat.zeros()
            self._team_bcast(new.numpy())
            self.flat.set(new)
            self.forget()
        self.block, self.remote_stop = int(hdr[0]), self.remote_stop or bool(hdr[1])
        self.released = self.released or (self.block < 0 and not self.overlap)
        return self.block

    def _team_bcast(self, buf: np.ndarray) -> None:
        assert self.team is not None
        self._wait([self.team.Ibcast(buf, root=0)], "reply passed on by this worker's leader")

    def forget(self) -> None:
        """A worker's other rank after its leader pushed: what it collected was pushed."""
        if self.acc is not None:
            self.acc.zero_()
        for proxy in self.proxies.values():
            proxy.steps = 0

    def _call(self, kind: int, data: torch.Tensor | None, flags: int = 0) -> torch.Tensor:
        """Sends a header (and data) to the parent; returns the weights it replies
        (nothing for a request for work) and keeps the block it assigns."""
        assert self.flat is not None and self.parent is not None
        reply = self.flat.zeros()
        rhdr = np.zeros(3, np.int64)
        reqs = [self.fold.Irecv(rhdr, source=self.parent, tag=RHDR)]
        if kind != WORK:
            reqs.append(self.fold.Irecv(reply.numpy(), self.parent, RDATA))
        flags |= STOP_FLAG if self.signal is not None and self.signal.requested else 0
        self.fold.Send(np.array([kind, flags], np.int64), dest=self.parent, tag=HDR)
        if data is not None:
            self.fold.Send(np.ascontiguousarray(data.numpy()), dest=self.parent, tag=DATA)
        self._wait(reqs, f"a reply from fold rank {self.parent}")
        self.remote_stop = self.remote_stop or bool(rhdr[1])
        if self.is_worker and kind != PULL:
            self.block = int(rhdr[2])
            self.released = self.released or (self.block < 0 and not self.overlap)
        self.messages += 1
        return reply

    def _end(self, stopped: bool) -> None:
        assert self.parent is not None
        self.fold.Send(np.array([END, STOP_FLAG if stopped else 0], np.int64), dest=self.parent, tag=HDR)

    def _wait(self, reqs: list[MPI.Request], what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not MPI.Request.Testall(reqs):
            if time.monotonic() > deadline:
                raise Halted(f"fold rank {self.rank}: no {what} within {self.timeout:.0f} s")
            time.sleep(POLL)

    # -- serving ranks -------------------------------------------------------------------

    def serve(self, stop: Stop) -> bool:
        """Serves the children until each is done with the epoch; returns whether the
        epoch ended in a stop (this rank, its parent or a child was signalled)."""
        assert self.flat is not None
        active = list(self.children)
        hdrs = {c: np.zeros(2, np.int64) for c in active}
        reqs = {c: self.fold.Irecv(hdrs[c], source=c, tag=HDR) for c in active}
        arrived: list[int] = []
        deadline = time.monotonic() + self.timeout
        while active:
            for c in active:
                if c not in arrived and reqs[c].Test():
                    arrived.append(c)
            batch = self._pick(arrived, active, hdrs)
            if not batch:
                if time.monotonic() > deadline:
                    silent = [c for c in active if c not in arrived]
                    raise Halted(f"fold rank {self.rank}: no message from fold ranks {silent} in {self.timeout:.0f} s")
                time.sleep(POLL)
                continue
            deadline = time.monotonic() + self.timeout
            pushes = []
            for c in batch:
                arrived.remove(c)
                kind, flags = int(hdrs[c][0]), int(hdrs[c][1])
                self.stopping = self.stopping or bool(flags & STOP_FLAG) or stop.requested or self.remote_stop
                if kind == PUSH:
                    data = self.flat.zeros(grads=self.grad_payload)
                    self.fold.Recv(data.numpy(), source=c, tag=DATA)
                    pushes.append((c, data, flags))
                elif kind == PULL:  # the clock does not move: round robin stays on this child
                    self._reply(c, self.flat.get(), NO_BLOCK)
                    self.child_clock[c] = self.clock
                    reqs[c] = self.fold.Irecv(hdrs[c], source=c, tag=HDR)
                elif kind == WORK:
                    if self._reply(c, None, self._assign(c)) < 0 and not self.overlap:
                        active.remove(c)
                    else:
                        reqs[c] = self.fold.Irecv(hdrs[c], source=c, tag=HDR)
                    self.rr = c + 1
                else:  # END: a sub-master with nothing left to push, or a worker that failed
                    active.remove(c)
            if pushes:
                for c, _, _ in pushes:
                    self.staleness.append(self.clock - self.child_clock[c])
                reply = self.apply([d for _, d, _ in pushes])
                self.clock += 1
                for c, _, flags in pushes:
                    sub = c <= self.layout.sub_masters
                    block = NO_BLOCK if sub else self._assign(c)
                    self._reply(c, reply, block)
                    self.child_clock[c] = self.clock
                    self.served += 1
                    if (sub and flags & DONE_FLAG) or (block < 0 and not sub and not self.overlap):
                        active.remove(c)
                    else:
                        reqs[c] = self.fold.Irecv(hdrs[c], source=c, tag=HDR)
                    self.rr = c + 1
                if self.parent is not None and self.served >= len(self.children):
                    self._up(done=False)
        if self.parent is not None:
            if self.served and not self.stopping:
                self._up(done=True)
            else:
                self._end(self.stopping)
        return self.stopping

    def _assign(self, child: int) -> int:
        """The next block for a worker: -1 when none is left or the epoch stops."""
        if self.stopping or self.next >= len(self.queue):
            if self.stopping and self.rr_resume is None:
                self.rr_resume = child  # where round robin picks up after a resume
            return -1
        self.next += 1
        return self.queue[self.next - 1]

    def _reply(self, child: int, weights: torch.Tensor | None, block: int) -> int:
        self.fold.Send(np.array([self.clock, int(self.stopping), block], np.int64), dest=child, tag=RHDR)
        if weights is not None:
            self.fold.Send(np.ascontiguousarray(weights.numpy()), dest=child, tag=RDATA)
        return block

    def _pick(self, arrived: list[int], active: list[int], hdrs: dict[int, np.ndarray]) -> list[int]:
        """The messages to serve now (several only in synchronous mode)."""
        if not arrived:
            return []
        if self.knobs.get("synchronous"):  # a round: this fraction of the active children (NNLO's partial sync)
            need = math.ceil(float(self.knobs.get("sync_fraction", 1.0)) * len(active) - 1e-9)
            return list(arrived) if len(arrived) >= max(1, need) else []
        if self.round_robin:  # the first active child at or after the turn, wrapping
            nxt = next((c for c in active if c >= self.rr), active[0])
            return [nxt] if nxt in arrived else []
        for c in arrived:
            if int(hdrs[c][0]) != PUSH or self._allowed(c, active):
                return [c]
        return []

    def _allowed(self, child: int, active: list[int]) -> bool:
        """Whether serving ``child``'s push leaves the others a schedule that keeps
        the staleness bound: sorted by staleness after it, the i-th stalest must still
        have i pushes of room."""
        if self.bound is None:
            return True
        after = sorted((self.clock + 1 - self.child_clock[c] for c in active if c != child), reverse=True)
        return all(s + i <= self.bound for i, s in enumerate(after))

    def _up(self, done: bool) -> None:
        """A sub-master's exchange with the master."""
        reply = self._call(PUSH, self.up_payload(), DONE_FLAG if done else 0)
        self.up_adopt(reply)
        self.served = 0

    # -- epoch boundary ------------------------------------------------------------------

    def consensus(self, models: Models) -> None:
        """The master's weights to every rank (the others keep theirs to go on
        training); floating buffers (BatchNorm statistics) averaged over the workers."""
        assert self.flat is not None
        central = self.flat.get() if self.rank == 0 else self.flat.zeros()
        self.fold.Bcast(central.numpy(), root=0)
        if self.rank != 0:
            self.stash = self.flat.get()
            self.flat.set(central)
        self.on_consensus(central)
        bufs = self.flat.get_buffers()
        if len(bufs):
            mine = bufs * (1.0 if self.is_worker else 0.0)
            total = np.zeros_like(mine.numpy())
            self.fold.Allreduce(mine.numpy(), total, op=MPI.SUM)
            self.flat.set_buffers(torch.from_numpy(total / self.roles.train_size))

    def on_consensus(self, central: torch.Tensor) -> None:
        """After the central weights arrived (GEM resets its view of them)."""

    def end_epoch(self, epoch: int, train_loss: float) -> dict[str, float]:
        """``staleness_mean``/``staleness_max``: master updates between a child's pull
        and its push, over the epoch's pushes."""
        mine = (sum(self.staleness), len(self.staleness), max(self.staleness, default=0), self.messages)
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
        s: dict[str, Any] = {
            "clock": self.clock,
            "child_clock": dict(self.child_clock),
            "rr": self.rr_resume if self.rr_resume is not None else self.rr,
            "next": self.next,
            "served": self.served,
            "staleness": list(self.staleness),
            "messages": self.messages,
            "up_acc": self.up_acc,
            "acc": self.acc.clone() if self.acc is not None else None,
            "steps": {k: p.steps for k, p in self.proxies.items()},
        }
        if self.rank != 0:  # the master's weights and optimizers are the fold's own
            s["local"] = self.stash if self.stash is not None else self.flat.get()
            s["optimizers"] = {k: o.state_dict() for k, o in self.optimizers.items()}
        s.update(self.rule_state())
        return s

    def load_state(self, state: dict[str, Any]) -> None:
        if not state:
            return
        self.clock, self.rr, self.served = state["clock"], state["rr"], state["served"]
        self.next = state["next"]
        self.child_clock = {int(k): v for k, v in state["child_clock"].items()}
        self.messages = state["messages"]
        self.staleness = list(state["staleness"])
        self.up_acc = state["up_acc"]
        if self.acc is not None and state["acc"] is not None:
            self.acc.copy_(state["acc"])
        for k, steps in state["steps"].items():
            if k in self.proxies:
                self.proxies[k].steps = steps
        if "local" in state:
            self.stash = state["local"]
            for k, o in self.optimizers.items():
                o.load_state_dict(state["optimizers"][k])
        self.load_rule_state(state)
        self.resumed = True

    def rule_state(self) -> dict[str, Any]:
        return {}

    def load_rule_state(self, state: dict[str, Any]) -> None:
        pass
