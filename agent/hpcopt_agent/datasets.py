"""Datasets larger than memory: samples stay in files and are read when a batch asks
for them, so an agent's resident memory does not grow with the data.

- :class:`H5Dataset`: HDF5 shards through h5py (``pip install 'hpcopt-agent[hdf5]'``),
  files opened lazily in each process (the loader's workers included, after they are
  forked), reads aligned to the files' chunks: every chunk a batch touches is read
  once, whole, and chunks (or rows of an unchunked dataset) less than ``GAP`` bytes
  apart in one call, so a small column such as a label is one read per batch, not one
  per sample (each read is a round trip on a parallel file system).
- :class:`NpyDataset`: ``.npy`` files (what ``np.save`` and ``np.lib.format.open_memmap``
  write), read with ``os.pread`` (rows less than ``GAP`` bytes apart in one call)
  rather than through a memory map: the pages of a
  mapped file that a process has touched count in its resident memory, so reading a
  large memmap once would grow it by the file's size.

Both give ``__getitems__`` (a whole batch per call, already stacked, which the
input pipeline passes on as is), ``groups()`` (the shard of each sample, for
``training.options.folds_by: group``), and pickle without their open files.

.. code-block:: python

    class Showers(Task):
        def __init__(self):
            self.data = H5Dataset(sorted(Path("showers").glob("*.h5")), ["ecal", "energy"])
        def dataset(self):
            return self.data
        def groups(self):
            return self.data.groups()
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from hpcopt_agent.data import Stacked

#: Bytes of h5py's chunk cache per open dataset: reads are chunk-aligned, so the cache
#: only spares re-reading a small chunk (of labels, say) that the next batch touches
#: again; every process holds one per open file and dataset.
CHUNK_CACHE = 1 << 16
#: Bytes of unwanted data an HDF5 read may span to join two wanted runs into one call.
GAP = 1 << 15


def _runs(sorted_ids: np.ndarray, gap: int = 0) -> list[tuple[int, int]]:
    """[lo, hi) runs of a sorted array of unique integers, a run going on over at most
    ``gap`` missing values."""
    if not len(sorted_ids):
        return []
    breaks = np.flatnonzero(np.diff(sorted_ids) > gap + 1) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [len(sorted_ids)]])
    return [(int(sorted_ids[a]), int(sorted_ids[b - 1]) + 1) for a, b in zip(starts, ends, strict=True)]


class _Sharded(Dataset[tuple[torch.Tensor, ...]]):
    """Samples numbered across shards: shard ``s`` holds ``offsets[s]:offsets[s + 1]``."""

    def __init__(self, lengths: Sequence[int]) -> None:
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self._handles: dict[Any, Any] = {}
        self._pid = -1

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_handles": {}, "_pid": -1}

    def _handle(self, key: Any, opener: Any) -> Any:
        """This process's open file for ``key`` (a forked worker opens its own, never
        using the parent's)."""
        if self._pid != os.getpid():
            self._handles, self._pid = {}, os.getpid()
        handle = self._handles.get(key)
        if handle is None:
            handle = self._handles[key] = opener()
        return handle

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        return tuple(t[0] for t in self.__getitems__([i]))

    def __getitems__(self, indices: Sequence[int]) -> Stacked:
        raise NotImplementedError

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def groups(self) -> np.ndarray:
        """The shard of each sample (``Task.groups()`` for folds over files)."""
        return np.repeat(np.arange(len(self.offsets) - 1), np.diff(self.offsets))

    def locate(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx = np.asarray(indices, dtype=np.int64)
        if len(idx) and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"sample index out of range 0..{len(self) - 1}")
        shard = np.searchsorted(self.offsets, idx, side="right") - 1
        return shard, idx - self.offsets[shard]


class H5Dataset(_Sharded):
    """Samples from HDF5 files: ``keys`` names the datasets (arrays with the samples
    along their first axis, the same length within a file), one tensor each per sample."""

    def __init__(self, files: Sequence[str | Path], keys: Sequence[str]) -> None:
        import h5py

        if not files:
            raise ValueError("H5Dataset: no files given")
        if not keys:
            raise ValueError("H5Dataset: no keys given (the HDF5 datasets to read)")
        self.files = [str(f) for f in files]
        self.keys = list(keys)
        lengths = []
        for path in self.files:
            with h5py.File(path, "r", locking=False) as f:
                missing = [k for k in self.keys if k not in f]
                if missing:
                    raise KeyError(f"{path}: no dataset {missing[0]!r} (it has {', '.join(f.keys())})")
                sizes = {k: int(f[k].shape[0]) for k in self.keys}
                if len(set(sizes.values())) != 1:
                    raise ValueError(f"{path}: the datasets differ in length: {sizes}")
                lengths.append(next(iter(sizes.values())))
        super().__init__(lengths)

    def _file(self, shard: int) -> Any:
        import h5py

        path = self.files[shard]
        return self._handle(shard, lambda: h5py.File(path, "r", locking=False, rdcc_nbytes=CHUNK_CACHE))

    def _column(self, shard: int, key: str) -> Any:
        """The open HDF5 dataset (kept open: its chunk cache lives as long as it does)."""
        return self._handle((shard, key), lambda: self._file(shard)[key])

    def __getitems__(self, indices: Sequence[int]) -> Stacked:
        shard, local = self.locate(indices)
        columns: list[list[np.ndarray]] = [[] for _ in self.keys]
        order: list[np.ndarray] = []
        for s in np.unique(shard):
            mine = np.flatnonzero(shard == s)
            order.append(mine)
            for column, key in zip(columns, self.keys, strict=True):
                column.append(_read_rows(self._column(int(s), key), local[mine]))
        where = np.concatenate(order)
        back = np.empty_like(where)
        back[where] = np.arange(len(where))
        return Stacked(torch.from_numpy(np.concatenate(c)[back]) for c in columns)

    def close(self) -> None:
        for key, f in self._handles.items():
            if not isinstance(key, tuple):  # files; their datasets close with them
                f.close()
        self._handles = {}


