"""The model and data both sides of the training benchmark use: an MLP on a seeded
synthetic classification set, big enough that a step is real work on a CPU."""

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

# HPCOPT_BENCH_SAMPLES shrinks the data for the smoke test (run.py --small).
SAMPLES = int(os.environ.get("HPCOPT_BENCH_SAMPLES", "32768"))
# Slowed ranks (schemes.py, slow_link.py): HPCOPT_BENCH_SLOW_S seconds per step on the world
# ranks listed in HPCOPT_BENCH_SLOW_RANK (comma-separated: a slowed node is all its ranks).
SLOW_S = float(os.environ.get("HPCOPT_BENCH_SLOW_S", "0"))
SLOW_RANKS = {int(r) for r in os.environ.get("HPCOPT_BENCH_SLOW_RANK", "").split(",") if r.strip()}
FEATURES, CLASSES, WIDTH = 128, 10, 1024
BATCH = 256  # global per fold; split over the fold's ranks
LR = 0.05


def make_data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, CLASSES, generator=g)
    y = (x @ w + 0.5 * torch.randn(SAMPLES, CLASSES, generator=g)).argmax(1)
    return TensorDataset(x, y)


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(FEATURES, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, CLASSES)
    )


def evaluate(model: nn.Module, batches: Iterable[Any]) -> dict[str, float]:
    loss, correct, n = 0.0, 0, 0
    for x, y in batches:
        out = model(x)
        loss += float(F.cross_entropy(out, y, reduction="sum"))
        correct += int((out.argmax(1) == y).sum())
        n += len(y)
    return {"val_loss": loss / n, "val_accuracy": correct / n}


class Synthetic(Task):
    def __init__(self) -> None:
        self.data = make_data()
        self.rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))

    def dataset(self) -> TensorDataset:
        return self.data

    def build(self, params: dict[str, Any]) -> nn.Module:
        return make_model()

    def optimizer(self, params: dict[str, Any], model: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)

    def loss(self, output: torch.Tensor, batch: Any) -> torch.Tensor:
        return F.cross_entropy(output, batch[1])

    def batch_size(self, params: dict[str, Any]) -> int:
        return BATCH

    def train_step(self, models: Any, optimizers: Any, batch: Any, params: dict[str, Any]) -> float:
        if SLOW_S and self.rank in SLOW_RANKS:
            time.sleep(SLOW_S)
        return super().train_step(models, optimizers, batch, params)

    def evaluate(self, model: Any, batches: Iterable[Any], params: dict[str, Any]) -> dict[str, float]:
        return evaluate(model, batches)
