"""What the parts of a parameter server see of the scheme that holds them: the rules,
the worker and the serving loop take a :class:`Context` (the scheme) and an
:class:`Exchange` (its rule), so they import nothing of :mod:`.scheme`."""

from __future__ import annotations

from typing import Any, Protocol

import torch
from mpi4py import MPI

from hpcopt.core.schemes import PsLayout
from hpcopt_agent.schemes.base import Optimizers, Stop
from hpcopt_agent.schemes.flat import Collect, Flat


class Exchange(Protocol):
    """A rule, as the worker and the serving loop call it."""

    @property
    def pulls_first(self) -> bool: ...

    @property
    def grad_payload(self) -> bool: ...

    def payload(self, pulled: torch.Tensor | None) -> torch.Tensor: ...

    def adopt(self, reply: torch.Tensor) -> None: ...

    def apply(self, payloads: list[torch.Tensor]) -> torch.Tensor: ...

    def up_payload(self) -> torch.Tensor: ...

    def up_adopt(self, reply: torch.Tensor) -> None: ...


class Context(Protocol):
    """One rank's parameter-server scheme."""

    @property
    def fold(self) -> MPI.Comm: ...

    @property
    def rank(self) -> int: ...

    @property
    def timeout(self) -> float: ...

    @property
    def knobs(self) -> dict[str, Any]: ...

    @property
    def layout(self) -> PsLayout: ...

    @property
    def parent(self) -> int | None: ...

    @property
    def every(self) -> int:
        """Batches per block (``sync_every`` or ``tau``)."""
        ...

    @property
    def is_worker(self) -> bool: ...

    @property
    def team(self) -> MPI.Comm | None: ...

    @property
    def signal(self) -> Stop | None: ...

    @property
    def flat(self) -> Flat | None: ...

    @property
    def acc(self) -> torch.Tensor | None: ...

    @property
    def proxies(self) -> dict[str, Collect]: ...

    @property
    def optimizers(self) -> Optimizers: ...

    @property
    def rule(self) -> Exchange: ...

    def forget(self) -> None: ...
