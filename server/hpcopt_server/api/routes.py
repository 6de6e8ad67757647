"""REST routes under /api/v1: decode, call one service method, encode."""

from __future__ import annotations

import json
from typing import Annotated, Any

import yaml
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from hpcopt_server import domain as d
from hpcopt_server.api.deps import CanRead, CanSubmit, ServiceDep
from hpcopt_server.api.schemas import (
    AgentOut,
    CampaignOut,
    ErrorOut,
    TrialOut,
    TrialPage,
    agent_out,
    campaign_out,
    trial_out,
)
from hpcopt_server.errors import InvalidArgument

router = APIRouter(
    prefix="/api/v1",
    responses={
        401: {"model": ErrorOut, "description": "no or unknown token"},
        403: {"model": ErrorOut, "description": "the token lacks the scope"},
        404: {"model": ErrorOut, "description": "no such campaign or trial"},
        422: {"model": ErrorOut, "description": "invalid input; `errors` names each field"},
    },
)

_DOCUMENT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"type": "object"}},
            "application/yaml": {"schema": {"type": "string"}},
        },
    }
}


async def _document(request: Request) -> Any:
    """The request body as a parsed JSON or YAML (by Content-Type) document."""
    raw = await request.body()
    kind = request.headers.get("content-type", "application/json")
    try:
        if "yaml" in kind:
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (yaml.YAMLError, ValueError) as exc:
        raise InvalidArgument(
            f"the request body is not valid {'YAML' if 'yaml' in kind else 'JSON'}: {exc}",
            [("body", "must be a JSON object (or YAML with Content-Type: application/yaml)")],
        ) from None


@router.get("/campaigns", operation_id="list_campaigns")
def list_campaigns(service: ServiceDep, _: CanRead) -> list[CampaignOut]:
    return [campaign_out(s) for s in service.campaigns.list_all()]


@router.post("/campaigns", status_code=201, operation_id="create_campaign", openapi_extra=_DOCUMENT_BODY)
async def create_campaign(request: Request, service: ServiceDep, _: CanSubmit) -> CampaignOut:
    document = await _document(request)
    # The service is synchronous (SQL): keep it off the event loop.
    created = await run_in_threadpool(service.campaigns.create, document)
    return campaign_out(await run_in_threadpool(service.campaigns.get, created.id))


@router.post("/campaigns/import", status_code=201, operation_id="import_campaign", openapi_extra=_DOCUMENT_BODY)
async def import_campaign(request: Request, service: ServiceDep, _: CanSubmit) -> CampaignOut:
    document = await _document(request)
    created = await run_in_threadpool(service.import_campaign, document)
    return campaign_out(await run_in_threadpool(service.campaigns.get, created.id))


@router.get("/campaigns/{campaign_id}", operation_id="get_campaign")
def get_campaign(campaign_id: int, service: ServiceDep, _: CanRead) -> CampaignOut:
    return campaign_out(service.campaigns.get(campaign_id))


@router.get("/campaigns/{campaign_id}/trials", operation_id="list_trials")
def list_trials(
    campaign_id: int,
    service: ServiceDep,
    _: CanRead,
    state: Annotated[list[d.TrialState] | None, Query(description="only these states")] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
) -> TrialPage:
    trials, total = service.campaigns.trials(campaign_id, state or (), offset, limit)
    return TrialPage(trials=[trial_out(t) for t in trials], total=total, offset=offset, limit=limit)


@router.get("/campaigns/{campaign_id}/best", operation_id="get_best_trial")
def best_trial(campaign_id: int, service: ServiceDep, _: CanRead) -> TrialOut:
    return trial_out(service.campaigns.best(campaign_id), full=True)


@router.get("/campaigns/{campaign_id}/agents", operation_id="list_agents")
def list_agents(campaign_id: int, service: ServiceDep, _: CanRead) -> list[AgentOut]:
    service.campaigns.get(campaign_id)
    return [agent_out(a) for a in service.campaigns.agents(campaign_id)]


@router.get("/campaigns/{campaign_id}/export", operation_id="export_campaign")
def export_campaign(campaign_id: int, service: ServiceDep, _: CanRead) -> JSONResponse:
    doc = service.export_campaign(campaign_id)
    name = f"campaign-{campaign_id}.json"
    return JSONResponse(doc, headers={"Content-Disposition": f'attachment; filename="{name}"'})


@router.post("/campaigns/{campaign_id}/cancel", operation_id="cancel_campaign")
def cancel_campaign(campaign_id: int, service: ServiceDep, _: CanSubmit) -> CampaignOut:
    return campaign_out(service.campaigns.cancel(campaign_id))


@router.get("/trials/{trial_id}", operation_id="get_trial")
def get_trial(trial_id: int, service: ServiceDep, _: CanRead) -> TrialOut:
    return trial_out(service.campaigns.trial(trial_id), full=True)
