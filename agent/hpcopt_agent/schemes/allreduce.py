"""Synchronous data parallelism: DistributedDataParallel over the fold group's process
group, every rank on its own shard; gradients are averaged by allreduce in each
backward pass, so the weights stay identical across the fold group (the base class's
consensus, checkpoint and stop vote are right as they are)."""

from __future__ import annotations

from torch.nn.parallel import DistributedDataParallel

from hpcopt_agent.schemes.base import Models, Optimizers, Scheme


class AllReduce(Scheme):
    name = "allreduce"

    def wrap(self, models: Models, optimizers: Optimizers) -> tuple[Models, Optimizers]:
        if self.comms.pg is None:  # one rank per fold: nothing to synchronize
            return models, optimizers
        device_ids = [self.comms.device.index] if self.comms.device.type == "cuda" else None
        wrapped: Models = {}
        for name, model in models.items():
            if any(p.requires_grad for p in model.parameters()):
                wrapped[name] = DistributedDataParallel(model, device_ids=device_ids, process_group=self.comms.pg)
            else:
                wrapped[name] = model
        return wrapped, optimizers
