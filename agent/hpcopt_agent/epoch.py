"""The epoch driver: the only code that calls a scheme's epoch hooks, and the one place
their order is fixed. The fold trainer (:mod:`hpcopt_agent.fold`) runs it for every
epoch of every fold; the conformance harness (``tests/agent/ps_check.py``) runs the
same driver, so the schemes' checks test the fold loop itself, not a copy of it.

One epoch on one rank is two calls with the fold group's agreement between them:

1. :meth:`EpochDriver.batches`: ``roles.shard`` deals the epoch's samples,
   ``begin_epoch``; on a rank that does not train, ``roles.serve`` for the epoch; else
   for every batch of every run ``blocks`` yields (read ahead by the loader's workers
   on a rank that reads): ``placement.prime`` once after a resume,
   ``placement.step``, ``after_step`` and the stop vote; then ``end_batches`` (with
   ``failed`` on an error, before it propagates).
2. The caller agrees with its fold group (failure > preemption > go on).
3. :meth:`EpochDriver.end`: ``consensus``, the caller's evaluation, ``end_epoch``.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from hpcopt_agent.precision import Precision
from hpcopt_agent.schemes.base import Models, Scheme, Stop, StopVote
from hpcopt_agent.task import Task

#: The caller's evaluation: the fold group's metrics and its mean training loss.
Evaluation = Callable[[], tuple[dict[str, float], float]]


class Reader(Protocol):
    """Where batches come from (:class:`hpcopt_agent.data.Data`)."""

    def batches(self, indices: np.ndarray, size: int) -> list[np.ndarray]: ...

    def read(self, batches: Sequence[np.ndarray]) -> Iterator[Any]: ...


@dataclass
class Batches:
    """What one rank did in an epoch's batch loop."""

    stop_at: int | None = None  # the position where the ranks agreed to stop
    samples: int = 0  # samples this rank read and trained
    seconds: float = 0.0  # this rank's time in the batch loop
    losses: list[float] = field(default_factory=list)


class EpochDriver:
    """Drives ``scheme`` through the epochs of one fold on this rank.

    ``models``/``optimizers`` are what the task's step gets (as the scheme wrapped
    them); ``resumed`` is set by the caller after loading a checkpoint, and the driver
    primes the placement before the first step after it."""

    def __init__(
        self,
        scheme: Scheme,
        task: Task,
        data: Reader,
        params: dict[str, Any],
        precision: Precision,
        models: Any,
        optimizers: Any,
    ) -> None:
        self.scheme = scheme
        self.task = task
        self.data = data
        self.params = params
        self.precision = precision
        self.models = models
        self.optimizers = optimizers
        self.resumed = False

    def batches(
        self,
        epoch: int,
        start: int,
        indices: np.ndarray,
        seed: int,
        batch_size: int,
        stop: Stop,
        *,
        vote: StopVote | None = None,
        each_step: Callable[[int], None] | None = None,
    ) -> Batches:
        """This rank's part of epoch ``epoch`` from batch ``start`` on: the batch loop
        over its shard of ``indices`` (``batch_size`` samples per rank and step), or, on
        a rank that does not train, serving the ones that do. ``vote`` replaces the
        roles' stop vote and ``each_step`` is called after every step, before the vote
        (the conformance harness plants stops with them)."""
        scheme, roles, out = self.scheme, self.scheme.roles, Batches()
        chunks = self.data.batches(roles.shard(indices, seed), batch_size)
        scheme.begin_epoch(epoch, start, len(chunks), stop)
        if not roles.trains:
            out.stop_at = start if roles.serve(stop) else None
            return out
        vote = roles.vote() if vote is None else vote
        t0 = time.perf_counter()
        try:
            for block in scheme.blocks(len(chunks), start):
                # The rank that reads (not a pipeline's later stages) gets the block's
                # batches read ahead by the loader's workers while it trains.
                reads = roles.reads
                batches = self.data.read([chunks[b] for b in block]) if reads else itertools.repeat(None)
                for b, batch in zip(block, batches):  # noqa: B905 - the block decides; the reader follows
                    loss = self._step(batch)
                    if loss is not None:
                        out.losses.append(float(loss))
                    scheme.after_step(b, out.losses[-1] if out.losses else math.nan)
                    if reads:
                        out.samples += len(chunks[b])
                    if each_step is not None:
                        each_step(b)
                    if vote.step(stop.requested):
                        out.stop_at = b + 1
                        break
                if out.stop_at is not None:
                    break
            else:
                if vote.finish():
                    out.stop_at = len(chunks)
        except Exception:
            # Tell the scheme's peers (a parameter server waiting for this rank) before failing.
            with contextlib.suppress(Exception):
                scheme.end_batches(stopped=True, failed=True)
            raise
        if scheme.end_batches(stopped=out.stop_at is not None) and out.stop_at is None:
            out.stop_at = start  # the scheme stopped the epoch (a parameter server's "stop")
        out.seconds = time.perf_counter() - t0
        return out

    def _step(self, batch: Any) -> float | None:
        placement = self.scheme.placement
        with self.precision.active():
            if self.resumed:
                placement.prime(self.task, batch)
                self.resumed = False
            loss = placement.step(self.task, self.models, self.optimizers, batch, self.params)
        self.precision.end_step()
        return loss

    def end(self, epoch: int, models: Models, evaluate: Evaluation) -> dict[str, float]:
        """After the fold group agreed to go on: the scheme's consensus leaves the
        weights to evaluate in ``models``, ``evaluate`` returns the metrics and the fold
        group's mean training loss, and ``end_epoch`` adds the scheme's figures."""
        self.scheme.consensus(models)
        metrics, train_loss = evaluate()
        metrics.update(self.scheme.end_epoch(epoch, train_loss))
        return metrics
