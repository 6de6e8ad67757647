"""REST routes that steer a running campaign (``service/steering.py``): stop a trial,
pause and resume, raise the budget. All need the ``submit`` scope."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from hpcopt_server.api.deps import Body, Caller, ServiceDep, limited_body, parse_json
from hpcopt_server.api.schemas import COMMON_RESPONSES, CampaignOut, ErrorOut, TrialOut, campaign_out, trial_out
from hpcopt_server.service import limits as lim

router = APIRouter(prefix="/api/v1", responses=COMMON_RESPONSES)

#: These bodies are a number or a short reason: anything longer is refused unread.
MAX_BODY_BYTES = 6 * lim.MAX_EXIT_REASON + 1024


class StopIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    reason: str = Field("", description=f"why, kept in the trial's history (at most {lim.MAX_EXIT_REASON} characters)")


class BudgetIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    max_trials: int = Field(description="the new budget.max_trials: above the present one, at most 1,000,000")


async def _body(request: Request, model: type[Body], expected: str, *, optional: bool = False) -> Body:
    raw = await limited_body(request, MAX_BODY_BYTES)
    return model() if optional and not raw.strip() else parse_json(raw, model, "body", expected)


def _documented(model: type[BaseModel] | None, conflict: str) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if model is not None:
        schema = {"application/json": {"schema": model.model_json_schema()}}
        extra["openapi_extra"] = {"requestBody": {"required": model is BudgetIn, "content": schema}}
    return {"responses": {409: {"model": ErrorOut, "description": conflict}}, **extra}


@router.post(
    "/campaigns/{campaign_id}/trials/{number}/stop",
    operation_id="stop_trial",
    **_documented(StopIn, "the trial has finished"),
)
async def stop_trial(campaign_id: int, number: int, request: Request, service: ServiceDep, token: Caller) -> TrialOut:
    """Stops a QUEUED or RUNNING trial: it becomes CANCELLED in SQL now, and its agent
    stops at its next heartbeat (and goes on to another trial). It counts against the
    budget."""
    body = await _body(request, StopIn, '{"reason": text}, or no body', optional=True)
    await run_in_threadpool(service.steering.stop_trial, campaign_id, number, token, body.reason)
    x = await run_in_threadpool(lambda: service.insights.trial(campaign_id=campaign_id, number=number))
    return trial_out(x.trial, full=True, ran=x.ran, agents=x.agents)


@router.post(
    "/campaigns/{campaign_id}/pause",
    operation_id="pause_campaign",
    **_documented(None, "the campaign is not RUNNING"),
)
def pause_campaign(campaign_id: int, service: ServiceDep, token: Caller) -> CampaignOut:
    """Hands out no new trial until resumed: agents wait (keeping their allocation),
    running trials go on."""
    service.steering.pause(campaign_id, token)
    return campaign_out(service.campaigns.get(campaign_id))


@router.post(
    "/campaigns/{campaign_id}/resume",
    operation_id="resume_campaign",
    **_documented(None, "the campaign is not PAUSED"),
)
def resume_campaign(campaign_id: int, service: ServiceDep, token: Caller) -> CampaignOut:
    """A PAUSED campaign RUNNING again: waiting agents get trials at their next poll."""
    service.steering.resume(campaign_id, token)
    return campaign_out(service.campaigns.get(campaign_id))


@router.post(
    "/campaigns/{campaign_id}/budget",
    operation_id="raise_budget",
    **_documented(BudgetIn, "the campaign is CANCELLED"),
)
async def raise_budget(campaign_id: int, request: Request, service: ServiceDep, token: Caller) -> CampaignOut:
    """Raises ``budget.max_trials``; a COMPLETED campaign is RUNNING again (start agents:
    those told it was done have exited)."""
    body = await _body(request, BudgetIn, '{"max_trials": an integer above the present budget}')
    await run_in_threadpool(service.steering.raise_budget, campaign_id, body.max_trials, token)
    return campaign_out(await run_in_threadpool(service.campaigns.get, campaign_id))
