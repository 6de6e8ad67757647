"""PowerSGD for DASO's non-blocking global syncs (``daso.global_compression: powersgd``).

DASO's global sync averages *weights*, not gradients, and only one rank per node (the
sender, rotating over the node's local indices) takes part. Weights are not low-rank;
what a sender's weights moved since its peers last agreed is closer to it. So each
channel (the ranks of one local index, one per node) keeps:

- ``ref``: the mean weights the channel last agreed on, the same bits on every member;
- ``q``: PowerSGD's warm-started right factors, one per weight matrix.

There is no separate error-feedback memory: ``ref`` moves only by what was sent, so
what an exchange left out is still in ``weights - ref`` at the next one (adding a
residual on top, as gradient PowerSGD does, would send it twice).

An exchange (``start`` at the send, ``finish`` at the merge ``wait`` batches later):

1. ``move = weights - ref``; per weight matrix M (n x m, reshaped as PowerSGD
   does gradients) P = M Q; vectors (biases, norms) and matrices too small to gain go
   in full. One asynchronous allreduce of [P..., vectors] overlaps the node's training,
   as the uncompressed sync's allreduce does.
2. At the merge: P summed is orthonormalised (the same bits on every member), Q = Mᵀ P
   is averaged (a second, small, blocking allreduce), and the mean move is P Qᵀ for each
   matrix and the vectors' mean. ``ref += mean move``; the sender merges ``ref`` as the
   nodes' mean weights.

A blocking sync leaves every rank of the fold group the exact mean: every rank then
takes its weights as ``ref``. The first ``ref`` is the weights at
the fold's start, the same on every rank (built from the fold's seed, or read from one
checkpoint, whose saved state then replaces it). The state is in the fold's checkpoint
as tensors, so a resumed fold goes on with the same factors.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from hpcopt_agent.schemes.powersgd import compressible, orthonormalise

#: A matrix is compressed when its factors are at least this many times smaller.
MIN_RATE = 2.0
EPS = 1e-8


class WeightsPowerSGD:
    """One rank's PowerSGD state for its channel's global syncs (see the module)."""

    def __init__(self, shapes: list[torch.Size], rank: int, seed: int = 0) -> None:
        self.rank = rank
        self.seed = seed
        #: Per parameter in the flat layout: (offset, numel, (n, m, r)) for a compressed
        #: matrix, (offset, numel, None) for one sent in full.
        self.layout: list[tuple[int, int, tuple[int, int, int] | None]] = []
        at = 0
        for shape in shapes:
            numel = int(torch.Size(shape).numel())
            plan = None
            if len(shape) > 1:
                n, m = int(shape[0]), numel // int(shape[0])
                if compressible(n, m, rank, MIN_RATE):
                    plan = (n, m, min(n, m, rank))
            self.layout.append((at, numel, plan))
            at += numel
        self.numel = at
        self.ref: torch.Tensor | None = None
        self.q: torch.Tensor | None = None
        self.move: torch.Tensor | None = None  # the exchange in flight's move

    @property
    def ready(self) -> bool:
        """Whether the channel has a mean to measure moves from (else: a full exchange)."""
        return self.ref is not None

    def agree(self, weights: torch.Tensor) -> None:
        """After a blocking sync: ``weights`` (every rank's the same) are the reference."""
        self.ref = weights.detach().float().clone()

    def _q(self, device: torch.device) -> torch.Tensor:
        if self.q is None:
            size = sum(m * r for _, _, plan in self.layout if plan for _, m, r in [plan])
            gen = torch.Generator().manual_seed(self.seed)
            self.q = torch.randn(size, generator=gen, dtype=torch.float32).to(device)
            for q in self._views(self.q, which="q"):
                orthonormalise(q, EPS)
        return self.q

    def _views(self, flat: torch.Tensor, which: str) -> list[torch.Tensor]:
        """The per-matrix views of a flat P (n x r each) or Q (m x r each)."""
        out, at = [], 0
        for _, _, plan in self.layout:
            if plan is None:
                continue
            n, m, r = plan
            rows = n if which == "p" else m
            out.append(flat[at : at + rows * r].view(rows, r))
            at += rows * r
        return out

    def start(self, weights: torch.Tensor, group: Any) -> tuple[torch.Tensor, Any]:
        """Step 1 (on a sender): the buffer [P..., vectors] and its asynchronous allreduce."""
        assert self.ref is not None
        move = weights.detach().float() - self.ref
        self.move = move
        q = self._q(move.device)
        parts, vectors = [], []
        for (at, numel, (n, m, _)), qv in zip(self._matrices(), self._views(q, "q"), strict=True):
            parts.append((move[at : at + numel].view(n, m) @ qv).reshape(-1))
        for at, numel, plan in self.layout:
            if plan is None:
                vectors.append(move[at : at + numel])
        buffer = torch.cat(parts + vectors) if parts or vectors else move.new_zeros(0)
        return buffer, dist.all_reduce(buffer, group=group, async_op=True)

    def _matrices(self) -> list[tuple[int, int, tuple[int, int, int]]]:
        return [(at, numel, plan) for at, numel, plan in self.layout if plan is not None]

    def finish(self, buffer: torch.Tensor, group: Any, nodes: int) -> torch.Tensor:
        """Step 2 (on a sender, after the allreduce of ``start`` completed): the nodes'
        mean weights as this channel now agrees on them (``ref``, updated)."""
        assert self.ref is not None and self.move is not None and self.q is not None
        move, self.move = self.move, None
        matrices = self._matrices()
        p_size = sum(n * r for _, _, (n, _, r) in matrices)
        ps = self._views(buffer[:p_size], "p")
        for p in ps:
            orthonormalise(p, EPS)
        qs = self._views(self.q, "q")
        for (at, numel, (n, m, _)), p, q in zip(matrices, ps, qs, strict=True):
            torch.matmul(move[at : at + numel].view(n, m).t(), p, out=q)
        if len(self.q):
            dist.all_reduce(self.q, group=group)
            self.q.div_(nodes)
        mean = torch.empty_like(move)
        for (at, numel, (n, m, _)), p, q in zip(matrices, ps, qs, strict=True):
            torch.matmul(p, q.t(), out=mean[at : at + numel].view(n, m))
        at_v = p_size
        for at, numel, plan in self.layout:
            if plan is None:
                mean[at : at + numel] = buffer[at_v : at_v + numel] / nodes
                at_v += numel
        self.ref = self.ref + mean
        return self.ref

    def state(self) -> dict[str, Any]:
        """The tensors a checkpoint keeps (None: not yet there)."""
        return {"ref": self.ref, "q": self.q}

    def load_state(self, state: dict[str, Any]) -> None:
        for key in ("ref", "q"):
            value = state.get(key)
            setattr(self, key, None if value is None else torch.as_tensor(value).float().clone())
