"""``training.options.batchnorm``: whose batch statistics a BatchNorm layer normalises
with while training.

- ``local`` (the default): each rank's own micro-batch, as the model was built.
- ``global``: the whole fold group's batch, through torch's ``SyncBatchNorm`` (a
  collective in every forward pass), over the fold group's process group.
- ``node``: the batch of the fold group's ranks on this node (their own process group),
  the usual compromise when the global one crosses a slow link.

Either way the running statistics are averaged before every evaluation (the schemes'
consensus). ``SyncBatchNorm`` runs on GPUs only, so on CPUs a fold asked for ``node`` or
``global`` is refused at its start, naming the option; the spec refuses them under
schemes whose ranks are not in lock-step (the parameter servers), a pipeline and Horovod.
"""

from __future__ import annotations

from typing import Any

from mpi4py import MPI
from torch import nn

from hpcopt_agent.comm import Comms


def _has_batchnorm(models: dict[str, nn.Module]) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for model in models.values() for m in model.modules())


def _node_group(comms: Comms) -> Any:
    """The torch process group of the fold group's ranks on this host (collective over
    the fold group; each node's members make theirs)."""
    host = MPI.Get_processor_name()
    members = comms.fold.allgather((comms.world.rank, host))
    return comms.subgroup([rank for rank, name in members if name == host])


def synchronise(models: dict[str, nn.Module], mode: str, comms: Comms) -> dict[str, nn.Module]:
    """``models`` with their BatchNorm layers as ``SyncBatchNorm`` over the chosen ranks
    (the same parameter and buffer tensors, so optimizers and checkpoints are
    unaffected); ``local``, a fold group of one rank or a model without BatchNorm: as
    they are. Raises ``ValueError`` naming the option on a device SyncBatchNorm does not
    run on."""
    if mode == "local" or comms.fold.size == 1 or not _has_batchnorm(models):
        return models
    if comms.device.type != "cuda":
        raise ValueError(
            f"training.options.batchnorm: {mode} synchronises BatchNorm's batch statistics in every forward "
            f"pass through torch's SyncBatchNorm, which runs on GPUs only; this fold group trains on "
            f"{comms.device.type}. Use local (the running statistics are still averaged before every evaluation)"
        )
    group = comms.pg if mode == "global" else _node_group(comms)
    convert = nn.SyncBatchNorm.convert_sync_batchnorm
    return {name: convert(model, group) for name, model in models.items()}  # type: ignore[no-untyped-call]
