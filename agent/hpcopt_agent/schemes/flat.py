"""Models and optimizers as flat vectors: what schemes send in one message per
exchange instead of one per layer.

- the **weights layout** holds every trainable parameter of a dict of models once
  (a parameter shared by two models, as a GAN's combined model shares the
  discriminator, is counted once);
- the **gradient layout** holds, optimizer after optimizer, the parameters each
  optimizer steps (a shared parameter appears once per optimizer that owns it), as an
  index into the weights layout.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def _unique(params: Any) -> list[nn.Parameter]:
    seen: set[int] = set()
    out = []
    for p in params:
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


class Flat:
    def __init__(self, models: dict[str, nn.Module], optimizers: dict[str, torch.optim.Optimizer]) -> None:
        self.params = _unique(p for m in models.values() for p in m.parameters())
        if not self.params:
            raise ValueError("the task's models have no trainable parameters")
        dtypes = {p.dtype for p in self.params}
        if len(dtypes) > 1 or not next(iter(dtypes)).is_floating_point:
            raise ValueError(
                "schemes that exchange flat weights (parameter servers, daso) need one floating dtype for all "
                f"parameters, got {dtypes}"
            )
        self.dtype = self.params[0].dtype
        self.offsets: dict[int, tuple[int, int]] = {}
        at = 0
        for p in self.params:
            self.offsets[id(p)] = (at, p.numel())
            at += p.numel()
        self.numel = at
        # Gradient layout: each optimizer's parameters, as positions in the weights layout.
        self.segments: list[tuple[str, list[nn.Parameter], slice]] = []
        index: list[torch.Tensor] = []
        at = 0
        for name, opt in optimizers.items():
            params = _unique(p for g in opt.param_groups for p in g["params"])
            for p in params:
                if id(p) not in self.offsets:
                    raise ValueError(f"optimizer {name!r} steps a parameter that none of the models has")
                o, n = self.offsets[id(p)]
                index.append(torch.arange(o, o + n))
            n_seg = sum(p.numel() for p in params)
            self.segments.append((name, params, slice(at, at + n_seg)))
            at += n_seg
        self.index = torch.cat(index) if index else torch.zeros(0, dtype=torch.long)
        self.grad_numel = at
        # Floating buffers (BatchNorm statistics): averaged at epoch ends, never pushed.
        self.buffers = [
            b for b in {id(b): b for m in models.values() for b in m.buffers() if b.is_floating_point()}.values()
        ]

    def get(self, host: bool = True) -> torch.Tensor:
        """The weights as one new vector: in host memory, or (``host=False``) on the
        parameters' device."""
        with torch.no_grad():
            if not host:
                return torch.cat([p.detach().reshape(-1) for p in self.params])
            return torch.cat([p.detach().reshape(-1).to("cpu", copy=True) for p in self.params])

    def set(self, flat: torch.Tensor) -> None:
        with torch.no_grad():
            for p in self.params:
                o, n = self.offsets[id(p)]
                p.copy_(flat[o : o + n].view_as(p))

    def zeros(self, grads: bool = False) -> torch.Tensor:
        return torch.zeros(self.grad_numel if grads else self.numel, dtype=self.dtype)

    def get_buffers(self, host: bool = True) -> torch.Tensor:
        """The floating buffers as one new float64 vector (host memory, or their device)."""
        if not self.buffers:
            return torch.zeros(0, dtype=torch.float64, device=None if host else self.params[0].device)
        device = "cpu" if host else self.buffers[0].device
        return torch.cat([b.detach().reshape(-1).to(device, torch.float64) for b in self.buffers])

    def set_buffers(self, flat: torch.Tensor) -> None:
        at = 0
        with torch.no_grad():
            for b in self.buffers:
                b.copy_(flat[at : at + b.numel()].view_as(b).to(b.dtype))
                at += b.numel()


class Collect(torch.optim.Optimizer):
    """Stands in for a worker's optimizer under downpour and GEM: ``step()`` adds the
    gradients to this optimizer's segment of a flat accumulator (and, with ``local_lr``
    > 0, takes a plain SGD step) instead of updating the weights; the master's copy of
    the task's optimizer applies them. ``zero_grad`` and ``param_groups`` (the task's
    hyper-parameters, such as ``lr``) work as usual."""

    def __init__(self, task_optimizer: torch.optim.Optimizer, acc: torch.Tensor, local_lr: float = 0.0) -> None:
        groups = [dict(g) for g in task_optimizer.param_groups]
        super().__init__(groups, {})
        self.params = _unique(p for g in self.param_groups for p in g["params"])
        self.acc = acc  # a view of this optimizer's segment
        self.local_lr = local_lr
        self.steps = 0

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = closure() if closure is not None else None
        at = 0
        for p in self.params:
            n = p.numel()
            if p.grad is not None:
                self.acc[at : at + n] += p.grad.reshape(-1).to("cpu", self.acc.dtype)
                if self.local_lr:
                    p.add_(p.grad, alpha=-self.local_lr)
            at += n
        self.steps += 1
        return loss
