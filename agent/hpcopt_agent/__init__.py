"""hpcopt MPI agent: pulls trials from an hpcopt server and trains them with K-fold
cross-validation over the ranks of an allocation. Users write a :class:`Task`."""

__version__ = "0.1.0"

from hpcopt_agent.task import Task

__all__ = ["Task", "__version__"]
