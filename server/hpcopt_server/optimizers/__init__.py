"""Optimizers: pure numerics over domain objects. ``REGISTRY`` maps algorithm names
(the spec's ``algorithm.name``) to factories."""

from __future__ import annotations

from hpcopt_server.optimizers.base import Optimizer, OptimizerFactory
from hpcopt_server.optimizers.random import RandomSearch
from hpcopt_server.optimizers.space import SearchSpace

REGISTRY: dict[str, OptimizerFactory] = {"random": RandomSearch}

__all__ = ["REGISTRY", "Optimizer", "OptimizerFactory", "RandomSearch", "SearchSpace"]
