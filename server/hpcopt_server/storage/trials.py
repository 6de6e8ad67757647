"""Trial rows and what hangs off them: folds, learning-curve points and the event log. A
repository of :class:`~hpcopt_server.storage.repository.Tx` (``tx.trials``). The agents'
own calls on a trial are :mod:`~hpcopt_server.storage.agent_calls`; every transition to a
final state goes through :mod:`~hpcopt_server.storage.finishing`."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import case, delete, func, select, update
from sqlalchemy.orm import Session

from hpcopt.core.constraints import Outcome
from hpcopt_server import domain as d
from hpcopt_server.curves import READ_POINTS_PER_FOLD, keep_steps
from hpcopt_server.storage import mapping
from hpcopt_server.storage import models as m
from hpcopt_server.storage.agent_sql import UPSERTS
from hpcopt_server.storage.finishing import Finishing
from hpcopt_server.storage.results import FEASIBLE_FIRST, curves_of
from hpcopt_server.storage.store import Store, must

#: The trial columns the listing can sort by.
TRIAL_SORT_KEYS = ("number", "value", "value_std", "state", "attempt", "started_at", "finished_at")
#: Sorts that put the COMPLETED trials (results) first, then the others with a value
#: (a PRUNED trial's value reached), then those without.
RESULT_SORTS = ("value", "value_std")
_ACTIVE = (d.TrialState.QUEUED, d.TrialState.RUNNING)


def numeric(name: str) -> Any:
    """The trial's value, or a numeric parameter out of its JSON ``params`` (SQLite's
    json_extract, PostgreSQL's ->>), as a float: NULL where the trial has none."""
    return m.TrialRow.value if name == "value" else m.TrialRow.params[name].as_float()


def choice_position(name: str, choices: Sequence[str]) -> Any:
    """A categorical parameter's position among its (string) choices, out of the JSON
    ``params``: NULL where the trial has none or a value that is not a choice."""
    return case({c: i for i, c in enumerate(choices)}, value=m.TrialRow.params[name].as_string(), else_=None)


