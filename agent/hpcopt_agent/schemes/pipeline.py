"""Pipeline (model) parallelism on ``torch.distributed.pipelining``: the model cut into
``pipeline.stages`` contiguous stages (``Task.stages``; an ``nn.Sequential`` is cut
automatically), each batch split into ``pipeline.microbatches`` micro-batches and run
through the stages with the GPipe or 1F1B schedule.

Layout: a fold group of R ranks is R / S pipelines (replicas) of S stages; fold rank r
runs stage r % S of replica r // S. The replicas split the data as data-parallel ranks
do, and after every step the gradients of each stage are averaged over its replicas (an
MPI allreduce among the ranks of that stage index), so all replicas stay equal.

- Only each replica's first stage reads samples (the input pipeline's workers read
  ahead for it); it sends the batch's target to its last stage, which computes the
  loss. The first stages evaluate (a share each, with the whole model).
- Every batch has the same shape: an epoch's order is padded by wrapping to whole
  batches (a short last batch makes the schedule fail, pytorch#126600), and the
  micro-batch count must divide each replica's batch.
- The task's default training step is replaced by the schedule (its ``loss`` is called
  on each micro-batch's output, with ``(None, target)`` as the batch): a task with its
  own ``train_step`` or a dict of models is refused.
- Every rank keeps the whole model: it trains its stage's parameters, and at the end of
  each epoch every stage's weights (and floating buffers) go to every rank, so
  evaluation and checkpoints see the whole model, and a resume may change the stage
  count (the per-stage optimizer state is restored only when it does not).
- The schedule scales gradients by 1 / micro-batches, so a step equals a step on the
  whole batch with a mean loss (no BatchNorm: it sees micro-batch statistics).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from mpi4py import MPI
from torch import nn

from hpcopt_agent.comm import Comms
from hpcopt_agent.schemes.base import Models, Optimizers, Scheme
from hpcopt_agent.task import Task


class Pipeline(Scheme):
    name = "pipeline"

    def __init__(self, comms: Comms, knobs: dict[str, Any], epochs: int, timeout: float = 300.0) -> None:
        super().__init__(comms, knobs, epochs, timeout)
        self.stages = int(knobs.get("stages") or self.size)
        if self.size % self.stages:
            raise ValueError(f"pipeline.stages={self.stages} does not divide the fold group's {self.size} ranks")
        self.microbatches = int(knobs["microbatches"])
        self.schedule_name = str(knobs["schedule"])
        self.stage, replica = self.rank % self.stages, self.rank // self.stages
        self.train_rank, self.train_size = replica, self.size // self.stages
        # The ranks of this stage index in every replica (gradient averaging).
        self.replicas = self.fold.Split(color=self.stage, key=replica)
        world_ranks = self.fold.allgather(comms.world.rank)
        mine = sorted(world_ranks[replica * self.stages + s] for s in range(self.stages))
        self.pg = comms.pg if self.train_size == 1 else comms.subgroup(mine) if self.stages > 1 else None
        self.batch = 0
        self.model: nn.Module | None = None
        self.optimizers: Optimizers = {}
        self.parts: list[nn.Module] = []
        self.runner: Any = None

    # -- data ----------------------------------------------------------------------------

    @property
    def reads(self) -> bool:
        return self.stage == 0

    def rank_batch(self, batch_size: int) -> int:
        self.batch = max(1, batch_size // self.train_size)
        if self.batch % self.microbatches:
            raise ValueError(
                f"pipeline.microbatches={self.microbatches} must divide each pipeline's batch of {self.batch} "
                f"(the batch size {batch_size} over {self.train_size} replica(s)); pick a divisor of {self.batch}"
            )
        return self.batch

    def shard(self, indices: np.ndarray, seed: int) -> np.ndarray:
        """The replica's samples, padded by wrapping so every batch is whole (the
        stages of a replica see the same batches)."""
        order = np.random.default_rng(seed).permutation(indices)
        whole = self.batch * self.train_size
        pad = (-len(order)) % whole if len(order) else 0
        while pad > len(order):  # fewer samples than one batch of every replica
            order, pad = np.concatenate([order, order]), pad - len(order)
        if pad:
            order = np.concatenate([order, order[:pad]])
        return order[self.train_rank :: self.train_size]

    # -- wrapping and the step -----------------------------------------------------------

    def wrap(self, models: Models, optimizers: Optimizers) -> tuple[Models, Optimizers]:
        if set(models) != {"model"}:
            raise ValueError(
                f"scheme pipeline trains one model; the task's build returned a dict ({', '.join(models)}): "
                "use allreduce, daso or a parameter-server scheme for several models"
            )
        self.model, self.optimizers = models["model"], optimizers
        return models, optimizers

    def step(self, task: Task, models: Any, optimizers: Any, batch: Any, params: dict[str, Any]) -> float | None:
        if self.runner is None:
            self._build(task, params)
        first, last = self.stage == 0, self.stage == self.stages - 1
        x, target, sent = None, None, None
        if first:
            x, target = batch[0], batch[1]
            if not last:  # the last stage computes the loss: it needs the target
                sent = self.fold.isend(target.cpu(), dest=self.rank + self.stages - 1, tag=7301)
        elif last:
            target = self.fold.recv(source=self.rank - self.stages + 1, tag=7301).to(self.comms.device)
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        if self.stages == 1:
            loss = task.loss(self.parts[0](x), (None, target))
            task.backward(loss)
            losses = [loss.detach()]
        elif first:
            self.runner.step(x)
        elif last:
            self.runner.step(target=target, losses=losses)
        else:
            self.runner.step()
        if sent is not None:
            sent.wait()
        if self.train_size > 1:
            self._average_gradients()
        for opt in self.optimizers.values():
            opt.step()
        return float(torch.stack(losses).mean()) if losses else None

    def _build(self, task: Task, params: dict[str, Any]) -> None:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        assert self.model is not None
        self.parts = list(task.stages(params, self.model, self.stages))
        if len(self.parts) != self.stages:
            raise ValueError(f"Task.stages returned {len(self.parts)} stages; pipeline.stages is {self.stages}")
        mine = self.parts[self.stage]
        known = {id(p) for p in self.model.parameters()}
        if any(id(p) not in known for p in mine.parameters()):
            raise ValueError("Task.stages must return modules that share the model's parameters (its layers)")
        if self.stages > 1:
            stage = PipelineStage(mine, self.stage, self.stages, self.comms.device, group=self.pg)
            kind = ScheduleGPipe if self.schedule_name == "gpipe" else Schedule1F1B

            def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
                return task.loss(output, (None, target))

            self.runner = kind(stage, n_microbatches=self.microbatches, loss_fn=loss_fn)
        else:
            self.runner = True

    def _average_gradients(self) -> None:
        params = [p for p in self.parts[self.stage].parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.detach().reshape(-1).cpu() for p in params]).numpy()  # type: ignore[union-attr]
        self.replicas.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
        flat /= self.train_size
        at = 0
        with torch.no_grad():
            for p in params:
                n = p.numel()
                p.grad.copy_(torch.from_numpy(flat[at : at + n]).view_as(p))  # type: ignore[union-attr]
                at += n

    # -- epoch boundaries ----------------------------------------------------------------

    def consensus(self, models: Models) -> None:
        """Every stage's weights and floating buffers, from its rank in replica 0, to
        every rank of the fold group."""
        if not self.parts or self.stages == 1:
            return
        with torch.no_grad():
            for s, part in enumerate(self.parts):
                tensors = [p for p in part.parameters()] + [b for b in part.buffers() if b.is_floating_point()]
                if not tensors:
                    continue
                flat = torch.cat([t.detach().reshape(-1).cpu().to(torch.float64) for t in tensors]).numpy()
                self.fold.Bcast(flat, root=s)
                at = 0
                for t in tensors:
                    n = t.numel()
                    t.copy_(torch.from_numpy(flat[at : at + n]).view_as(t).to(t.dtype))
                    at += n

    # -- checkpoints ---------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {"stages": self.stages, "optimizers": {k: o.state_dict() for k, o in self.optimizers.items()}}

    def load_state(self, state: dict[str, Any]) -> None:
        if state.get("stages") != self.stages:  # another stage count: the stages' states do not map
            return
        for name, opt in self.optimizers.items():
            if name in state.get("optimizers", {}):
                opt.load_state_dict(state["optimizers"][name])

    def close(self) -> None:
        self.replicas.Free()
