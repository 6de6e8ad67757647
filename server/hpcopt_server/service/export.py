"""Export a campaign as one JSON document, and import such a document as a new campaign.

The document (``format: hpcopt-campaign``, ``version: 1``) holds the spec, the
campaign's state and note, and every trial with its folds, curves, attempt history and
note. Importing
gives new ids; trials that were RUNNING come back QUEUED (their lease died with the
export), so an imported running campaign simply goes on. Checkpoint URIs are not
imported: they name files of the exporting server's trials, which no agent here may
resume from, so an imported unfinished fold trains from its first epoch.

An import is checked as strictly as the live path checks reports: finite numbers,
folds and curve points inside the campaign's K folds, parameters the space could have
produced, ids and steps within the database's columns, timezone-aware times, text
without NUL within its column's width, and no more trials than the budget. A document
that fails any of it is refused whole, naming the field; nothing is stored.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import pydantic
from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field

from hpcopt.core.analysis_doc import AnalysisDoc
from hpcopt.core.constraints import MAX_CONSTRAINTS
from hpcopt.core.spec import MAX_OBJECTIVES
from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument, TooLarge
from hpcopt_server.optimizers import SearchSpace
from hpcopt_server.service import limits as lim
from hpcopt_server.service.campaigns import front_ids
from hpcopt_server.service.context import Context, campaign_or_404

#: A campaign's most folds (the spec's ``folds`` field).
MAX_FOLDS = 100


def _no_nul(text: str) -> str:
    if "\x00" in text:
        raise ValueError("must not contain NUL characters")
    return text


def _utc(t: datetime) -> datetime:
    try:
        return t.astimezone(UTC)
    except OverflowError:
        raise ValueError("is out of range in UTC") from None


def Text(max_chars: int) -> Any:
    return Annotated[str, Field(max_length=max_chars), AfterValidator(_no_nul)]


Index = Annotated[int, Field(ge=0, le=lim.MAX_ID)]
Attempt = Annotated[int, Field(ge=1, le=lim.MAX_ID)]
Time = Annotated[AwareDatetime, AfterValidator(_utc)]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class FoldDoc(_Doc):
    index: Index
    finished: bool
    value: float | None = None
    metrics: dict[Text(lim.MAX_METRIC_NAME), float] = Field(default={}, max_length=lim.MAX_METRICS)  # type: ignore[valid-type]
    checkpoint_uri: Text(lim.MAX_URI) = ""  # type: ignore[valid-type]
    attempt: Attempt = 1


class CurveDoc(_Doc):
    fold: Index
    step: Index
    value: float


class EventDoc(_Doc):
    attempt: Attempt
    kind: Text(32)  # type: ignore[valid-type]
    agent_id: Text(lim.MAX_SHORT) = ""  # type: ignore[valid-type]
    reason: Text(lim.MAX_REASON) = ""  # type: ignore[valid-type]
    at: Time


class LineageDoc(_Doc):
    """A PBT interval's lineage (:class:`hpcopt_server.domain.Lineage`); trials are
    named by number."""

    member: Index
    start_epoch: Index
    stop_epoch: Index
    parent: Index | None = None
    previous: Index | None = None
    changed: dict[Text(lim.MAX_METRIC_NAME), list[bool | int | float | str]] = Field(  # type: ignore[valid-type]
        default={}, max_length=lim.MAX_METRICS
    )
    unreadable: list[Index] = Field(default=[], max_length=lim.MAX_UNREADABLE)


#: Rungs a multi-fidelity trial's history may hold (a ladder has a handful).
MAX_RUNGS = 64
Count = Annotated[int, Field(ge=1, le=lim.MAX_ID)]


class RungResultDoc(_Doc):
    """A rung a multi-fidelity trial finished (:class:`hpcopt_server.domain.RungResult`)."""

    rung: Index
    folds: Annotated[int, Field(ge=1, le=MAX_FOLDS)]
    epochs: Count
    value: float
    values: list[float] = Field(max_length=MAX_FOLDS)
    seconds: float = Field(ge=0)


class FidelityDoc(_Doc):
    """A multi-fidelity trial's rung and finished rungs (:class:`hpcopt_server.domain.Fidelity`)."""

    rung: Index
    folds: Annotated[int, Field(ge=1, le=MAX_FOLDS)]
    epochs: Count
    why: Text(lim.MAX_REASON) = ""  # type: ignore[valid-type]
    history: list[RungResultDoc] = Field(default=[], max_length=MAX_RUNGS)


class FoldAnalysisDoc(_Doc):
    """A fold's analysis (``domain.FoldAnalysis``): its document is the agent's schema."""

    fold: Annotated[int, Field(ge=0, lt=MAX_FOLDS)]
    attempt: Attempt = 1
    computed_at: Time
    document: AnalysisDoc


