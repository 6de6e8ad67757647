"""Synchronous data parallelism: DistributedDataParallel over the fold group's process
group, every rank on its own shard; gradients are averaged by allreduce in each
backward pass, so the weights stay identical across the fold group (the base class's
consensus, checkpoint and stop vote are right as they are)."""

from __future__ import annotations

from hpcopt.core.schemes import TRAITS
from hpcopt_agent.schemes.base import Models, Optimizers, Scheme


class AllReduce(Scheme):
    name = "allreduce"
    traits = TRAITS[name]

    def wrap(self, models: Models, optimizers: Optimizers) -> tuple[Models, Optimizers]:
        if self.comms.pg is None:  # one rank per fold: nothing to synchronize
            return models, optimizers
        return self.placement.ddp(models, self.comms.pg), optimizers
