"""The trial, as a training script sees it (``training.task: {script: train.py}``).

The agent starts the script once per fold on the fold group's ranks with the
environment ``torchrun`` sets, so ``torch.distributed.init_process_group()`` works as
it is. This module is the script's side of the agent::

    from hpcopt_agent import trial

    lr = trial.params.get("lr", 1e-3)               # this trial's parameters
    train_idx, val_idx = trial.split(len(dataset))  # this fold's samples
    start = load(trial.resume_from) if trial.resume_from else 0
    for epoch in range(start, trial.epochs):
        ...
        save(trial.checkpoint_dir)                  # any files; they are the fold's
        if trial.report(epoch + 1, val_loss=v) != "continue":
            break                                   # pruned, preempted or done

``report`` is called by every rank at the same epochs (like an all-reduce): the agent
records rank 0's metrics and gives every rank the same answer. Outside an agent (the
script run by hand, or by ``torchrun``) :data:`active` is False, :data:`params` is
empty, ``split`` gives fold 0 of :data:`folds` = 1 (everything to train on, nothing to
validate) and ``report`` answers ``"continue"``: the same script runs either way.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from hpcopt_agent.script.channel import Channel

#: What ``report`` answers: go on; stop, the server pruned (or cancelled) the trial;
#: checkpoint to :data:`checkpoint_dir` and stop (the job is preempted, or the trial's
#: epochs for this lease are done).
CONTINUE, PRUNE, STOP = "continue", "prune", "stop"

_info: dict[str, Any] = json.loads(os.environ.get("HPCOPT_TRIAL") or "{}")

#: Whether an agent started this process.
active: bool = bool(_info)
#: The trial's parameters (a copy; empty outside an agent).
params: dict[str, Any] = dict(_info.get("params") or {})
#: The trial's number in its campaign.
number: int = int(_info.get("number", 0))
#: The fold this process trains, of :data:`folds` (the campaign's ``folds``).
fold: int = int(_info.get("fold", 0))
folds: int = int(_info.get("folds", 1))
#: Train up to this epoch (the campaign's ``training.epochs``, or fewer: a
#: multi-fidelity rung); ``report`` answers ``"stop"`` at it.
epochs: int = int(_info.get("epochs", 1))
#: The campaign's training seed, for the script's own seeding.
seed: int = int(_info.get("seed", 0))
#: Where this fold keeps its checkpoint (one directory per trial and fold, under the
#: agent's ``--checkpoint-dir``); None outside an agent.
checkpoint_dir: Path | None = Path(_info["checkpoint_dir"]) if _info.get("checkpoint_dir") else None
#: :data:`checkpoint_dir` when an earlier attempt (a preemption, a promotion) left files
#: in it, else None: where to resume from.
resume_from: Path | None = Path(_info["resume_from"]) if _info.get("resume_from") else None

_checkpoint = False
_channel: Channel | None = None
_answers: dict[int, str] = {}


def _connect() -> Channel | None:
    global _channel
    if _channel is None and os.environ.get("HPCOPT_TRIAL_FD", "").isdigit():
        _channel = Channel(socket.socket(fileno=int(os.environ["HPCOPT_TRIAL_FD"])))
    return _channel


def _take(messages: list[dict[str, Any]]) -> None:
    global _checkpoint
    for m in messages:
        if m.get("op") == "checkpoint":
            _checkpoint = True
        elif m.get("op") == "answer":
            _answers[int(m["epoch"])] = str(m["answer"])


def _on_signal(signum: int, frame: FrameType | None) -> None:
    global _checkpoint
    _checkpoint = True


def should_checkpoint() -> bool:
    """True once the job is to stop (SIGUSR1 or SIGTERM to the job, the walltime's
    reserve): save to :data:`checkpoint_dir` and exit. Each rank learns it on its own
    (possibly at another step): check it where the ranks are in step, or all-reduce it;
    ``report``'s answer is the same on every rank."""
    channel = _connect()
    if channel is not None:
        _take(channel.poll(0))
    return _checkpoint


def _number(name: str, value: Any) -> float:
    try:
        return float(value)  # a Python number, a NumPy scalar, a one-element tensor
    except (TypeError, ValueError):
        raise TypeError(f"trial.report: metric {name!r} must be a number, got {type(value).__name__}") from None


def report(epoch: int, **metrics: Any) -> str:
    """Reports this fold's metrics after ``epoch`` (counted from 1) and waits for the
    agent's answer: ``"continue"``, ``"prune"`` or ``"stop"`` (the same on every rank).
    Call it on every rank; rank 0's metrics are the fold's. One of them must be the
    campaign's objective metric."""
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
        raise ValueError(f"trial.report: epoch counts the epochs done, from 1; got {epoch!r}")
    values = {str(k): _number(k, v) for k, v in metrics.items()}
    channel = _connect()
    if channel is None:
        return CONTINUE
    channel.send({"op": "report", "epoch": epoch, "metrics": {k: _json_number(v) for k, v in values.items()}})
    while epoch not in _answers:
        _take(channel.poll(1.0))
        if channel.closed and epoch not in _answers:
            print("hpcopt: the agent is gone; stopping", file=sys.stderr)
            return STOP
    return _answers[epoch]


def _json_number(v: float) -> float | str:
    return v if math.isfinite(v) else str(v)  # "nan", "inf": JSON has no such numbers


def split(n: int, labels: Sequence[int] | None = None, groups: Sequence[Any] | None = None) -> tuple[Any, Any]:
    """This fold's (train, validation) indices into a dataset of ``n`` samples, as the
    agent splits a Task's dataset: the campaign's ``folds`` and ``fold_seed``;
    ``labels`` for stratified folds, ``groups`` to keep each group within one fold
    (``folds: 1`` holds out a fifth). Outside an agent: every index to train on, none to validate."""
    import numpy as np

    from hpcopt_agent.folds import splits

    if not active:
        return np.arange(n), np.arange(0)
    return splits(n, folds, int(_info.get("fold_seed", 0)), labels, groups)[fold]


if active:  # Slurm's --signal reaches every process of the job step: checkpoint, do not die
    for _sig in (signal.SIGUSR1, signal.SIGTERM):
        if signal.getsignal(_sig) in (signal.SIG_DFL, None):
            signal.signal(_sig, _on_signal)

__all__ = [
    "CONTINUE",
    "PRUNE",
    "STOP",
    "active",
    "checkpoint_dir",
    "epochs",
    "fold",
    "folds",
    "number",
    "params",
    "report",
    "resume_from",
    "seed",
    "should_checkpoint",
    "split",
]
