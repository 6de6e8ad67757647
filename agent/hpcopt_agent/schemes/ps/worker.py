"""A parameter-server worker: trains the blocks of batches its parent assigns and
exchanges with it at each block's end (the rule says what it pushes and becomes).

A worker of several ranks (NNLO's hybrid layout) trains data-parallel, DDP over its own
process group, each rank on its share of every batch, so its weights stay equal; its
first rank (the leader) alone talks to the parent and passes each reply's block, stop
and weights on to the others (:meth:`Worker._share`, :meth:`Worker._follow`).

With ``overlap: true`` (:class:`Overlap`) the exchange runs on a communication thread
while the worker trains its next block, as Dean et al.'s downpour fetches and pushes
while it trains: the push leaves at a block's end, and its reply lands at the next
block's end, applied to the weights the push was computed from plus what the worker
moved since. It asks for two blocks at the epoch's start, and each reply names the
block after next.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from hpcopt_agent.schemes.ps.context import Context
from hpcopt_agent.schemes.ps.protocol import PULL, PUSH, STOP_FLAG, WORK, Link, wait


class Overlap:
    """The exchange on its way while the worker trains."""

    def __init__(self) -> None:
        self.ahead: list[int] = []  # the blocks this worker knows it trains next
        self.inflight: Future[torch.Tensor] | None = None  # the push on its way
        self.pushed: torch.Tensor | None = None  # the weights that push was computed from
        self.expect = False  # a worker's other rank: its leader has a push on its way
        self.thread: ThreadPoolExecutor | None = None


class Worker:
    """The training side of one rank of a worker."""

    def __init__(self, ps: Context, link: Link | None) -> None:
        self.ps = ps
        self.link = link  # to the parent: on the worker's leader only
        self.overlap = Overlap() if ps.knobs.get("overlap", False) else None
        self.block, self.block_end, self.released = -1, 0, False
        self.stopped = False  # the leader passed on a stop

    @property
    def stop(self) -> bool:
        """Whether a reply (to this rank or its leader) said stop."""
        return self.stopped or (self.link is not None and self.link.stop)

    def begin_epoch(self) -> None:
        self.stopped, self.released = False, False

    # -- the blocks ----------------------------------------------------------------------

    def blocks(self, n_batches: int) -> Iterator[range]:
        """The batches this worker trains: block after block, as its parent assigns
        them (the input pipeline reads each block ahead once it is known)."""
        if self.overlap is not None:
            yield from self._blocks_ahead(n_batches, self.overlap)
            return
        block = self._work() if self.link is not None else self._follow(False)
        while block >= 0:
            yield self._block(block, n_batches)
            block = self.block  # the reply to the exchange at the block's end

    def _block(self, block: int, n_batches: int) -> range:
        lo = block * self.ps.every
        self.block_end = min(lo + self.ps.every, n_batches)
        return range(lo, self.block_end)

    def _blocks_ahead(self, n_batches: int, o: Overlap) -> Iterator[range]:
        """Two blocks known at the start, then each landed reply names the one after
        next; once none is left, the last push's reply lands and the leader says END."""
        lead = self.link is not None
        o.thread = ThreadPoolExecutor(1, thread_name_prefix="hpcopt-ps") if lead else None
        try:
            o.ahead = [self._work() if lead else self._follow(False)]
            if o.ahead[0] >= 0:
                o.ahead.append(self._work() if lead else self._follow(False))
            o.expect = False
            while o.ahead and o.ahead[0] >= 0:
                yield self._block(o.ahead.pop(0), n_batches)
            if self.link is not None:
                self._land(o)
                self.link.end(False)
            elif o.expect:
                self._follow(True)
            self.released = True
        finally:
            if o.thread is not None:  # an error: a push on its way ends with its reply, or times out
                o.thread.shutdown(wait=False)
                o.thread = None

    def after_step(self, step: int) -> None:
        if step + 1 < self.block_end:
            return
        if self.overlap is not None:
            self._exchange_ahead(self.overlap)
        elif self.link is not None:
            self._exchange()
        else:
            self._follow(True)

    def end(self) -> None:
        """Left the blocks early (an error): the leader tells its parent."""
        if self.link is not None and not self.released:
            self.link.end(True)
            self.released = True

    # -- exchanges -----------------------------------------------------------------------

    def _call(self, kind: int, data: torch.Tensor | None) -> torch.Tensor:
        """One message to the parent (a stop signal on this rank rides in its flags);
        returns the weights replied, and keeps the block assigned."""
        assert self.link is not None and self.ps.flat is not None
        reply = self.ps.flat.zeros()
        signal = self.ps.signal
        self.link.call(kind, data, reply, STOP_FLAG if signal is not None and signal.requested else 0)
        if kind != PULL:
            self.block = self.link.block
            self.released = self.released or (self.block < 0 and self.overlap is None)
        return reply

    def _work(self) -> int:
        """Asks the parent for a block of batches (-1: none left, or stop)."""
        self._call(WORK, None)
        self._share(False)
        return self.block

    def _exchange(self) -> None:
        """One exchange with the parent at the end of a block."""
        rule = self.ps.rule
        pulled = self._call(PULL, None) if rule.pulls_first else None
        reply = self._call(PUSH, rule.payload(pulled))
        rule.adopt(reply)
        self._share(True)

    def _exchange_ahead(self, o: Overlap) -> None:
        """At a block's end: the last push's reply lands (naming the block after next),
        then this block's push leaves on the communication thread."""
        if self.link is None:  # a worker's other rank follows what its leader lands
            if o.expect:
                o.ahead.append(self._follow(True))
            o.expect = True
            return
        self._land(o)
        assert self.ps.flat is not None and o.thread is not None
        payload = self.ps.rule.payload(None)
        o.pushed = self.ps.flat.get()
        o.inflight = o.thread.submit(self._call, PUSH, payload)

    def _land(self, o: Overlap) -> None:
        """Waits for the push on its way; its reply applies to the weights the push was
        computed from, and what the worker moved since is added back (its own steps,
        EASGD's or downpour's ``local_lr``)."""
        if o.inflight is None:
            return
        flat = self.ps.flat
        assert flat is not None and o.pushed is not None
        reply = o.inflight.result()  # re-raises the thread's error (a silent parent)
        o.inflight = None
        now = flat.get()
        flat.set(o.pushed)
        self.ps.rule.adopt(reply)
        moved = now - o.pushed
        if bool(moved.any()):
            flat.set(flat.get() + moved)
        o.pushed = None
        o.ahead.append(self.block)
        self._share(True)

    def _share(self, weights: bool) -> None:
        """The leader passes the reply it got (the next block, a stop and, after an
        exchange, its new weights) on to the worker's other ranks."""
        if self.ps.team is None:
            return
        assert self.ps.flat is not None
        self._team_bcast(np.array([self.block, int(self.stop)], np.int64))
        if weights:
            self._team_bcast(self.ps.flat.get().numpy())

    def _follow(self, weights: bool) -> int:
        """A worker's other rank: takes what its leader got; returns the next block."""
        flat = self.ps.flat
        assert flat is not None and self.ps.team is not None
        hdr = np.zeros(2, np.int64)
        self._team_bcast(hdr)
        if weights:
            new = flat.zeros()
            self._team_bcast(new.numpy())
            flat.set(new)
            self.ps.forget()
        self.block, self.stopped = int(hdr[0]), self.stopped or bool(hdr[1])
        self.released = self.released or (self.block < 0 and self.overlap is None)
        return self.block

    def _team_bcast(self, buf: np.ndarray) -> None:
        team = self.ps.team
        assert team is not None
        wait([team.Ibcast(buf, root=0)], self.ps.timeout, "reply passed on by this worker's leader", self.ps.rank)
