"""The exchange rules of the parameter-server schemes, as small objects with their own
state (the way DDP's communication hooks are written): what a worker pushes and what it
becomes after the reply, what a serving rank does with its children's pushes, and what
a sub-master passes up. The transport and the roles are in :mod:`.protocol`,
:mod:`.worker` and :mod:`.serving`.

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
- **gem**: :mod:`.gem`.
"""

from __future__ import annotations

from typing import Any

import torch

from hpcopt_agent.schemes.base import Optimizers
from hpcopt_agent.schemes.flat import Flat
from hpcopt_agent.schemes.ps.context import Context


class Rule:
    """One exchange rule on one rank of a parameter-server fold group (``ps``)."""

    #: The worker pulls the central weights before computing its push (GEM).
    pulls_first = False
    #: Pushes are in the gradient layout (else the weights layout).
    grad_payload = True

    def __init__(self, ps: Context) -> None:
        self.ps = ps
        self.up_acc: torch.Tensor | None = None  # a sub-master's next push up

    @property
    def collects(self) -> bool:
        """Workers step through Collect proxies (their gradients are pushed)."""
        return True

    @property
    def flat(self) -> Flat:
        assert self.ps.flat is not None
        return self.ps.flat

    def optimizers(self, optimizers: Optimizers) -> Optimizers:
        """The optimizers this rank steps with (before the scheme wraps them)."""
        return optimizers

    def bind(self) -> None:
        """After the scheme wrapped the models (its flat view exists)."""

    def begin_epoch(self) -> None:
        """At the epoch's start, after the weights to train on are back."""

    def payload(self, pulled: torch.Tensor | None) -> torch.Tensor:
        """A worker's push."""
        raise NotImplementedError

    def adopt(self, reply: torch.Tensor) -> None:
        """A worker's weights after the reply to its push."""
        raise NotImplementedError

    def apply(self, payloads: list[torch.Tensor]) -> torch.Tensor:
        """A serving rank applies children's pushes to its copy; returns the reply."""
        raise NotImplementedError

    def up_payload(self) -> torch.Tensor:
        """A sub-master's push to the master (what it served since the last one)."""
        raise NotImplementedError

    def up_adopt(self, reply: torch.Tensor) -> None:
        """A sub-master's copy after the master's reply."""
        raise NotImplementedError

    def on_consensus(self, central: torch.Tensor) -> None:
        """After the central weights arrived (GEM resets its view of them)."""

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        pass


class GradientPush(Rule):
    """Workers push mean gradients (downpour) or steps (GEM), in the gradient layout."""

    def __init__(self, ps: Context) -> None:
        super().__init__(ps)
        self.up_n = 0

    def mean_gradient(self) -> torch.Tensor:
        """The accumulated gradient, each optimizer's segment over its step count; resets."""
        acc, proxies = self.ps.acc, self.ps.proxies
        assert acc is not None
        out = acc.clone()
        for name, _, part in self.flat.segments:
            out[part] /= max(proxies[name].steps, 1)
            proxies[name].steps = 0
        acc.zero_()
        return out

    def adopt(self, reply: torch.Tensor) -> None:
        self.flat.set(reply)

    def up_adopt(self, reply: torch.Tensor) -> None:
        self.flat.set(reply)

    def collect_up(self, update: torch.Tensor, mean: bool) -> None:
        """On a sub-master: what it pushes up next, the mean of the updates it served
        (downpour's gradients) or their sum (GEM's steps)."""
        if self.ps.parent is None:
            return
        self.up_acc = update.clone() if self.up_acc is None else self.up_acc + update
        self.up_n = self.up_n + 1 if mean else 1

    def up_payload(self) -> torch.Tensor:
        assert self.up_acc is not None
        out = self.up_acc / max(self.up_n, 1)
        self.up_acc, self.up_n = None, 0
        return out

    def state(self) -> dict[str, Any]:
        return {"up_n": self.up_n}

    def load_state(self, state: dict[str, Any]) -> None:
        self.up_n = state.get("up_n", 0)


class DownpourRule(GradientPush):
    def payload(self, pulled: torch.Tensor | None) -> torch.Tensor:
        return self.mean_gradient()

    def apply(self, payloads: list[torch.Tensor]) -> torch.Tensor:
        flat = self.flat
        g = payloads[0] if len(payloads) == 1 else torch.stack(payloads).mean(0)
        for name, params, part in flat.segments:
            seg, at = g[part], 0
            for p in params:
                p.grad = seg[at : at + p.numel()].view_as(p).to(p.device, copy=True)
                at += p.numel()
            self.ps.optimizers[name].step()
        for p in flat.params:
            p.grad = None
        self.collect_up(g, mean=True)
        return flat.get()


class EasgdRule(Rule):
    grad_payload = False  # workers push their weights

    @property
    def collects(self) -> bool:
        return False  # workers keep the task's optimizer

    def optimizers(self, optimizers: Optimizers) -> Optimizers:
        """With ``easgd.momentum`` (EAMSGD), workers step with Nesterov-momentum SGD at
        the task optimizer's learning rates instead of the task's optimizer; its
        momentum buffers are the worker's optimizer state in checkpoints."""
        delta = self.ps.knobs.get("momentum")
        if delta is None or not self.ps.is_worker:
            return optimizers
        return {
            name: torch.optim.SGD(
                [{"params": g["params"], "lr": g.get("lr", 0.01)} for g in opt.param_groups],
                momentum=float(delta),
                nesterov=True,
            )
            for name, opt in optimizers.items()
        }

    def alpha(self, node: int) -> float:
        """The moving rate at a serving rank: alpha, else beta over its children."""
        knobs = self.ps.knobs
        a = knobs.get("alpha")
        return float(a) if a is not None else float(knobs.get("beta", 0.9)) / len(self.ps.layout.children(node))

    def payload(self, pulled: torch.Tensor | None) -> torch.Tensor:
        return self.flat.get()

    def adopt(self, reply: torch.Tensor) -> None:
        assert self.ps.parent is not None
        x = self.flat.get()
        self.flat.set(x - self.alpha(self.ps.parent) * (x - reply))

    def apply(self, payloads: list[torch.Tensor]) -> torch.Tensor:
        centre = self.flat.get()
        self.flat.set(centre + self.alpha(self.ps.rank) * (payloads[0] - centre))
        return centre  # the centre before the move: both sides use pre-exchange values

    def up_payload(self) -> torch.Tensor:
        return self.flat.get()

    def up_adopt(self, reply: torch.Tensor) -> None:
        self.adopt(reply)
