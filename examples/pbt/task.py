"""The schedule task of the PBT example and benchmark: a fixed MLP on scikit-learn's digits trained
with SGD, where learning rate, momentum and dropout are the hyper-parameters and one
setting held for every epoch is not the best schedule (a high rate early, a lower one
late). The model's shape does not depend on them, so PBT may perturb all three."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from examples.digits.task import DigitsTask


class ScheduleDigits(DigitsTask):
    def build(self, params: dict[str, Any]) -> nn.Module:
        p = float(params["dropout"])
        return nn.Sequential(
            nn.Linear(64, 128),
            nn.ReLU(),
            nn.Dropout(p),
            nn.Linear(128, 128),
            nn.ReLU(),
            nn.Dropout(p),
            nn.Linear(128, 10),
        )

    def optimizer(self, params: dict[str, Any], model: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=float(params["lr"]), momentum=float(params["momentum"]))

    def batch_size(self, params: dict[str, Any]) -> int:
        return 32
