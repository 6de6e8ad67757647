"""Synchronous data parallelism: DistributedDataParallel over the fold group's process
group, every rank on its own shard; gradients are averaged by allreduce in each
backward pass, so the weights stay identical across the fold group."""

from __future__ import annotations

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from hpcopt_agent.schemes.base import Scheme


class AllReduce(Scheme):
    name = "allreduce"

    def wrap(self, models: dict[str, nn.Module]) -> dict[str, nn.Module]:
        if self.comms.pg is None:  # one rank per fold: nothing to synchronize
            return models
        device_ids = [self.comms.device.index] if self.comms.device.type == "cuda" else None
        wrapped: dict[str, nn.Module] = {}
        for name, model in models.items():
            if any(p.requires_grad for p in model.parameters()):
                wrapped[name] = DistributedDataParallel(model, device_ids=device_ids, process_group=self.comms.pg)
            else:
                wrapped[name] = model
        return wrapped
