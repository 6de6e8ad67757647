"""Synchronous data parallelism: DistributedDataParallel over the fold group's process
group, every rank on its own shard; gradients are averaged by allreduce in each
backward pass, so the weights stay identical across the fold group (the base class's
consensus, checkpoint and stop vote are right as they are).

``compression: bf16`` exchanges the gradients in bf16 (a 16-bit hook: half the
bytes, the average back in fp32 before the optimizer), whatever the training precision
and on any backend with a bf16 allreduce: the fair baseline for a compressor (Agarwal
et al. 2022; arXiv 2407.01378), and a choice the scheme search can make.

``compression: powersgd`` exchanges each gradient matrix as two low-rank factors
(PowerSGD, Vogels, Karimireddy and Jaggi 2019: torch's state object, the hook of
``powersgd.py``, as torch's own hook deadlocks under gloo), with
error feedback: what a step's approximation left out is added to the next step's
gradient, so nothing is lost, only delayed. The first ``powersgd_start`` steps are
plain allreduce. The error-feedback memories, the warm-start factors, the step count
and the hook's random state are this rank's scheme state, saved in the fold's
checkpoint as tensors and numbers, so a preempted fold resumes compressing where it
stopped (and the placement's priming pass after a resume leaves them as restored).
Under bf16 or fp16 the factors are exchanged in fp32: the PowerSGD hook takes the
place of the precision's 16-bit hook (one hook per DDP model).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from hpcopt.core.schemes import TRAITS
from hpcopt_agent.precision import low_precision_hook
from hpcopt_agent.schemes import powersgd
from hpcopt_agent.schemes.base import Models, Optimizers, Scheme

#: PowerSGD's dictionaries of tensors, by bucket index (the scheme state keeps them).
_MEMORIES = ("error_dict", "p_memory_dict", "q_memory_dict")


class AllReduce(Scheme):
    name = "allreduce"
    traits = TRAITS[name]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.powersgd: dict[str, Any] = {}  # each DDP model's PowerSGDState, with compression: powersgd

    def wrap(self, models: Models, optimizers: Optimizers) -> tuple[Models, Optimizers]:
        if self.comms.pg is None:  # one rank per fold: nothing to synchronize
            return models, optimizers
        wrapped = self.placement.ddp(models, self.comms.pg)
        kind = self.knobs.get("compression", "none")
        if kind == "bf16":
            for ddp in self.placement.ddps:
                ddp.register_comm_hook(self.comms.pg, low_precision_hook(torch.bfloat16))
                object.__setattr__(ddp, "_hpcopt_comm_hook", "bf16")
        if kind == "powersgd":
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as P

            # One state per model: a GAN's two DDPs each number their buckets from 0.
            for name, model in wrapped.items():
                if not isinstance(model, DistributedDataParallel):
                    continue
                self.powersgd[name] = P.PowerSGDState(
                    process_group=self.comms.pg,
                    matrix_approximation_rank=int(self.knobs["powersgd_rank"]),
                    start_powerSGD_iter=int(self.knobs["powersgd_start"]),
                    min_compression_rate=1,  # compress every matrix: the knob decides, not a size rule
                    use_error_feedback=True,
                    warm_start=True,
                    random_seed=0,  # the same on every rank: their factors must agree
                )
                model.register_comm_hook(self.powersgd[name], powersgd.hook)
                # The precision's 16-bit hook stands aside (one hook per DDP model).
                object.__setattr__(model, "_hpcopt_comm_hook", "powersgd")
            # The priming pass after a resume runs the hook too: it must not count as a
            # step nor rewrite the memories the resume just restored. It runs on DDP's
            # first bucket order, not the reordered one the memories are keyed by: they
            # are set aside for it (with several buckets, bucket 0 is another size).
            self.placement._hook_state = (self.state, self.load_state, self._blank)
        return wrapped, optimizers

    def _blank(self) -> None:
        """Empty memories for the priming pass (``Placement.prime``), restored after it."""
        for s in self.powersgd.values():
            for m in _MEMORIES:
                setattr(s, m, {})

    def state(self) -> dict[str, Any]:
        """PowerSGD's error feedback and warm start of each model, as tensors and numbers."""
        if not self.powersgd:
            return {}
        return {"powersgd": {name: _saved(s) for name, s in self.powersgd.items()}}

    def load_state(self, state: dict[str, Any]) -> None:
        saved = state.get("powersgd") or {}
        for name, s in self.powersgd.items():
            if name in saved:  # else a checkpoint of another compression: the memories start empty
                _restore(s, saved[name], self.comms.device)


def _saved(s: Any) -> dict[str, Any]:
    kind, keys, pos, has_gauss, gauss = s.rng.get_state()
    return {
        "iter": int(s.iter),
        **{m: {str(k): v.detach().cpu().clone() for k, v in getattr(s, m).items()} for m in _MEMORIES},
        "rng": [str(kind), torch.from_numpy(np.asarray(keys, np.int64)), int(pos), int(has_gauss), float(gauss)],
    }


def _restore(s: Any, saved: dict[str, Any], device: torch.device) -> None:
    s.iter = int(saved["iter"])
    for m in _MEMORIES:
        setattr(s, m, {int(k): v.to(device) for k, v in saved[m].items()})
    kind, keys, pos, has_gauss, gauss = saved["rng"]
    s.rng.set_state((kind, np.asarray(keys, np.uint32), int(pos), int(has_gauss), float(gauss)))
