"""REST route for a trial's fold analyses (the spec's ``analysis``: Hessian eigenvalues,
spectral density, loss surfaces), read with ``read``. The documents are the schema's
plain numbers (``hpcopt.core.analysis_doc``), as the agent stored them."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel

from hpcopt.core.analysis_doc import AnalysisDoc
from hpcopt_server.api.deps import Caller, ServiceDep
from hpcopt_server.api.schemas import COMMON_RESPONSES

router = APIRouter(prefix="/api/v1", responses=COMMON_RESPONSES)


class FoldAnalysisOut(BaseModel):
    fold: int
    #: The trial's attempt that computed it (a later attempt's replaces it).
    attempt: int
    computed_at: datetime
    document: AnalysisDoc


class TrialAnalysesOut(BaseModel):
    trial_id: int
    #: By fold; empty when the campaign has no ``analysis`` or no fold finished one yet.
    folds: list[FoldAnalysisOut]


@router.get("/trials/{trial_id}/analysis", operation_id="get_trial_analysis")
def get_trial_analysis(trial_id: int, service: ServiceDep, _: Caller) -> TrialAnalysesOut:
    found = service.insights.fold_analyses(trial_id)
    return TrialAnalysesOut(
        trial_id=trial_id,
        folds=[
            FoldAnalysisOut(
                fold=a.fold,
                attempt=a.attempt,
                computed_at=a.computed_at,
                document=AnalysisDoc.model_validate(a.document),
            )
            for a in found
        ],
    )
