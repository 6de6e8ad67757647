"""REST routes for notes on campaigns and trials: read with ``read``, saved with
``submit`` (PUT with the version the edit started from; 409 if someone saved since)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from hpcopt_server import domain as d
from hpcopt_server.api.deps import Caller, ServiceDep, limited_body, parse_json
from hpcopt_server.api.schemas import COMMON_RESPONSES, ErrorOut
from hpcopt_server.service import limits as lim
from hpcopt_server.storage.notes import MAX_VERSIONS

router = APIRouter(prefix="/api/v1", responses=COMMON_RESPONSES)

#: A save's body: the note as JSON, escapes (``\\uXXXX``: 6 bytes a character) included.
MAX_NOTE_BYTES = 6 * lim.MAX_NOTE + 1024


class NoteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    body: str = Field(description=f"the note's text (at most {lim.MAX_NOTE} characters; empty clears it)")
    base_version: int = Field(description="the version the edit started from (0 for a note never saved)")


class NoteOut(BaseModel):
    campaign_id: int
    #: None: the campaign's own note.
    trial_number: int | None
    body: str
    #: How many times it was saved (0: never).
    version: int
    updated_at: datetime | None
    #: The name of the token that saved it ("" with auth off).
    updated_by: str


_SAVE = {
    "openapi_extra": {
        "requestBody": {"required": True, "content": {"application/json": {"schema": NoteIn.model_json_schema()}}}
    },
    "responses": {
        409: {"model": ErrorOut, "description": "someone saved the note after `base_version`: reload and merge"},
        413: {"model": ErrorOut, "description": "the body is over the size limit"},
    },
}


class NoteVersionOut(BaseModel):
    version: int
    saved_at: datetime
    #: The name of the token that saved it ("" with auth off).
    saved_by: str
    #: The length of its text, in characters.
    chars: int


def _versions(page: tuple[list[d.NoteVersion], int], response: Response) -> list[NoteVersionOut]:
    vs, total = page
    response.headers["X-Total-Count"] = str(total)
    return [NoteVersionOut(**vars(v)) for v in vs]


#: The versions list pages (``X-Total-Count``: how many versions the note keeps).
Offset = Annotated[int, Query(ge=0, le=lim.MAX_ID, description="versions to skip, newest first")]
Limit = Annotated[int, Query(ge=1, le=MAX_VERSIONS, description=f"at most this many (1..{MAX_VERSIONS})")]


def _out(n: d.Note) -> NoteOut:
    return NoteOut(**vars(n))


async def _note_in(request: Request) -> NoteIn:
    expected = '{"body": text, "base_version": the version you edited, 0 for a new note}'
    return parse_json(await limited_body(request, MAX_NOTE_BYTES), NoteIn, "note", expected)


@router.get("/campaigns/{campaign_id}/note", operation_id="get_campaign_note")
def get_campaign_note(campaign_id: int, service: ServiceDep, _: Caller) -> NoteOut:
    """The campaign's note (empty, version 0, when none was saved)."""
    return _out(service.notes.get(campaign_id))


@router.put("/campaigns/{campaign_id}/note", operation_id="save_campaign_note", **_SAVE)  # type: ignore[arg-type]
async def save_campaign_note(campaign_id: int, request: Request, service: ServiceDep, token: Caller) -> NoteOut:
    """Saves the campaign's note over ``base_version``; 409 if it changed since."""
    note = await _note_in(request)
    saved = await run_in_threadpool(service.notes.save, campaign_id, None, note.body, note.base_version, token)
    return _out(saved)


@router.get("/campaigns/{campaign_id}/note/versions", operation_id="campaign_note_versions")
def campaign_note_versions(
    campaign_id: int, response: Response, service: ServiceDep, _: Caller, offset: Offset = 0, limit: Limit = 100
) -> list[NoteVersionOut]:
    """A page of the campaign's note's kept versions, newest first (without their text);
    ``X-Total-Count`` says how many are kept (the newest 100, within 1,000,000
    characters)."""
    return _versions(service.notes.versions(campaign_id, None, offset, limit), response)


@router.get("/campaigns/{campaign_id}/note/versions/{version}", operation_id="campaign_note_version")
def campaign_note_version(campaign_id: int, version: int, service: ServiceDep, _: Caller) -> NoteOut:
    """Version ``version`` of the campaign's note, with its text (restore it by saving it)."""
    return _out(service.notes.version(campaign_id, None, version))


@router.get("/campaigns/{campaign_id}/trials/{number}/note/versions", operation_id="trial_note_versions")
def trial_note_versions(
    campaign_id: int,
    number: int,
    response: Response,
    service: ServiceDep,
    _: Caller,
    offset: Offset = 0,
    limit: Limit = 100,
) -> list[NoteVersionOut]:
    """A page of the kept versions of the note of trial ``#number``, newest first;
    ``X-Total-Count`` says how many are kept."""
    return _versions(service.notes.versions(campaign_id, number, offset, limit), response)


@router.get("/campaigns/{campaign_id}/trials/{number}/note/versions/{version}", operation_id="trial_note_version")
def trial_note_version(campaign_id: int, number: int, version: int, service: ServiceDep, _: Caller) -> NoteOut:
    """Version ``version`` of the note of trial ``#number``, with its text."""
    return _out(service.notes.version(campaign_id, number, version))


@router.get("/campaigns/{campaign_id}/trials/{number}/note", operation_id="get_trial_note")
def get_trial_note(campaign_id: int, number: int, service: ServiceDep, _: Caller) -> NoteOut:
    """The note of the campaign's trial ``#number``."""
    return _out(service.notes.get(campaign_id, number))


@router.put("/campaigns/{campaign_id}/trials/{number}/note", operation_id="save_trial_note", **_SAVE)  # type: ignore[arg-type]
async def save_trial_note(
    campaign_id: int, number: int, request: Request, service: ServiceDep, token: Caller
) -> NoteOut:
    """Saves the note of trial ``#number`` over ``base_version``; 409 if it changed since."""
    note = await _note_in(request)
    saved = await run_in_threadpool(service.notes.save, campaign_id, number, note.body, note.base_version, token)
    return _out(saved)


@router.get("/campaigns/{campaign_id}/notes", operation_id="noted_trials")
def noted_trials(campaign_id: int, service: ServiceDep, _: Caller) -> list[int]:
    """Numbers of the campaign's trials that have a note."""
    return service.notes.noted_trials(campaign_id)
