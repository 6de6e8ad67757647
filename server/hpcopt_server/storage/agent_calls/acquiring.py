"""Acquisition: a queued trial resumed, or new ones numbered and inserted RUNNING."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from hpcopt_server import domain as d
from hpcopt_server import rules
from hpcopt_server.storage import agent_sql as S
from hpcopt_server.storage.agent_calls.base import DONE, PAUSED, WAIT, CallsBase, Suggest, event_params
from hpcopt_server.storage.repository import Tx


class Acquiring(CallsBase):
    def acquire(
        self, campaign_id: int, agents: Sequence[str], now: datetime, expires: datetime, suggest: Suggest
    ) -> list[d.Trial | str] | None:
        """A trial for each of ``agents`` (RUNNING under a new lease, in its
        ``lease_id``), or WAIT (PAUSED: the campaign is paused) or DONE, in one
        transaction under the campaign's lock:
        queued trials resume first (rules.room_to_acquire). None if there is no such
        campaign."""
        with self.storage.write() as tx:
            c = tx.connection()
            campaign = self.campaign(campaign_id, c)
            if campaign is None:
                return None
            asking = len(agents)
            # The campaign lock, to the commit.
            state, first, finished, budget = self._take_numbers(c, campaign_id, asking)
            if budget != campaign.spec.get("budget"):  # raised since it was cached
                campaign = self._reload(c, campaign_id)
            running, queued = (int(n or 0) for n in c.execute(S.ACTIVE, {"cid": campaign_id}).one())
            if state != d.CampaignState.RUNNING:
                c.execute(S.SET_NEXT_NUMBER, {"cid": campaign_id, "n": first})
                return [PAUSED if state == d.CampaignState.PAUSED else DONE] * asking
            room = rules.room_to_acquire(
                asking=asking,
                running=running,
                queued=queued,
                created=first,
                max_parallel=campaign.max_parallel,
                max_trials=campaign.max_trials,
                promotes=campaign.promotes,
            )
            queued_ids = self._queued(c, campaign_id, room.resume)
            out: list[d.Trial | str] = [
                self._resume(tx, tid, a, now, expires)
                for tid, a in zip(queued_ids, agents[: len(queued_ids)], strict=True)
            ]
            made: list[d.Suggestion] = []
            if room.new:
                fresh = replace(campaign, trials_created=first, trials_finished=finished)
                made = suggest(tx, fresh, room.new, running + room.resume)
                if campaign.promotes:
                    out += self._promote(tx, campaign, made, list(agents[len(out) :]), now, expires)
                    made = [m for m in made if m.promote is None][: max(0, campaign.max_trials - first)]
                refused = [m for m in made if m.refused is not None]
                made = [m for m in made if m.refused is None][: asking - len(out)]
                chosen = list(agents[len(out) : len(out) + len(made)])
                if made:  # an empty executemany is one execution without parameters
                    out += self._insert_running(c, campaign, first, made, chosen, now, expires)
                self._insert_refused(tx, campaign, first + len(made), refused, now)
                made += refused
            if len(made) != asking:
                c.execute(S.SET_NEXT_NUMBER, {"cid": campaign_id, "n": first + len(made)})
            out += [WAIT] * (asking - len(out))
            c.execute(S.SEEN_MANY, {"aids": sorted(set(agents)), "now": now})
        return out

    def _insert_refused(
        self, tx: Tx, campaign: d.Campaign, first: int, refused: list[d.Suggestion], now: datetime
    ) -> None:
        """Suggestions not started (hard limits before launch): each a FAILED trial
        that never ran, with its predicted outcome and a ``skipped`` event saying why."""
        for i, m in enumerate(refused):
            assert m.refused is not None
            params = campaign.in_space_order(m.params)
            trial = tx.trials.insert(campaign.id, first + i, params, d.TrialState.RUNNING, now)
            why = m.refused.broken
            tx.trials.finish(trial.id, d.TrialState.FAILED, now, error=why, outcome=m.refused)
            tx.trials.add_event(trial.id, 1, "skipped", now, reason=why)
        if refused:
            self._finish_campaign_if_done(tx, campaign.id, now)

    def _promote(
        self,
        tx: Tx,
        campaign: d.Campaign,
        made: list[d.Suggestion],
        agents: list[str],
        now: datetime,
        expires: datetime,
    ) -> list[d.Trial]:
        """The suggestions that name a PAUSED trial: each promotion RUNNING again under a
        new lease for one of ``agents`` (the same trial, its checkpoints kept); each stop
        (``retire``) PRUNED with why. Returns the promoted trials."""
        out: list[d.Trial] = []
        for m in made:
            if m.promote is None:
                continue
            if m.retire:
                paused = tx.trials.get(m.promote, lock=True, folds=False)
                if paused is not None and paused.state == d.TrialState.PAUSED:
                    tx.trials.finish(m.promote, d.TrialState.PRUNED, now, error=m.retire)
                    tx.trials.add_event(m.promote, paused.attempt, "pruned", now, reason=m.retire)
                    self._finish_campaign_if_done(tx, campaign.id, now)
                continue
            if len(out) >= len(agents) or m.fidelity is None:
                continue
            agent, lease_id = agents[len(out)], uuid.uuid4().hex
            if not tx.fidelity.promote(m.promote, m.fidelity, agent, lease_id, expires):
                continue  # no longer PAUSED (another replica promoted or stopped it)
            trial = self._trial_with_folds(tx.connection(), m.promote)
            assert trial is not None
            tx.trials.add_event(trial.id, trial.attempt, "promoted", now, agent_id=agent, reason=m.fidelity.why)
            tx.trials.add_event(trial.id, trial.attempt, "acquired", now, agent_id=agent)
            out.append(trial)
        return out

    def _take_numbers(self, c: Connection, campaign_id: int, k: int) -> tuple[str, int, int, Any]:
        """Takes the campaign's row lock and the next ``k`` trial numbers: (state, the
        first number, trials finished, the spec's budget now)."""
        p = {"cid": campaign_id, "k": k}
        if self.returning:
            row = S.run(c, S.TAKE_NUMBERS, p).one()
        else:
            S.run(c, S.TAKE_NUMBERS_PLAIN, p)
            row = c.execute(S.NUMBERS, p).one()
        return str(row[0]), int(row[1]) - k, int(row[2]), row[3]

    def _queued(self, c: Connection, campaign_id: int, k: int) -> list[int]:
        return [int(r[0]) for r in c.execute(S.QUEUED_IDS, {"cid": campaign_id, "k": k})] if k else []

    def _resume(self, tx: Tx, trial_id: int, agent_id: str, now: datetime, expires: datetime) -> d.Trial:
        c = tx.connection()
        lease_id = uuid.uuid4().hex
        c.execute(S.RESUME, {"tid": trial_id, "aid": agent_id, "lid": lease_id, "exp": expires, "now": now})
        trial = self._trial_with_folds(c, trial_id)
        assert trial is not None
        c.execute(S.EVENT, event_params(trial_id, trial.attempt, "acquired", agent_id, now))
        return trial

    def _insert_running(
        self,
        c: Connection,
        campaign: d.Campaign,
        first: int,
        made: list[d.Suggestion],
        agents: list[str],
        now: datetime,
        expires: datetime,
    ) -> list[d.Trial]:
        new = [
            d.Trial(
                id=0,
                campaign_id=campaign.id,
                number=first + i,
                state=d.TrialState.RUNNING,
                attempt=1,
                params=campaign.in_space_order(m.params),
                created_at=now,
                agent_id=a,
                lease_id=uuid.uuid4().hex,
                lease_expires_at=expires,
                started_at=now,
                lineage=m.lineage,
                fidelity=m.fidelity,
            )
            for i, (m, a) in enumerate(zip(made, agents, strict=True))
        ]
        rows = [
            {
                "cid": campaign.id,
                "number": t.number,
                "params": t.params,
                "aid": t.agent_id,
                "lid": t.lease_id,
                "exp": expires,
                "now": now,
                "lineage": None if t.lineage is None else t.lineage.as_dict(),
                "fidelity": None if t.fidelity is None else t.fidelity.as_dict(),
            }
            for t in new
        ]
        if self.returning:
            ids = [int(r[0]) for r in c.execute(S.NEW_TRIALS, rows)]
        else:
            ids = [int(c.execute(S.NEW_TRIAL, r).inserted_primary_key[0]) for r in rows]  # type: ignore[index]
        c.execute(S.EVENT, [event_params(tid, 1, "acquired", t.agent_id, now) for tid, t in zip(ids, new, strict=True)])
        return [replace(t, id=tid) for tid, t in zip(ids, new, strict=True)]
