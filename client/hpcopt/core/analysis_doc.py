"""The document a fold's analysis is (``hpcopt_agent.curvature.analysis`` makes it): the
one schema the agent checks before it sends, the server checks before it stores, and
export and import carry. Plain numbers in bounded lists, nothing else: an unknown key,
text where a number belongs or a list past its bound is refused, naming the field.

A loss that overflowed (a surface point far from the weights) is ``null``.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import pydantic
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from hpcopt.errors import DocumentError

#: Bounds of the document's lists: the options' own bounds (``analysis.py``) and some room.
MAX_EIGEN, MAX_STEPS, MAX_SAMPLES_SLQ, MAX_GRID, MAX_LINE, MAX_EPOCHS = 20, 500, 32, 101, 1001, 100_000
MAX_DENSITY_POINTS = 2000
#: The document as JSON text, at most (a 101 x 101 surface is about 120 KB).
MAX_DOCUMENT_BYTES = 4 << 20


def _finite(x: float) -> float:
    if not math.isfinite(x):
        raise ValueError("must be a finite number")
    return x


Num = Annotated[float, AfterValidator(_finite)]
Loss = Num | None


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class DensityDoc(_Doc):
    grid: list[Num] = Field(max_length=MAX_DENSITY_POINTS)
    density: list[Num] = Field(max_length=MAX_DENSITY_POINTS)
    nodes: list[list[Num]] = Field(max_length=MAX_SAMPLES_SLQ)
    weights: list[list[Num]] = Field(max_length=MAX_SAMPLES_SLQ)
    sigma: Num


class HessianDoc(_Doc):
    eigenvalues: list[Num] = Field(min_length=1, max_length=MAX_EIGEN)
    residuals: list[Num] = Field(max_length=MAX_EIGEN)
    steps: int = Field(ge=1, le=MAX_STEPS)
    density: DensityDoc | None = None
    trace: list[Num] | None = Field(default=None, max_length=MAX_EPOCHS)


class LineDoc(_Doc):
    offsets: list[Num] = Field(max_length=MAX_LINE)
    loss: list[Loss] = Field(max_length=MAX_LINE)


class SurfaceDoc(_Doc):
    xs: list[Num] = Field(max_length=MAX_GRID)
    ys: list[Num] = Field(max_length=MAX_GRID)
    loss: list[list[Loss]] = Field(max_length=MAX_GRID)


class TrajectoryDoc(_Doc):
    xs: list[Num] = Field(max_length=MAX_EPOCHS)
    ys: list[Num] = Field(max_length=MAX_EPOCHS)
    off_plane: list[Num] = Field(max_length=MAX_EPOCHS)


class LandscapeDoc(_Doc):
    directions: Literal["random", "eigen"]
    line: LineDoc | None = None
    surface: SurfaceDoc | None = None
    trajectory: TrajectoryDoc | None = None


class CostDoc(_Doc):
    hvps: int = Field(ge=0, le=10**9)
    passes: int = Field(ge=0, le=10**9)
    samples: int = Field(ge=0, le=10**12)
    seconds: Num = Field(ge=0)
    share_planned: Num | None = Field(default=None, ge=0)


class AnalysisDoc(_Doc):
    parameters: int = Field(ge=1, le=10**13)
    samples: int = Field(ge=1, le=10**12)
    hessian: HessianDoc | None = None
    landscape: LandscapeDoc | None = None
    epochs: list[int] | None = Field(default=None, max_length=MAX_EPOCHS)
    cost: CostDoc


def check_document(document: Any, field: str = "document") -> dict[str, Any]:
    """``document`` as the schema allows it (None members left out); DocumentError naming
    each offending field otherwise."""
    try:
        doc = AnalysisDoc.model_validate(document)
    except pydantic.ValidationError as exc:
        errors = [
            (".".join([field, *(str(p) for p in e["loc"])]), e["msg"].removeprefix("Value error, "))
            for e in exc.errors(include_url=False)
        ]
        raise DocumentError(errors[:10]) from None
    return doc.model_dump(mode="json", exclude_none=True)
