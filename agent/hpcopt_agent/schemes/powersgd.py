"""PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019) as a DDP comm hook whose
collectives are blocking calls on the autograd thread.

torch's ``powerSGD_hook`` chains its three allreduces through future callbacks and
waits on the next allreduce *inside* a callback. Under gloo (every CPU run) that wait
never returns once the model is larger than a toy: on the training benchmark's MLP
(1024 x 1024 hidden layer) every rank stopped at the first compressed step, at 2 and 4
ranks, with more gloo threads too. This hook runs the same algorithm, on torch's
``PowerSGDState`` (so the step count, the error-feedback memories, the warm-start
factors and the random state are where the scheme's checkpoint reads them), with the
allreduces done one after another before it returns a completed future. What it gives
up is overlapping the factors' exchange with the rest of the backward pass; the plain
steps before ``start_powerSGD_iter`` still exchange asynchronously.

Per bucket, as torch's hook: vectors (biases, norms) and matrices too small to gain are
averaged in full; each gradient matrix M (n x m) plus its error feedback becomes
P = M Q (Q warm-started from the last step), P averaged and orthonormalised,
Q = Mᵀ P averaged, and M ≈ P Qᵀ; what the approximation left out is the next step's
error feedback.
"""

from typing import Any

import torch
import torch.distributed as dist


def orthonormalise(m: torch.Tensor, eps: float) -> None:
    """Gram-Schmidt on the columns of ``m``, in place."""
    for i in range(m.shape[1]):
        col = m[:, i : i + 1]
        col.div_(torch.linalg.vector_norm(col) + eps)
        if i + 1 < m.shape[1]:
            rest = m[:, i + 1 :]
            rest.sub_(col @ (col.t() @ rest))


def compressible(n: int, m: int, rank: int, min_rate: float) -> bool:
    """Whether an n x m matrix's rank-``rank`` factors are ``min_rate`` times smaller than it."""
    return (n + m) * min(n, m, rank) * min_rate < n * m


def _average(tensor: torch.Tensor, group: Any, size: int) -> None:
    dist.all_reduce(tensor, group=group)
    tensor.div_(size)


def hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:  # type: ignore[name-defined]
    """The comm hook (``ddp.register_comm_hook(state, hook)``; DDP checks the annotations)."""
    group = state.process_group
    size = dist.get_world_size(group)
    buffer = bucket.buffer()
    done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    if state.iter < state.start_powerSGD_iter:
        state.maybe_increase_iter(bucket)
        work = dist.all_reduce(buffer, group=group, async_op=True).get_future()
        averaged: torch.futures.Future[torch.Tensor] = work.then(lambda f: f.value()[0].div_(size))
        return averaged
    index = bucket.index()
    if state.use_error_feedback:
        if index in state.error_dict:
            buffer.add_(state.error_dict[index])
        else:
            state.error_dict[index] = torch.zeros_like(buffer)
        before = buffer.clone()
    rank, eps = state.matrix_approximation_rank, max(state.orthogonalization_epsilon, 1e-12)
    matrices, vectors = [], []
    for grad in bucket.gradients():  # views of the bucket's buffer
        matrix = grad.view(grad.shape[0], -1) if grad.ndim > 1 else None
        if matrix is not None and compressible(matrix.shape[0], matrix.shape[1], rank, state.min_compression_rate):
            matrices.append(matrix)
        else:
            vectors.append(grad)
    if vectors:
        flat = torch.cat([v.reshape(-1) for v in vectors])
        _average(flat, group, size)
        at = 0
        for v in vectors:
            v.copy_(flat[at : at + v.numel()].view_as(v))
            at += v.numel()
    shapes = [(m.shape[0], m.shape[1], min(m.shape[0], m.shape[1], rank)) for m in matrices]
    fresh = not state.warm_start or index not in state.p_memory_dict
    if fresh:
        state.p_memory_dict[index] = buffer.new_zeros(sum(n * r for n, _, r in shapes))
        state.q_memory_dict[index] = buffer.new_zeros(sum(m * r for _, m, r in shapes))
    ps, qs, at_p, at_q = [], [], 0, 0
    for n, m, r in shapes:
        ps.append(state.p_memory_dict[index][at_p : at_p + n * r].view(n, r))
        qs.append(state.q_memory_dict[index][at_q : at_q + m * r].view(m, r))
        at_p, at_q = at_p + n * r, at_q + m * r
    if fresh:  # the same seed on every rank: their Qs agree
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(state.rng.randint(1_000_000_000))
            for q in qs:
                q.copy_(torch.randn(*q.shape, dtype=q.dtype))
                orthonormalise(q, eps)
    if matrices:
        for matrix, q, p in zip(matrices, qs, ps, strict=True):
            torch.matmul(matrix, q, out=p)
        dist.all_reduce(state.p_memory_dict[index], group=group)  # orthonormalised: no division
        for p in ps:
            orthonormalise(p, eps)
        for matrix, p, q in zip(matrices, ps, qs, strict=True):
            torch.matmul(matrix.t(), p, out=q)
        _average(state.q_memory_dict[index], group, size)
        for matrix, p, q in zip(matrices, ps, qs, strict=True):
            torch.matmul(p, q.t(), out=matrix)
    if state.use_error_feedback:
        state.error_dict[index] = before - buffer
    if not state.warm_start:
        state.p_memory_dict.clear()
        state.q_memory_dict.clear()
    state.maybe_increase_iter(bucket)
    done.set_result(buffer)
    return done
