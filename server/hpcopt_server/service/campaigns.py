"""Campaign use cases: create, read, cancel."""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import numpy as np

from hpcopt.core.spec import parse_spec, spec_to_json_dict
from hpcopt.errors import OptionError, SpecError
from hpcopt_server import domain as d
from hpcopt_server.errors import FailedPrecondition, InvalidArgument, NotFound, QuotaExceeded, ServiceError
from hpcopt_server.optimizers.pareto import losses, nondominated
from hpcopt_server.pruners import make_pruner
from hpcopt_server.rules import OPEN_STATES
from hpcopt_server.service.context import Context, campaign_or_404, revisions_in
from hpcopt_server.service.limits import MAX_HOST, RequestLimits, require_id, require_page, require_safe_text
from hpcopt_server.service.owners import require_owner
from hpcopt_server.service.suggestions import make_optimizer, option_field
from hpcopt_server.service.warmstart import check_sources
from hpcopt_server.storage.repository import CAMPAIGN_SORT_KEYS, TRIAL_SORT_KEYS


def front_ids(campaign: d.Campaign, rows: list[tuple[int, list[float]]]) -> list[int]:
    """Ids of the non-dominated trials among ``rows`` (id, values), best first in the
    first objective."""
    rows = [r for r in rows if len(r[1]) == len(campaign.objectives)]
    if not rows:
        return []
    L = losses([v for _, v in rows], [direction for _, direction in campaign.objectives])
    on = np.flatnonzero(nondominated(L))
    return [rows[i][0] for i in on[np.lexsort(L[on].T[::-1])]]


def validate_spec(document: Any) -> dict[str, Any]:
    """The canonical spec, or InvalidArgument naming every bad field."""
    try:
        spec = spec_to_json_dict(parse_spec(document))
    except SpecError as exc:
        raise InvalidArgument(f"invalid campaign spec: {exc}", exc.errors) from None
    make_optimizer(spec)  # checks the algorithm and its options
    try:
        make_pruner(spec)
    except ValueError as exc:
        field = "pruner." + option_field(exc)
        if isinstance(exc, OptionError):
            raise InvalidArgument(f"{field}: {exc.message}", [(field, exc.message)]) from None
        raise InvalidArgument(f"pruner.{exc}", [(field, str(exc))]) from None
    return spec


#: The window of the per-token creation quota.
QUOTA_WINDOW = timedelta(hours=1)


def admit_submission(tx: Any, ctx: Context, token: d.ApiToken | None, per_hour: int) -> d.ApiToken | None:
    """The token to record as a new campaign's creator and owner (None with auth off),
    or QuotaExceeded once the token created ``per_hour`` campaigns in the last hour
    (never for an admin token, or with ``per_hour`` 0)."""
    if token is None:
        return None
    if per_hour > 0 and "admin" not in token.scopes:
        now = ctx.clock()
        recent = tx.campaigns.submissions_by(token.id, now - QUOTA_WINDOW)
        if len(recent) >= per_hour:
            frees = recent[len(recent) - per_hour] + QUOTA_WINDOW
            wait = max(1, math.ceil((frees - now).total_seconds()))
            raise QuotaExceeded(
                f"token {token.name!r} created {len(recent)} campaigns in the last hour, its quota "
                f"(hpcopt-server serve --max-campaigns-per-hour; admin tokens have none); try again in {wait} s",
                [("campaigns", f"at most {per_hour} created or imported per token an hour")],
                retry_after=wait,
            )
    return token


#: Campaigns one listing returns at most.
MAX_CAMPAIGN_PAGE = 1000


