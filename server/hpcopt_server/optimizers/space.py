"""The search space of a campaign, as the optimizers see it.

Each parameter maps to one coordinate of the unit cube [0, 1) (categoricals to a
coordinate that is cut into equal bins here; the GP optimizer of a later release one-hot
encodes them itself). ``decode`` turns a point of the cube into valid parameters:
log scales, integers rounded, categoricals from their choices.

A parameter with ``when: {parent: [values]}`` is *conditional*: it is active only when
each named (unconditional, categorical) parent takes one of the values. Every point of
the cube still has a coordinate for it, so the optimizers keep one fixed geometry;
``decode`` and ``active`` drop inactive parameters, so they never reach a trial, and
``complete`` fills them back in (at a fixed imputed value) where an optimizer needs a
full point. Trials that differ only in inactive coordinates are the same trial.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpcopt_server import domain as d


@dataclass(frozen=True)
class Dimension:
    name: str
    type: str  # "real" | "int" | "categorical"
    low: float = 0.0
    high: float = 1.0
    log: bool = False
    choices: tuple[d.ParamValue, ...] = ()
    #: ((parent, (values...)), ...): active when every parent takes one of its values.
    when: tuple[tuple[str, tuple[d.ParamValue, ...]], ...] = ()

    def active(self, params: Mapping[str, Any]) -> bool:
        """Whether this parameter is active given the (unconditional) parents in ``params``."""
        return all(any(_same(params.get(parent), v) for v in values) for parent, values in self.when)

    #: Where an inactive coordinate sits in the unit cube (SMAC-style imputation).
    IMPUTED = 0.5

    def decode(self, u: float) -> d.ParamValue:
        """The parameter value at ``u`` in [0, 1]."""
        u = min(max(float(u), 0.0), 1.0)
        if self.type == "categorical":
            return self.choices[min(int(u * len(self.choices)), len(self.choices) - 1)]
        if self.type == "int":
            # Widen by half a step each side so that the end points are as likely as the rest.
            lo, hi = self.low - 0.5, self.high + 0.5
            if self.log:
                lo, hi = max(self.low - 0.5, 0.5), self.high + 0.5
                x = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
            else:
                x = lo + u * (hi - lo)
            return int(min(max(round(x), self.low), self.high))
        if self.log:
            x = math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        else:
            x = self.low + u * (self.high - self.low)
        return min(max(x, self.low), self.high)


class SearchSpace:
    """The ordered dimensions of a validated ``space`` mapping of a campaign spec."""

    def __init__(self, space: Mapping[str, Mapping[str, Any]]):
        dims = []
        for name, p in space.items():
            when = tuple((parent, tuple(values)) for parent, values in (p.get("when") or {}).items())
            if p["type"] == "categorical":
                dims.append(Dimension(name, "categorical", choices=tuple(p["choices"]), when=when))
            else:
                low, high, log = float(p["low"]), float(p["high"]), p.get("scale") == "log"
                dims.append(Dimension(name, p["type"], low, high, log, when=when))
        self.dims: tuple[Dimension, ...] = tuple(dims)
        self.conditional = any(dim.when for dim in self.dims)

    def __len__(self) -> int:
        return len(self.dims)

    def decode(self, u: np.ndarray) -> d.Params:
        """The active parameters at a point ``u`` of shape (len(self),) in the unit cube."""
        return self.active({dim.name: dim.decode(x) for dim, x in zip(self.dims, u, strict=True)})

    def active(self, params: Mapping[str, Any]) -> d.Params:
        """``params`` without the parameters their parents make inactive."""
        return {dim.name: params[dim.name] for dim in self.dims if dim.name in params and dim.active(params)}

    def complete(self, params: Mapping[str, Any]) -> d.Params:
        """``params`` with every inactive parameter at its imputed value: a full point
        for optimizers that need one (skopt)."""
        return {dim.name: params[dim.name] if dim.name in params else dim.decode(dim.IMPUTED) for dim in self.dims}

    def problems(self, params: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(parameter, what is wrong) for parameters that this space could not have
        produced: missing or unknown names, wrong types, values out of range. An
        optimizer fed such a point fails (the encoders look choices up by value)."""
        out = [(name, "is not a parameter of the space") for name in params if name not in {d.name for d in self.dims}]
        for dim in self.dims:
            if not dim.active(params):
                if dim.name in params:
                    cond = " and ".join(f"{p} in {list(v)}" for p, v in dim.when)
                    out.append((dim.name, f"is inactive here (it is used only when {cond}); leave it out"))
                continue
            if dim.name not in params:
                out.append((dim.name, "is missing"))
                continue
            v = params[dim.name]
            if dim.type == "categorical":
                if not any(type(v) is type(c) and v == c for c in dim.choices):
                    out.append((dim.name, f"must be one of the choices {list(dim.choices)[:10]}"))
            elif (
                isinstance(v, bool) or not isinstance(v, int | float) or (dim.type == "int" and not isinstance(v, int))
            ):
                out.append((dim.name, f"must be {'an integer' if dim.type == 'int' else 'a number'}"))
            elif not (math.isfinite(v) and dim.low <= v <= dim.high):
                out.append((dim.name, f"must be in [{dim.low}, {dim.high}]"))
        return out


def _same(a: Any, b: Any) -> bool:
    """Equal as parameter values: 1, 1.0 and True are three different choices."""
    return type(a) is type(b) and a == b
