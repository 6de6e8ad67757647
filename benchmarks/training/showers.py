"""The tasks of the input-pipeline benchmark (``input_pipeline.py``): the calorimeter
GAN of ``examples/calorimeter`` on its HDF5 shards, read through a file whose every read
request waits ``HPCOPT_BENCH_READ_MS`` milliseconds first.

That wait stands for the storage a cluster's jobs read from: on a parallel file system
(Lustre, GPFS) or network storage a small read is a round trip to a server, of the
order of a millisecond, where this machine's page cache answers in microseconds. HDF5's
own logic (chunk index, chunk reads, caches) is real: h5py reads through the file
object below, and only the request's latency is added.

- ``Showers``: the example's task, its ``H5Dataset`` on the slow file (batched,
  chunk-aligned reads; what a user of ``hpcopt_agent.datasets`` gets).
- ``ShowersItem``: the same samples through a dataset that only has ``__getitem__`` —
  with ``loader.workers: 0`` that is the input path before the DataLoader pipeline
  (one sample at a time, in the training process).

``HPCOPT_BENCH_STEP=feed`` replaces the GAN's step (and its evaluation) by one that
only touches the batch: the rate the input path alone can deliver (what a fast GPU
would ask of it).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.calorimeter.task import CalorimeterGan  # noqa: E402
from hpcopt_agent.datasets import CHUNK_CACHE, H5Dataset  # noqa: E402

READ_S = float(os.environ.get("HPCOPT_BENCH_READ_MS", "0")) / 1000.0
STEP = os.environ.get("HPCOPT_BENCH_STEP", "gan")


class SlowFile(io.RawIOBase):
    """A read-only file whose every read request waits ``READ_S`` first."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = base + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: Any) -> int:
        if READ_S:
            time.sleep(READ_S)
        n = os.preadv(self.fd, [buffer], self.pos)
        self.pos += n
        return n

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
        super().close()


_OPEN: list[Any] = []


def open_slow(path: str) -> Any:
    import h5py

    f = h5py.File(SlowFile(path), "r", rdcc_nbytes=CHUNK_CACHE)
    _OPEN.append(f)
    return f


@atexit.register
def _close() -> None:  # HDF5 files on Python file objects: closed before the objects go
    for f in _OPEN:
        with contextlib.suppress(Exception):
            f.close()


class SlowH5(H5Dataset):
    def _file(self, shard: int) -> Any:
        path = self.files[shard]
        return self._handle(shard, lambda: open_slow(path))


class ItemByItem(torch.utils.data.Dataset[Any]):
    """Only ``__getitem__``: the loader asks for one sample at a time."""

    def __init__(self, inner: H5Dataset) -> None:
        self.inner = inner

    def __getitem__(self, i: int) -> Any:
        return self.inner[i]

    def __len__(self) -> int:
        return len(self.inner)


class Showers(CalorimeterGan):
    def __init__(self) -> None:
        super().__init__()
        self.data = SlowH5(self.data.files, self.data.keys)

    def train_step(self, models: Any, optimizers: Any, batch: Any, params: dict[str, Any]) -> float:
        if STEP == "feed":
            return feed_step(batch)
        return super().train_step(models, optimizers, batch, params)

    def evaluate(self, models: Any, batches: Iterable[Any], params: dict[str, Any]) -> dict[str, float]:
        if STEP == "feed":  # reads the validation showers, generates none
            return {"physics_distance": sum(feed_step(b) for b in batches)}
        return super().evaluate(models, batches, params)


class ShowersItem(Showers):
    def dataset(self) -> Any:
        return ItemByItem(self.data)


def feed_step(batch: Any) -> float:
    """Touches every value of the batch (as a copy to a device would), trains nothing."""
    return float(batch[0].sum()) * 0.0
