"""A fold's training loss over fixed samples, as a function of the flat weight vector:
its value and its Hessian-vector products, summed over the fold group's ranks.

``L(w) = (1/N) sum_i l_i(w)`` over the ``N`` samples that all ranks hold together;
each rank sums the per-batch losses (``task.loss`` times the batch's samples) of its own
share and the ranks add their sums with ``reduce``. A Hessian-vector product is the same
sum of the exact second derivative (Pearlmutter's trick: the gradient of ``g(w) . v``),
so it costs each rank about two backward passes over its share: with the fold's
samples dealt over more ranks the cost per rank falls, and the result is the same sum
to the precision of a different order of additions (GradVis's "scalable Lanczos").

The model is evaluated in ``eval`` mode: BatchNorm uses its running statistics and
dropout is off, so the loss is a function of the weights alone, not of which samples
shared a batch (which changes with the rank count).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

Reduce = Callable[[torch.Tensor], torch.Tensor]
BatchLoss = Callable[[nn.Module, Any], torch.Tensor]


def no_reduce(t: torch.Tensor) -> torch.Tensor:
    return t


def samples_of(batch: Any) -> int:
    """The samples in a batch: the length of its first tensor."""
    first = batch[0] if isinstance(batch, (tuple, list)) else batch
    return len(first)


class FoldLoss:
    """``L(w)`` and ``H(w) v`` of one model over fixed batches (this rank's share).

    ``reduce`` sums a tensor over the fold group's ranks in place and returns it (every
    rank gets the sum); :attr:`hvps` and :attr:`passes` count what was computed.
    """

    def __init__(self, model: nn.Module, loss: BatchLoss, batches: Sequence[Any], reduce: Reduce = no_reduce) -> None:
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the model has no trainable parameters: there is no Hessian to compute")
        self._loss, self._batches, self._reduce = loss, list(batches), reduce
        device, dtype = self.params[0].device, self.params[0].dtype
        local = torch.tensor([float(sum(samples_of(b) for b in self._batches))], device=device, dtype=torch.float64)
        self.samples = int(self._reduce(local).item())
        if self.samples == 0:
            raise ValueError("no samples to compute the loss on: every rank's share is empty")
        self.size = sum(p.numel() for p in self.params)
        self.device, self.dtype = device, dtype
        self.hvps = 0
        self.passes = 0

    def weights(self) -> torch.Tensor:
        """The current weights as one flat vector (a copy)."""
        return torch.cat([p.detach().reshape(-1) for p in self.params]).clone()

    def unflatten(self, flat: torch.Tensor) -> list[torch.Tensor]:
        out, at = [], 0
        for p in self.params:
            out.append(flat[at : at + p.numel()].view_as(p))
            at += p.numel()
        return out

    @contextmanager
    def at(self, flat: torch.Tensor) -> Iterator[None]:
        """The model's weights set to ``flat`` for the block, restored after."""
        saved = self.weights()
        self.assign(flat)
        try:
            yield
        finally:
            self.assign(saved)

    def assign(self, flat: torch.Tensor) -> None:
        """Sets the model's weights to ``flat``."""
        with torch.no_grad():
            for p, value in zip(self.params, self.unflatten(flat), strict=True):
                p.copy_(value)

    @contextmanager
    def _evaluating(self) -> Iterator[None]:
        modes = [m.training for m in self.model.modules()]
        self.model.eval()
        try:
            yield
        finally:
            for m, mode in zip(self.model.modules(), modes, strict=True):
                m.training = mode

    def _batch_sum(self, batch: Any) -> torch.Tensor:
        """The batch's loss summed over its samples (``task.loss`` is a batch mean)."""
        return self._loss(self.model, batch) * samples_of(batch)

    def value(self) -> float:
        """``L(w)`` at the current weights: one forward pass over the samples."""
        total = torch.zeros(1, device=self.device, dtype=torch.float64)
        with self._evaluating(), torch.no_grad():
            for batch in self._batches:
                total += self._batch_sum(batch).double()
        self.passes += 1
        return float(self._reduce(total).item()) / self.samples

    def hvp(self, v: torch.Tensor) -> torch.Tensor:
        """``H(w) v`` at the current weights, for a flat ``v`` (every rank the same)."""
        vs = self.unflatten(v.to(device=self.device, dtype=self.dtype))
        out = torch.zeros(self.size, device=self.device, dtype=self.dtype)
        with self._evaluating():
            for batch in self._batches:
                grads = torch.autograd.grad(self._batch_sum(batch), self.params, create_graph=True, allow_unused=True)
                # A parameter the loss does not use, or uses linearly, adds no curvature.
                used = [i for i, g in enumerate(grads) if g is not None and g.requires_grad]
                if not used:
                    continue
                hv = torch.autograd.grad(
                    [grads[i] for i in used], self.params, grad_outputs=[vs[i] for i in used], allow_unused=True
                )
                pairs = zip(hv, self.params, strict=True)
                out += torch.cat([(h if h is not None else torch.zeros_like(p)).reshape(-1) for h, p in pairs])
        self.hvps += 1
        return self._reduce(out) / self.samples
