"""Fold checkpoints: written atomically (a temp file in the same directory, fsync,
rename), so a kill at any moment leaves the previous checkpoint or the new one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import torch


def fold_path(root: Path, campaign_id: int, trial_id: int, fold: int) -> Path:
    return root / str(campaign_id) / str(trial_id) / f"fold{fold}.pt"


def save(path: Path, state: dict[str, Any]) -> str:
    """Writes ``state`` to ``path`` atomically; returns its ``file://`` URI."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path.resolve().as_uri()


def load(uri: str) -> dict[str, Any] | None:
    """The checkpoint at a ``file://`` URI (or plain path); None when it is gone."""
    parsed = urlparse(uri)
    path = Path(unquote(parsed.path)) if parsed.scheme == "file" else Path(uri)
    if not path.is_file():
        return None
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=False)
    return state
