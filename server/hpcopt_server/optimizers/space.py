"""The search space of a campaign, as the optimizers see it.

Each parameter maps to one coordinate of the unit cube [0, 1) (categoricals to a
coordinate that is cut into equal bins here; the GP optimizer of a later release one-hot
encodes them itself). ``decode`` turns a point of the cube into valid parameters:
log scales, integers rounded, categoricals from their choices.
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
            if p["type"] == "categorical":
                dims.append(Dimension(name, "categorical", choices=tuple(p["choices"])))
            else:
                dims.append(Dimension(name, p["type"], float(p["low"]), float(p["high"]), p.get("scale") == "log"))
        self.dims: tuple[Dimension, ...] = tuple(dims)

    def __len__(self) -> int:
        return len(self.dims)

    def decode(self, u: np.ndarray) -> d.Params:
        """Parameters at a point ``u`` of shape (len(self),) in the unit cube."""
        return {dim.name: dim.decode(x) for dim, x in zip(self.dims, u, strict=True)}

    def problems(self, params: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(parameter, what is wrong) for parameters that this space could not have
        produced: missing or unknown names, wrong types, values out of range. An
        optimizer fed such a point fails (the encoders look choices up by value)."""
        out = [(name, "is not a parameter of the space") for name in params if name not in {d.name for d in self.dims}]
        for dim in self.dims:
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
