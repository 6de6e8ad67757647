"""Import an export document (``export.py``) as a new campaign, in chunks.

The document is checked whole first (``ExportDoc``, ``check_trials``): a bad one stores
nothing. Then it is written in transactions of at most :data:`CHUNK_TRIALS` trials or
:data:`CHUNK_SECONDS` of work, so that the database's writer is free between them: on
SQLite one transaction holds the file's only write lock, and a 42 s import of 2,000
trials left an agent of another campaign without a heartbeat for over 20 s (its lease
expired). While it is written the new campaign is PAUSED, its ``pause_reason`` saying
how far the import is (``importing: 1,200 of 2,000 trials``), so no agent takes a trial
of a half-written campaign; the last transaction gives it the document's state. An
import that fails half-way (a database error, the server stopping) deletes what it
wrote; one whose process is killed leaves that PAUSED campaign, named as an interrupted
import, to delete (``hpcopt cancel``) and import again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import pydantic

from hpcopt.core.constraints import Outcome
from hpcopt_server import domain as d
from hpcopt_server.curves import thin
from hpcopt_server.errors import InvalidArgument
from hpcopt_server.service import limits as lim
from hpcopt_server.service.campaigns import admit_submission, validate_spec
from hpcopt_server.service.context import Context
from hpcopt_server.service.export import ExportDoc, LineageDoc, TrialDoc, check_import_size, check_trials
from hpcopt_server.storage.repository import Tx

log = logging.getLogger(__name__)

#: One transaction writes at most this many trials, or this much work (seconds).
CHUNK_TRIALS, CHUNK_SECONDS = 250, 0.5
#: Finished trials take their finish numbers this many to a transaction.
CHUNK_FINISHES = 2000

T = TypeVar("T")


def import_campaign(
    ctx: Context, document: Any, limits: lim.RequestLimits | None = None, token: d.ApiToken | None = None
) -> d.Campaign:
    limits = limits or lim.RequestLimits()
    check_import_size(document, limits)
    try:
        doc = ExportDoc.model_validate(document)
    except pydantic.ValidationError as exc:
        errors = [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors(include_url=False)]
        raise InvalidArgument(
            "invalid export document: " + "; ".join(f"{p}: {m}" for p, m in errors[:10]), errors
        ) from None
    spec = validate_spec(doc.spec)
    # Campaign ids name campaigns of the exporting server: here they would name others.
    spec.pop("warm_start", None)
    check_trials(spec, doc.trials)
    now = ctx.clock()
    trials = sorted(doc.trials, key=lambda t: t.number)
    with ctx.storage.write() as tx:
        creator = admit_submission(tx, ctx, token, limits.campaigns_per_hour)
        c = tx.campaigns.insert(doc.campaign.name, spec, doc.campaign.created_at, submitted_at=now, created_by=creator)
        tx.campaigns.set_state(c.id, d.CampaignState.PAUSED, None)
        tx.campaigns.set_pause_reason(c.id, _progress(doc, 0, len(trials)))
    try:
        return _write(ctx, c, doc, trials, token.name if token else "", now)
    except BaseException:
        log.warning("the import of campaign %r failed: deleting what it wrote (campaign %d)", doc.campaign.name, c.id)
        try:
            with ctx.storage.write() as tx:
                tx.campaigns.delete(c.id)
        except Exception:  # the database itself may be what failed: say so, keep the first error
            log.exception("could not delete the half-imported campaign %d: cancel it and import again", c.id)
        raise


def _write(ctx: Context, c: d.Campaign, doc: ExportDoc, trials: list[TrialDoc], by: str, now: Any) -> d.Campaign:
    ids: dict[int, int] = {}
    done = 0
    for chunk in _chunks(trials, CHUNK_TRIALS, ctx, lambda tx, t: _trial(tx, c, doc, t, ids, by, now)):
        done += chunk
        with ctx.storage.write() as tx:
            tx.campaigns.set_pause_reason(c.id, _progress(doc, done, len(trials)))
    # Finished trials take their finish_seq in the order they originally finished.
    finished = [t for t in sorted(trials, key=lambda t: (t.finished_at or now, t.number)) if t.state.finished]
    for start in range(0, len(finished), CHUNK_FINISHES):
        with ctx.storage.write() as tx:
            for t in finished[start : start + CHUNK_FINISHES]:
                tx.trials.finish(ids[t.number], t.state, t.finished_at or now)
    with ctx.storage.write() as tx:
        tx.campaigns.set_next_number(c.id, max((t.number for t in trials), default=-1) + 1)
        if doc.campaign.note:
            tx.notes.save(c.id, None, doc.campaign.note, 0, now, by)
        current = tx.campaigns.lock(c.id)
        tx.campaigns.set_pause_reason(c.id, None)
        if current is not None and current.state == d.CampaignState.CANCELLED:
            pass  # cancelled while it was written: it stays so
        elif doc.campaign.state == d.CampaignState.PAUSED:
            tx.campaigns.set_pause_reason(c.id, "paused when it was exported")
        elif doc.campaign.state == d.CampaignState.RUNNING:
            tx.campaigns.set_state(c.id, d.CampaignState.RUNNING, None)
        else:
            tx.campaigns.set_state(c.id, doc.campaign.state, doc.campaign.finished_at or now)
        out = tx.campaigns.get(c.id)
    assert out is not None
    return out


def _chunks(items: Sequence[T], most: int, ctx: Context, write: Callable[[Tx, T], None]) -> Iterator[int]:
    """Writes ``items`` in transactions of at most ``most`` items or ``CHUNK_SECONDS``;
    yields how many each wrote, once it committed."""
    i = 0
    while i < len(items):
        n = 0
        with ctx.storage.write() as tx:
            start = time.monotonic()  # the lock is held from here
            while i < len(items) and n < most and (n == 0 or time.monotonic() - start < CHUNK_SECONDS):
                write(tx, items[i])
                i += 1
                n += 1
        yield n


def _trial(tx: Tx, c: d.Campaign, doc: ExportDoc, t: TrialDoc, ids: dict[int, int], by: str, now: Any) -> None:
    # Only a COMPLETED trial has a result and a PRUNED one the value it reached: the
    # values an older SQLite server left on running and failed trials (and on open
    # folds: below) are not carried over (migration 0011).
    # A PAUSED one (multi-fidelity, between rungs) keeps its rung's value and state: the
    # campaign's searcher promotes or stops it.
    kept = t.state in (d.TrialState.COMPLETED, d.TrialState.PRUNED, d.TrialState.PAUSED)
    # RUNNING (and the transient PREEMPTED) come back QUEUED: their lease is gone.
    new = tx.trials.insert(
        c.id,
        t.number,
        c.in_space_order(t.params),
        t.state if t.state.finished or t.state == d.TrialState.PAUSED else d.TrialState.QUEUED,
        t.created_at,
        attempt=t.attempt,
        value=t.value if kept else None,
        value_std=t.value_std if kept else None,
        values=t.values if kept else None,
        error=t.error,
        started_at=t.started_at,
        lineage=_imported(t.lineage, ids),
        fidelity=None if t.fidelity is None else d.Fidelity.from_dict(t.fidelity.model_dump()),
        outcome=None if t.violation is None else Outcome(tuple(t.constraint_values or ()), t.violation, t.broken),
    )
    # A checkpoint URI names a file of the exporting server's agents and trials: never
    # offered to an agent here (an unfinished fold of an imported trial trains from its
    # start).
    folds = [
        d.Fold(f.index, f.finished, f.value if f.finished else None, dict(f.metrics), "", f.attempt) for f in t.folds
    ]
    tx.trials.put_folds(new.id, folds, now)
    # Held to the campaign's cap per fold, as reports are (hpcopt_server.curves).
    by_fold: dict[int, list[tuple[int, float]]] = {}
    for p in sorted(t.curves, key=lambda p: (p.fold, p.step)):
        by_fold.setdefault(p.fold, []).append((p.step, p.value))
    for fold, points in by_fold.items():
        tx.trials.put_curve(new.id, fold, thin(points, c.curve_points))
    for e in t.events:
        tx.trials.add_event(new.id, e.attempt, e.kind, e.at, agent_id=e.agent_id, reason=e.reason)
    for a in t.analyses:
        tx.analyses.save(
            new.id, a.fold, a.attempt, a.document.model_dump(mode="json", exclude_none=True), a.computed_at
        )
    tx.trials.add_event(new.id, t.attempt, "imported", now, reason=f"from campaign {doc.campaign.id}")
    if t.note:
        tx.notes.save(c.id, t.number, t.note, 0, now, by)
    ids[t.number] = new.id


#: How a campaign being imported says so (``pause_reason``); it cannot be resumed.
IMPORTING = "importing "


def _progress(doc: ExportDoc, done: int, total: int) -> str:
    return (
        f"{IMPORTING}{doc.campaign.name!r}: {done:,} of {total:,} trials written; it takes its exported state when "
        "the import ends (a campaign left like this was an interrupted import: cancel it and import again)"
    )


def _imported(doc: LineageDoc | None, ids: dict[int, int]) -> d.Lineage | None:
    """The lineage with the parent's id on this server (trials are inserted by number,
    and a parent's number is below its child's, as check_trials made sure)."""
    if doc is None:
        return None
    lineage = d.Lineage.from_dict(doc.model_dump())
    return replace(lineage, parent_id=None if lineage.parent is None else ids[lineage.parent])
