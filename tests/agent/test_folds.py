"""Folds over groups: a group (a file, a run) never spans two folds, deterministically,
with balanced sizes, stratified where labels exist; and the file-backed datasets read
exactly the samples asked for, in the order asked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcopt_agent.folds import decode, encode, group_kfold, splits


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 30), min_size=2, max_size=40),
    k=st.integers(2, 8),
    seed=st.integers(0, 2**31),
    stratified=st.booleans(),
)
def test_a_group_never_spans_two_folds(sizes: list[int], k: int, seed: int, stratified: bool) -> None:
    groups = np.repeat(np.arange(len(sizes)) * 7 + 3, sizes)  # arbitrary group names
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(groups))
    groups = groups[order]  # samples of a group are not contiguous
    labels = rng.integers(0, 3, len(groups)) if stratified else None
    if len(sizes) < k:
        with pytest.raises(ValueError, match="at least as many groups as folds"):
            splits(len(groups), k, seed, labels, groups)
        return
    parts = splits(len(groups), k, seed, labels, groups)
    assert len(parts) == k
    seen = np.zeros(len(groups), dtype=int)
    for train, validation in parts:
        assert len(validation) and not set(train) & set(validation)
        assert len(train) + len(validation) == len(groups)
        seen[validation] += 1
        # Every group of the validation part is wholly in it.
        assert not set(groups[validation]) & set(groups[train])
    assert (seen == 1).all()
    again = splits(len(groups), k, seed, labels, groups)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(parts, again, strict=True))
    # The compact form the agent broadcasts gives the same folds back.
    assert all(
        np.array_equal(a[1], b[1]) and np.array_equal(a[0], b[0])
        for a, b in zip(parts, decode(encode(parts, len(groups)), k), strict=True)
    )


def test_group_folds_balance_sizes_and_stratify() -> None:
    # 20 files of 50 samples: 4 folds of 5 files each.
    groups = np.repeat(np.arange(20), 50)
    folds = group_kfold(groups, 4, seed=1)
    assert sorted(len(f) for f in folds) == [250, 250, 250, 250]
    # Files that hold one class each (10 of class 0, 10 of class 1): every fold gets both.
    labels = (groups % 2).astype(int)
    for f in group_kfold(groups, 5, seed=2, labels=labels):
        share = labels[f].mean()
        assert 0.3 <= share <= 0.7, share
    assert [list(f) for f in group_kfold(groups, 4, seed=1)] != [list(f) for f in group_kfold(groups, 4, seed=9)]


def test_one_fold_over_groups_holds_out_whole_groups() -> None:
    groups = np.repeat(np.arange(10), 12)
    [(train, validation)] = splits(len(groups), 1, 0, groups=groups)
    assert 0 < len(validation) < len(groups) and not set(groups[validation]) & set(groups[train])


def test_groups_must_have_one_entry_per_sample() -> None:
    with pytest.raises(ValueError, match=r"Task.groups\(\) must give one entry per sample \(10\)"):
        splits(10, 2, 0, groups=[0, 1])


def _shards(tmp_path: Path) -> tuple[np.ndarray, np.ndarray, list[Path], list[Path], list[Path]]:
    import h5py

    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 3, 4)).astype(np.float32)
    y = np.arange(100, dtype=np.int64)
    files, xs, ys = [], [], []
    for s, (a, b) in enumerate([(0, 30), (30, 31), (31, 100)]):
        path = tmp_path / f"s{s}.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=x[a:b], chunks=(min(7, b - a), 3, 4))
            f.create_dataset("y", data=y[a:b])
        files.append(path)
        np.save(tmp_path / f"x{s}.npy", x[a:b])
        np.save(tmp_path / f"y{s}.npy", y[a:b])
        xs.append(tmp_path / f"x{s}.npy")
        ys.append(tmp_path / f"y{s}.npy")
    return x, y, files, xs, ys


def test_file_backed_datasets_read_what_is_asked_in_order(tmp_path: Path) -> None:
    from hpcopt_agent.datasets import H5Dataset, NpyDataset

    x, y, files, xs, ys = _shards(tmp_path)
    h5, npy = H5Dataset(files, ["x", "y"]), NpyDataset([xs, ys])
    asked = [99, 0, 30, 5, 5, 31, 64, 29, 98, 12]
    for data in (h5, npy):
        assert len(data) == 100
        got_x, got_y = data.__getitems__(asked)
        assert np.array_equal(got_y.numpy(), y[asked]) and np.array_equal(got_x.numpy(), x[asked])
        one = data[42]
        assert np.array_equal(one[0].numpy(), x[42]) and int(one[1]) == 42
        assert list(np.bincount(data.groups())) == [30, 1, 69]
        with pytest.raises(IndexError):
            data.__getitems__([100])
    with pytest.raises(KeyError, match="no dataset 'z'"):
        H5Dataset(files, ["x", "z"])


@pytest.fixture(scope="module")
def shard_files(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[np.ndarray, np.ndarray, list[Path], list[Path], list[Path]]:
    return _shards(tmp_path_factory.mktemp("shards"))


@settings(max_examples=60, deadline=None)
@given(asked=st.lists(st.integers(0, 99), min_size=1, max_size=40), gap=st.sampled_from([0, 64, 1 << 15]))
def test_file_backed_reads_join_nearby_rows_without_changing_what_is_read(
    shard_files: tuple[np.ndarray, np.ndarray, list[Path], list[Path], list[Path]], asked: list[int], gap: int
) -> None:
    """Reads that span unwanted rows or chunks (up to GAP bytes) return exactly the
    rows asked for, in order, repeats included, whatever the gap."""
    from hpcopt_agent import datasets

    x, y, files, xs, ys = shard_files
    saved, datasets.GAP = datasets.GAP, gap
    try:
        for data in (datasets.H5Dataset(files, ["x", "y"]), datasets.NpyDataset([xs, ys])):
            got_x, got_y = data.__getitems__(asked)
            assert np.array_equal(got_y.numpy(), y[asked]) and np.array_equal(got_x.numpy(), x[asked])
            data.close()
    finally:
        datasets.GAP = saved
