"""Population-based training on the agent: an interval (a trial of ``algorithm: pbt``)
starts from its parent's fold checkpoint, with its own hyper-parameters.

The server names the parent (``Trial.lineage``, its number and id) only when every fold
of it reported a checkpoint. The agent reads the parent's file where it would have
written it, ``ROOT/<server_id>/<campaign>/<parent_trial_id>/fold<k>.pt``, so agents of a
PBT campaign share one ``--checkpoint-dir`` (a shared file system on a cluster), and it
accepts the file only if it says it is that trial's fold. An interval whose parent
cannot be read fails, saying why: it never trains from scratch in its place.

After the parent's weights and optimizer state are loaded, each optimizer's
hyper-parameters (``lr``, ``momentum``, ``weight_decay``, ... of every param group) are
set back to what ``Task.optimizer`` made of this interval's params: the copied optimizer
state (moments, buffers) is kept, the copied hyper-parameters are not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hpcopt_agent import checkpoint


@dataclass(frozen=True)
class Parent:
    """The checkpoint an interval starts from: trial ``number`` (id ``trial_id``) at
    epoch ``epoch`` (the interval's start)."""

    trial_id: int
    number: int
    epoch: int


def load_parent(
    parent: Parent, root: Path, server_id: str, campaign_id: int, fold: int
) -> tuple[dict[str, Any] | None, str]:
    """(the parent's checkpoint of ``fold``, "") or (None, why not)."""
    path = checkpoint.fold_path(root, server_id, campaign_id, parent.trial_id, fold)
    uri = (root.resolve() / path.relative_to(root)).as_uri()
    state, why = checkpoint.load(uri, root, server_id, campaign_id, parent.trial_id, fold)
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