class TrialDoc(_Doc):
    number: Index
    state: d.TrialState
    attempt: Attempt = 1
    params: dict[str, bool | int | float | str]
    value: float | None = None
    value_std: float | None = Field(default=None, ge=0)
    values: list[float] | None = Field(default=None, max_length=MAX_OBJECTIVES)
    error: Text(lim.MAX_REASON) = ""  # type: ignore[valid-type]
    created_at: Time
    started_at: Time | None = None
    finished_at: Time | None = None
    folds: list[FoldDoc] = []
    curves: list[CurveDoc] = []
    events: list[EventDoc] = []
    note: Text(lim.MAX_NOTE) = ""  # type: ignore[valid-type]
    lineage: LineageDoc | None = None
    fidelity: FidelityDoc | None = None
    constraint_values: list[float | None] | None = Field(default=None, max_length=MAX_CONSTRAINTS)
    violation: float | None = Field(default=None, ge=0)
    broken: Text(lim.MAX_REASON) = ""  # type: ignore[valid-type]
    analyses: list[FoldAnalysisDoc] = Field(default=[], max_length=MAX_FOLDS)


class CampaignDoc(_Doc):
    id: Index | None = None
    name: Text(200)  # type: ignore[valid-type]
    note: Text(lim.MAX_NOTE) = ""  # type: ignore[valid-type]
    state: d.CampaignState
    created_at: Time
    finished_at: Time | None = None


class ExportDoc(_Doc):
    format: Literal["hpcopt-campaign"]
    version: Literal[1]
    spec: dict[str, Any]
    campaign: CampaignDoc
    trials: list[TrialDoc]
    #: Numbers of the trials on the Pareto front when exported (multi-objective; the
    #: importing server recomputes it).
    front: list[Index] = Field(default=[], max_length=1_000_000)

    @pydantic.model_validator(mode="after")
    def _times_in_order(self) -> ExportDoc:
        c = self.campaign
        if c.finished_at is not None and c.finished_at < c.created_at:
            raise ValueError("campaign.finished_at is before campaign.created_at")
        for i, t in enumerate(self.trials):
            if t.started_at is not None and t.started_at < t.created_at:
                raise ValueError(f"trials.{i}.started_at is before its created_at")
            if t.finished_at is not None and t.finished_at < (t.started_at or t.created_at):
                raise ValueError(f"trials.{i}.finished_at is before its started_at (or created_at)")
        return self


def export_campaign(ctx: Context, campaign_id: int) -> dict[str, Any]:
    with ctx.storage.read() as tx:
        c = campaign_or_404(tx, campaign_id)
        ids = [t.id for t in tx.trials.page(campaign_id, with_folds=False)[0]]
        trials = [tx.trials.get(i, full=True, curve_points=None) for i in ids]
        feasible = tx.results.completed_values(campaign_id, feasible=True)
        on_front = set(front_ids(c, feasible)) if len(c.objectives) > 1 else set()
        notes = tx.notes.of_campaign(campaign_id)
        analyses = tx.analyses.of_campaign(campaign_id)
    # Built without the document's own checks: an export returns what is stored, even
    # times out of order (a clock stepped back between a trial's start and finish used
    # to make every export of its campaign fail). Import still checks them.
    doc = ExportDoc.model_construct(
        format="hpcopt-campaign",
        version=1,
        spec=c.spec,
        campaign=CampaignDoc(
            id=c.id,
            name=c.name,
            state=c.state,
            created_at=c.created_at,
            finished_at=c.finished_at,
            note=notes.get(None, ""),
        ),
        trials=[trial_doc(t, notes.get(t.number, ""), analyses.get(t.id, [])) for t in trials if t is not None],
        front=sorted(t.number for t in trials if t is not None and t.id in on_front),
    )
    return doc.model_dump(mode="json")


def trial_doc(t: d.Trial, note: str = "", analyses: list[d.FoldAnalysis] | None = None) -> TrialDoc:
    """A trial as the export document carries it: the one mapping of a trial into the
    document (``tests/server/test_trial_fields.py`` holds it to the domain's fields)."""
    return TrialDoc(
        **d.trial_fields(t, TrialDoc.model_fields),
        folds=[FoldDoc(**vars(f)) for f in t.folds],
        curves=[CurveDoc(**vars(p)) for p in t.curves],
        events=[EventDoc(**vars(e)) for e in t.events],
        note=note,
        lineage=None if t.lineage is None else LineageDoc(**_exported(t.lineage)),
        fidelity=None if t.fidelity is None else FidelityDoc(**t.fidelity.as_dict()),
        analyses=[
            FoldAnalysisDoc.model_construct(
                fold=a.fold,
                attempt=a.attempt,
                computed_at=a.computed_at,
                document=AnalysisDoc.model_validate(a.document),  # stored checked: plain numbers
            )
            for a in analyses or []
        ],
    )


