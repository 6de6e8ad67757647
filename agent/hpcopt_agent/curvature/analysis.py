"""One fold's analysis, as a campaign's ``analysis:`` section asks (``hpcopt.core.analysis``
checks it and fixes its cost): the result is a JSON-able mapping of small arrays and
what it cost.

    {"parameters": 2410, "samples": 512,
     "hessian": {"eigenvalues": [...], "residuals": [...], "steps": 20,
                 "density": {"grid": [...], "density": [...], "nodes": [[...]],
                             "weights": [[...]], "sigma": 0.01},
                 "trace": [...]},          # one per epoch checkpoint, when asked
     "landscape": {"directions": "random",
                   "line": {"offsets": [...], "loss": [...]},
                   "surface": {"xs": [...], "ys": [...], "loss": [[...]]},
                   "trajectory": {"xs": [...], "ys": [...], "off_plane": [...]}},
     "cost": {"hvps": 50, "passes": 142, "samples": 512, "seconds": 3.1}}

Every rank of the fold group calls :func:`analyse` with its share of the samples and
gets the same result; the fold leader reports it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from hpcopt_agent.curvature import landscape as ls
from hpcopt_agent.curvature.lanczos import density, top_eigen
from hpcopt_agent.curvature.loss import FoldLoss

Say = Callable[[str], None]


def analyse(
    op: FoldLoss,
    options: dict[str, dict[str, Any]],
    *,
    seed: int,
    checkpoints: Sequence[torch.Tensor] = (),
    say: Say | None = None,
) -> dict[str, Any]:
    """The analysis of the model at its current weights. ``checkpoints`` are the flat
    weights at each epoch's end, oldest first (for the trace and the trajectory)."""
    started = time.perf_counter()
    out: dict[str, Any] = {"parameters": op.size, "samples": op.samples}
    h, land = options.get("hessian"), options.get("landscape")
    eigen = None
    if h is not None:
        want_vectors = land is not None and land["directions"] == "eigen"
        eigen = top_eigen(op.hvp, op.size, h["top_k"], h["steps"], seed, vectors=want_vectors, device=op.device)
        hess: dict[str, Any] = {"eigenvalues": eigen.values, "residuals": eigen.residuals, "steps": eigen.steps}
        _say(say, f"top {len(eigen.values)} Hessian eigenvalues in {op.hvps} HVPs: λ_max {eigen.values[0]:.6g}")
        if h["density_samples"]:
            dens = density(op.hvp, op.size, h["density_samples"], h["density_steps"], seed, device=op.device)
            hess["density"] = {
                "grid": dens.grid,
                "density": dens.density,
                "nodes": dens.nodes,
                "weights": dens.weights,
                "sigma": dens.sigma,
            }
            _say(say, f"spectral density from {h['density_samples']} start vector(s), {op.hvps} HVPs so far")
        if h["trace"] and checkpoints:
            trace = []
            for w in checkpoints:
                with op.at(w):
                    trace.append(top_eigen(op.hvp, op.size, 1, h["steps"], seed, device=op.device).values[0])
            hess["trace"] = trace
            _say(say, f"λ_max at {len(trace)} epoch checkpoint(s), {op.hvps} HVPs so far")
        out["hessian"] = hess
    if land is not None:
        out["landscape"] = _landscape(op, land, eigen, seed, checkpoints)
        _say(say, f"loss surfaces: {op.passes} loss passes")
    out["cost"] = {
        "hvps": op.hvps,
        "passes": op.passes,
        "samples": op.samples,
        "seconds": round(time.perf_counter() - started, 3),
    }
    return out


def _landscape(
    op: FoldLoss, land: dict[str, Any], eigen: Any, seed: int, checkpoints: Sequence[torch.Tensor]
) -> dict[str, Any]:
    if land["directions"] == "eigen":
        assert eigen is not None and eigen.vectors is not None and len(eigen.vectors) >= 2
        d1, d2 = (ls.eigen_direction(op, v) for v in eigen.vectors[:2])
    else:
        d1, d2 = ls.random_direction(op, seed + 101), ls.random_direction(op, seed + 102)
    result: dict[str, Any] = {"directions": land["directions"]}
    extent = land["extent"]
    if land["points"]:
        offsets = ls.grid(extent, land["points"])
        result["line"] = {"offsets": offsets, "loss": ls.surface_1d(op, d1, offsets)}
    if land["grid"]:
        axis = ls.grid(extent, land["grid"])
        result["surface"] = {"xs": axis, "ys": axis, "loss": ls.surface_2d(op, d1, d2, axis, axis)}
        if land["trajectory"] and checkpoints:
            p = ls.project(op.weights(), checkpoints, d1, d2)
            result["trajectory"] = {"xs": p.xs, "ys": p.ys, "off_plane": p.off_plane}
    return result


def _say(say: Say | None, line: str) -> None:
    if say is not None:
        say(line)
