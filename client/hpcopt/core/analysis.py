"""The curvature and landscape analysis a campaign asks for (``analysis:`` in the spec):
its options, declared once, and its cost, fixed before anything runs.

    analysis:
      on: best                  # the folds that would make their trial the best so far; all: every fold
      hessian: {top_k: 3, steps: 20, density_samples: 1}
      landscape: {directions: random, points: 21, grid: 11}
      max_share: 0.03

Each section is optional; an empty mapping takes every default. The cost is counted in
Hessian-vector products (HVPs, each about two backward passes over the samples the
loss is taken on) and loss passes (one forward pass over them per surface point). A
spec whose options would cost more than its own bound (``max_hvps``, ``max_points``)
is refused at submission, naming the field, so a computation never starts that could
not finish inside its bound.

How many of the fold's training samples the loss is taken on is fixed before it runs,
from numbers alone (never from a clock, so the same seed gives the same result): at
most ``samples``, and no more than ``max_share`` of what the fold's training cost,
counting an HVP per sample as :data:`HVP_STEPS` training steps per sample and a loss
pass as :data:`PASS_STEPS` (``samples_for``); never fewer than ``min_samples``, so on a
fold that trains in a second the analysis says it cost more than its share rather than
compute a Hessian of a handful of samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpcopt.core.options import Option, unknown
from hpcopt.errors import OptionError

HESSIAN: dict[str, Option] = {
    "top_k": Option(3, int, 1, 20, doc="Hessian eigenvalues computed, largest first."),
    "steps": Option(
        20, int, 1, 500, doc="Lanczos iterations for the top eigenvalues, one HVP each (at least ``top_k``)."
    ),
    "density_samples": Option(
        1, int, 0, 32, doc="Start vectors of the spectral density (stochastic Lanczos quadrature); 0: no density."
    ),
    "density_steps": Option(30, int, 2, 500, doc="Lanczos iterations per density start vector, one HVP each."),
    "trace": Option(
        False,
        bool,
        doc="The largest eigenvalue at every epoch's end as well (``steps`` HVPs per epoch): the "
        "edge-of-stability trace, from the weights the agent keeps in memory at each epoch's end.",
    ),
    "max_hvps": Option(
        200, int, 1, 1_000_000, doc="The cost bound: the options may not need more HVPs than this per fold."
    ),
}

LANDSCAPE: dict[str, Option] = {
    "directions": Option(
        "random",
        str,
        choices=("random", "eigen"),
        doc="Filter-normalised random directions, or the top two Hessian eigenvectors (needs ``hessian``).",
    ),
    "points": Option(21, int, 0, 1001, doc="Grid points of the 1-D surface along the first direction; 0: none."),
    "grid": Option(11, int, 0, 101, doc="Points per axis of the 2-D surface (``grid`` squared in all); 0: none."),
    "extent": Option(
        1.0,
        float,
        0.0,
        100.0,
        open_low=True,
        doc="How far the grid reaches along each direction, in units of the direction (1: as far as the "
        "weights' own norm).",
    ),
    "trajectory": Option(
        True, bool, doc="Project the weights at each epoch's end on the 2-D surface's plane (needs ``grid``)."
    ),
    "max_points": Option(
        500, int, 1, 1_000_000, doc="The cost bound: the 1-D and 2-D surfaces may not need more loss passes."
    ),
}

GENERAL: dict[str, Option] = {
    "on": Option(
        "best",
        str,
        choices=("best", "all"),
        doc="Which folds: ``best``, a fold whose result would make its trial the best so far (the incumbent, "
        "or a new Pareto member), asked of the server at the fold's end; ``all``, every fold.",
    ),
    "samples": Option(512, int, 1, 1_000_000, doc="Training samples of the fold the loss is taken on, at most."),
    "min_samples": Option(
        64,
        int,
        1,
        1_000_000,
        doc="Training samples at least, whatever ``max_share`` allows (the fold's all when fewer).",
    ),
    "max_share": Option(
        0.03,
        float,
        0.0,
        10.0,
        doc="The analysis's cost as a share of the fold's training at most, by counted work (0: no share bound, "
        "``samples`` are used).",
    ),
}

SECTIONS = {"hessian": HESSIAN, "landscape": LANDSCAPE}

#: What an HVP costs per sample, in training steps per sample (forward, backward and
#: the optimizer's step); Pearlmutter's product is a backward through a backward, about
#: twice a training step's passes, and measured at 0.8 to 1.4 of one
#: (``benchmarks/curvature/cost.py``): counted at the high end.
HVP_STEPS = 1.5
#: What one loss pass (a forward, no graph) costs per sample, in training steps.
PASS_STEPS = 0.35


@dataclass(frozen=True)
class Cost:
    """What one fold's analysis computes: HVPs, loss passes, over ``samples`` samples;
    ``per_epoch_hvps`` more for each epoch checkpoint when the trace is asked for."""

    hvps: int
    passes: int
    samples: int
    per_epoch_hvps: int = 0

    def total_hvps(self, epochs: int) -> int:
        return self.hvps + self.per_epoch_hvps * epochs


def check(analysis: Any, field: str = "analysis") -> dict[str, Any]:
    """The analysis section with every default filled in; OptionError naming the field
    otherwise (an unknown key, a bad value, a bound the options exceed)."""
    if analysis is None:
        return {}
    if not isinstance(analysis, dict):
        raise OptionError(field, f"must be a mapping with hessian and/or landscape, got {analysis!r}")
    unknown(analysis, {**{k: Option(None, dict) for k in SECTIONS}, **GENERAL}, field, "the analysis")
    out: dict[str, Any] = {k: opt.check(f"{field}.{k}", analysis.get(k, opt.default)) for k, opt in GENERAL.items()}
    for name, table in SECTIONS.items():
        if name not in analysis:
            continue
        given = analysis[name]
        if given is None:
            given = {}
        if not isinstance(given, dict):
            raise OptionError(f"{field}.{name}", f"must be a mapping of options ({{}}: the defaults), got {given!r}")
        unknown(given, table, f"{field}.{name}", f"analysis.{name}")
        out[name] = {k: opt.check(f"{field}.{name}.{k}", given.get(k, opt.default)) for k, opt in table.items()}
    if not any(name in out for name in SECTIONS):
        raise OptionError(field, "names nothing to compute: give hessian, landscape or both")
    if out["min_samples"] > out["samples"]:
        raise OptionError(
            f"{field}.min_samples", f"must be at most samples ({out['samples']}), got {out['min_samples']}"
        )
    _check_bounds(out, field)
    return out


def _check_bounds(a: dict[str, Any], field: str) -> None:
    h, land = a.get("hessian"), a.get("landscape")
    if h is not None:
        if h["steps"] < h["top_k"]:
            raise OptionError(
                f"{field}.hessian.steps", f"must be at least top_k ({h['top_k']}) Lanczos iterations, got {h['steps']}"
            )
        need = cost(a).hvps
        if need > h["max_hvps"]:
            raise OptionError(
                f"{field}.hessian.max_hvps",
                f"the options need {need:,} Hessian-vector products per fold (steps {h['steps']} + "
                f"density_samples {h['density_samples']} x density_steps {h['density_steps']}), past the bound "
                f"of {h['max_hvps']:,}; lower them or raise max_hvps",
            )
    if land is not None:
        if land["directions"] == "eigen" and h is None:
            raise OptionError(
                f"{field}.landscape.directions",
                "eigen needs the Hessian's eigenvectors: add analysis.hessian (top_k >= 2), or use random",
            )
        if land["directions"] == "eigen" and h is not None and h["top_k"] < 2:
            raise OptionError(f"{field}.hessian.top_k", "must be at least 2 for landscape.directions: eigen")
        for key in ("points", "grid"):
            if land[key] == 1:
                raise OptionError(f"{field}.landscape.{key}", "must be 0 (none) or at least 2 grid points, got 1")
        points = land["points"] + land["grid"] ** 2
        if points == 0:
            raise OptionError(f"{field}.landscape", "computes no surface: points and grid are both 0")
        if points > land["max_points"]:
            raise OptionError(
                f"{field}.landscape.max_points",
                f"the surfaces need {points:,} loss passes per fold (points {land['points']} + grid "
                f"{land['grid']} x {land['grid']}), past the bound of {land['max_points']:,}; "
                "lower points or grid, or raise max_points",
            )


def cost(a: dict[str, Any]) -> Cost:
    """The cost of a checked analysis section before it runs, at ``samples``."""
    h, land = a.get("hessian"), a.get("landscape")
    hvps = per_epoch = passes = 0
    if h is not None:
        hvps = h["steps"] + h["density_samples"] * h["density_steps"]
        per_epoch = h["steps"] if h["trace"] else 0
    if land is not None:
        passes = land["points"] + land["grid"] ** 2
    return Cost(hvps, passes, a["samples"], per_epoch)


def samples_for(a: dict[str, Any], *, epochs: int, train_samples: int) -> int:
    """The samples a fold's analysis takes its loss on: ``max_share`` of the fold's
    training (``epochs`` x ``train_samples`` sample-steps) by counted work, within
    ``min_samples`` .. ``samples``, and at most the fold's own."""
    c = cost(a)
    cap = min(int(a["samples"]), train_samples)
    if a["max_share"] == 0:
        return max(1, cap)
    per_sample = HVP_STEPS * c.total_hvps(epochs) + PASS_STEPS * c.passes
    fits = int(a["max_share"] * epochs * train_samples / per_sample) if per_sample else cap
    return max(1, min(cap, max(int(a["min_samples"]), fits)))


def planned_share(a: dict[str, Any], samples: int, *, epochs: int, train_samples: int) -> float:
    """The counted work of an analysis on ``samples`` as a share of the fold's training."""
    c = cost(a)
    work = samples * (HVP_STEPS * c.total_hvps(epochs) + PASS_STEPS * c.passes)
    return work / max(1, epochs * train_samples)
