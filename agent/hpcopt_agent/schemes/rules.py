"""The exchange rules of the parameter-server schemes (the transport, roles and
bookkeeping are in :mod:`.ps`).

- **downpour** (Dean et al. 2012): workers push their mean gradient every
  ``sync_every`` batches; the master applies it with the task's optimizer (one master
  optimizer per model) and replies with the new weights, which the worker adopts.
  ``synchronous: true``: the master waits for ``sync_fraction`` of the workers still
  training (all of them up to 19 workers at NNLO's 0.95) and applies their mean; late
  pushes join the next round.
- **easgd** (Zhang, Choromanska & LeCun 2015): workers step with the task's optimizer
  (EAMSGD with ``easgd.momentum``: Nesterov-momentum SGD at the task's lr);
  every ``tau`` steps, with the master's centre c and alpha = beta / workers,
  worker x <- x - alpha (x - c) and centre c <- c + alpha (x - c), both from the values
  before the exchange.
- **gem** (Hermans & Louppe 2018): a worker's step u, its proxy momentum
  m <- mu m + u; it pulls the centre, measures how far the others moved it since it last
  looked (d), and pushes pi * u with pi = clip((kappa |m| - |d|) / |u|, 0, 5) element-wise,
  so the workers together move the centre with about the energy of one momentum SGD.
  u is what the task's optimizer moved the worker's weights since its last exchange
  (so an Adam-tuned ``lr`` works as it does under the other schemes; the proxy's
  momentum defaults to 0 and kappa to 1 there, since the optimizer has its own
  momentum); with ``gem.lr`` set, the paper's plain SGD step u = -lr g of the mean
  gradient, with momentum 0.9 and kappa 2 by default.
"""

from __future__ import annotations

from typing import Any

import torch

from hpcopt.schemes import TRAITS
from hpcopt_agent.schemes.base import Models, Optimizers, Stop
from hpcopt_agent.schemes.ps import ParameterServer

EPS = 1e-12
PI_MAX = 5.0


class _GradientPush(ParameterServer):
    """Workers push mean gradients (downpour) or steps (GEM), in the gradient layout."""

    up_n = 0
    grad_payload = True

    def mean_gradient(self) -> torch.Tensor:
        """The accumulated gradient, each optimizer's segment over its step count; resets."""
        assert self.acc is not None and self.flat is not None
        out = self.acc.clone()
        for name, _, part in self.flat.segments:
            out[part] /= max(self.proxies[name].steps, 1)
            self.proxies[name].steps = 0
        self.acc.zero_()
        return out

    def adopt(self, reply: torch.Tensor) -> None:
        assert self.flat is not None
        self.flat.set(reply)

    def up_adopt(self, reply: torch.Tensor) -> None:
        assert self.flat is not None
        self.flat.set(reply)

    def _collect_up(self, update: torch.Tensor, mean: bool) -> None:
        """On a sub-master: what it pushes up next, the mean of the updates it served
        (downpour's gradients) or their sum (GEM's steps)."""
        if self.parent is None:
            return
        self.up_acc = update.clone() if self.up_acc is None else self.up_acc + update
        self.up_n = self.up_n + 1 if mean else 1

    def up_payload(self) -> torch.Tensor:
        assert self.up_acc is not None
        out = self.up_acc / max(self.up_n, 1)
        self.up_acc, self.up_n = None, 0
        return out

    def rule_state(self) -> dict[str, Any]:
        return {"up_n": self.up_n}

    def load_rule_state(self, state: dict[str, Any]) -> None:
        self.up_n = state.get("up_n", 0)


class Downpour(_GradientPush):
    name = "downpour"
    traits = TRAITS[name]

    def payload(self, pulled: torch.Tensor | None) -> torch.Tensor:
        return self.mean_gradient()

    def apply(self, payloads: list[torch.Tensor]) -> torch.Tensor:
        assert self.flat is not None
        g = payloads[0] if len(payloads) == 1 else torch.stack(payloads).mean(0)
        for name, params, part in self.flat.segments:
            seg, at = g[part], 0
            for p in params:
                p.grad = seg[at : at + p.numel()].view_as(p).to(p.device, copy=True)
                at += p.numel()
            self.optimizers[name].step()
        for p in self.flat.params:
            p.grad = None
        self._collect_up(g, mean=True)
        return self.flat.get()