def check_import_size(document: Any, limits: lim.RequestLimits) -> None:
    """Counts what an import would store before anything else reads it (validating and
    storing cost per trial, point and event): TooLarge (413) naming the limit that is
    passed, so an over-limit document costs one pass over its lists."""
    trials = document.get("trials") if isinstance(document, dict) else None
    if not isinstance(trials, list):
        return  # the document model names what is wrong
    if len(trials) > limits.import_trials:
        raise TooLarge(
            f"the document holds {len(trials)} trials; an import may hold at most {limits.import_trials}",
            [("trials", f"at most {limits.import_trials} trials per import")],
        )
    counts = {"curves": 0, "events": 0}
    for i, t in enumerate(trials):
        if not isinstance(t, dict):
            continue
        folds = t.get("folds")
        if isinstance(folds, list) and len(folds) > MAX_FOLDS:
            raise TooLarge(
                f"trials.{i}.folds has {len(folds)} entries; a campaign has at most {MAX_FOLDS} folds",
                [(f"trials.{i}.folds", f"at most {MAX_FOLDS} entries")],
            )
        for key in counts:
            items = t.get(key)
            counts[key] += len(items) if isinstance(items, list) else 0
    for key, limit, what in (
        ("curves", limits.import_curve_points, "learning-curve points"),
        ("events", limits.import_events, "events"),
    ):
        if counts[key] > limit:
            raise TooLarge(
                f"the document holds {counts[key]} {what}; an import may hold at most {limit}",
                [(f"trials.*.{key}", f"at most {limit} {what} per import")],
            )


def _exported(lineage: d.Lineage) -> dict[str, Any]:
    out = lineage.as_dict()
    del out["parent_id"]  # an id of this server's: the number says which trial
    return out


def _lineage_problems(
    at: str, lineage: LineageDoc, number: int, numbers: set[int], names: set[str]
) -> list[tuple[str, str]]:
    out = []
    for key in ("parent", "previous"):
        ref = getattr(lineage, key)
        if ref is not None and (ref >= number or ref not in numbers):
            out.append((f"{at}.lineage.{key}", f"must be the number of an earlier trial of the document, not {ref}"))
    for ref in lineage.unreadable:
        if ref >= number or ref not in numbers:
            out.append((f"{at}.lineage.unreadable", f"must list numbers of earlier trials of the document, not {ref}"))
            break
    if lineage.stop_epoch <= lineage.start_epoch:
        out.append((f"{at}.lineage.stop_epoch", "must be greater than start_epoch"))
    for name, change in lineage.changed.items():
        if name not in names or len(change) != 2:
            out.append((f"{at}.lineage.changed", f"{name!r}: must name a parameter of the space, with [before, after]"))
    return out


def check_trials(spec: dict[str, Any], trials: list[TrialDoc]) -> None:
    """What the document's types cannot say: every trial against the campaign's spec.
    Raises InvalidArgument listing the problems (the first 20)."""
    space, folds = SearchSpace(spec["space"]), int(spec["folds"])
    objectives = len(d.objectives_of(spec))
    errors: list[tuple[str, str]] = []
    if len(trials) > spec["budget"]["max_trials"]:
        errors.append(("trials", f"{len(trials)} trials; the budget allows {spec['budget']['max_trials']}"))
    numbers = {t.number for t in trials}
    if len(numbers) != len(trials):
        errors.append(("trials", "numbers must be unique"))
    for i, t in enumerate(trials):
        at = f"trials.{i}"
        errors += [(f"{at}.params.{name}", msg) for name, msg in space.problems(t.params)]
        if t.attempt > spec["max_attempts"]:
            errors.append((f"{at}.attempt", f"must be <= max_attempts ({spec['max_attempts']})"))
        if t.state == d.TrialState.COMPLETED and t.value is None:
            errors.append((f"{at}.value", "a COMPLETED trial needs a value"))
        if t.values is not None and objectives == 1:
            errors.append((f"{at}.values", "only the trials of a campaign with objectives have values"))
        elif t.values is not None and len(t.values) != objectives:
            errors.append((f"{at}.values", f"must hold one value per objective ({objectives})"))
        elif objectives > 1 and t.state == d.TrialState.COMPLETED and t.values is None:
            errors.append((f"{at}.values", f"a COMPLETED trial needs values ({objectives} objectives)"))
        elif t.values is not None and t.value is not None and t.values[0] != t.value:
            errors.append((f"{at}.values", "the first of values must equal value"))
        indices = [f.index for f in t.folds]
        if len(set(indices)) != len(indices):
            errors.append((f"{at}.folds", "fold indices must be unique"))
        for j, f in enumerate(t.folds):
            if f.index >= folds:
                errors.append((f"{at}.folds.{j}.index", f"must be in 0..{folds - 1} (the campaign has {folds} folds)"))
            if f.finished and f.value is None:
                errors.append((f"{at}.folds.{j}.value", "a finished fold needs a value"))
        for j, p in enumerate(t.curves):
            if p.fold >= folds:
                errors.append((f"{at}.curves.{j}.fold", f"must be in 0..{folds - 1}"))
        if t.lineage is not None:
            errors += _lineage_problems(at, t.lineage, t.number, numbers, set(spec["space"]))
        if len(errors) >= 20:
            break
    if errors:
        raise InvalidArgument("invalid export document: " + "; ".join(f"{p}: {m}" for p, m in errors[:5]), errors)
