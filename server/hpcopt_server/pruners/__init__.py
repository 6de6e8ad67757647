"""Pruners: early stopping decided by the server (``pruner: {name, options}`` in the
campaign spec). ``REGISTRY`` maps names to classes; ``make_pruner`` builds one from a
validated spec and names a bad option."""

from __future__ import annotations

from typing import Any

from hpcopt_server.pruners.base import History, NoPruner, Pruner, PrunerProblem, Verdict
from hpcopt_server.pruners.fold import FoldPruner
from hpcopt_server.pruners.steps import AshaPruner, MedianPruner

REGISTRY: dict[str, type[Pruner]] = {"none": NoPruner, "median": MedianPruner, "asha": AshaPruner, "fold": FoldPruner}


def make_pruner(spec: dict[str, Any]) -> Pruner:
    """The pruner a canonical spec names (specs stored before pruners existed: none).
    ValueError("options.x ...") for a bad option."""
    p = spec.get("pruner") or {"name": "none", "options": {}}
    epochs = int((spec.get("training") or {}).get("epochs") or 0)
    problem = PrunerProblem(
        spec["objective"]["direction"],
        int(spec["folds"]),
        dict(p.get("options") or {}),
        spec["objective"]["metric"],
        epochs,
    )
    return REGISTRY[p["name"]](problem)


__all__ = [
    "REGISTRY",
    "AshaPruner",
    "FoldPruner",
    "History",
    "MedianPruner",
    "NoPruner",
    "Pruner",
    "Verdict",
    "make_pruner",
]