def _read_rows(dset: Any, rows: np.ndarray) -> np.ndarray:
    """``dset[rows]`` (any order, repeats allowed), reading each chunk it touches once:
    runs of chunks less than ``GAP`` bytes apart in one call, then the rows picked out
    in memory."""
    chunk = dset.chunks[0] if dset.chunks else 1
    unit = chunk * max(1, int(np.prod(dset.shape[1:]))) * dset.dtype.itemsize
    wanted = np.unique(rows)
    parts, firsts = [], []
    for lo, hi in _runs(np.unique(wanted // chunk), GAP // unit):
        a, b = lo * chunk, min(hi * chunk, dset.shape[0])
        block = dset[a:b]
        inside = wanted[(wanted >= a) & (wanted < b)]
        parts.append(block[inside - a])
        firsts.append(inside)
    got = np.concatenate(parts)
    return got[np.searchsorted(np.concatenate(firsts), rows)]


class NpyDataset(_Sharded):
    """Samples from ``.npy`` files: ``columns`` holds, for each tensor of a sample, its
    files (shards, in order; every column cut into shards of the same lengths)."""

    def __init__(self, columns: Sequence[Sequence[str | Path]]) -> None:
        if not columns or not all(columns):
            raise ValueError("NpyDataset: give each column (tensor of a sample) its .npy files")
        self.columns = [[str(p) for p in files] for files in columns]
        shards = {len(files) for files in self.columns}
        if len(shards) != 1:
            raise ValueError(f"NpyDataset: the columns have different numbers of files: {sorted(shards)}")
        self.headers = [[_npy_header(p) for p in files] for files in self.columns]
        lengths = [h[0][0] for h in self.headers[0]]
        for files, headers in zip(self.columns, self.headers, strict=True):
            for path, (shape, _, _), n in zip(files, headers, lengths, strict=True):
                if shape[0] != n:
                    raise ValueError(f"{path}: {shape[0]} samples where the first column's shard has {n}")
        super().__init__(lengths)

    def _fd(self, path: str) -> int:
        return int(self._handle(path, lambda: os.open(path, os.O_RDONLY)))

    def __getitems__(self, indices: Sequence[int]) -> Stacked:
        shard, local = self.locate(indices)
        out = []
        for files, headers in zip(self.columns, self.headers, strict=True):
            shape, dtype, offset = headers[0]
            batch = np.empty((len(local), *shape[1:]), dtype=dtype)
            for s in np.unique(shard):
                mine = np.flatnonzero(shard == s)
                rows = local[mine]
                shape, dtype, offset = headers[int(s)]
                row = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
                wanted = np.unique(rows)
                got = np.empty((len(wanted), *shape[1:]), dtype=dtype)
                at = 0
                for lo, hi in _runs(wanted, GAP // max(row, 1)):
                    raw = os.pread(self._fd(files[int(s)]), (hi - lo) * row, offset + lo * row)
                    inside = wanted[at : at + np.searchsorted(wanted[at:], hi)]
                    block = np.frombuffer(raw, dtype=dtype).reshape(hi - lo, *shape[1:])
                    got[at : at + len(inside)] = block[inside - lo]
                    at += len(inside)
                batch[mine] = got[np.searchsorted(wanted, rows)]
            out.append(torch.from_numpy(batch))
        return Stacked(out)

    def close(self) -> None:
        for fd in self._handles.values():
            os.close(fd)
        self._handles = {}


def _npy_header(path: str) -> tuple[tuple[int, ...], np.dtype[Any], int]:
    """(shape, dtype, data offset) of a C-ordered ``.npy`` file."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        if fortran:
            raise ValueError(f"{path}: Fortran-ordered arrays are not supported (save it C-ordered)")
        if dtype.hasobject:
            raise ValueError(f"{path}: object arrays are not read (they would be unpickled)")
        if not shape:
            raise ValueError(f"{path}: a 0-d array has no samples")
        return tuple(shape), dtype, f.tell()
