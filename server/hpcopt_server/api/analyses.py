"""REST routes for a trial's fold analyses (the spec's ``analysis``: Hessian eigenvalues,
spectral density, loss surfaces), read with ``read``, and asked for after the fact with
``submit`` (``service/requested_analyses.py``). The documents are the schema's plain
numbers (``hpcopt.core.analysis_doc``), as the agent stored them."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel

from hpcopt.core.analysis_doc import AnalysisDoc
from hpcopt_server import domain as d
from hpcopt_server.api.deps import Caller, ServiceDep
from hpcopt_server.api.schemas import COMMON_RESPONSES, ErrorOut

router = APIRouter(prefix="/api/v1", responses=COMMON_RESPONSES)


class FoldAnalysisOut(BaseModel):
    fold: int
    #: The trial's attempt that computed it (a later attempt's replaces it).
    attempt: int
    computed_at: datetime
    document: AnalysisDoc


class AnalysisRequestOut(BaseModel):
    """An analysis of the finished trial asked for after the fact."""

    trial_id: int
    #: QUEUED, RUNNING (an agent of the campaign computes it), DONE or FAILED.
    state: str
    requested_at: datetime
    finished_at: datetime | None
    #: Why it failed.
    reason: str


class TrialAnalysesOut(BaseModel):
    trial_id: int
    #: By fold; empty when the campaign has no ``analysis`` or no fold finished one yet.
    folds: list[FoldAnalysisOut]
    #: The latest analysis asked for after the fact; null when none was.
    request: AnalysisRequestOut | None = None


def _request(r: d.AnalysisRequest) -> AnalysisRequestOut:
    return AnalysisRequestOut(
        trial_id=r.trial_id, state=r.state, requested_at=r.requested_at, finished_at=r.finished_at, reason=r.reason
    )


@router.post(
    "/trials/{trial_id}/analysis",
    status_code=202,
    operation_id="request_trial_analysis",
    responses={
        409: {
            "model": ErrorOut,
            "description": "the trial is not COMPLETED, its campaign has no analysis section, or a fold kept no "
            "checkpoint",
        }
    },
)
def request_trial_analysis(trial_id: int, service: ServiceDep, _: Caller) -> AnalysisRequestOut:
    """Asks for the curvature and landscape of a COMPLETED trial of a campaign with an
    ``analysis`` section: the campaign's next agent computes it from the folds'
    checkpoints (start one on a finished campaign: it computes what is asked, then
    leaves). 409 for a trial that is not COMPLETED, a campaign without ``analysis``, a
    fold without a checkpoint. Asking again for one queued or running answers it."""
    return _request(service.requested_analyses.request(trial_id))


@router.get("/trials/{trial_id}/analysis", operation_id="get_trial_analysis")
def get_trial_analysis(trial_id: int, service: ServiceDep, _: Caller) -> TrialAnalysesOut:
    found = service.insights.fold_analyses(trial_id)
    asked = service.requested_analyses.of(trial_id)
    return TrialAnalysesOut(
        trial_id=trial_id,
        request=None if asked is None else _request(asked),
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
