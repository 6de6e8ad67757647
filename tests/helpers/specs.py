"""Campaign specs the tests submit."""

from __future__ import annotations

from typing import Any


def make_spec(**overrides: Any) -> dict[str, Any]:
    """A small valid campaign spec; keyword arguments replace top-level fields."""
    spec: dict[str, Any] = {
        "name": "test-campaign",
        "objective": {"metric": "loss", "direction": "minimize"},
        "space": {
            "lr": {"type": "real", "low": 1e-4, "high": 1.0, "scale": "log"},
            "width": {"type": "int", "low": 8, "high": 64},
            "act": {"type": "categorical", "choices": ["relu", "tanh"]},
        },
        "algorithm": {"name": "random", "seed": 1},
        "budget": {"max_trials": 10, "max_parallel": 4},
        "folds": 3,
        "training": {"task": "tests:task", "epochs": 2},
        "max_attempts": 2,
    }
    spec.update(overrides)
    return spec
