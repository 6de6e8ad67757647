"""A second task for the pruning replay: an MLP regression on scikit-learn's bundled
diabetes data (442 patients, 10 features; no download). Its validation curves differ
from digits': few samples, noisy, and wide models overfit after a few epochs, so a
curve's early values are a weaker guide to its end."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from sklearn.datasets import load_diabetes
from torch import nn
from torch.utils.data import TensorDataset

from hpcopt_agent import Task

SPACE = {
    "lr": {"type": "real", "low": 1.0e-4, "high": 3.0e-2, "scale": "log"},
    "width": {"type": "int", "low": 8, "high": 512, "scale": "log"},
    "depth": {"type": "int", "low": 1, "high": 3},
    "dropout": {"type": "real", "low": 0.0, "high": 0.5},
    "weight_decay": {"type": "real", "low": 1.0e-6, "high": 1.0e-1, "scale": "log"},
    "batch_size": {"type": "categorical", "choices": [16, 32, 64]},
}


class DiabetesTask(Task):
    def __init__(self) -> None:
        x, y = load_diabetes(return_X_y=True)
        x = (x - x.mean(0)) / x.std(0)
        y = (y - y.mean()) / y.std()
        self.x = torch.tensor(x, dtype=torch.float32)
        self.y = torch.tensor(y, dtype=torch.float32)

    def dataset(self) -> TensorDataset:
        return TensorDataset(self.x, self.y)

    def build(self, params: dict[str, Any]) -> nn.Module:
        width, depth = int(params["width"]), int(params["depth"])
        layers: list[nn.Module] = []
        size = self.x.shape[1]
        for _ in range(depth):
            layers += [nn.Linear(size, width), nn.ReLU(), nn.Dropout(float(params["dropout"]))]
            size = width
        layers.append(nn.Linear(size, 1))
        return nn.Sequential(*layers)

    def optimizer(self, params: dict[str, Any], model: Any) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=float(params["lr"]), weight_decay=float(params["weight_decay"]))

    def loss(self, output: torch.Tensor, batch: Any) -> torch.Tensor:
        return F.mse_loss(output[:, 0], batch[1])

    def evaluate(self, model: Any, batches: Iterable[Any], params: dict[str, Any]) -> dict[str, float]:
        total, n = 0.0, 0
        for x, y in batches:
            total += float(F.mse_loss(model(x)[:, 0], y, reduction="sum"))
            n += len(y)
        return {"val_mse": total / n}