class CampaignService:
    def __init__(self, ctx: Context, limits: RequestLimits | None = None):
        self.ctx = ctx
        self.limits = limits or RequestLimits()

    def create(self, document: Any, token: d.ApiToken | None = None) -> d.Campaign:
        """A new campaign from ``document``, created by ``token`` (its quota applies)."""
        spec = validate_spec(document)
        with self.ctx.storage.write() as tx:
            creator = admit_submission(tx, self.ctx, token, self.limits.campaigns_per_hour)
            check_sources(tx, spec)
            now = self.ctx.clock()
            return tx.campaigns.insert(spec["name"], spec, now, submitted_at=now, created_by=creator)

    def reopen_or_create(self, document: Any, token: d.ApiToken | None = None) -> tuple[d.Campaign, bool]:
        """The newest campaign with ``document``'s name and (validated) spec, else a new
        one created by ``token``; and whether it was created. One transaction under a
        lock on the name, so processes opening one name and spec at once share one
        campaign (the embedded mode's ``Study``)."""
        spec = validate_spec(document)
        with self.ctx.storage.write() as tx:
            for c in tx.campaigns.named(spec["name"], lock=True):
                if _same_spec(c.spec, spec):
                    return c, False
            creator = admit_submission(tx, self.ctx, token, self.limits.campaigns_per_hour)
            check_sources(tx, spec)
            now = self.ctx.clock()
            return tx.campaigns.insert(spec["name"], spec, now, submitted_at=now, created_by=creator), True

    def get(self, campaign_id: int) -> d.CampaignSummary:
        with self.ctx.storage.read() as tx:
            return self._summaries(tx, [campaign_or_404(tx, campaign_id)])[0]

    def page(
        self,
        offset: int = 0,
        limit: int = 100,
        *,
        name: str = "",
        states: Iterable[d.CampaignState] = (),
        sort: str = "id",
        descending: bool = True,
    ) -> tuple[list[d.CampaignSummary], int]:
        """A page of the campaigns whose name contains ``name`` (any case) in one of
        ``states`` (all when empty), by ``sort`` (CAMPAIGN_SORT_KEYS; newest first by
        default), and how many match."""
        require_page(offset, limit, MAX_CAMPAIGN_PAGE)
        require_safe_text("q", name, MAX_HOST)  # REST's query parameter
        if sort not in CAMPAIGN_SORT_KEYS:
            allowed = ", ".join(CAMPAIGN_SORT_KEYS)
            raise InvalidArgument(f"sort must be one of {allowed}, got {sort[:100]!r}", [("sort", f"one of {allowed}")])
        with self.ctx.storage.read() as tx:
            campaigns, total = tx.campaigns.page(
                offset, limit, name=name, states=states, sort=sort, descending=descending
            )
            return self._summaries(tx, campaigns), total

    def trials(
        self,
        campaign_id: int,
        states: Iterable[d.TrialState] = (),
        offset: int = 0,
        limit: int = 100,
        sort: str = "number",
        descending: bool = False,
    ) -> tuple[list[d.Trial], int]:
        if sort not in TRIAL_SORT_KEYS:
            allowed = ", ".join(TRIAL_SORT_KEYS)
            raise InvalidArgument(f"sort must be one of {allowed}, got {sort!r}", [("sort", f"one of {allowed}")])
        require_page(offset, limit)
        with self.ctx.storage.read() as tx:
            campaign_or_404(tx, campaign_id)
            return tx.trials.page(
                campaign_id, states=states, offset=offset, limit=limit, sort=sort, descending=descending
            )

    def trial(self, trial_id: int) -> d.Trial:
        require_id("trial_id", trial_id)
        with self.ctx.storage.read() as tx:
            trial = tx.trials.get(trial_id, full=True)
        if trial is None:
            raise NotFound(f"trial {trial_id} does not exist")
        return trial

    def best(self, campaign_id: int) -> d.Trial:
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            best = tx.results.best_trials([campaign]).get(campaign_id)
            if best is None:
                last = campaign.final_epoch
                if last is not None:
                    raise NotFound(f"campaign {campaign_id} has no member that has trained all {last} epochs yet")
                raise NotFound(f"campaign {campaign_id} has no completed trial yet")
            full = tx.trials.get(best.id, full=True)
        assert full is not None
        return full

    def front(self, campaign_id: int) -> list[d.Trial]:
        """The Pareto front: the COMPLETED trials no other completed trial beats in every
        objective, best first in the first objective. A single-objective campaign's
        front is its best trial (empty while it has none)."""
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            if len(campaign.objectives) == 1:
                best = tx.results.best_trials([campaign]).get(campaign_id)
                return [] if best is None else [best]
            return tx.trials.by_ids(front_ids(campaign, tx.results.completed_values(campaign_id, feasible=True)))

    def agents(self, campaign_id: int | None = None) -> list[d.Agent]:
        with self.ctx.storage.read() as tx:
            return tx.agents.registered(campaign_id)

    def cancel(self, campaign_id: int, token: d.ApiToken | None = None) -> d.CampaignSummary:
        """Cancels a RUNNING or PAUSED campaign: its queued and running trials become
        CANCELLED (agents learn it from their next heartbeat). Needs its owner or an
        admin ``token`` (``owners.py``)."""
        now = self.ctx.clock()
        with self.ctx.storage.write() as tx:
            campaign = campaign_or_404(tx, campaign_id, lock=True)
            require_owner(campaign, token, "cancel")
            if campaign.state not in OPEN_STATES:
                raise FailedPrecondition(
                    f"campaign {campaign_id} is {campaign.state.value}; only a RUNNING or PAUSED campaign can be "
                    "cancelled"
                )
            for trial_id in tx.trials.unfinished_ids(campaign_id):
                # The lease stays, so a holder's next heartbeat learns of the cancel.
                trial = tx.trials.get(trial_id)
                assert trial is not None
                tx.trials.finish(trial_id, d.TrialState.CANCELLED, now)
                tx.trials.add_event(trial_id, trial.attempt, "cancelled", now, reason="campaign cancelled")
            tx.campaigns.set_state(campaign_id, d.CampaignState.CANCELLED, now)
            tx.campaigns.set_pause_reason(campaign_id, None)
            updated = campaign_or_404(tx, campaign_id)
            summary = self._summaries(tx, [updated])[0]
        self.ctx.optimizers.forget(campaign_id)
        return summary

    def _summaries(self, tx: Any, campaigns: list[d.Campaign]) -> list[d.CampaignSummary]:
        counts = tx.campaigns.trial_counts([c.id for c in campaigns])
        best = tx.results.best_trials(campaigns)
        live = tx.agents.live_counts(self.ctx.clock() - timedelta(seconds=self.ctx.settings.lease_seconds))
        return [
            d.CampaignSummary(
                campaign=c,
                trial_counts=counts.get(c.id, {}),
                best_value=best[c.id].value if c.id in best else None,
                best_trial_id=best[c.id].id if c.id in best else None,
                live_agents=live.get(c.id, 0),
                best_trial_number=best[c.id].number if c.id in best else None,
                front_size=self._front_size(tx, c),
            )
            for c in campaigns
        ]

    def _front_size(self, tx: Any, c: d.Campaign) -> int | None:
        """How many completed trials are on a multi-objective campaign's Pareto front;
        kept until a trial of it finishes (a listing is polled every 2 s)."""
        if len(c.objectives) == 1:
            return None
        revision = revisions_in(tx, c.id)[0]
        return self.ctx.shared.get(
            ("front_size", c.id), revision, lambda: len(front_ids(c, tx.results.completed_values(c.id, feasible=True)))
        )[1]


def _same_spec(stored: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether a stored spec is ``wanted`` (validated): compared once both are validated
    by this release, so a field added since (with its default) does not count."""
    if stored == wanted:
        return True
    try:
        return bool(validate_spec(stored) == wanted)
    except ServiceError:
        return False
