"""The storage interface: a transaction object whose methods speak domain objects.

Usage::

    storage = Storage("sqlite:///hpcopt.db")
    with storage.write() as tx:        # one transaction, committed on exit
        campaign = tx.lock_campaign(7)
        trials, total = tx.list_trials(7, states=[TrialState.QUEUED])

The agents' calls (acquire, heartbeat, report, complete, release) are not here: they
are :class:`hpcopt_server.storage.agent_calls.AgentCalls`, one method each.

Contract for every implementation (the conformance suite in
``tests/server/test_storage.py`` runs it on SQLite and PostgreSQL):

- Nothing is visible to other transactions before the ``with`` block exits cleanly; an
  exception rolls everything back.
- ``lock_campaign`` serializes writers of one campaign across threads *and* processes
  (PostgreSQL ``FOR UPDATE``; SQLite's single writer).
- ``expired_trials`` never returns a row another open transaction has locked
  (PostgreSQL ``FOR UPDATE SKIP LOCKED``).
- Methods that look one thing up return ``None`` when it does not exist; methods that
  change one thing raise ``KeyError`` when it does not.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from hpcopt_server import domain as d
from hpcopt_server.curves import READ_POINTS_PER_FOLD, keep_steps, thin
from hpcopt_server.storage import mapping
from hpcopt_server.storage import models as m
from hpcopt_server.storage.db import Database
from hpcopt_server.storage.notes import NoteQueries
from hpcopt_server.storage.views import ViewQueries


class Storage:
    """Opens transactions on one database."""

    def __init__(self, url: str, *, pool_size: int = 16):
        self.db = Database(url, pool_size=pool_size)

    @property
    def dialect(self) -> str:
        return self.db.dialect

    @property
    def returning(self) -> bool:
        """Whether the database answers ``INSERT/UPDATE … RETURNING`` (PostgreSQL; SQLite
        from 3.35); without it the agents' calls read back what they changed."""
        d = self.db.engine.dialect
        return bool(
            d.update_returning and d.insert_returning and d.insert_executemany_returning_sort_by_parameter_order
        )

    @contextmanager
    def write(self) -> Iterator[Tx]:
        with self.db.transaction(write=True) as session:
            yield Tx(session)

    @contextmanager
    def read(self) -> Iterator[Tx]:
        with self.db.transaction(write=False) as session:
            yield Tx(session)

    def close(self) -> None:
        self.db.dispose()


def _numeric(name: str) -> Any:
    """The trial's value, or a numeric parameter out of its JSON ``params`` (SQLite's
    json_extract, PostgreSQL's ->>), as a float: NULL where the trial has none."""
    return m.TrialRow.value if name == "value" else m.TrialRow.params[name].as_float()


_TRIALS = cast(Table, m.TrialRow.__table__)
_FINISHED_AFTER = (
    select(_TRIALS)
    .where(_TRIALS.c.campaign_id == bindparam("cid"), _TRIALS.c.finish_seq > bindparam("seq"))
    .order_by(_TRIALS.c.finish_seq)
)

#: The trial columns the listing can sort by.
TRIAL_SORT_KEYS = ("number", "value", "value_std", "state", "attempt", "started_at", "finished_at")


