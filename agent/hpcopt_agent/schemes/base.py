"""The parallelism-scheme interface: how the ranks of one fold group train together.

A scheme decides which samples each rank trains on, wraps the task's models so that
the task's training step stays plain PyTorch, and gets a hook after every step (where
asynchronous schemes such as downpour or EASGD exchange with their parameter server).
The fold trainer calls only these methods, so a new scheme is one class registered in
``hpcopt_agent.schemes.SCHEMES``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
from torch import nn

from hpcopt_agent.comm import Comms


class Scheme(ABC):
    name: ClassVar[str]

    def __init__(self, comms: Comms) -> None:
        self.comms = comms
        self.rank = comms.fold.rank
        self.size = comms.fold.size

    def shard(self, indices: np.ndarray, seed: int) -> np.ndarray:
        """This rank's training samples for one epoch: a seeded shuffle of the fold's
        training indices, padded (by wrapping) to a multiple of the fold group's size so
        every rank takes the same number of steps, then dealt round-robin."""
        order = np.random.default_rng(seed).permutation(indices)
        pad = (-len(order)) % self.size
        if pad:
            order = np.concatenate([order, order[:pad]])
        return order[self.rank :: self.size]

    def rank_batch(self, batch_size: int) -> int:
        """Samples per rank and step for a fold's global batch size."""
        return max(1, batch_size // self.size)

    @abstractmethod
    def wrap(self, models: dict[str, nn.Module]) -> dict[str, nn.Module]:
        """The models the training step uses (the originals keep the weights that are
        evaluated and checkpointed)."""

    def after_step(self, step: int) -> None:  # noqa: B027 - a hook: most schemes need nothing here
        """Called after every training step of this rank."""
