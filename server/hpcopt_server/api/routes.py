"""REST routes under /api/v1: decode, call one service method, encode."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from hpcopt import __version__
from hpcopt.core.documents import parse_document
from hpcopt.errors import DocumentError
from hpcopt_server import domain as d
from hpcopt_server.api.deps import Caller, ServiceDep, bearer, etag_matches, limited_body
from hpcopt_server.api.schemas import (
    COMMON_RESPONSES,
    AgentOut,
    CampaignOut,
    CampaignPage,
    CurvePointOut,
    ErrorOut,
    FieldError,
    ImportanceOut,
    ParamImportance,
    PlotData,
    PopulationOut,
    RunningTrial,
    SpanOut,
    ThroughputOut,
    Timeline,
    TrialCurves,
    TrialOut,
    TrialPage,
    ValidationOut,
    WhoAmI,
    agent_out,
    campaign_out,
    trial_out,
)
from hpcopt_server.errors import InvalidArgument, TooLarge
from hpcopt_server.service import Service
from hpcopt_server.service.analysis import METHODS as IMPORTANCE_METHODS
from hpcopt_server.service.campaigns import MAX_CAMPAIGN_PAGE, validate_spec
from hpcopt_server.service.insights import TrialDetail
from hpcopt_server.service.limits import MAX_ID
from hpcopt_server.service.tokens import SCOPES

router = APIRouter(prefix="/api/v1", responses=COMMON_RESPONSES)

_TOO_LARGE: dict[int | str, dict[str, Any]] = {
    413: {"model": ErrorOut, "description": "the body is over the server's size limit"}
}

_DOCUMENT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"type": "object"}},
            "application/yaml": {"schema": {"type": "string"}},
        },
    }
}


async def _document(request: Request, service: Service, *, export: bool = False) -> Any:
    """The body as a parsed JSON or YAML (by Content-Type) document, under the server's
    limits (hpcopt.core.documents); parsed off the event loop so /healthz keeps answering."""
    yaml_syntax = "yaml" in request.headers.get("content-type", "application/json")
    limits = service.limits
    max_bytes = limits.import_bytes if export and not yaml_syntax else limits.spec_bytes
    raw = await limited_body(request, max_bytes)
    try:
        return await run_in_threadpool(
            parse_document, raw, yaml_syntax=yaml_syntax, max_bytes=max_bytes, what="request body"
        )
    except DocumentError as exc:
        raise InvalidArgument(str(exc), [(p or "body", m) for p, m in exc.errors]) from None


@router.get("/whoami", operation_id="whoami")
def whoami(request: Request, service: ServiceDep) -> WhoAmI:
    """Open: whether the server wants tokens, and the presented token's name and scopes
    (none when it is missing, unknown or revoked). The dashboard asks this first, so it
    can prompt for a token and say what the token may do."""
    auth, token = service.tokens.describe(bearer(request))
    agents = request.app.state.agent_server
    if not auth:
        return WhoAmI(auth=False, token=None, scopes=list(SCOPES), agent_server=agents)
    return WhoAmI(
        auth=True,
        token=token.name if token else None,
        scopes=sorted(token.scopes) if token else [],
        agent_server=agents,
    )


@router.post(
    "/campaigns/validate", operation_id="validate_campaign", openapi_extra=_DOCUMENT_BODY, responses=_TOO_LARGE
)
async def validate_campaign(request: Request, service: ServiceDep, _: Caller) -> ValidationOut:
    """Checks a spec without submitting it: 200 with ``valid`` and the field errors (413
    for a body over the size limit)."""
    try:
        document = await _document(request, service)
        await run_in_threadpool(validate_spec, document)
    except TooLarge:
        raise
    except InvalidArgument as exc:
        return ValidationOut(
            valid=False, detail=exc.message, errors=[FieldError(field=f, message=m) for f, m in exc.errors]
        )
    return ValidationOut(valid=True, detail="", errors=[])


@router.get("/campaigns", operation_id="list_campaigns")
def list_campaigns(
    service: ServiceDep,
    _: Caller,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_CAMPAIGN_PAGE)] = 100,
    q: Annotated[str, Query(max_length=255, description="campaigns whose name contains this (any case)")] = "",
    state: Annotated[list[d.CampaignState] | None, Query(description="campaigns in these states (repeatable)")] = None,
    sort: Annotated[str, Query(max_length=64, description="id (newest), name, state, algorithm or progress")] = "id",
    order: Annotated[Literal["asc", "desc"], Query()] = "desc",
) -> CampaignPage:
    """A page of the campaigns that match ``q`` and ``state``, sorted on the server by
    ``sort`` (ties newest first); ``total`` counts the matches on every page."""
    page, total = service.campaigns.page(
        offset, limit, name=q, states=state or (), sort=sort, descending=order == "desc"
    )
    return CampaignPage(
        campaigns=[campaign_out(s, with_spec=False) for s in page], total=total, offset=offset, limit=limit
    )


@router.post(
    "/campaigns", status_code=201, operation_id="create_campaign", openapi_extra=_DOCUMENT_BODY, responses=_TOO_LARGE
)
async def create_campaign(request: Request, service: ServiceDep, token: Caller) -> CampaignOut:
    document = await _document(request, service)
    # The service is synchronous (SQL): keep it off the event loop.
    created = await run_in_threadpool(service.campaigns.create, document, token)
    return campaign_out(await run_in_threadpool(service.campaigns.get, created.id))


@router.post(
    "/campaigns/import",
    status_code=201,
    operation_id="import_campaign",
    openapi_extra=_DOCUMENT_BODY,
    responses=_TOO_LARGE,
)
async def import_campaign(request: Request, service: ServiceDep, token: Caller) -> CampaignOut:
    document = await _document(request, service, export=True)
    created = await run_in_threadpool(service.import_campaign, document, token)
    return campaign_out(await run_in_threadpool(service.campaigns.get, created.id))


@router.get("/campaigns/{campaign_id}", operation_id="get_campaign")
def get_campaign(campaign_id: int, service: ServiceDep, _: Caller) -> CampaignOut:
    return campaign_out(service.campaigns.get(campaign_id))


#: The trials table's filters and order: the table's page and its CSV take the same.
TrialStates = Annotated[list[d.TrialState] | None, Query(description="only these states")]
TrialSort = Annotated[
    str,
    Query(
        max_length=300,
        description="number, value, value_std, state, attempt, started_at, finished_at, duration (time ran), "
        "agent (host) or param:NAME",
    ),
]
TrialOrder = Annotated[Literal["asc", "desc"], Query()]
TrialRanges = Annotated[
    list[str] | None,
    Query(
        max_length=300,
        description="NAME:LOW:HIGH, NAME `value`, `values.K` (objective K of a multi-objective campaign, "
        "K from 1) or a parameter (a categorical one by its choices' positions); repeat for several, all must hold",
    ),
]


@router.get("/campaigns/{campaign_id}/trials", operation_id="list_trials")
def list_trials(
    campaign_id: int,
    service: ServiceDep,
    _: Caller,
    state: TrialStates = None,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    sort: TrialSort = "number",
    order: TrialOrder = "asc",
    range: TrialRanges = None,
) -> TrialPage:
    page = service.insights.table(
        campaign_id, state or (), offset, limit, sort, order == "desc", [_range(r) for r in range or []]
    )
    trials = [trial_out(t, ran=page.ran.get(t.id), agents=page.agents) for t in page.trials]
    return TrialPage(trials=trials, total=page.total, offset=offset, limit=limit)


def _range(text: str) -> tuple[str, float, float]:
    name, _, bounds = text.partition(":")
    low, _, high = bounds.partition(":")
    try:
        return name, float(low), float(high)
    except ValueError:
        raise InvalidArgument(
            f"range {text[:100]!r} is not NAME:LOW:HIGH with numbers LOW and HIGH", [("range", "NAME:LOW:HIGH")]
        ) from None


@router.get("/campaigns/{campaign_id}/trials/{number}", operation_id="get_trial_by_number")
def trial_by_number(campaign_id: int, number: int, service: ServiceDep, _: Caller) -> TrialOut:
    """A trial by its campaign-local number (``#27``: what the dashboard and CLI show;
    ``/trials/{id}`` takes the global id)."""
    return _detail(service.insights.trial(campaign_id=campaign_id, number=number))


def _detail(x: TrialDetail) -> TrialOut:
    return trial_out(x.trial, full=True, ran=x.ran, agents=x.agents)


@router.get("/campaigns/{campaign_id}/running", operation_id="running_trials")
def running_trials(campaign_id: int, service: ServiceDep, _: Caller) -> list[RunningTrial]:
    """The RUNNING trials: agent, folds done, epochs reported per fold, latest value."""
    page = service.insights.running(campaign_id)
    out = []
    for r in page.rows:
        t = r.trial
        host, job = page.agents.get(t.agent_id, ("", ""))
        ran = page.ran.get(t.id)
        out.append(
            RunningTrial(
                trial_id=t.id,
                number=t.number,
                attempt=t.attempt,
                params=t.params,
                agent_id=t.agent_id,
                agent_host=host,
                agent_job=job,
                started_at=t.started_at,
                ran_seconds=ran.seconds if ran else None,
                running_since=ran.since if ran else None,
                folds=page.folds,
                folds_finished=r.folds_finished,
                epochs=page.epochs,
                steps={str(k): v for k, v in r.steps.items()},
                latest=CurvePointOut(**vars(r.latest)) if r.latest else None,
            )
        )
    return out


@router.get("/campaigns/{campaign_id}/timeline", operation_id="timeline")
def timeline(
    campaign_id: int,
    service: ServiceDep,
    _: Caller,
    limit: Annotated[int, Query(ge=1, le=20_000, description="the latest this many attempts")] = 2000,
) -> Timeline:
    """Every attempt of every trial on its agent (from the event log), oldest first."""
    spans, total, agents = service.insights.timeline(campaign_id, limit)
    return Timeline(
        spans=[
            SpanOut(
                trial_id=s.trial_id,
                number=s.number,
                attempt=s.attempt,
                agent_id=s.agent_id,
                agent_host=agents.get(s.agent_id, ("", ""))[0],
                agent_job=agents.get(s.agent_id, ("", ""))[1],
                start=s.start,
                end=s.end,
                outcome=s.outcome,
            )
            for s in spans
        ],
        total=total,
    )


@router.get("/campaigns/{campaign_id}/importance", operation_id="param_importance")
def importance(
    campaign_id: int,
    service: ServiceDep,
    _: Caller,
    objective: Annotated[int, Query(ge=0, le=63, description="which objective (0: the first)")] = 0,
    method: Annotated[str, Query(max_length=32, description=f"one of {list(IMPORTANCE_METHODS)}")] = "first-order",
) -> ImportanceOut:
    """Hyper-parameter importance over the completed trials, by ``method``: first-order
    share of the objective's rank variance (binned), or permutation importance on a
    nearest-neighbour surrogate (interactions included); see hpcopt_server.service.analysis."""
    params, completed = service.analysis.importance(campaign_id, objective, method)
    return ImportanceOut(
        params=[ParamImportance(**vars(p)) for p in params],
        completed=completed,
        method=method,
        description=IMPORTANCE_METHODS[method],
    )


@router.get("/campaigns/{campaign_id}/throughput", operation_id="get_throughput")
def throughput(campaign_id: int, service: ServiceDep, _: Caller) -> ThroughputOut:
    """The fold throughput measured at each width (ranks per fold, nodes spanned) and the
    scaling model the allocation planner fits on it (``--groups auto``, ``hpcopt plan``)."""
    return ThroughputOut.model_validate(service.throughput.document(campaign_id))


@router.get("/campaigns/{campaign_id}/population", operation_id="get_population")
def population(campaign_id: int, service: ServiceDep, _: Caller) -> PopulationOut:
    """A population-based training campaign's population over time: every interval with
    its lineage, the best member's ancestry and the schedule of each parameter along it."""
    return PopulationOut.model_validate(service.population.document(campaign_id))


