"""The agent's ``training.options`` (besides the schemes' knobs, :mod:`hpcopt.core.schemes`):
their defaults and checks, shared by the server, which refuses a bad value at
submission naming the field, and the agent, which reads them.

.. code-block:: yaml

    training:
      options:
        checkpoint_every: 1      # epochs between checkpoints (0: the last and on preemption)
        folds_by: sample         # or group: Task.groups() keeps each group in one fold
        stratified: false        # stratify the folds on Task.labels()
        fold_seed: 0             # the K-fold split (the same for every trial)
        seed: 0                  # model initialization and data order (with trial and fold)
        precision: fp32          # fp32 | bf16 | fp16 (autocast; fp16 with a GradScaler)
        batchnorm: local         # local | node | global (SyncBatchNorm: GPUs, lock-step schemes)
        cudnn_benchmark: false   # let cuDNN pick the fastest convolution algorithms
        loader: {workers: null, prefetch: 2, pin_memory: null}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hpcopt.core.closest import did_you_mean
from hpcopt.core.schemes import TRAITS, Traits, split_options
from hpcopt.errors import OptionError

#: The options and their defaults.
OPTIONS: dict[str, Any] = {
    "checkpoint_every": 1,
    "folds_by": "sample",
    "stratified": False,
    "fold_seed": 0,
    "seed": 0,
    "precision": "fp32",
    "batchnorm": "local",
    "cudnn_benchmark": False,
    "loader": {},
}

#: ``training.options.loader``: null means chosen by the agent (see the docs).
LOADER: dict[str, Any] = {"workers": None, "prefetch": 2, "pin_memory": None}

FOLDS_BY = ("sample", "group")
PRECISIONS = ("fp32", "bf16", "fp16")
#: BatchNorm's batch statistics in training: each rank's own, or synchronised over the
#: fold group's ranks on one node, or over the whole fold group (SyncBatchNorm).
BATCHNORM = ("local", "node", "global")


def _int(field: str, value: Any, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise OptionError(field, f"must be an integer from {low} to {high}, got {value!r}")
    return value


def _bool(field: str, value: Any, nullable: bool = False) -> bool | None:
    if value is None and nullable:
        return None
    if not isinstance(value, bool):
        raise OptionError(field, f"must be true or false{' or null' if nullable else ''}, got {value!r}")
    return value


def _choice(field: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        hint = did_you_mean(value, allowed) if isinstance(value, str) else ""
        raise OptionError(field, f"must be one of {', '.join(allowed)}, got {value!r}{hint}")
    return str(value)


def check_options(options: dict[str, Any], schemes: Sequence[str] = ()) -> dict[str, Any]:
    """``training.options`` without the scheme sections, merged over the defaults
    (``loader`` over its own), for a campaign training with ``schemes``; raises
    :class:`OptionError` naming the first bad field."""
    _, rest = split_options(dict(options or {}))
    unknown = sorted(set(rest) - set(OPTIONS))
    if unknown:
        raise OptionError(
            f"training.options.{unknown[0]}",
            f"unknown option; allowed: {', '.join(OPTIONS)}, and a scheme's knobs under its name (easgd: {{tau: 4}})",
        )
    merged = {**OPTIONS, **rest}
    at = "training.options."
    _int(at + "checkpoint_every", merged["checkpoint_every"], 0, 1_000_000)
    _int(at + "fold_seed", merged["fold_seed"], 0, 2**63 - 1)
    _int(at + "seed", merged["seed"], 0, 2**63 - 1)
    _bool(at + "stratified", merged["stratified"])
    _bool(at + "cudnn_benchmark", merged["cudnn_benchmark"])
    _choice(at + "folds_by", merged["folds_by"], FOLDS_BY)
    _choice(at + "precision", merged["precision"], PRECISIONS)
    staged = [s for s in schemes if TRAITS.get(s, Traits()).own_step]
    if merged["precision"] == "fp16" and staged:
        raise OptionError(
            at + "precision",
            f"fp16 is not available with scheme {staged[0]} (its stages would skip overflowing steps "
            "independently); use bf16, which needs no loss scaling",
        )
    _choice(at + "batchnorm", merged["batchnorm"], BATCHNORM)
    if merged["batchnorm"] != "local":
        for scheme in schemes:
            traits = TRAITS.get(scheme, Traits())
            if traits.parameter_server or traits.splits_model or traits.horovod:
                why = (
                    "its ranks are not in lock-step (a master serves while workers train), so "
                    "SyncBatchNorm's collective in each forward pass would hang"
                    if traits.parameter_server
                    else "its stages see different micro-batches of different layers"
                    if traits.splits_model
                    else "Horovod's optimizer has no torch process group to synchronise over; use scheme allreduce"
                )
                raise OptionError(
                    at + "batchnorm",
                    f"{merged['batchnorm']} is not available with scheme {scheme}: {why}. Use local "
                    "(the running statistics are averaged before every evaluation in every scheme)",
                )
    loader = merged["loader"]
    if not isinstance(loader, dict):
        raise OptionError(at + "loader", f"must be a mapping such as {{workers: 4, prefetch: 2}}, got {loader!r}")
    unknown = sorted(set(loader) - set(LOADER))
    if unknown:
        raise OptionError(f"{at}loader.{unknown[0]}", f"unknown loader option; allowed: {', '.join(LOADER)}")
    loader = {**LOADER, **loader}
    if loader["workers"] is not None:
        _int(at + "loader.workers", loader["workers"], 0, 256)
    _int(at + "loader.prefetch", loader["prefetch"], 1, 1024)
    _bool(at + "loader.pin_memory", loader["pin_memory"], nullable=True)
    merged["loader"] = loader
    return merged