class TrialStore(Store):
    def __init__(self, session: Session, finishing: Finishing):
        super().__init__(session)
        self._finishing = finishing

    def insert(
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
        lineage: d.Lineage | None = None,
        fidelity: d.Fidelity | None = None,
        outcome: Outcome | None = None,
    ) -> d.Trial:
        """A trial as given, held by no agent (an import, a fixture; agents' new trials are
        ``AgentCalls.acquire``'s); ``outcome``: against its campaign's constraints."""
        row = m.TrialRow(
            campaign_id=campaign_id,
            number=number,
            state=state,
            attempt=attempt,
            params=dict(params),
            value=value,
            value_std=value_std,
            values=values,
            constraint_values=None if outcome is None else list(outcome.values),
            violation=None if outcome is None else outcome.violation,
            broken="" if outcome is None else outcome.broken,
            agent_id="",
            lease_id="",
            error=error,
            created_at=now,
            started_at=started_at,
            finished_at=finished_at,
            lineage=None if lineage is None else lineage.as_dict(),
            fidelity=None if fidelity is None else fidelity.as_dict(),
        )
        self.s.add(row)
        self.s.flush()
        return mapping.trial(row)

    def get(
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
        q = select(m.TrialRow).where(m.TrialRow.id == trial_id).execution_options(populate_existing=True)
        row = self.s.scalars(q.with_for_update() if lock else q).one_or_none()
        if row is None:
            return None
        if not folds:
            return mapping.trial(row)
        fold_rows = list(self.s.scalars(select(m.FoldRow).where(m.FoldRow.trial_id == trial_id)))
        if not full:
            return mapping.trial(row, fold_rows)
        events = list(self.s.scalars(select(m.TrialEventRow).where(m.TrialEventRow.trial_id == trial_id)))
        trial = mapping.trial(row, fold_rows, [], events)
        return replace(trial, curves=tuple(curves_of(self.s, [trial_id], curve_points)[trial_id]))

    def by_ids(self, ids: list[int], *, with_folds: bool = False) -> list[d.Trial]:
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

    def page(
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
        choices: Mapping[str, Sequence[str]] | None = None,
    ) -> tuple[list[d.Trial], int]:
        """A page of the campaign's trials ordered by ``sort`` (one of
        :data:`TRIAL_SORT_KEYS`, or ``param:NAME`` of a numeric parameter or of one in
        ``choices``, by its choice's position; empty values last, then by number; by
        value, the COMPLETED trials before the others and the feasible ones first,
        :data:`RESULT_SORTS`), and
        the total that match. ``ranges``: (``value``, a numeric parameter or one in
        ``choices`` by its choice's position, low, high), inclusive, all must hold; a
        range of ``value`` holds for COMPLETED trials only.
        ``choices``: the categorical parameters whose choices are all strings."""
        choices = choices or {}

        def column_of(name: str) -> Any:
            return choice_position(name, choices[name]) if name in choices else numeric(name)

        where = [m.TrialRow.campaign_id == campaign_id]
        wanted = [str(s) for s in states]
        if wanted:
            where.append(m.TrialRow.state.in_(wanted))
        for name, low, high in ranges:
            where.append(column_of(name).between(low, high))
            if name == "value":  # results only: a PRUNED trial's value reached is not one
                where.append(m.TrialRow.state == d.TrialState.COMPLETED)
        total = self.s.scalar(select(func.count()).select_from(m.TrialRow).where(*where)) or 0
        if sort not in TRIAL_SORT_KEYS and not sort.startswith("param:"):
            raise ValueError(f"sort must be one of {TRIAL_SORT_KEYS} or param:NAME, not {sort!r}")
        column = column_of(sort[6:]) if sort.startswith("param:") else getattr(m.TrialRow, sort)
        key = column.desc() if descending else column.asc()
        first = [column.is_(None)]
        if sort in RESULT_SORTS:
            first += [m.TrialRow.state != d.TrialState.COMPLETED, FEASIBLE_FIRST]
        q = select(m.TrialRow).where(*where).order_by(*first, key, m.TrialRow.number).offset(offset)
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
        """How many of the campaign's trials are QUEUED or RUNNING."""
        q = select(func.count()).where(m.TrialRow.campaign_id == campaign_id, m.TrialRow.state.in_(_ACTIVE))
        return int(self.s.scalar(q) or 0)

    def unfinished_ids(self, campaign_id: int) -> list[int]:
        """Ids of the campaign's QUEUED, RUNNING and PAUSED trials."""
        unfinished = (*_ACTIVE, d.TrialState.PAUSED)
        q = select(m.TrialRow.id).where(m.TrialRow.campaign_id == campaign_id, m.TrialRow.state.in_(unfinished))
        return list(self.s.scalars(q.order_by(m.TrialRow.id)))

    def expired(self, now: datetime, limit: int = 100) -> list[d.Trial]:
        """RUNNING trials whose lease ended before ``now``, row-locked, skipping locked rows."""
        q = (
            select(m.TrialRow)
            .where(m.TrialRow.state == d.TrialState.RUNNING, m.TrialRow.lease_expires_at < now)
            .order_by(m.TrialRow.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return [mapping.trial(r) for r in self.s.scalars(q)]

    def requeue(self, trial_id: int, attempt: int) -> None:
        """QUEUED as ``attempt``, without agent or lease (its folds and curves kept)."""
        q = update(m.TrialRow).where(m.TrialRow.id == trial_id)
        q = q.values(state=d.TrialState.QUEUED, attempt=attempt, agent_id="", lease_id="", lease_expires_at=None)
        must(self.s.execute(q).rowcount, f"trial {trial_id}")  # type: ignore[attr-defined]
        self._forget(m.TrialRow, trial_id)

    def finish(
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
        failure: str | None = None,
        outcome: Outcome | None = None,
    ) -> int:
        """The trial in a final state under its campaign's next finish number (returned),
        the columns given set and the others kept (``outcome``: its constraint columns);
        KeyError if there is no such trial. Call with the campaign row locked
        (:meth:`CampaignStore.lock`)."""
        q = select(m.TrialRow.campaign_id).where(m.TrialRow.id == trial_id)
        campaign_id = self.s.scalar(q)
        if campaign_id is None:
            raise KeyError(f"trial {trial_id}")
        given = {
            "value": value,
            "value_std": value_std,
            "error": error,
            "agent_id": agent_id,
            "lease_id": lease_id,
            "failure": failure,
        }
        columns: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        if outcome is not None:
            columns |= {"constraint_values": list(outcome.values), "violation": outcome.violation}
            columns["broken"] = outcome.broken
        seq = self._finishing.finish(self.s.connection(), campaign_id, trial_id, state, now, **columns)
        self._forget(m.TrialRow, trial_id)
        self._forget(m.CampaignRow, campaign_id)
        return seq

    def put_folds(self, trial_id: int, folds: Iterable[d.Fold], now: datetime) -> None:
        """Stores the folds as given (an import, a fixture), each replacing the stored one
        of its index (the last of an index given wins), in one statement."""
        rows = {
            f.index: {
                "trial_id": trial_id,
                "fold": f.index,
                "finished": f.finished,
                "value": f.value,
                "metrics": dict(f.metrics),
                "checkpoint_uri": f.checkpoint_uri,
                "attempt": f.attempt,
                "updated_at": now,
            }
            for f in folds
        }
        self._put(m.FoldRow.__table__, ("trial_id", "fold"), list(rows.values()))

    def put_curve(self, trial_id: int, fold: int, points: Iterable[tuple[int, float]]) -> None:
        """Stores the fold's learning-curve points ``(step, value)`` in one statement (the
        agents' curve upsert); a stored (or repeated) step takes the last value given."""
        rows = {step: {"tid": trial_id, "fold": fold, "step": step, "value": value} for step, value in points}
        if rows:
            self.s.execute(UPSERTS[(self.s.get_bind().dialect.name, False)][2], list(rows.values()))

    def _put(self, table: Any, key: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
        """Inserts ``rows`` (at most one per ``key``), replacing those already stored."""
        if rows:
            self.s.execute(_replacing(self._upsert(), table, key), rows)

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

    def set_plan(self, trial_id: int, params: d.Params, lineage: d.Lineage, lease_expires_at: datetime) -> None:
        """A running PBT interval's params and lineage, re-planned in place, and its
        lease extended."""
        self.s.execute(
            update(m.TrialRow)
            .where(m.TrialRow.id == trial_id)
            .values(params=dict(params), lineage=lineage.as_dict(), lease_expires_at=lease_expires_at)
            .execution_options(synchronize_session=False)
        )

    def set_params(self, trial_id: int, params: d.Params) -> None:
        """A running trial's params, grown by a define-by-run study (``service/growing.py``)."""
        self.s.execute(
            update(m.TrialRow)
            .where(m.TrialRow.id == trial_id)
            .values(params=dict(params))
            .execution_options(synchronize_session=False)
        )

    def add_event(
        self, trial_id: int, attempt: int, kind: str, now: datetime, *, agent_id: str = "", reason: str = ""
    ) -> None:
        """Appends an entry to the trial's event log."""
        self.s.add(
            m.TrialEventRow(trial_id=trial_id, attempt=attempt, kind=kind, agent_id=agent_id, reason=reason, at=now)
        )


@functools.cache
def _replacing(insert: Any, table: Any, key: tuple[str, ...]) -> Any:
    """The dialect's ``INSERT … ON CONFLICT (key) DO UPDATE`` of every other column (built
    once: building ``excluded`` costs more than a small insert)."""
    q = insert(table)
    return q.on_conflict_do_update(
        index_elements=list(key), set_={c.name: q.excluded[c.name] for c in table.columns if c.name not in key}
    )
