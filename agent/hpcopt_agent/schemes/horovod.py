"""Synchronous data parallelism with Horovod instead of DDP
(``training.options.allreduce.backend: horovod``, or ``scheme: horovod``).

Horovod is an optional extra (``make horovod`` builds 0.28.1; see the README). It is
initialized once per agent, over the world, with each rank's fold group as its process
set (:meth:`hpcopt_agent.comm.Comms.init_horovod`; a fold group that spans the world is the global set); a
trial's optimizers become ``hvd.DistributedOptimizer``\\ s on that set, averaging
gradients as the backward pass produces them. The models are not wrapped: every rank
of a fold group starts from the same seed, so no broadcast is needed.

- Parameter names are prefixed with their model's name, so a GAN's two networks never
  share a Horovod tensor name (horovod#2559); a parameter shared by two models keeps
  its first name.
- ``zero_grad`` first completes gradient reductions that a backward pass started for
  an optimizer that has not stepped since (a GAN's generator loss reaches the critic's
  parameters): Horovod refuses ``zero_grad`` while they are pending, and would count a
  second backward as a second pass (#796, #1549, #2821).
- The wrapped optimizer shares the task optimizer's parameter groups and state, so
  checkpoints and learning-rate schedules see the same optimizer.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from hpcopt.core.schemes import TRAITS
from hpcopt_agent.schemes.base import Models, Optimizers, Scheme


class HorovodAllReduce(Scheme):
    name = "horovod"
    traits = TRAITS[name]

    def wrap(self, models: Models, optimizers: Optimizers) -> tuple[Models, Optimizers]:
        if self.comms.horovod is None:
            raise RuntimeError("Horovod was not initialized at agent start")
        if self.size == 1:
            return models, optimizers
        import horovod.torch as hvd

        names: dict[int, str] = {}
        for model_name, model in models.items():
            for param_name, p in model.named_parameters():
                names.setdefault(id(p), f"{model_name}.{param_name}")
        wrapped: Optimizers = {}
        for name, opt in optimizers.items():
            params = [p for group in opt.param_groups for p in group["params"]]
            dist = hvd.DistributedOptimizer(
                opt,
                named_parameters=[(names[id(p)], p) for p in params],
                op=hvd.Average,
                process_set=self.comms.horovod,
            )
            dist.state = opt.state  # one state: the task's optimizer is what checkpoints save
            dist.zero_grad = types.MethodType(_zero_grad, dist)
            wrapped[name] = dist
        return models, wrapped


def _zero_grad(self: Any, set_to_none: bool = True) -> None:
    """Horovod's ``zero_grad``, after completing reductions a backward pass left pending
    (and with torch's ``set_to_none``, which Horovod's override drops)."""
    if self._handles:
        self.synchronize()
        self._synchronized = False  # the next step synchronizes its own gradients
    torch.optim.Optimizer.zero_grad(self, set_to_none)