@router.get("/campaigns/{campaign_id}/best", operation_id="get_best_trial")
def best_trial(campaign_id: int, service: ServiceDep, _: Caller) -> TrialOut:
    return trial_out(service.campaigns.best(campaign_id), full=True)


@router.get("/campaigns/{campaign_id}/front", operation_id="get_pareto_front")
def pareto_front(campaign_id: int, service: ServiceDep, _: Caller) -> list[TrialOut]:
    """The non-dominated completed trials of a multi-objective campaign (the best trial
    of a single-objective one), best first in the first objective."""
    return [trial_out(t) for t in service.campaigns.front(campaign_id)]


@router.get("/campaigns/{campaign_id}/agents", operation_id="list_agents")
def list_agents(campaign_id: int, service: ServiceDep, _: Caller) -> list[AgentOut]:
    return [agent_out(v) for v in service.insights.agents(campaign_id)]


@router.get("/campaigns/{campaign_id}/plot", operation_id="plot_data")
def plot_data(
    campaign_id: int,
    request: Request,
    service: ServiceDep,
    _: Caller,
    max_points: Annotated[int, Query(ge=10, le=20_000, description="downsample past this many trials")] = 2000,
) -> Response:
    """Completed trials for the plots. Its ETag changes only when a trial finishes, and
    is checked before any work: an unchanged campaign costs one row read. On a big
    campaign the answer is shared by every tab and refreshed at most every ten times
    what it costs (see the README, "Running at scale")."""
    revision = service.insights.plot_served_revision(campaign_id, max_points)
    etag = f'"plot-{revision}-{max_points}-{__version__}"'
    if etag_matches(request.headers.get("if-none-match", ""), etag):
        return Response(status_code=304, headers={"etag": etag, "cache-control": "no-cache"})
    revision, plot = service.insights.plot(campaign_id, max_points)
    etag = f'"plot-{revision}-{max_points}-{__version__}"'
    data = PlotData.model_validate(plot)
    return Response(data.model_dump_json(), media_type="application/json", headers={"etag": etag})


