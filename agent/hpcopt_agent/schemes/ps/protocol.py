"""How the ranks of a parameter-server fold group talk: MPI point-to-point on the fold
communicator. A message to a parent is a 2-integer header (kind, flags), then one flat
buffer (:mod:`..flat`); a reply is a 3-integer header (the parent's clock, a stop flag,
the next block of batches for a worker), then the weights. Waits poll with short
sleeps, so a waiting rank costs no core that oversubscribed workers need, and end with
:class:`Halted` once a peer is silent past the collective timeout."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from mpi4py import MPI

from hpcopt_agent.schemes.base import StopVote

HDR, DATA, RHDR, RDATA = 7201, 7202, 7203, 7204
#: Header kinds: a push (an update; the reply has the weights and the next block), a
#: pull (just the weights), a request for a block of batches, an early end (an error).
PUSH, PULL, END, WORK = 1, 2, 3, 4
#: Header flags: the sender was signalled to stop; a sub-master's last push of the epoch.
STOP_FLAG, DONE_FLAG = 1, 2
NO_BLOCK = -2  # a reply that assigns nothing (a pull, a sub-master's push)
POLL = 0.0005


class Halted(RuntimeError):
    """A peer went silent past the collective timeout."""


class NoVote(StopVote):
    """Stops travel in the headers (the parent answers "no more blocks"), not in a vote."""

    def step(self, stop: bool) -> bool:
        return False

    def finish(self) -> bool:
        return False


def wait(reqs: list[MPI.Request], timeout: float, what: str, rank: int) -> None:
    """Polls ``reqs`` until all completed; :class:`Halted` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not MPI.Request.Testall(reqs):
        if time.monotonic() > deadline:
            raise Halted(f"fold rank {rank}: no {what} within {timeout:.0f} s")
        time.sleep(POLL)


class Link:
    """A rank's line to its parent (a worker's leader or a sub-master): sends a header
    and a buffer, waits for the reply, and keeps what the reply said."""

    def __init__(self, fold: MPI.Comm, parent: int | None, timeout: float) -> None:
        self.fold, self.parent, self.timeout = fold, parent, timeout
        self.messages = 0  # sent this epoch
        self.stop = False  # a reply said stop
        self.block = -1  # the block the last reply assigned (a worker's)

    def call(self, kind: int, data: torch.Tensor | None, reply: torch.Tensor, flags: int = 0) -> None:
        """Sends a header (and ``data``) to the parent and waits for its reply: the
        weights into ``reply`` (nothing for a request for work), a stop and a block."""
        assert self.parent is not None
        rhdr = np.zeros(3, np.int64)
        reqs = [self.fold.Irecv(rhdr, source=self.parent, tag=RHDR)]
        if kind != WORK:
            reqs.append(self.fold.Irecv(reply.numpy(), self.parent, RDATA))
        self.fold.Send(np.array([kind, flags], np.int64), dest=self.parent, tag=HDR)
        if data is not None:
            self.fold.Send(np.ascontiguousarray(data.numpy()), dest=self.parent, tag=DATA)
        wait(reqs, self.timeout, f"a reply from fold rank {self.parent}", self.fold.rank)
        self.stop = self.stop or bool(rhdr[1])
        if kind != PULL:
            self.block = int(rhdr[2])
        self.messages += 1

    def end(self, stopped: bool) -> None:
        """Tells the parent this rank has nothing more this epoch (or failed)."""
        assert self.parent is not None
        self.fold.Send(np.array([END, STOP_FLAG if stopped else 0], np.int64), dest=self.parent, tag=HDR)


def reply(fold: MPI.Comm, child: int, header: tuple[int, int, int], weights: torch.Tensor | None) -> None:
    """A serving rank's answer to ``child``: (clock, stop, block), then the weights."""
    fold.Send(np.array(header, np.int64), dest=child, tag=RHDR)
    if weights is not None:
        fold.Send(np.ascontiguousarray(weights.numpy()), dest=child, tag=RDATA)


def receive(fold: MPI.Comm, child: int, into: torch.Tensor) -> None:
    """The buffer a child sent after its header."""
    fold.Recv(into.numpy(), source=child, tag=DATA)


def listen(fold: MPI.Comm, child: int, header: np.ndarray) -> Any:
    """A request for ``child``'s next header."""
    return fold.Irecv(header, source=child, tag=HDR)