class Tx(ViewQueries, NoteQueries):
    """Operations inside one transaction (the dashboard's read-only views in
    :class:`ViewQueries`, notes in :class:`NoteQueries`)."""

    def __init__(self, session: Session):
        self.s = session

    # -- campaigns -------------------------------------------------------------------

    def insert_campaign(
        self,
        name: str,
        spec: dict[str, Any],
        created_at: datetime,
        *,
        submitted_at: datetime,
        created_by: int | None = None,
    ) -> d.Campaign:
        row = m.CampaignRow(
            name=name,
            state=d.CampaignState.RUNNING,
            spec=spec,
            created_at=created_at,
            submitted_at=submitted_at,
            created_by=created_by,
        )
        self.s.add(row)
        self.s.flush()
        return mapping.campaign(row)

    def get_campaign(self, campaign_id: int) -> d.Campaign | None:
        row = self.s.get(m.CampaignRow, campaign_id, populate_existing=True)
        return mapping.campaign(row) if row else None

    def lock_campaign(self, campaign_id: int) -> d.Campaign | None:
        """Reads the campaign and holds its row lock until the transaction ends."""
        row = self.s.scalars(
            select(m.CampaignRow).where(m.CampaignRow.id == campaign_id).with_for_update()
        ).one_or_none()
        return mapping.campaign(row) if row else None

    def list_campaigns(self, offset: int, limit: int) -> tuple[list[d.Campaign], int]:
        """A page of campaigns, newest first, and how many there are."""
        rows = self.s.scalars(select(m.CampaignRow).order_by(m.CampaignRow.id.desc()).offset(offset).limit(limit))
        page = [mapping.campaign(r) for r in rows]
        return page, int(self.s.scalar(select(func.count()).select_from(m.CampaignRow)) or 0)

    def submissions_by(self, token_id: int, since: datetime) -> list[datetime]:
        """When the campaigns this token created or imported since ``since`` arrived,
        oldest first (the token's row is locked first, so that concurrent creations count
        each other)."""
        self.s.execute(select(m.ApiTokenRow.id).where(m.ApiTokenRow.id == token_id).with_for_update())
        return [
            t
            for t in self.s.scalars(
                select(m.CampaignRow.submitted_at)
                .where(m.CampaignRow.created_by == token_id, m.CampaignRow.submitted_at >= since)
                .order_by(m.CampaignRow.submitted_at)
            )
            if t is not None
        ]

    def set_campaign_state(self, campaign_id: int, state: d.CampaignState, finished_at: datetime | None) -> None:
        self._must(
            self.s.execute(
                update(m.CampaignRow)
                .where(m.CampaignRow.id == campaign_id)
                .values(state=state, finished_at=finished_at)
            ).rowcount,  # type: ignore[attr-defined]
            f"campaign {campaign_id}",
        )

    def set_next_trial_number(self, campaign_id: int, number: int) -> None:
        self._must(
            self.s.execute(
                update(m.CampaignRow).where(m.CampaignRow.id == campaign_id).values(next_number=number)
            ).rowcount,  # type: ignore[attr-defined]
            f"campaign {campaign_id}",
        )

    def trial_counts(self, campaign_ids: Iterable[int] | None = None) -> dict[int, dict[str, int]]:
        """{campaign id: {state: count}} for the given campaigns (all when None)."""
        q = select(m.TrialRow.campaign_id, m.TrialRow.state, func.count()).group_by(
            m.TrialRow.campaign_id, m.TrialRow.state
        )
        if campaign_ids is not None:
            q = q.where(m.TrialRow.campaign_id.in_(list(campaign_ids)))
        out: dict[int, dict[str, int]] = {}
        for cid, state, n in self.s.execute(q):
            out.setdefault(cid, {})[state] = n
        return out

    def best_trials(self, campaigns: list[d.Campaign]) -> dict[int, d.Trial]:
        """The best COMPLETED trial of each campaign that has one."""
        out = {}
        for c in campaigns:
            order = m.TrialRow.value.asc() if c.direction == "minimize" else m.TrialRow.value.desc()
            row = self.s.scalars(
                select(m.TrialRow)
                .where(
                    m.TrialRow.campaign_id == c.id,
                    m.TrialRow.state == d.TrialState.COMPLETED,
                )
                .order_by(order, m.TrialRow.id)
                .limit(1)
            ).one_or_none()
            if row is not None:
                out[c.id] = mapping.trial(row)
        return out

    # -- trials ----------------------------------------------------------------------

    def insert_trial(
        self,
        campaign_id: int,
        number: int,
        params: d.Params,
        state: d.TrialState,
        now: datetime,
        *,
        attempt: int = 1,
        value: float | None = None,
        value_std: float | None = None,
        values: list[float] | None = None,
        error: str = "",
        started_at: datetime | None = None,
        finished_at: datetime | None = None,
    ) -> d.Trial:
        row = m.TrialRow(
            campaign_id=campaign_id,
            number=number,
            state=state,
            attempt=attempt,
            params=dict(params),
            value=value,
            value_std=value_std,
            values=values,
            agent_id="",
            lease_id="",
            error=error,
            created_at=now,
            started_at=started_at,
            finished_at=finished_at,
        )
        self.s.add(row)
        self.s.flush()
        return mapping.trial(row)

    def get_trial(
        self,
        trial_id: int,
        *,
        lock: bool = False,
        full: bool = False,
        folds: bool = True,
        curve_points: int | None = READ_POINTS_PER_FOLD,
    ) -> d.Trial | None:
        """The trial with its folds (unless ``folds=False``); with ``full`` also its curves
        (at most ``curve_points`` per fold, thinned by hpcopt_server.curves; None: all)
        and events; with ``lock`` its row lock held to the end of the transaction."""
        q = select(m.TrialRow).where(m.TrialRow.id == trial_id)
        if lock:
            q = q.with_for_update()
        row = self.s.scalars(q).one_or_none()
        if row is None:
            return None
        if not folds:
            return mapping.trial(row)
        fold_rows = list(self.s.scalars(select(m.FoldRow).where(m.FoldRow.trial_id == trial_id)))
        if not full:
            return mapping.trial(row, fold_rows)
        events = list(self.s.scalars(select(m.TrialEventRow).where(m.TrialEventRow.trial_id == trial_id)))
        trial = mapping.trial(row, fold_rows, [], events)
        return replace(trial, curves=tuple(self.curves_of([trial_id], curve_points)[trial_id]))

    def requeue_trial(self, trial_id: int, attempt: int) -> None:
        """QUEUED as ``attempt``, without agent or lease (its folds and curves kept)."""
        q = update(m.TrialRow).where(m.TrialRow.id == trial_id)
        q = q.values(state=d.TrialState.QUEUED, attempt=attempt, agent_id="", lease_id="", lease_expires_at=None)
        self._must(self.s.execute(q).rowcount, f"trial {trial_id}")  # type: ignore[attr-defined]

    def list_trials(
        self,
        campaign_id: int,
        *,
        states: Iterable[d.TrialState] = (),
        offset: int = 0,
        limit: int | None = None,
        with_folds: bool = True,
        sort: str = "number",
        descending: bool = False,
        ranges: Sequence[tuple[str, float, float]] = (),
    ) -> tuple[list[d.Trial], int]:
        """A page of the campaign's trials ordered by ``sort`` (one of
        :data:`TRIAL_SORT_KEYS`, or ``param:NAME`` of a numeric parameter; empty values
        last, then by number), and the total that match. ``ranges``: (``value`` or a
        numeric parameter, low, high), inclusive, all must hold."""
        where = [m.TrialRow.campaign_id == campaign_id]
        wanted = [str(s) for s in states]
        if wanted:
            where.append(m.TrialRow.state.in_(wanted))
        for name, low, high in ranges:
            where.append(_numeric(name).between(low, high))
        total = self.s.scalar(select(func.count()).select_from(m.TrialRow).where(*where)) or 0
        if sort not in TRIAL_SORT_KEYS and not sort.startswith("param:"):
            raise ValueError(f"sort must be one of {TRIAL_SORT_KEYS} or param:NAME, not {sort!r}")
        column = _numeric(sort[6:]) if sort.startswith("param:") else getattr(m.TrialRow, sort)
        key = column.desc() if descending else column.asc()
        q = select(m.TrialRow).where(*where).order_by(column.is_(None), key, m.TrialRow.number).offset(offset)
        if limit is not None:
            q = q.limit(limit)
        rows = list(self.s.scalars(q))
        folds: dict[int, list[m.FoldRow]] = {}
        if with_folds and rows:
            fq = select(m.FoldRow).where(m.FoldRow.trial_id.in_([r.id for r in rows]))
            for f in self.s.scalars(fq):
                folds.setdefault(f.trial_id, []).append(f)
        return [mapping.trial(r, folds.get(r.id, [])) for r in rows], total

    def count_active(self, campaign_id: int) -> int:
        """The campaign's QUEUED and RUNNING trials."""
        q = select(func.count()).where(
            m.TrialRow.campaign_id == campaign_id,
            m.TrialRow.state.in_([d.TrialState.QUEUED, d.TrialState.RUNNING]),
        )
        return int(self.s.scalar(q) or 0)

    def finished_after(self, campaign_id: int, finish_seq: int) -> list[d.Trial]:
        """Trials (without folds) that reached a final state after ``finish_seq``, in order
        (on every acquisition: Core rows, a prebuilt statement)."""
        rows = self.s.connection().execute(_FINISHED_AFTER, {"cid": campaign_id, "seq": finish_seq})
        return [mapping.trial(r) for r in rows]

    def expired_trials(self, now: datetime, limit: int = 100) -> list[d.Trial]:
        """RUNNING trials whose lease ended before ``now``, row-locked, skipping locked rows."""
        q = (
            select(m.TrialRow)
            .where(m.TrialRow.state == d.TrialState.RUNNING, m.TrialRow.lease_expires_at < now)
            .order_by(m.TrialRow.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return [mapping.trial(r) for r in self.s.scalars(q)]

    def unfinished_trial_ids(self, campaign_id: int) -> list[int]:
        """Ids of the campaign's QUEUED and RUNNING trials."""
        q = select(m.TrialRow.id).where(
            m.TrialRow.campaign_id == campaign_id,
            m.TrialRow.state.in_([d.TrialState.QUEUED, d.TrialState.RUNNING]),
        )
        return list(self.s.scalars(q.order_by(m.TrialRow.id)))

    def finish_trial(
        self,
        trial_id: int,
        state: d.TrialState,
        now: datetime,
        *,
        value: float | None = None,
        value_std: float | None = None,
        error: str | None = None,
        agent_id: str | None = None,
        lease_id: str | None = None,
    ) -> None:
        """Moves a trial to a final state and gives it the campaign's next ``finish_seq``;
        the columns given are set, the others kept.

        Call with the campaign row locked (``lock_campaign``): the sequence is what lets the
        optimizer cache read "everything finished after n" without missing a trial.
        """
        given = {"value": value, "value_std": value_std, "error": error, "agent_id": agent_id, "lease_id": lease_id}
        trial = self.s.get(m.TrialRow, trial_id)
        if trial is None:
            raise KeyError(f"trial {trial_id}")
        campaign = self.s.get(m.CampaignRow, trial.campaign_id)
        assert campaign is not None
        campaign.finished_count += 1
        trial.finish_seq = campaign.finished_count
        trial.state = state
        trial.finished_at = now
        for key, set_to in given.items():
            if set_to is not None:
                setattr(trial, key, set_to)
        self.s.flush()

    # -- folds, curves, events -------------------------------------------------------

    def put_fold(self, trial_id: int, fold: d.Fold, now: datetime) -> None:
        """Stores the fold as given (an import, a fixture), replacing one of that index."""
        row = self.s.get(m.FoldRow, (trial_id, fold.index))
        if row is None:
            row = m.FoldRow(trial_id=trial_id, index=fold.index)
            self.s.add(row)
        row.finished, row.value, row.metrics = fold.finished, fold.value, dict(fold.metrics)
        row.checkpoint_uri, row.attempt, row.updated_at = fold.checkpoint_uri, fold.attempt, now
        self.s.flush()

    def put_curve_point(self, trial_id: int, fold: int, step: int, value: float) -> None:
        """Stores one learning-curve point; a repeated (fold, step) replaces the old value."""
        row = self.s.get(m.CurveRow, (trial_id, fold, step))
        if row is None:
            self.s.add(m.CurveRow(trial_id=trial_id, fold=fold, step=step, value=value))
        else:
            row.value = value
        self.s.flush()

    def thin_curve(self, trial_id: int, fold: int, target: int) -> int:
        """Thins the fold's curve to at most ``target`` points (see hpcopt_server.curves);
        the number of points deleted."""
        C = m.CurveRow
        where = (C.trial_id == trial_id, C.fold == fold)
        points = [
            (int(r[0]), float(r[1])) for r in self.s.execute(select(C.step, C.value).where(*where).order_by(C.step))
        ]
        keep = keep_steps(points, target)
        gone = [s for s, _ in points if s not in keep]
        for i in range(0, len(gone), 500):  # bounded parameter lists
            self.s.execute(delete(C).where(*where, C.step.in_(gone[i : i + 500])))
        return len(gone)

    def values_at(self, campaign_id: int, fold: int, step: int, states: Iterable[d.TrialState]) -> dict[int, float]:
        """{trial id: value} at one (fold, step) of the campaign's trials in ``states``:
        what the pruners compare a new report with."""
        q = (
            select(m.CurveRow.trial_id, m.CurveRow.value)
            .join(m.TrialRow, m.TrialRow.id == m.CurveRow.trial_id)
            .where(m.TrialRow.campaign_id == campaign_id, m.TrialRow.state.in_(list(states)))
            .where(m.CurveRow.fold == fold, m.CurveRow.step == step)
        )
        return {tid: float(v) for tid, v in self.s.execute(q)}

    def completed_folds(self, campaign_id: int) -> dict[int, tuple[int, list[float]]]:
        """{trial id: (number, fold values by index)} of the campaign's COMPLETED trials."""
        q = (
            select(m.TrialRow.id, m.TrialRow.number, m.FoldRow.index, m.FoldRow.value)
            .join(m.FoldRow, m.FoldRow.trial_id == m.TrialRow.id)
            .where(m.TrialRow.campaign_id == campaign_id, m.TrialRow.state == d.TrialState.COMPLETED)
            .where(m.FoldRow.finished.is_(True), m.FoldRow.value.is_not(None))
            .order_by(m.TrialRow.id, m.FoldRow.index)
        )
        out: dict[int, tuple[int, list[float]]] = {}
        for tid, number, _, value in self.s.execute(q):
            out.setdefault(tid, (number, []))[1].append(float(value or 0.0))  # not None: filtered
        return out

    def fold_metrics(self, campaign_id: int, limit: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(trial params, fold metrics) of the campaign's most recently updated folds
        that reported any metrics, at most ``limit`` (the planner's measurements)."""
        q = (
            select(m.TrialRow.params, m.FoldRow.metrics)
            .join(m.FoldRow, m.FoldRow.trial_id == m.TrialRow.id)
            .where(m.TrialRow.campaign_id == campaign_id)
            .order_by(m.FoldRow.updated_at.desc())
            .limit(limit)
        )
        return [(dict(params or {}), dict(metrics or {})) for params, metrics in self.s.execute(q)]

    def add_event(
        self, trial_id: int, attempt: int, kind: str, now: datetime, *, agent_id: str = "", reason: str = ""
    ) -> None:
        self.s.add(
            m.TrialEventRow(trial_id=trial_id, attempt=attempt, kind=kind, agent_id=agent_id, reason=reason, at=now)
        )

    # -- agents ----------------------------------------------------------------------

    def insert_agent(self, agent: d.Agent) -> None:
        self.s.add(
            m.AgentRow(
                id=agent.id,
                host=agent.host,
                ranks=agent.ranks,
                gpus=agent.gpus,
                slurm_job_id=agent.slurm_job_id,
                campaign_id=agent.campaign_id,
                pid=agent.pid,
                version=agent.version,
                registered_at=agent.registered_at,
                last_seen_at=agent.last_seen_at,
                token_id=agent.token_id,
            )
        )
        self.s.flush()

    def get_agent(self, agent_id: str) -> d.Agent | None:
        row = self.s.get(m.AgentRow, agent_id)
        return mapping.agent(row) if row else None

    def seen_agent(self, agent_id: str, now: datetime) -> None:
        """The agent was heard from at ``now``."""
        self.s.execute(update(m.AgentRow).where(m.AgentRow.id == agent_id).values(last_seen_at=now))

    def completed_points(self, campaign_id: int) -> list[tuple[int, int, float, float | None, dict[str, Any]]]:
        """(id, number, value, value_std, params) of every COMPLETED trial, by number:
        the columns the dashboard's plots need, without folds."""
        return [r[:5] for r in self.completed_points_at(campaign_id)]

    def completed_points_at(
        self, campaign_id: int
    ) -> list[tuple[int, int, float, float | None, dict[str, Any], datetime | None]]:
        """:meth:`completed_points` with each trial's finish time."""
        q = (
            select(
                m.TrialRow.id,
                m.TrialRow.number,
                m.TrialRow.value,
                m.TrialRow.value_std,
                m.TrialRow.params,
                m.TrialRow.finished_at,
            )
            .where(m.TrialRow.campaign_id == campaign_id, m.TrialRow.state == d.TrialState.COMPLETED)
            .where(m.TrialRow.value.is_not(None))
            .order_by(m.TrialRow.number)
        )
        return [(r[0], r[1], float(r[2]), r[3], dict(r[4]), r[5]) for r in self.s.execute(q)]

    def completed_values(self, campaign_id: int) -> list[tuple[int, list[float]]]:
        """(id, values) of every COMPLETED trial of a multi-objective campaign, by number."""
        q = (
            select(m.TrialRow.id, m.TrialRow.values)
            .where(m.TrialRow.campaign_id == campaign_id, m.TrialRow.state == d.TrialState.COMPLETED)
            .where(m.TrialRow.values.is_not(None))
            .order_by(m.TrialRow.number)
        )
        return [(r[0], [float(v) for v in r[1]]) for r in self.s.execute(q) if r[1] is not None]

    def trials_by_id(self, ids: list[int], *, with_folds: bool = False) -> list[d.Trial]:
        """These trials (with their folds if asked), in the order given; missing ids are left out."""
        rows: dict[int, m.TrialRow] = {}
        folds: dict[int, list[m.FoldRow]] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            rows.update((r.id, r) for r in self.s.scalars(select(m.TrialRow).where(m.TrialRow.id.in_(chunk))))
            if with_folds:
                for f in self.s.scalars(select(m.FoldRow).where(m.FoldRow.trial_id.in_(chunk))):
                    folds.setdefault(f.trial_id, []).append(f)
        return [mapping.trial(rows[i], folds.get(i, [])) for i in ids if i in rows]

    def best_trial_ids(self, campaign_id: int, direction: str, limit: int) -> list[int]:
        """Ids of the ``limit`` best COMPLETED trials."""
        order = m.TrialRow.value.asc() if direction == "minimize" else m.TrialRow.value.desc()
        q = (
            select(m.TrialRow.id)
            .where(m.TrialRow.campaign_id == campaign_id, m.TrialRow.state == d.TrialState.COMPLETED)
            .where(m.TrialRow.value.is_not(None))
            .order_by(order, m.TrialRow.id)
            .limit(limit)
        )
        return list(self.s.scalars(q))

    def curves_of(
        self, trial_ids: list[int], per_fold: int | None = READ_POINTS_PER_FOLD
    ) -> dict[int, list[d.CurvePoint]]:
        """Learning-curve points of several trials, by trial id, in (fold, step) order:
        at most ``per_fold`` of each fold (thinned by hpcopt_server.curves; None: all)."""
        out: dict[int, list[d.CurvePoint]] = {t: [] for t in trial_ids}
        if not trial_ids:
            return out
        C = m.CurveRow
        q = (
            select(C.trial_id, C.fold, C.step, C.value)
            .where(C.trial_id.in_(trial_ids))
            .order_by(C.trial_id, C.fold, C.step)
        )
        runs: dict[tuple[int, int], list[tuple[int, float]]] = {}
        for tid, fold, step, value in self.s.execute(q):
            runs.setdefault((tid, fold), []).append((step, value))
        for (tid, fold), points in runs.items():
            kept = points if per_fold is None else thin(points, per_fold)
            out[tid].extend(d.CurvePoint(fold, step, value) for step, value in kept)
        return out

    def running_by_agent(self, campaign_id: int) -> dict[str, tuple[int, datetime | None]]:
        """{agent id: (trial id, lease expiry)} of the campaign's RUNNING trials."""
        q = select(m.TrialRow.agent_id, m.TrialRow.id, m.TrialRow.lease_expires_at).where(
            m.TrialRow.campaign_id == campaign_id, m.TrialRow.state == d.TrialState.RUNNING
        )
        return {agent: (tid, expires) for agent, tid, expires in self.s.execute(q)}

    def live_agent_counts(self, since: datetime) -> dict[int, int]:
        """{campaign id: agents heard from since ``since``}."""
        q = (
            select(m.AgentRow.campaign_id, func.count())
            .where(m.AgentRow.last_seen_at >= since, m.AgentRow.campaign_id.is_not(None))
            .group_by(m.AgentRow.campaign_id)
        )
        return {int(cid or 0): int(n) for cid, n in self.s.execute(q)}

    def list_agents(self, campaign_id: int | None = None) -> list[d.Agent]:
        q = select(m.AgentRow).order_by(m.AgentRow.registered_at)
        if campaign_id is not None:
            q = q.where(m.AgentRow.campaign_id == campaign_id)
        return [mapping.agent(r) for r in self.s.scalars(q)]

    # -- tokens ----------------------------------------------------------------------

    def insert_token(self, name: str, token_hash: str, scopes: Iterable[str], now: datetime) -> d.ApiToken:
        """Stores a token; if another transaction stored the same secret meanwhile (two
        replicas starting with one HPCOPT_ADMIN_TOKEN), returns that one."""
        insert = pg_insert if self.s.get_bind().dialect.name == "postgresql" else sqlite_insert
        stmt = insert(m.ApiTokenRow).values(
            name=name, token_hash=token_hash, scopes=",".join(sorted(scopes)), created_at=now
        )
        self.s.execute(stmt.on_conflict_do_nothing(index_elements=["token_hash"]))
        token = self.token_by_hash(token_hash)
        assert token is not None
        return token

    def token_by_hash(self, token_hash: str) -> d.ApiToken | None:
        row = self.s.scalars(select(m.ApiTokenRow).where(m.ApiTokenRow.token_hash == token_hash)).one_or_none()
        return mapping.token(row) if row else None

    def list_tokens(self) -> list[d.ApiToken]:
        return [mapping.token(r) for r in self.s.scalars(select(m.ApiTokenRow).order_by(m.ApiTokenRow.id))]

    def count_active_tokens(self) -> int:
        q = select(func.count()).select_from(m.ApiTokenRow).where(m.ApiTokenRow.revoked_at.is_(None))
        return self.s.scalar(q) or 0

    def revoke_token(self, token_id: int, now: datetime) -> None:
        self._must(
            self.s.execute(update(m.ApiTokenRow).where(m.ApiTokenRow.id == token_id).values(revoked_at=now)).rowcount,  # type: ignore[attr-defined]
            f"token {token_id}",
        )

    # -- server flags ----------------------------------------------------------------

    def get_flag(self, name: str) -> str | None:
        row = self.s.get(m.ServerFlagRow, name)
        return row.value if row else None

    def set_flag(self, name: str, value: str, now: datetime) -> None:
        """Sets a flag atomically (an upsert: two servers starting at once both succeed)."""
        insert = pg_insert if self.s.get_bind().dialect.name == "postgresql" else sqlite_insert
        stmt = insert(m.ServerFlagRow).values(name=name, value=value, changed_at=now)
        self.s.execute(
            stmt.on_conflict_do_update(
                index_elements=["name"],
                set_={"value": value, "changed_at": now},
                where=m.ServerFlagRow.value != stmt.excluded.value,
            )
        )

    def ensure_flag(self, name: str, value: str, now: datetime) -> str:
        """The flag's value, storing ``value`` first when it has none (two servers
        starting at once store one of theirs, and both read that one)."""
        insert = pg_insert if self.s.get_bind().dialect.name == "postgresql" else sqlite_insert
        stmt = insert(m.ServerFlagRow).values(name=name, value=value, changed_at=now)
        self.s.execute(stmt.on_conflict_do_nothing(index_elements=["name"]))
        stored = self.s.scalar(select(m.ServerFlagRow.value).where(m.ServerFlagRow.name == name))
        assert stored is not None
        return stored

    @staticmethod
    def _must(rowcount: int, what: str) -> None:
        if rowcount == 0:
            raise KeyError(what)
