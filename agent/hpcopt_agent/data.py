"""The input pipeline of a fold: the batches one rank trains or evaluates, read through
``torch.utils.data.DataLoader`` — worker processes, prefetch, pinned memory, workers
kept for the whole fold — and moved to the training device.

The fold loop decides *which* samples make each batch (the scheme deals the epoch's
seeded order over its ranks, ``DistributedSampler``-style; a parameter server hands
out blocks of batches as workers ask); this module only reads them, in that order,
ahead of the step that uses them. A mid-epoch resume passes the batches from the
resume position on, so the consumed ones are never read again.

- A dataset with ``__getitems__`` (every ``TensorDataset``, and the file-backed
  datasets of :mod:`hpcopt_agent.datasets`) reads a whole batch in one call; it may
  return a :class:`Stacked` batch, which is passed on without collating.
- The dataset is built on first use (:class:`Data` takes the task), so a rank that
  never reads a sample — a parameter server's master or sub-master — never loads it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset
from torch.utils.data._utils.collate import default_collate

#: Samples per evaluation batch at most (a rank's training batch when larger)...
EVAL_BATCH = 256
#: ... and bytes per evaluation batch at most: the loader holds workers x prefetch
#: batches in flight, so 256 large samples (3-D showers: 16 MB a batch) would hold
#: hundreds of MB per rank, and the model would see a batch far larger than it trains on.
EVAL_BYTES = 4 << 20


def _sample_bytes(batch: Any) -> int | None:
    """Bytes per sample of a batch of tensors (None when it holds none)."""
    tensors = [t for t in (batch if isinstance(batch, (tuple, list)) else [batch]) if isinstance(t, torch.Tensor)]
    if not tensors or not len(tensors[0]):
        return None
    return max(1, sum(t.nbytes for t in tensors) // len(tensors[0]))


class Stacked(tuple):  # type: ignore[type-arg]
    """A batch a dataset's ``__getitems__`` already stacked (tensors with the batch as
    their first dimension): the loader passes it on as a tuple, without collating."""


def collate(items: Any) -> Any:
    if isinstance(items, Stacked):
        return tuple(items)
    return default_collate(items)  # type: ignore[no-untyped-call]


class TensorRows(Dataset[Any]):
    """A ``TensorDataset`` read a batch at a time (one gather per tensor)."""

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        self.tensors = tuple(tensors)

    def __len__(self) -> int:
        return len(self.tensors[0])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        return tuple(t[i] for t in self.tensors)

    def __getitems__(self, indices: Sequence[int]) -> Stacked:
        idx = torch.as_tensor(indices, dtype=torch.int64)
        return Stacked(t[idx] for t in self.tensors)


def to_device(obj: Any, device: torch.device, non_blocking: bool = False) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, tuple | list):
        return type(obj)(to_device(o, device, non_blocking) for o in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device, non_blocking) for k, v in obj.items()}
    return obj


@dataclass(frozen=True)
class LoaderOptions:
    """``training.options.loader`` (checked by :func:`hpcopt.core.training.check_options`)."""

    #: Worker processes per rank; None: 0 for a dataset in memory (a ``TensorDataset``),
    #: else the rank's share of its node's cores, at most 4.
    workers: int | None = None
    #: Batches each worker reads ahead.
    prefetch: int = 2
    #: Page-locked host batches (faster, asynchronous copies to a GPU); None: on CUDA.
    pin_memory: bool | None = None

    @classmethod
    def from_options(cls, given: dict[str, Any]) -> LoaderOptions:
        return cls(given.get("workers"), int(given.get("prefetch", 2)), given.get("pin_memory"))


class _Feed:
    """The loader's batch sampler: the batches of the current iteration, set before
    each one (a persistent loader iterates it anew every time)."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def _start_worker(_: int) -> None:
    """In each loader worker. A job's stop signals (Slurm sends SIGTERM, or the
    ``--signal`` one, to every process of the step) are for the rank, which checkpoints
    and then ends its workers itself: a worker killed by them would fail the batch in
    flight. torch seeds its own and Python's RNG in each worker from the loader's
    generator; NumPy's too, so augmentations drawn with np.random are reproducible."""
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    np.random.seed(torch.initial_seed() % 2**32)


