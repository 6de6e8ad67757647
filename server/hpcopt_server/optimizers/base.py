"""The optimizer interface every algorithm implements.

Life cycle, per campaign, inside the server's optimizer cache
(``service/suggestions.py``):

1. ``factory(space, direction, seed, options)`` builds the optimizer when a campaign
   first needs a suggestion (or after a server restart).
2. ``observe(trials)`` feeds finished trials the optimizer has not seen yet, in the order
   they finished. It is called with every new batch, possibly empty; a stateful
   optimizer (GP, EA) updates its state incrementally here.
3. ``suggest(n, pending)`` returns ``n`` parameter sets. ``pending`` holds the
   parameters of trials that are queued or running, so concurrent suggestions can be
   kept apart. The optimizer must not assume it sees every suggestion it made come back:
   trials can be cancelled, and another server replica may have made suggestions.

Both are called with the campaign's row lock held, so one optimizer instance is never
used by two threads at once. Example::

    opt = RandomSearch(space, "minimize", seed=0, options={})
    opt.observe(finished_trials)
    [params] = opt.suggest(1, pending=[t.params for t in running])
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from hpcopt_server import domain as d
from hpcopt_server.optimizers.space import SearchSpace


class Optimizer(ABC):
    def __init__(self, space: SearchSpace, direction: str, seed: int, options: dict[str, Any]):
        self.space = space
        self.direction = direction
        self.seed = seed
        self.options = options

    @abstractmethod
    def observe(self, trials: Sequence[d.Trial]) -> None:
        """Takes finished trials (any finished state; ``value`` set for COMPLETED)."""

    @abstractmethod
    def suggest(self, n: int, pending: Sequence[d.Params]) -> list[d.Params]:
        """Returns ``n`` parameter sets, valid in the search space."""


OptimizerFactory = Callable[[SearchSpace, str, int, dict[str, Any]], Optimizer]
