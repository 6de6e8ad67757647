"""Optimizers: pure numerics over domain objects. ``REGISTRY`` maps algorithm names
(the spec's ``algorithm.name``) to factories, each imported when first asked for: a
campaign of ``random`` never loads SciPy's optimisers or the GP (the embedded mode's
start-up; ``benchmarks/embedded_start.py``)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

from hpcopt_server.optimizers.base import Optimizer, OptimizerFactory, Problem
from hpcopt_server.optimizers.space import SearchSpace

if TYPE_CHECKING:
    from hpcopt_server.optimizers.bo import BayesianOptimization
    from hpcopt_server.optimizers.ea import Evolutionary
    from hpcopt_server.optimizers.mf import MultiFidelity
    from hpcopt_server.optimizers.pbt import PopulationBasedTraining
    from hpcopt_server.optimizers.random import RandomSearch
    from hpcopt_server.optimizers.sequences import GridSearch, SobolSearch
    from hpcopt_server.optimizers.skopt_adapter import SkoptOptimizer

#: Where each algorithm's factory lives (module, name).
_WHERE: dict[str, tuple[str, str]] = {
    "random": ("random", "RandomSearch"),
    "sobol": ("sequences", "SobolSearch"),
    "grid": ("sequences", "GridSearch"),
    "bo": ("bo", "BayesianOptimization"),
    "ea": ("ea", "Evolutionary"),
    "skopt": ("skopt_adapter", "SkoptOptimizer"),
    "pbt": ("pbt", "PopulationBasedTraining"),
    "mf": ("mf", "MultiFidelity"),
}
_NAMES = {name: where for where in _WHERE.values() for name in [where[1]]}


def _load(module: str, name: str) -> Any:
    return getattr(importlib.import_module(f"hpcopt_server.optimizers.{module}"), name)


class _Registry(MutableMapping[str, OptimizerFactory]):
    """The algorithms by name; a factory's module is imported on first use. A factory
    set in its place (a test's instrumented one) wins until it is deleted."""

    def __init__(self) -> None:
        self._set: dict[str, OptimizerFactory] = {}

    def __getitem__(self, key: str) -> OptimizerFactory:
        if key in self._set:
            return self._set[key]
        if key not in _WHERE:
            raise KeyError(key)
        factory: OptimizerFactory = _load(*_WHERE[key])
        return factory

    def __setitem__(self, key: str, factory: OptimizerFactory) -> None:
        self._set[key] = factory

    def __delitem__(self, key: str) -> None:
        if key not in self._set and key not in _WHERE:
            raise KeyError(key)
        self._set.pop(key, None)

    def __iter__(self) -> Iterator[str]:
        return iter({**dict.fromkeys(_WHERE), **self._set})

    def __len__(self) -> int:
        return len({**dict.fromkeys(_WHERE), **self._set})


REGISTRY: MutableMapping[str, OptimizerFactory] = _Registry()


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return _load(*_NAMES[name])
    raise AttributeError(f"module 'hpcopt_server.optimizers' has no attribute {name!r}")


__all__ = [
    "REGISTRY",
    "BayesianOptimization",
    "Evolutionary",
    "GridSearch",
    "MultiFidelity",
    "Optimizer",
    "OptimizerFactory",
    "PopulationBasedTraining",
    "Problem",
    "RandomSearch",
    "SearchSpace",
    "SkoptOptimizer",
    "SobolSearch",
]
