"""GEM (Hermans & Louppe 2018), a parameter-server rule: a worker's step u, its proxy
momentum m <- mu m + u; it pulls the centre, measures how far the others moved it since it last
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

from hpcopt_agent.schemes.ps.context import Context
from hpcopt_agent.schemes.ps.rules import GradientPush

EPS = 1e-12
PI_MAX = 5.0


class GemRule(GradientPush):
    pulls_first = True

    def __init__(self, ps: Context) -> None:
        super().__init__(ps)
        self.m: torch.Tensor | None = None
        self.prev: torch.Tensor | None = None  # the centre when this worker last saw it
        self.base: torch.Tensor | None = None  # this worker's weights after its last exchange
        self.eta = torch.zeros(0)
        self.share = torch.zeros(0)

    @property
    def collects(self) -> bool:
        # gem.lr set: the paper's SGD step on collected gradients; else the task's optimizer steps.
        return self.ps.knobs.get("lr") is not None

    def bind(self) -> None:
        flat = self.flat
        self.m, self.prev, self.base = None, None, None
        self.eta = torch.full((flat.grad_numel,), float(self.ps.knobs.get("lr") or 0.0), dtype=flat.dtype)
        # A weight that two optimizers step sits twice in the gradient layout: each copy
        # carries half of its move, so the centre moves it once.
        owners = torch.bincount(flat.index, minlength=flat.numel).clamp(min=1)
        self.share = (1.0 / owners.to(flat.dtype))[flat.index]

    def step_taken(self) -> torch.Tensor:
        """u: the worker's step since its last exchange, in the gradient layout."""
        assert self.base is not None
        if self.collects:
            return -self.eta * self.mean_gradient()
        return (self.flat.get() - self.base)[self.flat.index] * self.share

    def begin_epoch(self) -> None:
        if self.ps.is_worker:
            self.base = self.flat.get()  # the weights it goes on training (restored after evaluation)
            if self.prev is None:
                self.prev = self.base  # the first epoch starts from the common initial weights

    def payload(self, pulled: torch.Tensor | None) -> torch.Tensor:
        assert pulled is not None and self.prev is not None
        u = self.step_taken()
        knobs, sgd = self.ps.knobs, self.collects  # the paper's SGD step: its momentum proxy and kappa 2
        mu = knobs["momentum"] if knobs["momentum"] is not None else (0.9 if sgd else 0.0)
        kappa = knobs["kappa"] if knobs["kappa"] is not None else (2.0 if sgd else 1.0)
        self.m = u.clone() if self.m is None else mu * self.m + u
        moved = (pulled - self.prev)[self.flat.index]
        pi = ((kappa * self.m.abs() - moved.abs()) / (u.abs() + EPS)).clamp(0.0, PI_MAX)
        return pi * u

    def adopt(self, reply: torch.Tensor) -> None:
        super().adopt(reply)
        self.prev = self.base = reply

    def apply(self, payloads: list[torch.Tensor]) -> torch.Tensor:
        centre = self.flat.get()
        for d in payloads:
            centre.index_add_(0, self.flat.index, d)
            self.collect_up(d, mean=False)
        self.flat.set(centre)
        return centre

    def on_consensus(self, central: torch.Tensor) -> None:
        self.prev = central.clone()

    def state(self) -> dict[str, Any]:
        return {**super().state(), "m": self.m, "prev": self.prev}

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.m, self.prev = state.get("m"), state.get("prev")
