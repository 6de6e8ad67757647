"""What the curvature views cost, and whether their numbers are right, against
``hessian-eigenthings`` (the maintained reference) on the same model and samples.

    python benchmarks/curvature/cost.py [--reps 7] [--eigenthings PATH]

``PATH`` is a checkout of https://github.com/noahgolmant/pytorch-hessian-eigenthings
(it is not on PyPI; nothing of it is in this tree): without it, the peer's rows are
left out and say so. The model is the digits example's MLP (width 128, depth 2) after
one fold's training (4/5 of the 1,797 samples, ``--epochs`` epochs, batch 64, AdamW);
the curvature is taken over the first 512 training samples, as the defaults do. One
thread per process, so the two sides share the machine alike. Three tables:

1. seconds per Hessian-vector product (a 20-step Lanczos, divided by 20) and per
   surface point (one loss pass; the peer has no surfaces, so the floor is a plain
   ``torch.no_grad`` forward over the same samples), interleaved, median and range;
2. the top 3 eigenvalues of both after 60 Lanczos steps, and their relative difference;
3. the default analysis's cost as a share of the fold's training time (goal <= 3%), on
   a fold of ``--epochs`` epochs (so short that the ``min_samples`` floor binds), of 10
   and of 50 times as many (where ``max_share`` picks the samples): the share the
   sample count was planned for, and the measured one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from examples.digits.task import DigitsTask  # noqa: E402
from hpcopt.core.analysis import check, cost, planned_share, samples_for  # noqa: E402
from hpcopt_agent.curvature.analysis import analyse  # noqa: E402
from hpcopt_agent.curvature.lanczos import top_eigen  # noqa: E402
from hpcopt_agent.curvature.loss import FoldLoss  # noqa: E402

PARAMS = {"width": 128, "depth": 2, "activation": "relu", "dropout": 0.1, "lr": 1e-3, "weight_decay": 1e-4}


def train_fold(task: DigitsTask, epochs: int) -> tuple[nn.Module, torch.Tensor, float, list[torch.Tensor]]:
    """The model after one fold's training, its training indices, the seconds it took
    and the weights at each epoch's end."""
    torch.manual_seed(0)
    order = torch.randperm(len(task.y), generator=torch.Generator().manual_seed(0))
    train = order[: len(order) * 4 // 5]
    model = task.build(PARAMS)
    opt = task.optimizer(PARAMS, model)
    checkpoints = []
    started = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        perm = train[torch.randperm(len(train), generator=torch.Generator().manual_seed(epoch))]
        for i in range(0, len(perm), 64):
            idx = perm[i : i + 64]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(task.x[idx]), task.y[idx])
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
        checkpoints.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone())
    return model, train, time.perf_counter() - started, checkpoints