class EASGD(ParameterServer):
    name = "easgd"
    traits = TRAITS[name]
    collects = False  # workers keep the task's optimizer
    grad_payload = False  # and push their weights

    def wrap(self, models: Models, optimizers: Optimizers) -> tuple[Models, Optimizers]:
        """With ``easgd.momentum`` (EAMSGD), workers step with Nesterov-momentum SGD at
        the task optimizer's learning rates instead of the task's optimizer; its
        momentum buffers are the worker's optimizer state in checkpoints."""
        delta = self.knobs.get("momentum")
        if delta is not None and self.is_worker:
            optimizers = {
                name: torch.optim.SGD(
                    [{"params": g["params"], "lr": g.get("lr", 0.01)} for g in opt.param_groups],
                    momentum=float(delta),
                    nesterov=True,
                )
                for name, opt in optimizers.items()
            }
        return super().wrap(models, optimizers)

    def payload(self, pulled: torch.Tensor | None) -> torch.Tensor:
        assert self.flat is not None
        return self.flat.get()

    def adopt(self, reply: torch.Tensor) -> None:
        assert self.flat is not None and self.parent is not None
        x = self.flat.get()
        self.flat.set(x - self.alpha(self.parent) * (x - reply))

    def apply(self, payloads: list[torch.Tensor]) -> torch.Tensor:
        assert self.flat is not None
        centre = self.flat.get()
        self.flat.set(centre + self.alpha(self.rank) * (payloads[0] - centre))
        return centre  # the centre before the move: both sides use pre-exchange values

    def up_payload(self) -> torch.Tensor:
        assert self.flat is not None
        return self.flat.get()

    def up_adopt(self, reply: torch.Tensor) -> None:
        self.adopt(reply)


class GEM(_GradientPush):
    name = "gem"
    traits = TRAITS[name]
    pulls_first = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # gem.lr set: the paper's SGD step on collected gradients; else the task's optimizer steps.
        self.collects = self.knobs.get("lr") is not None

    def wrap(self, models: Models, optimizers: Optimizers) -> tuple[Models, Optimizers]:
        out = super().wrap(models, optimizers)
        assert self.flat is not None
        self.m: torch.Tensor | None = None
        self.prev: torch.Tensor | None = None  # the centre when this worker last saw it
        self.base: torch.Tensor | None = None  # this worker's weights after its last exchange
        lr = self.knobs.get("lr")
        self.eta = torch.full((self.flat.grad_numel,), float(lr or 0.0), dtype=self.flat.dtype)
        # A weight that two optimizers step sits twice in the gradient layout: each copy
        # carries half of its move, so the centre moves it once.
        owners = torch.bincount(self.flat.index, minlength=self.flat.numel).clamp(min=1)
        self.share = (1.0 / owners.to(self.flat.dtype))[self.flat.index]
        return out

    def step_taken(self) -> torch.Tensor:
        """u: the worker's step since its last exchange, in the gradient layout."""
        assert self.flat is not None and self.base is not None
        if self.collects:
            return -self.eta * self.mean_gradient()
        return (self.flat.get() - self.base)[self.flat.index] * self.share

    def begin_epoch(self, epoch: int, start: int, n_batches: int, stop: Stop) -> None:
        super().begin_epoch(epoch, start, n_batches, stop)
        if self.is_worker:
            assert self.flat is not None
            self.base = self.flat.get()  # the weights it goes on training (restored after evaluation)
            if self.prev is None:
                self.prev = self.base  # the first epoch starts from the common initial weights

    def payload(self, pulled: torch.Tensor | None) -> torch.Tensor:
        assert pulled is not None and self.prev is not None and self.flat is not None
        u = self.step_taken()
        sgd = self.collects  # the paper's SGD step: its momentum proxy and kappa 2
        mu = self.knobs["momentum"] if self.knobs["momentum"] is not None else (0.9 if sgd else 0.0)
        kappa = self.knobs["kappa"] if self.knobs["kappa"] is not None else (2.0 if sgd else 1.0)
        self.m = u.clone() if self.m is None else mu * self.m + u
        moved = (pulled - self.prev)[self.flat.index]
        pi = ((kappa * self.m.abs() - moved.abs()) / (u.abs() + EPS)).clamp(0.0, PI_MAX)
        return pi * u

    def adopt(self, reply: torch.Tensor) -> None:
        super().adopt(reply)
        self.prev = self.base = reply

    def apply(self, payloads: list[torch.Tensor]) -> torch.Tensor:
        assert self.flat is not None
        centre = self.flat.get()
        for d in payloads:
            centre.index_add_(0, self.flat.index, d)
            self._collect_up(d, mean=False)
        self.flat.set(centre)
        return centre

    def on_consensus(self, central: torch.Tensor) -> None:
        self.prev = central.clone()

    def rule_state(self) -> dict[str, Any]:
        return {**super().rule_state(), "m": self.m, "prev": self.prev}

    def load_rule_state(self, state: dict[str, Any]) -> None:
        super().load_rule_state(state)
        self.m, self.prev = state.get("m"), state.get("prev")
