"""Optimizers: pure numerics over domain objects. ``REGISTRY`` maps algorithm names
(the spec's ``algorithm.name``) to factories."""

from __future__ import annotations

from hpcopt_server.optimizers.base import Optimizer, OptimizerFactory, Problem
from hpcopt_server.optimizers.bo import BayesianOptimization
from hpcopt_server.optimizers.ea import Evolutionary
from hpcopt_server.optimizers.mf import MultiFidelity
from hpcopt_server.optimizers.pbt import PopulationBasedTraining
from hpcopt_server.optimizers.random import RandomSearch
from hpcopt_server.optimizers.sequences import GridSearch, SobolSearch
from hpcopt_server.optimizers.skopt_adapter import SkoptOptimizer
from hpcopt_server.optimizers.space import SearchSpace

REGISTRY: dict[str, OptimizerFactory] = {
    "random": RandomSearch,
    "sobol": SobolSearch,
    "grid": GridSearch,
    "bo": BayesianOptimization,
    "ea": Evolutionary,
    "skopt": SkoptOptimizer,
    "pbt": PopulationBasedTraining,
    "mf": MultiFidelity,
}

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