@router.get("/campaigns/{campaign_id}/curves", operation_id="learning_curves")
def learning_curves(
    campaign_id: int,
    service: ServiceDep,
    _: Caller,
    trial_id: Annotated[list[int] | None, Query(description="these trials (default: the best `limit`)")] = None,
    limit: Annotated[int, Query(ge=1, le=50)] = 5,
    number: Annotated[list[int] | None, Query(description="these trials, by campaign-local number")] = None,
) -> list[TrialCurves]:
    curves = service.insights.curves(campaign_id, trial_id or [], limit, number or [])
    return [TrialCurves.model_validate(c) for c in curves]


@router.get(
    "/campaigns/{campaign_id}/export",
    operation_id="export_campaign",
    responses={
        200: {
            "description": "json: the re-importable document; csv: one row per trial",
            "content": {"application/json": {"schema": {"type": "object"}}, "text/csv": {"schema": {"type": "string"}}},
        }
    },
)
def export_campaign(
    campaign_id: int,
    service: ServiceDep,
    _: Caller,
    format: Annotated[
        Literal["json", "csv"], Query(description="json: the re-importable document; csv: trials")
    ] = "json",
    state: TrialStates = None,
    sort: TrialSort = "number",
    order: TrialOrder = "asc",
    range: TrialRanges = None,
    hide: Annotated[
        list[str] | None,
        Query(
            max_length=300,
            description="csv: a column the table's chooser hides (param:NAME, attempt, duration or agent), "
            "left out of the CSV; repeat for several",
        ),
    ] = None,
) -> Response:
    """``format=csv``: the trials the table's ``state``, ``range``, ``sort`` and ``order``
    select (every trial by number without them), without the columns ``hide`` names,
    with each fold's value and metrics."""
    if format == "csv":
        name = f"campaign-{campaign_id}-trials.csv"
        ranges = [_range(r) for r in range or []]
        return Response(
            service.insights.trials_csv(campaign_id, state or (), sort, order == "desc", ranges, hide or ()),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )
    name = f"campaign-{campaign_id}.json"
    return Response(
        service.export_json(campaign_id),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.post(
    "/campaigns/{campaign_id}/cancel",
    operation_id="cancel_campaign",
    responses={409: {"model": ErrorOut, "description": "the campaign is not RUNNING"}},
)
def cancel_campaign(campaign_id: int, service: ServiceDep, token: Caller) -> CampaignOut:
    return campaign_out(service.campaigns.cancel(campaign_id, token))


@router.get("/trials/{trial_id}", operation_id="get_trial")
def get_trial(trial_id: int, service: ServiceDep, _: Caller) -> TrialOut:
    return _detail(service.insights.trial(trial_id))
