"""Pipeline (model) parallelism on ``torch.distributed.pipelining``: the model cut into
``pipeline.stages`` contiguous stages (``Task.stages``; an ``nn.Sequential`` is cut
automatically), each batch split into ``pipeline.microbatches`` micro-batches and run
through the stages with the GPipe or 1F1B schedule.

Layout: a fold group of R ranks is R / S pipelines (replicas) of S stages; fold rank r
runs stage r % S of replica r // S. The replicas split the data as data-parallel ranks
do, and after every step the gradients of each stage are averaged over its replicas (an
MPI allreduce among the ranks of that stage index), so all replicas stay equal.

Memory is split, not just compute: the task's ``build`` runs on the meta device (no
storage), and each rank allocates and initializes only its own stage (:func:`materialize`:
every layer with its ``reset_parameters()``, seeded by its position in the whole model,
so the initial weights do not depend on the stage count). The task's optimizer sees the
whole model but only this stage's parameters ever get gradients, so it holds only this
stage's state. ``pipeline.recompute`` recomputes each stage's activations in the backward
pass instead of keeping them (``torch.utils.checkpoint``).

- Only each replica's first stage reads samples (the input pipeline's workers read
  ahead for it); it sends the batch's target to its last stage, which computes the
  loss. Evaluation runs through the stages too: the first stage sends each validation
  batch's activations (and the rest of the batch) on, and the last stage calls
  ``Task.evaluate`` with its own stage as the model and those activations as inputs.
- Checkpoints are per stage: replica 0's rank of each stage writes its parameters,
  buffers and optimizer state (by their names in the whole model) to its own file
  beside the fold's checkpoint (:func:`hpcopt_agent.checkpoint.stage_path`); the fold's
  file names the stage count. A resume may change the stage count: each rank takes its
  stage's tensors from the files (optimizer state only when the count is unchanged).
- Every batch has the same shape: an epoch's order is padded by wrapping to whole
  batches (a short last batch makes the schedule fail, pytorch#126600), and the
  micro-batch count must divide each replica's batch.
- The task's default training step is replaced by the schedule (its ``loss`` is called
  on each micro-batch's output, with ``(None, target)`` as the batch): a task with its
  own ``train_step`` or a dict of models is refused.
- The schedule scales gradients by 1 / micro-batches, so a step equals a step on the
  whole batch with a mean loss (no BatchNorm: it sees micro-batch statistics).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from mpi4py import MPI
from torch import nn
from torch.utils.checkpoint import checkpoint as recompute

from hpcopt.core.schemes import TRAITS
from hpcopt_agent import checkpoint
from hpcopt_agent.comm import Comms
from hpcopt_agent.schemes.base import Models, Optimizers, Placement, Roles, Scheme
from hpcopt_agent.task import Task

EVAL_TAG = 7302


def materialize(model: nn.Module, part: nn.Module, device: torch.device, seed: int) -> None:
    """Allocates ``part`` (a piece of the meta-device ``model``) on ``device`` and
    initializes each of its layers with its ``reset_parameters()``, seeded by the layer's
    position in ``model``: the same weights whatever the stages. The global RNG state is
    left as it was."""
    mine = {id(m) for m in part.modules()}
    part.to_empty(device=device)
    state = torch.get_rng_state()
    try:
        for position, (name, module) in enumerate(model.named_modules()):
            if id(module) not in mine:
                continue
            if not [*module.parameters(recurse=False), *module.buffers(recurse=False)]:
                continue
            reset = getattr(module, "reset_parameters", None)
            if not callable(reset):
                raise ValueError(
                    f"scheme pipeline builds the model on the meta device and initializes each layer of a stage "
                    f"with its reset_parameters(); layer {name or '(the model)'} ({type(module).__name__}) has "
                    "parameters or buffers but no reset_parameters(): give it one that initializes them"
                )
            torch.manual_seed(int(np.random.SeedSequence([seed, position]).generate_state(1)[0]))
            reset()
    finally:
        torch.set_rng_state(state)


class _Recompute(nn.Module):
    """A stage whose activations are recomputed in the backward pass."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> Any:
        return recompute(self.inner, x, use_reentrant=False)


def _host(value: Any) -> Any:
    return value.cpu() if isinstance(value, torch.Tensor) else value


def _device(value: Any, device: torch.device) -> Any:
    return value.to(device) if isinstance(value, torch.Tensor) else value


