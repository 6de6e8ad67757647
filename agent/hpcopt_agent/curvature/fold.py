"""The analysis at a fold's end, on the fold group's own ranks (``FoldTrainer`` calls it
when the campaign has an ``analysis`` section).

- The weights are the fold leader's (fold rank 0: the trained model under allreduce,
  Horovod and DASO, where every rank holds the same; the master's centre under the
  parameter-server schemes), broadcast to the fold group. A copy is analysed, in fp32
  when the model trains in bf16 or fp16, so training state is never touched.
- The samples are the first ones of the fold's training indices, as many as
  ``hpcopt.core.analysis.samples_for`` allows, dealt over the fold group's ranks like an
  epoch's batches; the Hessian-vector products are summed over the fold's process group.
- The epoch snapshots (for the λ_max trace and the trajectory) are the fold leader's
  weights at each epoch's end, kept in memory only when asked for and thinned to at most
  :data:`SNAPSHOT_BYTES`; the epochs before a resume are not among them (the result
  says which epochs it has).

Every rank returns the same result; the fold leader reports it.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI
from torch import nn

from hpcopt.core import analysis as spec
from hpcopt.core.analysis_doc import check_document
from hpcopt_agent.curvature.analysis import analyse
from hpcopt_agent.curvature.lanczos import slq_moment
from hpcopt_agent.curvature.loss import FoldLoss, Reduce, no_reduce

log = logging.getLogger(__name__)

#: The epoch snapshots kept for the trace and the trajectory, at most (bytes).
SNAPSHOT_BYTES = 256 << 20


class Snapshots:
    """The fold leader's flat weights at chosen epoch ends (the others keep none)."""

    def __init__(self, options: dict[str, Any] | None, epochs: int, leader: bool) -> None:
        h, land = (options or {}).get("hessian"), (options or {}).get("landscape")
        self.wanted = leader and bool((h and h["trace"]) or (land and land["trajectory"] and land["grid"]))
        self.epochs = epochs
        self.taken: list[int] = []
        self.weights: list[torch.Tensor] = []
        self.stride = 1

    def keep(self, epoch: int, model: nn.Module) -> None:
        """Keeps the weights after ``epoch`` (counted from 1) when it is on the stride."""
        if not self.wanted:
            return
        params = [p for p in model.parameters() if p.requires_grad]
        size = sum(p.numel() for p in params) * 4
        self.stride = max(1, math.ceil(self.epochs * size / SNAPSHOT_BYTES))
        if epoch % self.stride and epoch != self.epochs:
            return
        self.weights.append(torch.cat([p.detach().float().reshape(-1).cpu() for p in params]))
        self.taken.append(epoch)


def _broadcast(comm: MPI.Comm, flat: torch.Tensor | None, n: int) -> torch.Tensor:
    buf = flat.numpy().astype(np.float32) if flat is not None else np.empty(n, np.float32)
    comm.Bcast(buf, root=0)
    return torch.from_numpy(buf)


def _reduce(pg: Any, comm: MPI.Comm) -> Reduce:
    """A sum over the fold group's process group (gloo, NCCL on GPUs), which every fold
    group of more than one rank has (``Comms.pg``)."""
    if comm.size == 1:
        return no_reduce
    if pg is None:
        raise ValueError(f"a fold group of {comm.size} ranks has no torch process group to sum the products over")

    def over_pg(t: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(t, group=pg)
        return t

    return over_pg


def analyse_fold(
    *,
    options: dict[str, Any],
    model: nn.Module,
    loss: Callable[[nn.Module, Any], torch.Tensor],
    read: Callable[[np.ndarray], list[Any]],
    train: np.ndarray,
    epochs: int,
    comm: MPI.Comm,
    pg: Any,
    device: torch.device,
    snapshots: Snapshots,
    seed: int,
) -> dict[str, Any]:
    """The analysis of one trained fold (a collective over the fold group ``comm``).
    ``read`` gives this rank's batches of the sample indices it is handed."""
    samples = spec.samples_for(options, epochs=epochs, train_samples=len(train))
    mine = train[:samples][comm.rank :: comm.size]
    copy_ = copy.deepcopy(model).to(device)
    if any(p.dtype in (torch.float16, torch.bfloat16) for p in copy_.parameters()):
        copy_ = copy_.float()
    params = [p for p in copy_.parameters() if p.requires_grad]
    n = sum(p.numel() for p in params)
    final = _broadcast(
        comm, torch.cat([p.detach().float().reshape(-1).cpu() for p in params]) if comm.rank == 0 else None, n
    )
    count = comm.bcast(len(snapshots.weights) if comm.rank == 0 else 0, root=0)
    taken = comm.bcast(snapshots.taken if comm.rank == 0 else [], root=0)
    points = [_broadcast(comm, snapshots.weights[i] if comm.rank == 0 else None, n) for i in range(count)]
    dtype = params[0].dtype
    op = FoldLoss(copy_, loss, read(mine), _reduce(pg, comm))
    op.assign(final.to(device=device, dtype=dtype))
    result = analyse(
        op,
        options,
        seed=seed,
        checkpoints=[w.to(device=device, dtype=dtype) for w in points],
        say=(lambda line: log.info("analysis: %s", line)) if comm.rank == 0 else None,
    )
    if points:
        result["epochs"] = taken
    result["cost"]["share_planned"] = round(
        spec.planned_share(options, samples, epochs=epochs, train_samples=len(train)), 4
    )
    return check_document(result)  # what the server will take, or why not, here


def fold_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The scalars of an analysis a fold reports with its metrics: each top eigenvalue
    (``hessian_eig_1`` the largest), the density's trace estimate, and what it cost."""
    out: dict[str, float] = {}
    h = result.get("hessian") or {}
    for i, value in enumerate(h.get("eigenvalues") or [], start=1):
        out[f"hessian_eig_{i}"] = float(value)
    dens = h.get("density")
    if dens:
        out["hessian_trace"] = slq_moment(dens["nodes"], dens["weights"]) * result["parameters"]
    out["analysis_seconds"] = float(result["cost"]["seconds"])
    out["analysis_samples"] = float(result["samples"])
    return out
