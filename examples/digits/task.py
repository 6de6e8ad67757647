"""An MLP on scikit-learn's bundled digits (1,797 8x8 images, 10 classes; no download).

The campaign (``campaign.yaml`` beside this file) searches learning rate, width, depth,
dropout, weight decay, batch size and activation with 5-fold cross-validation.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

from hpcopt_agent import Task

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU, "silu": nn.SiLU}


class DigitsTask(Task):
    def __init__(self) -> None:
        x, y = load_digits(return_X_y=True)
        self.x = torch.tensor(x / 16.0, dtype=torch.float32)
        self.y = torch.tensor(y, dtype=torch.long)

    def dataset(self) -> TensorDataset:
        return TensorDataset(self.x, self.y)

    def labels(self) -> list[int]:
        return self.y.tolist()

    def build(self, params: dict[str, Any]) -> nn.Module:
        width, depth = int(params["width"]), int(params["depth"])
        act = ACTIVATIONS[str(params["activation"])]
        layers: list[nn.Module] = []
        size = 64
        for _ in range(depth):
            layers += [nn.Linear(size, width), act(), nn.Dropout(float(params["dropout"]))]
            size = width
        layers.append(nn.Linear(size, 10))
        return nn.Sequential(*layers)

    def optimizer(self, params: dict[str, Any], model: Any) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=float(params["lr"]), weight_decay=float(params["weight_decay"]))

    def loss(self, output: torch.Tensor, batch: Any) -> torch.Tensor:
        return F.cross_entropy(output, batch[1])

    def evaluate(self, model: Any, batches: Iterable[Any], params: dict[str, Any]) -> dict[str, float]:
        loss, correct, n = 0.0, 0, 0
        for x, y in batches:
            out = model(x)
            loss += float(F.cross_entropy(out, y, reduction="sum"))
            correct += int((out.argmax(1) == y).sum())
            n += len(y)
        return {"val_loss": loss / n, "val_accuracy": correct / n}