class Data:
    """The task's dataset on one rank, built on first use, and its reader for a fold."""

    def __init__(
        self,
        source: Callable[[], Dataset[Any]],
        device: torch.device,
        options: LoaderOptions | None = None,
        threads: int = 1,
    ) -> None:
        self.source = source
        self.device = device
        self.options = options or LoaderOptions()
        self.threads = threads
        self._dataset: Dataset[Any] | None = None
        self._loader: DataLoader[Any] | None = None
        self._feed = _Feed()
        self._seed = 0
        #: Bytes per sample, from the first batch read (sizes the evaluation's batches).
        self.sample_bytes: int | None = None

    @property
    def dataset(self) -> Dataset[Any]:
        if self._dataset is None:
            dataset = self.source()
            if isinstance(dataset, TensorDataset):
                dataset = TensorRows(dataset.tensors)
            try:
                len(dataset)  # type: ignore[arg-type]
            except TypeError:
                raise TypeError("Task.dataset() must return a dataset with a length (a map-style Dataset)") from None
            self._dataset = dataset
        return self._dataset

    @property
    def loaded(self) -> bool:
        """Whether this rank built the dataset (a rank that reads nothing never does)."""
        return self._dataset is not None

    def workers(self) -> int:
        if self.options.workers is not None:
            return self.options.workers
        if isinstance(self.dataset, TensorRows):
            return 0
        return min(4, max(1, self.threads))

    def pinned(self) -> bool:
        pin = self.options.pin_memory
        return (self.device.type == "cuda") if pin is None else bool(pin and torch.cuda.is_available())

    def open(self, seed: int) -> None:
        """A fold starts: its reader's worker seeds come from ``seed`` (the trial and
        fold), so reruns read (and augment) alike. The workers start on first read."""
        self.close()
        self._seed = seed

    def _reader(self) -> DataLoader[Any]:
        if self._loader is None:
            workers = self.workers()
            extra: dict[str, Any] = {}
            if workers:
                extra = {
                    "prefetch_factor": self.options.prefetch,
                    "persistent_workers": True,
                    "worker_init_fn": _start_worker,
                    # fork keeps the task's module (loaded from a file) and the dataset
                    # object; spawn would have to import and pickle them again.
                    "multiprocessing_context": "fork" if os.name == "posix" else None,
                }
            self._loader = DataLoader(
                self.dataset,
                batch_sampler=self._feed,
                num_workers=workers,
                collate_fn=collate,
                pin_memory=self.pinned(),
                generator=torch.Generator().manual_seed(self._seed),
                **extra,
            )
        return self._loader

    def read(self, batches: Sequence[np.ndarray]) -> Iterator[Any]:
        """The batches (arrays of sample indices), in order, on the device; read ahead
        by the workers while the caller trains. Stopping early is fine: the next read
        starts afresh."""
        if not len(batches):
            return
        self._feed.batches = [b.tolist() for b in batches]
        non_blocking = self.pinned()
        for batch in self._reader():
            if self.sample_bytes is None:
                self.sample_bytes = _sample_bytes(batch)
            yield to_device(batch, self.device, non_blocking)

    def eval_size(self, rank_batch: int) -> int:
        """Samples per evaluation batch: the rank's training batch, or more, up to
        ``EVAL_BATCH`` samples and ``EVAL_BYTES`` (the size of a sample as read)."""
        cap = EVAL_BATCH if not self.sample_bytes else max(1, EVAL_BYTES // self.sample_bytes)
        return max(rank_batch, min(EVAL_BATCH, cap))

    def batch(self, indices: np.ndarray) -> Any:
        """One batch through the same reader (checks and tools)."""
        return next(iter(self.read([indices])))

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    @staticmethod
    def batches(indices: np.ndarray, size: int) -> list[np.ndarray]:
        """``indices`` cut into consecutive batches of ``size`` (the last may be short)."""
        return [indices[i : i + size] for i in range(0, len(indices), size)]

    def close(self) -> None:
        """Ends the fold's workers."""
        loader, self._loader = self._loader, None
        iterator = getattr(loader, "_iterator", None) if loader is not None else None
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
