"""A serving rank (the master, or a sub-master): answers its children's messages with
the rule until each is done with the epoch.

It hands out the epoch's blocks of batches as workers ask (sub-masters share them out),
so a slow worker trains less of the epoch instead of holding the others back. Its
clock counts the updates it applied; the staleness of a push is the updates applied
since the child's last reply, and ``max_staleness`` holds back a push that would leave
another child unable to keep that bound. ``order: round_robin`` serves children in rank
order, which makes runs (and preempted, resumed runs) reproducible bit for bit;
``synchronous`` (downpour) serves rounds of ``sync_fraction`` of the active children. A
sub-master exchanges with the master as a worker would after each round of its
workers' updates. A stop (a signal on any rank) travels in the headers: once it is
seen, every child is answered "no more blocks" after the push it came with is applied.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from hpcopt_agent.schemes.base import Stop
from hpcopt_agent.schemes.ps.context import Context
from hpcopt_agent.schemes.ps.protocol import (
    DONE_FLAG,
    NO_BLOCK,
    POLL,
    PULL,
    PUSH,
    STOP_FLAG,
    WORK,
    Halted,
    Link,
    listen,
    receive,
    reply,
)


class Server:
    """The serving side of the master or a sub-master."""

    def __init__(self, ps: Context, link: Link | None) -> None:
        self.ps = ps
        self.link = link  # a sub-master's, to the master
        self.children = ps.layout.children(ps.rank)
        self.bound: int | None = ps.knobs["max_staleness"]
        self.round_robin = ps.knobs["order"] == "round_robin"
        self.clock = 0
        self.child_clock: dict[int, int] = {}
        self.rr = 0
        self.rr_resume: int | None = None  # the child that got the first "stop": round robin resumes there
        self.queue: list[int] = []  # the blocks this rank hands out, and the next one
        self.next = 0
        self.served = 0  # updates served since the last exchange with the parent
        self.staleness: list[int] = []
        self.stopping = False  # answers "stop" from now on

    def begin_epoch(self, n_blocks: int, resumed: bool) -> None:
        ps, m = self.ps, self.ps.layout.sub_masters
        blocks = list(range(n_blocks))
        if ps.rank == 0 and m:
            self.queue = []  # the sub-masters hand out the blocks
        else:
            self.queue = blocks[ps.rank - 1 :: m] if ps.rank and m else blocks
        if not resumed:
            self.child_clock = dict.fromkeys(self.children, self.clock)
            self.rr, self.next = 0, 0
            self.staleness = []
        self.stopping = False
        self.rr_resume = None

    def serve(self, stop: Stop) -> bool:
        """Serves the children until each is done with the epoch; returns whether the
        epoch ended in a stop (this rank, its parent or a child was signalled)."""
        flat, fold, rule = self.ps.flat, self.ps.fold, self.ps.rule
        assert flat is not None
        active = list(self.children)
        hdrs = {c: np.zeros(2, np.int64) for c in active}
        reqs = {c: listen(fold, c, hdrs[c]) for c in active}
        arrived: list[int] = []
        overlap = bool(self.ps.knobs.get("overlap", False))
        deadline = time.monotonic() + self.ps.timeout
        while active:
            for c in active:
                if c not in arrived and reqs[c].Test():
                    arrived.append(c)
            batch = self._pick(arrived, active, hdrs)
            if not batch:
                if time.monotonic() > deadline:
                    silent = [c for c in active if c not in arrived]
                    raise Halted(
                        f"fold rank {self.ps.rank}: no message from fold ranks {silent} in {self.ps.timeout:.0f} s"
                    )
                time.sleep(POLL)
                continue
            deadline = time.monotonic() + self.ps.timeout
            pushes = []
            for c in batch:
                arrived.remove(c)
                kind, flags = int(hdrs[c][0]), int(hdrs[c][1])
                parent_stop = self.link is not None and self.link.stop
                self.stopping = self.stopping or bool(flags & STOP_FLAG) or stop.requested or parent_stop
                if kind == PUSH:
                    data = flat.zeros(grads=rule.grad_payload)
                    receive(fold, c, data)
                    pushes.append((c, data, flags))
                elif kind == PULL:  # the clock does not move: round robin stays on this child
                    self._reply(c, flat.get(), NO_BLOCK)
                    self.child_clock[c] = self.clock
                    reqs[c] = listen(fold, c, hdrs[c])
                elif kind == WORK:
                    if self._reply(c, None, self._assign(c)) < 0 and not overlap:
                        active.remove(c)
                    else:
                        reqs[c] = listen(fold, c, hdrs[c])
                    self.rr = c + 1
                else:  # END: a sub-master with nothing left to push, or a worker that failed
                    active.remove(c)
            if pushes:
                self._apply(pushes, active, reqs, hdrs, overlap)
        if self.link is not None:
            if self.served and not self.stopping:
                self._up(done=True)
            else:
                self.link.end(self.stopping)
        return self.stopping

    def _apply(
        self,
        pushes: list[tuple[int, torch.Tensor, int]],
        active: list[int],
        reqs: dict[int, object],
        hdrs: dict[int, np.ndarray],
        overlap: bool,
    ) -> None:
        """The rule applies the pushes to this rank's copy; each child gets the reply and
        its next block."""
        for c, _, _ in pushes:
            self.staleness.append(self.clock - self.child_clock[c])
        answer = self.ps.rule.apply([d for _, d, _ in pushes])
        self.clock += 1
        for c, _, flags in pushes:
            sub = c <= self.ps.layout.sub_masters
            block = NO_BLOCK if sub else self._assign(c)
            self._reply(c, answer, block)
            self.child_clock[c] = self.clock
            self.served += 1
            if (sub and flags & DONE_FLAG) or (block < 0 and not sub and not overlap):
                active.remove(c)
            else:
                reqs[c] = listen(self.ps.fold, c, hdrs[c])
            self.rr = c + 1
        if self.link is not None and self.served >= len(self.children):
            self._up(done=False)

    def _assign(self, child: int) -> int:
        """The next block for a worker: -1 when none is left or the epoch stops."""
        if self.stopping or self.next >= len(self.queue):
            if self.stopping and self.rr_resume is None:
                self.rr_resume = child  # where round robin picks up after a resume
            return -1
        self.next += 1
        return self.queue[self.next - 1]

    def _reply(self, child: int, weights: torch.Tensor | None, block: int) -> int:
        reply(self.ps.fold, child, (self.clock, int(self.stopping), block), weights)
        return block

    def _pick(self, arrived: list[int], active: list[int], hdrs: dict[int, np.ndarray]) -> list[int]:
        """The messages to serve now (several only in synchronous mode)."""
        if not arrived:
            return []
        knobs = self.ps.knobs
        if knobs.get("synchronous"):  # a round: this fraction of the active children (NNLO's partial sync)
            need = math.ceil(float(knobs.get("sync_fraction", 1.0)) * len(active) - 1e-9)
            return list(arrived) if len(arrived) >= max(1, need) else []
        if self.round_robin:  # the first active child at or after the turn, wrapping
            nxt = next((c for c in active if c >= self.rr), active[0])
            return [nxt] if nxt in arrived else []
        for c in arrived:
            if int(hdrs[c][0]) != PUSH or self._allowed(c, active):
                return [c]
        return []

    def _allowed(self, child: int, active: list[int]) -> bool:
        """Whether serving ``child``'s push leaves the others a schedule that keeps the
        staleness bound: sorted by staleness after it, the i-th stalest must still have
        i pushes of room."""
        if self.bound is None:
            return True
        after = sorted((self.clock + 1 - self.child_clock[c] for c in active if c != child), reverse=True)
        return all(s + i <= self.bound for i, s in enumerate(after))

    def _up(self, done: bool) -> None:
        """A sub-master's exchange with the master."""
        assert self.link is not None and self.ps.flat is not None
        answer = self.ps.flat.zeros()
        signal = self.ps.signal
        flags = (DONE_FLAG if done else 0) | (STOP_FLAG if signal is not None and signal.requested else 0)
        self.link.call(PUSH, self.ps.rule.up_payload(), answer, flags)
        self.ps.rule.up_adopt(answer)
        self.served = 0
