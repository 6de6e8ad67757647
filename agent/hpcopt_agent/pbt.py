"""Population-based training on the agent: an interval (a trial of ``algorithm: pbt``)
starts from its parent's fold checkpoint, with its own hyper-parameters.

The server names the parent (``Trial.lineage``, its number and id) only when every fold
of it reported a checkpoint. The agent reads the parent's file where it would have
written it, ``ROOT/<server_id>/<campaign>/<parent_trial_id>/fold<k>.pt``, so agents of a
PBT campaign share one ``--checkpoint-dir`` (a shared file system on a cluster), and it
accepts the file only if it says it is that trial's fold.

Before any fold starts, the trial group's leader loads each fold's checkpoint of the
parent (memory-mapped: no tensor is read) (:func:`readable_parent`). When one does not
load, it tells the server (``ReportUnreadableParent``), which records it (that trial is
no member's parent again) and re-plans the interval: another parent, or the member's own
previous interval. The leader checks the new parent the same way. When the unreadable
parent was the member's own last interval and no other member has reached that epoch
yet, the server keeps the parent for now: the leader waits, says so (once, then every
5 minutes) and asks again, so the member copies the first readable interval at that
epoch. An interval whose parent still cannot be read (a server that does not re-plan,
or a fold's rank that sees another file system than its leader) fails, saying why: it
never trains from scratch in its place.

After the parent's weights and optimizer state are loaded, each optimizer's
hyper-parameters (``lr``, ``momentum``, ``weight_decay``, ... of every param group) are
set back to what ``Task.optimizer`` made of this interval's params: the copied optimizer
state (moments, buffers) is kept, the copied hyper-parameters are not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hpcopt.core.records import Trial
from hpcopt.errors import ApiError
from hpcopt_agent import checkpoint

log = logging.getLogger(__name__)
#: Re-plans one interval asks for at most (the server allows 32).
MAX_REPLANS = 32
#: How often an interval waiting for a readable parent says so.
WAIT_LOG_SECONDS = 300.0


@dataclass(frozen=True)
class Parent:
    """The checkpoint an interval starts from: trial ``number`` (id ``trial_id``) at
    epoch ``epoch`` (the interval's start)."""

    trial_id: int
    number: int
    epoch: int


def load_parent(
    parent: Parent, root: Path, server_id: str, campaign_id: int, fold: int, *, mmap: bool = False
) -> tuple[dict[str, Any] | None, str]:
    """(the parent's checkpoint of ``fold``, "") or (None, why not); with ``mmap`` its
    tensors are mapped, not read (a check that it loads)."""
    path = checkpoint.fold_path(root, server_id, campaign_id, parent.trial_id, fold)
    uri = (root.resolve() / path.relative_to(root)).as_uri()
    state, why = checkpoint.load(uri, root, server_id, campaign_id, parent.trial_id, fold, mmap=mmap)
    if state is None:
        return None, (
            f"PBT: cannot start from trial #{parent.number}'s checkpoint of fold {fold}: {why}. Agents of a pbt "
            "campaign must share one --checkpoint-dir (a shared file system), where every member's checkpoints are"
        )
    if int(state.get("epoch", -1)) != parent.epoch or int(state.get("batch", 0)) != 0:
        return None, (
            f"PBT: trial #{parent.number}'s checkpoint of fold {fold} is at epoch {state.get('epoch')} batch "
            f"{state.get('batch')}, not at the end of epoch {parent.epoch} where this interval starts"
        )
    return state, ""


def unreadable_fold(
    parent: Parent, root: Path, server_id: str, campaign_id: int, folds: Iterable[int]
) -> tuple[int, str] | None:
    """The first of ``folds`` whose checkpoint of ``parent`` does not load, and why;
    None when all do."""
    for fold in folds:
        _, why = load_parent(parent, root, server_id, campaign_id, fold, mmap=True)
        if why:
            return fold, why
    return None


def readable_parent(
    report: Callable[[int, int, str], Trial],
    trial: Trial,
    root: Path,
    server_id: str,
    folds: Iterable[int],
    pause: Callable[[float], bool],
    wait_seconds: float,
) -> Trial | None:
    """``trial`` once its parent's checkpoints of ``folds`` (those it will start) all
    load. Each parent that does not is reported (``report(parent_trial_id, fold, why)``,
    the agent client's ``parent_unreadable``), and the interval the server re-planned is
    checked in turn. While the server keeps the parent (another member has yet to reach
    the epoch), it asks again every ``wait_seconds`` (``pause(s)``: False when the
    agent is told to stop; then None). Returns the trial with an unreadable parent only
    from a server that does not re-plan, or after :data:`MAX_REPLANS`; its folds then
    fail, saying why."""
    need = sorted(folds)
    refused: dict[int, tuple[int, str]] = {}  # parent trial id -> (fold, why)
    waiting_since, said = 0.0, 0.0
    while True:
        parent = parent_of(trial)
        if parent is None:
            return trial
        known = refused.get(parent.trial_id)
        if known is None:
            found = unreadable_fold(parent, root, server_id, trial.campaign_id, need)
            if found is None or len(refused) >= MAX_REPLANS:
                return trial
            refused[parent.trial_id] = known = found
        else:  # the server kept it: another member is still training toward this epoch
            now = time.monotonic()
            waiting_since = waiting_since or now
            if now - said >= WAIT_LOG_SECONDS:
                said = now
                log.info(
                    "trial #%d waits for another member to reach epoch %d with checkpoints it can read (%.0f s so far)",
                    trial.number,
                    parent.epoch,
                    now - waiting_since,
                )
            if not pause(wait_seconds):
                return None
        fold, why = known
        try:
            again = report(parent.trial_id, fold, why[:1000])
        except ApiError as exc:
            log.warning("trial #%d: %s; the server did not re-plan the interval (%s)", trial.number, why, exc)
            return trial
        moved = parent_of(again)
        if moved is None or moved.trial_id != parent.trial_id:
            start = f"trial #{moved.number}'s epoch {moved.epoch}" if moved else "scratch"
            log.warning("trial #%d: %s; the server re-planned it to start from %s", trial.number, why, start)
            waiting_since = said = 0.0
        trial = again


def parent_of(trial: Trial) -> Parent | None:
    """The checkpoint a PBT interval starts from (None: none, or not an interval)."""
    lin = trial.lineage
    if lin is None or lin.parent is None or not lin.parent_trial_id:
        return None
    return Parent(lin.parent_trial_id, lin.parent, lin.start_epoch)


def hyper_parameters(optimizers: dict[str, torch.optim.Optimizer]) -> dict[str, list[dict[str, Any]]]:
    """Each optimizer's param-group settings, without the parameters themselves."""
    return {k: [{n: v for n, v in g.items() if n != "params"} for g in o.param_groups] for k, o in optimizers.items()}


def restore_hyper_parameters(
    optimizers: dict[str, torch.optim.Optimizer], saved: dict[str, list[dict[str, Any]]]
) -> None:
    """Sets the settings :func:`hyper_parameters` took back on the (loaded) optimizers."""
    for key, groups in saved.items():
        for group, settings in zip(optimizers[key].param_groups, groups, strict=True):
            group.update(settings)


def shape_error(parent: Parent, exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (
        f"PBT: trial #{parent.number}'s weights do not fit the model built from this interval's params "
        f"({text[0][:300] if text else type(exc).__name__}): a parameter that changes the model's shape must "
        "not be in algorithm.options.mutable"
    )


def check_mutable(task: Any, spec: dict[str, Any]) -> None:
    """For a ``pbt`` campaign: ValueError naming the first parameter in
    ``algorithm.options.mutable`` (default: every parameter) whose ends (or choices)
    build a model of another shape than the middle of the space does. PBT copies a
    member's weights into a model built from perturbed params, which must fit them.
    Models are built on the ``meta`` device (no memory); a build that fails proves
    nothing and is skipped (the interval will say why)."""
    algorithm = spec.get("algorithm") or {}
    if algorithm.get("name") != "pbt":
        return
    space: dict[str, Any] = spec.get("space") or {}
    mutable = (algorithm.get("options") or {}).get("mutable") or list(space)
    base = {name: _middle(p) for name, p in space.items()}
    reference = _shapes(task, base)
    if reference is None:
        return
    for name in mutable:
        for value in _ends(space[name]):
            shapes = _shapes(task, {**base, name: value})
            if shapes is None or shapes == reference:
                continue
            key = next(k for k in sorted(set(shapes) | set(reference)) if shapes.get(k) != reference.get(k))
            raise ValueError(
                f"algorithm.options.mutable: {name!r} changes the model's shape ({key}: {reference.get(key)} at "
                f"{name}={base[name]!r}, {shapes.get(key)} at {name}={value!r}). PBT copies weights between members, "
                "so list in mutable only parameters that keep the shape; the others are copied with the weights"
            )


def _middle(p: dict[str, Any]) -> Any:
    if p["type"] == "categorical":
        return p["choices"][0]
    low, high = float(p["low"]), float(p["high"])
    mid = (low * high) ** 0.5 if p.get("scale") == "log" else (low + high) / 2
    return round(mid) if p["type"] == "int" else mid


def _ends(p: dict[str, Any]) -> list[Any]:
    if p["type"] == "categorical":
        return list(p["choices"])
    return [int(p["low"]), int(p["high"])] if p["type"] == "int" else [float(p["low"]), float(p["high"])]


def _shapes(task: Any, params: dict[str, Any]) -> dict[str, tuple[int, ...]] | None:
    try:
        with torch.device("meta"):
            built = task.build(params)
    except Exception:
        return None
    models = built if isinstance(built, dict) else {"model": built}
    return {
        f"{k}.{name}": tuple(t.shape)
        for k, m in models.items()
        for name, t in m.state_dict().items()
        if isinstance(t, torch.Tensor)
    }