class _Replicas(Roles):
    """R / S replicas split the data as data-parallel ranks do; only a replica's first
    stage reads samples, and every batch is whole."""

    def __init__(self, fold: MPI.Comm, stages: int, microbatches: int) -> None:
        super().__init__(fold, fold.rank // stages, fold.size // stages)
        self.stage, self.microbatches = fold.rank % stages, microbatches
        self.batch = 0

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


class _Stages(Placement):
    """One stage of the model per rank: built, stepped through the schedule, evaluated
    through the stages and saved per stage."""

    def __init__(self, comms: Comms, knobs: dict[str, Any], roles: _Replicas) -> None:
        super().__init__(comms.device)
        self.comms, self.fold, self.rank = comms, comms.fold, comms.fold.rank
        self.stages = int(knobs.get("stages") or self.fold.size)
        self.microbatches = int(knobs["microbatches"])
        self.schedule_name = str(knobs["schedule"])
        self.recompute = bool(knobs.get("recompute", False))
        self.stage, self.replica, self.replica_count = roles.stage, roles.train_rank, roles.train_size
        # The ranks of this stage index in every replica (gradient averaging).
        self.replicas = self.fold.Split(color=self.stage, key=self.replica)
        world_ranks = self.fold.allgather(comms.world.rank)
        mine = sorted(world_ranks[self.replica * self.stages + s] for s in range(self.stages))
        self.pg = comms.pg if self.replica_count == 1 else comms.subgroup(mine) if self.stages > 1 else None
        self.model: nn.Module | None = None
        self.optimizers: Optimizers = {}
        self.parts: list[nn.Module] = []
        self.runner: Any = None
        self.seen = 0  # validation samples the last stage evaluated

    def build(self, task: Task, params: dict[str, Any]) -> tuple[Models, bool]:
        with torch.device("meta"):
            built = task.build(params)
        if not isinstance(built, nn.Module):
            raise ValueError(
                f"scheme pipeline trains one model; the task's build returned a dict ({', '.join(built)}): "
                "use allreduce, daso or a parameter-server scheme for several models"
            )
        parts = list(task.stages(params, built, self.stages))
        if len(parts) != self.stages:
            raise ValueError(f"Task.stages returned {len(parts)} stages; pipeline.stages is {self.stages}")
        known = {id(p) for p in built.parameters()}
        if any(id(p) not in known for part in parts for p in part.parameters()):
            raise ValueError("Task.stages must return modules that share the model's parameters (its layers)")
        materialize(built, parts[self.stage], self.comms.device, torch.initial_seed())
        self.model, self.parts = built, parts
        return {"model": built}, True

    def stage_bytes(self) -> int:
        """Bytes this rank holds of the model and its optimizer state (parameters,
        buffers, gradients, optimizer tensors; none of the other stages)."""
        assert self.model is not None
        tensors = [*self.model.parameters(), *self.model.buffers()]
        held = [t for t in tensors if not t.is_meta]
        held += [p.grad for p in self.model.parameters() if p.grad is not None]
        for opt in self.optimizers.values():
            held += [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
        return sum(t.numel() * t.element_size() for t in held)

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
        if self.replica_count > 1:
            self._average_gradients()
        for opt in self.optimizers.values():
            opt.step()
        return float(torch.stack(losses).mean()) if losses else None

    def _build(self, task: Task, params: dict[str, Any]) -> None:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        mine = self.parts[self.stage]
        if self.recompute:
            mine = _Recompute(mine)
            self.parts[self.stage] = mine
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
        flat /= self.replica_count
        at = 0
        with torch.no_grad():
            for p in params:
                n = p.numel()
                p.grad.copy_(torch.from_numpy(flat[at : at + n]).view_as(p))  # type: ignore[union-attr]
                at += n

    def takes_part(self, share: int, read: int) -> bool:
        self.seen = 0
        return share > 0  # every stage of a replica whose first stage has samples

    def evaluate(
        self, task: Task, models: Models, single: bool, batches: Iterator[Any], params: dict[str, Any]
    ) -> dict[str, float]:
        """The first stage sends each batch's activations (and the rest of the batch)
        on; the last stage evaluates with its stage as the model."""
        if self.stages == 1:
            return super().evaluate(task, models, single, batches, params)
        part = self.parts[self.stage]
        first, last = self.stage == 0, self.stage == self.stages - 1
        self.seen = 0
        if first:
            for batch in batches:
                x, *rest = batch
                self.fold.send((part(x).cpu(), [_host(r) for r in rest]), dest=self.rank + 1, tag=EVAL_TAG)
            self.fold.send(None, dest=self.rank + 1, tag=EVAL_TAG)
            return {}

        def incoming() -> Iterator[Any]:
            while (msg := self.fold.recv(source=self.rank - 1, tag=EVAL_TAG)) is not None:
                act, rest = msg
                act = act.to(self.comms.device)
                if not last:
                    self.fold.send((part(act).cpu(), rest), dest=self.rank + 1, tag=EVAL_TAG)
                    continue
                self.seen += len(act)
                yield (act, *[_device(r, self.comms.device) for r in rest])
            if not last:
                self.fold.send(None, dest=self.rank + 1, tag=EVAL_TAG)

        stream = incoming()
        if not last:
            for _ in stream:
                pass
            return {}
        found = task.evaluate(part, stream, params)
        for _ in stream:  # what the task left unread: the sender waits for it to be taken
            pass
        return {k: float(v) for k, v in found.items()}

    def evaluated(self, read: int) -> int:
        return read if self.stages == 1 else self.seen

    def save_models(self, path: Path, models: Models, optimizers: Optimizers) -> dict[str, Any]:
        """Replica 0's rank of each stage writes the stage's tensors (named as in the
        whole model) and optimizer state to its own file beside ``path``."""
        assert self.model is not None
        if self.replica == 0:
            tensors = {k: v for k, v in self.model.state_dict().items() if not v.is_meta}
            shard = {
                "tensors": tensors,
                "optimizers": {k: o.state_dict() for k, o in optimizers.items()},
                "stage": self.stage,
                "stages": self.stages,
            }
            checkpoint.save(checkpoint.stage_path(path, self.stage, self.stages), shard)
        self.fold.Barrier()  # every stage's file is written before the fold's file names them
        return {"models": {}, "optimizers": {}, "pipeline_stages": self.stages}

    def load_models(self, path: Path, state: dict[str, Any], models: Models, optimizers: Optimizers) -> None:
        """This stage's tensors from the stage files (any stage count); its optimizer
        state when the stage count is the same."""
        assert self.model is not None
        saved = int(state.get("pipeline_stages") or 0)
        if not saved:
            raise ValueError("this fold's checkpoint was not written by scheme pipeline (it has no stage files)")
        wanted = {k: v for k, v in self.model.state_dict().items() if not v.is_meta}
        found: dict[str, torch.Tensor] = {}
        for s in range(saved):
            shard = checkpoint.load_stage(checkpoint.stage_path(path, s, saved))
            found.update({k: v for k, v in shard["tensors"].items() if k in wanted})
            if saved == self.stages and s == self.stage:
                for name, opt in optimizers.items():
                    opt.load_state_dict(shard["optimizers"][name])
        missing = sorted(set(wanted) - set(found))
        if missing:
            raise ValueError(f"the stage files of this fold's checkpoint lack {', '.join(missing[:5])}")
        with torch.no_grad():
            for k, v in wanted.items():
                v.copy_(found[k])


class Pipeline(Scheme):
    name = "pipeline"
    traits = TRAITS[name]

    def __init__(self, comms: Comms, knobs: dict[str, Any], epochs: int, timeout: float = 300.0) -> None:
        super().__init__(comms, knobs, epochs, timeout)
        stages = int(knobs.get("stages") or self.size)
        if self.size % stages:
            raise ValueError(f"pipeline.stages={stages} does not divide the fold group's {self.size} ranks")
        self.roles = _Replicas(self.fold, stages, int(knobs["microbatches"]))
        self.placement = self.staged = _Stages(comms, knobs, self.roles)

    def wrap(self, models: Models, optimizers: Optimizers) -> tuple[Models, Optimizers]:
        self.staged.optimizers = optimizers
        return models, optimizers

    def end_epoch(self, epoch: int, train_loss: float) -> dict[str, float]:
        """``pipeline_stage_mb``: the most memory a rank holds of the model (parameters,
        buffers, gradients and optimizer state of its stage)."""
        most = self.fold.allreduce(self.staged.stage_bytes(), op=MPI.MAX)
        return {"pipeline_stage_mb": most / 2**20} if self.rank == 0 else {}

    def close(self) -> None:
        self.staged.replicas.Free()
