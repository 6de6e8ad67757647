"""hpcopt MPI agent: pulls trials from an hpcopt server and trains them with K-fold
cross-validation over the ranks of an allocation. Users write a :class:`Task`, or
bring a training script that reads :mod:`hpcopt_agent.trial`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from hpcopt_agent.task import Task


def __getattr__(name: str) -> Any:
    # Task loads torch: a training script that imports hpcopt_agent.trial does not pay for it here.
    if name == "Task":
        from hpcopt_agent.task import Task

        return Task
    raise AttributeError(f"module 'hpcopt_agent' has no attribute {name!r}")


__all__ = ["Task", "__version__"]