def _ce(model: nn.Module, batch: Any) -> torch.Tensor:
    return F.cross_entropy(model(batch[0]), batch[1])


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1e3:8.2f} ms [{min(xs) * 1e3:.2f}-{max(xs) * 1e3:.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--eigenthings", type=Path, help="a checkout of pytorch-hessian-eigenthings")
    args = ap.parse_args()
    torch.set_num_threads(1)
    peer: Any = None
    if args.eigenthings:
        sys.path.insert(0, str(args.eigenthings))
        import hessian_eigenthings.algorithms as peer_algorithms
        import hessian_eigenthings.operators as peer_operators

        peer = (peer_algorithms, peer_operators)
    task = DigitsTask()
    model, train, train_seconds, _ = train_fold(task, args.epochs)
    model.eval()
    idx = train[:512]
    batches = [(task.x[idx[i : i + 128]], task.y[idx[i : i + 128]]) for i in range(0, len(idx), 128)]
    op = FoldLoss(model, _ce, batches)
    n = op.size
    print(f"digits MLP: {n:,} parameters, {op.samples} samples, fold trained in {train_seconds:.2f} s")

    ours_hvp, peer_hvp, ours_point, floor_point = [], [], [], []
    for rep in range(args.reps):  # interleaved
        t = time.perf_counter()
        top_eigen(op.hvp, n, 3, 20, seed=rep)
        ours_hvp.append((time.perf_counter() - t) / 20)
        if peer is not None:
            hop = peer[1].HessianOperator(model, batches, lambda m, b: _ce(m, b))
            t = time.perf_counter()
            peer[0].lanczos(hop, k=3, max_iter=20, which="LA", seed=rep, reorthogonalize=True)
            peer_hvp.append((time.perf_counter() - t) / 20)
        t = time.perf_counter()
        op.value()
        ours_point.append(time.perf_counter() - t)
        t = time.perf_counter()
        with torch.no_grad():
            for b in batches:
                _ce(model, b)
        floor_point.append(time.perf_counter() - t)

    print("\n1. Seconds per unit of work (median [min-max] of", args.reps, "interleaved repetitions)\n")
    print(f"{'work':<28}{'hpcopt':>30}{'peer':>34}{'ratio':>8}")
    peer_text = spread(peer_hvp) if peer_hvp else "(no --eigenthings)"
    ratio = f"{statistics.median(ours_hvp) / statistics.median(peer_hvp):.2f}" if peer_hvp else "-"
    print(f"{'HVP (20-step Lanczos / 20)':<28}{spread(ours_hvp):>30}{peer_text:>34}{ratio:>8}")
    ratio = f"{statistics.median(ours_point) / statistics.median(floor_point):.2f}"
    print(f"{'surface point (loss pass)':<28}{spread(ours_point):>30}{spread(floor_point) + ' floor':>34}{ratio:>8}")

    print("\n2. Top 3 eigenvalues after 60 Lanczos steps\n")
    ours = top_eigen(op.hvp, n, 3, 60, seed=0)
    print(f"{'':<10}{'hpcopt':>14}{'residual':>12}{'peer':>14}{'rel. diff':>12}")
    theirs: list[float] = []
    if peer is not None:
        hop = peer[1].HessianOperator(model, batches, lambda m, b: _ce(m, b))
        res = peer[0].lanczos(hop, k=3, max_iter=60, which="LA", seed=0, reorthogonalize=True)
        theirs = sorted((float(x) for x in res.eigenvalues), reverse=True)
    for i, (v, r) in enumerate(zip(ours.values, ours.residuals, strict=True)):
        p = f"{theirs[i]:14.6g}{abs(v - theirs[i]) / abs(theirs[i]):12.2e}" if theirs else f"{'-':>14}{'-':>12}"
        print(f"λ_{i + 1:<8}{v:14.6g}{r:12.1e}{p}")

    print("\n3. The default analysis as a share of the fold's training (goal <= 3%)\n")
    options = check({"hessian": {}, "landscape": {}})
    planned = cost(options)
    print(f"per sample: {planned.hvps} HVPs and {planned.passes} loss passes (the defaults)")
    print(f"{'fold':<26}{'train s':>9}{'samples':>9}{'analysis s':>12}{'planned':>9}{'measured':>10}")
    for epochs in (args.epochs, 10 * args.epochs, 50 * args.epochs):
        fold_model, fold_train, seconds_trained, fold_checkpoints = train_fold(task, epochs)
        fold_model.eval()
        samples = samples_for(options, epochs=epochs, train_samples=len(fold_train))
        mine = fold_train[:samples]
        fold_batches = [(task.x[mine[i : i + 128]], task.y[mine[i : i + 128]]) for i in range(0, len(mine), 128)]
        fresh = FoldLoss(fold_model, _ce, fold_batches)
        t = time.perf_counter()
        out = analyse(fresh, options, seed=0, checkpoints=fold_checkpoints)
        seconds = time.perf_counter() - t
        assert out["cost"]["hvps"] == planned.hvps and out["cost"]["passes"] == planned.passes
        share = planned_share(options, samples, epochs=epochs, train_samples=len(fold_train))
        label = f"{epochs} epochs x {len(fold_train)}"
        print(
            f"{label:<26}{seconds_trained:9.2f}{samples:9d}{seconds:12.2f}{share:9.1%}{seconds / seconds_trained:10.1%}"
        )
    print(
        "\nplanned: the counted work (HVP_STEPS, PASS_STEPS) the sample count was chosen by; measured: seconds "
        "over the fold's training seconds. A fold too short for min_samples (64) at 3% costs more, and says so; "
        "near the floor the per-operation overhead the count leaves out (dispatch, reorthogonalisation over "
        "the parameters) shows."
    )


if __name__ == "__main__":
    main()
