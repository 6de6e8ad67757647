"""Batches of samples by index, on the training device. A ``TensorDataset`` is indexed
as whole tensors (one gather per batch); any other dataset item by item, collated the
way a DataLoader would."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset
from torch.utils.data._utils.collate import default_collate


def to_device(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, tuple | list):
        return type(obj)(to_device(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


class Data:
    def __init__(self, dataset: Dataset[Any], device: torch.device) -> None:
        self.dataset = dataset
        self.device = device
        self.tensors = dataset.tensors if isinstance(dataset, TensorDataset) else None
        try:
            self.size = len(dataset)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError("Task.dataset() must return a dataset with a length (a map-style Dataset)") from None

    def __len__(self) -> int:
        return self.size

    def batch(self, indices: np.ndarray) -> Any:
        if self.tensors is not None:
            idx = torch.from_numpy(np.ascontiguousarray(indices, dtype=np.int64))
            return tuple(to_device(t[idx], self.device) for t in self.tensors)
        items = [self.dataset[int(i)] for i in indices]
        return to_device(default_collate(items), self.device)  # type: ignore[no-untyped-call]

    def batches(self, indices: np.ndarray, size: int) -> list[np.ndarray]:
        return [indices[i : i + size] for i in range(0, len(indices), size)]
