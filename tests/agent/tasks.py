"""Tasks for the agent tests: a small regression MLP on synthetic data.

Knobs (environment, inherited by every rank): ``HPCOPT_TEST_STEP_SLEEP`` seconds slept
per training step, to make epochs long enough to interrupt.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from hpcopt_agent import Task


class Regression(Task):
    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(240, 8, generator=g)
        w = torch.randn(8, 1, generator=g)
        self.y = self.x @ w + 0.1 * torch.randn(240, 1, generator=g)
        self.sleep = float(os.environ.get("HPCOPT_TEST_STEP_SLEEP", "0"))

    def dataset(self) -> TensorDataset:
        return TensorDataset(self.x, self.y)

    def build(self, params: dict[str, Any]) -> nn.Module:
        return nn.Sequential(
            nn.Linear(8, int(params.get("width", 16))), nn.Tanh(), nn.Linear(int(params.get("width", 16)), 1)
        )

    def optimizer(self, params: dict[str, Any], model: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=float(params["lr"]))

    def loss(self, output: torch.Tensor, batch: Any) -> torch.Tensor:
        return F.mse_loss(output, batch[1])

    def train_step(self, models: Any, optimizers: Any, batch: Any, params: dict[str, Any]) -> float:
        if self.sleep:
            time.sleep(self.sleep)
        return super().train_step(models, optimizers, batch, params)

    def evaluate(self, model: Any, batches: Iterable[Any], params: dict[str, Any]) -> dict[str, float]:
        total, n = 0.0, 0
        for x, y in batches:
            total += float(F.mse_loss(model(x), y, reduction="sum"))
            n += len(y)
        return {"loss": total / n, "rmse": (total / n) ** 0.5}


class Exploding(Regression):
    """Raises while building the model when ``lr`` is above 0.1."""

    def build(self, params: dict[str, Any]) -> nn.Module:
        if float(params["lr"]) > 0.1:
            raise RuntimeError(f"boom: lr {params['lr']:.3g} is too large for this model")
        return super().build(params)
