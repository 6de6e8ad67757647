"""Fold checkpoints: plain data, written atomically, read without running code.

- **What a checkpoint holds**: tensors, numbers, strings, ``None`` and lists, tuples and
  dicts of them (:func:`plain` converts NumPy values to tensors and Python numbers and
  refuses anything else at save time, naming where in the state it is). That is what
  ``torch.load(weights_only=True)`` reads back, and it unpickles nothing else: a file
  that holds a pickled object with a ``__reduce__`` is refused, not run.
- **Where**: ``ROOT/<server_id>/<campaign>/<trial>/fold<k>.pt``
  (:mod:`hpcopt.core.checkpoints`); an agent resumes only from the file it would have
  written itself under its own root, and only if the file says it is that server's,
  campaign's, trial's and fold's checkpoint.
- **A pipeline** keeps each stage in its own file beside the fold's (:func:`stage_path`),
  written by that stage's rank; the fold's file names the stage count.
- **Atomic**: a temp file in the same directory, fsync, rename, so a kill at any moment
  leaves the previous checkpoint or the new one.

A checkpoint that is refused or cannot be read is never fatal: :func:`load` says why,
and the fold trains from the start (the trial's events keep the reason).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hpcopt.core.checkpoints import local_path, relative
from hpcopt.errors import CheckpointRefused

_SCALARS = (str, int, float, bool, type(None))


def fold_path(root: Path, server_id: str, campaign_id: int, trial_id: int, fold: int) -> Path:
    return root / relative(server_id, campaign_id, trial_id, fold)


def stage_path(path: Path, stage: int, stages: int) -> Path:
    """Where a pipeline keeps one stage of a fold's checkpoint ``path``:
    ``fold0.pt`` -> ``fold0.stage1-of-4.pt``."""
    return path.with_name(f"{path.stem}.stage{stage}-of-{stages}{path.suffix}")


def load_stage(path: Path) -> dict[str, Any]:
    """A pipeline stage's file, read as plain data (ValueError saying why not)."""
    try:
        shard = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"pipeline stage checkpoint {path} cannot be read as plain data: {exc}") from None
    if not isinstance(shard, dict) or not isinstance(shard.get("tensors"), dict):
        raise ValueError(f"{path} is not a pipeline stage checkpoint")
    return shard


def plain(obj: Any, where: str = "state") -> Any:
    """``obj`` as tensors, Python scalars and plain containers (NumPy arrays become
    tensors, NumPy scalars Python numbers); TypeError naming ``where`` for anything else."""
    if isinstance(obj, np.generic):  # before the scalars: np.float64 is a float
        return obj.item()
    if isinstance(obj, (torch.Tensor, torch.Size, *_SCALARS)):
        return obj
    if isinstance(obj, np.ndarray):
        # Unsigned wider than a byte has little support in torch: widen (exact).
        wide = obj.astype(np.int64) if obj.dtype.kind == "u" and obj.itemsize > 1 else obj
        return torch.from_numpy(np.array(wide, copy=True))
    if isinstance(obj, dict):
        out = OrderedDict() if isinstance(obj, OrderedDict) else {}
        for k, v in obj.items():
            if not isinstance(k, _SCALARS):
                raise TypeError(f"{where} has a key of type {type(k).__name__}; checkpoint keys are str or numbers")
            out[k] = plain(v, f"{where}[{k!r}]")
        return out
    if isinstance(obj, list | tuple):
        items = [plain(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else tuple(items)
    raise TypeError(
        f"{where} is a {type(obj).__module__}.{type(obj).__qualname__}; a checkpoint holds tensors, numbers, "
        "strings, None and lists/tuples/dicts of them (it is read with torch.load(weights_only=True))"
    )


def save(path: Path, state: dict[str, Any]) -> str:
    """Writes ``state`` (see :func:`plain`) to ``path`` atomically; returns its ``file://`` URI."""
    data = plain(state)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        torch.save(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path.resolve().as_uri()


def load(
    uri: str, root: Path, server_id: str, campaign_id: int, trial_id: int, fold: int, *, mmap: bool = False
) -> tuple[dict[str, Any] | None, str]:
    """(the checkpoint at ``uri``, "") if it is this agent's checkpoint of the fold and
    reads as plain data; else (None, why not). Never raises. With ``mmap`` the tensors
    are mapped from the file, not read."""
    try:
        path = local_path(uri, root, server_id, campaign_id, trial_id, fold)
    except CheckpointRefused as exc:
        return None, f"checkpoint {uri[:512]!r} refused: {exc}"
    if not path.is_file():
        return None, f"checkpoint {path} is gone"
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as exc:  # a pickle with code, a truncated file, another format
        text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        return None, f"checkpoint {path} cannot be read as plain data ({type(exc).__name__}: {text})"
    header = {"server": server_id, "campaign": campaign_id, "trial": trial_id, "fold": fold}
    if not isinstance(state, dict) or any(state.get(k) != v for k, v in header.items()):
        found = {k: state.get(k) for k in header} if isinstance(state, dict) else type(state).__name__
        return None, f"checkpoint {path} is not this fold's (it says {found})"
    stages = state.get("pipeline_stages")
    if isinstance(stages, int) and stages > 0:
        gone = [p.name for s in range(stages) if not (p := stage_path(path, s, stages)).is_file()]
        if gone:
            return None, f"checkpoint {path} names pipeline stage files that are gone: {', '.join(gone)}"
    return state, ""


def numpy_rng(state: Any) -> tuple[Any, ...]:
    """NumPy's legacy RNG state as :func:`np.random.set_state` takes it, from its
    checkpointed form (the key array stored as a tensor)."""
    name, key, *rest = state
    return (name, np.asarray(key, dtype=np.uint32), *rest)
