"""The agents' hot path in lean SQL: one statement per step, no ORM objects.

Heartbeats, reports, acquisitions and completions are most of a busy server's calls.
Through the ORM each statement cost about 0.7 ms of Python; these Core statements
(compiled once, cached by SQLAlchemy) cost about 0.2 ms, and each step folds its guard
into the statement (``UPDATE … WHERE lease_id = … RETURNING``) instead of reading,
checking in Python and writing. A statement that matches nothing returns ``None`` or
``False``; the service then falls back to the full checks, which name the reason.

Lock order is the one every writer follows: campaign row, then trial row.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, case, delete, func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from hpcopt_server import domain as d
from hpcopt_server.curves import keep_steps
from hpcopt_server.storage import models as m

T = cast(Table, m.TrialRow.__table__)
F = cast(Table, m.FoldRow.__table__)
C = cast(Table, m.CampaignRow.__table__)
CURVES = cast(Table, m.CurveRow.__table__)
EVENTS = cast(Table, m.TrialEventRow.__table__)
AGENTS = cast(Table, m.AgentRow.__table__)
RUNNING = d.TrialState.RUNNING.value
QUEUED = d.TrialState.QUEUED.value


def _p(name: str, column: Any = None) -> Any:
    """A named parameter, typed like ``column`` (datetimes, JSON) where given."""
    return bindparam(name, type_=column.type) if column is not None else bindparam(name)


# Built once: SQLAlchemy caches a statement's compiled form by its structure, and
# building the structure costs about 0.1 ms a statement.
_LEASE_HELD = (
    (T.c.id == _p("tid")) & (T.c.lease_id == _p("lid")) & (T.c.agent_id == _p("aid"))
    & (T.c.state == RUNNING) & (T.c.lease_expires_at >= _p("now", T.c.lease_expires_at))
)  # fmt: skip
_RENEW = update(T).where(_LEASE_HELD).values(lease_expires_at=_p("exp", T.c.lease_expires_at))
_RENEW = _RENEW.returning(T.c.campaign_id, T.c.attempt)
_COMPLETE = update(T).where(_LEASE_HELD).values(
    state=d.TrialState.COMPLETED.value, finished_at=_p("now2", T.c.finished_at), finish_seq=_p("seq"),
    value=_p("value"), value_std=_p("std"), values=_p("values", T.c["values"]),
)  # fmt: skip
_TAKE_NUMBERS = (
    update(C).where(C.c.id == _p("cid")).values(next_number=C.c.next_number + _p("k"))
    .returning(C.c.state, C.c.next_number, C.c.finished_count)
)  # fmt: skip
_SET_NEXT_NUMBER = update(C).where(C.c.id == _p("cid")).values(next_number=_p("n"))
_COUNT_FINISHED = (
    update(C).where(C.c.id == _p("cid")).values(finished_count=C.c.finished_count + 1)
    .returning(C.c.finished_count, C.c.state)
)  # fmt: skip
_ACTIVE = select(func.count().filter(T.c.state == RUNNING), func.count().filter(T.c.state == QUEUED)).where(
    T.c.campaign_id == _p("cid"), T.c.state.in_([RUNNING, QUEUED])
)
_COUNT_ACTIVE = (
    select(func.count()).select_from(T).where(T.c.campaign_id == _p("cid"), T.c.state.in_([RUNNING, QUEUED]))
)
_NEW_TRIALS = T.insert().values(
    campaign_id=_p("cid"), number=_p("number"), state=RUNNING, attempt=1, params=_p("params", T.c.params),
    agent_id=_p("aid"), lease_id=_p("lid"), lease_expires_at=_p("exp", T.c.lease_expires_at), error="",
    created_at=_p("now", T.c.created_at), started_at=_p("now", T.c.started_at),
).returning(T.c.id, sort_by_parameter_order=True)  # fmt: skip
_EVENT = EVENTS.insert().values(
    trial_id=_p("tid"), attempt=_p("attempt"), kind=_p("kind"), agent_id=_p("aid"), reason="",
    at=_p("now", EVENTS.c.at),
)  # fmt: skip
_SEEN = update(AGENTS).where(AGENTS.c.id == _p("aid")).values(last_seen_at=_p("now", AGENTS.c.last_seen_at))
_SEEN_MANY = (
    update(AGENTS)
    .where(AGENTS.c.id.in_(bindparam("aids", expanding=True)))
    .values(last_seen_at=_p("now", AGENTS.c.last_seen_at))
)
_AGENT_TOKEN = select(AGENTS.c.token_id).where(AGENTS.c.id == _p("aid"))
_FOLD_COLS = [F.c.fold, F.c.finished, F.c.value.label("fold_value"), F.c.metrics, F.c.checkpoint_uri,
              F.c.attempt.label("fold_attempt")]  # fmt: skip
_TRIAL_WITH_FOLDS = (
    select(T, *_FOLD_COLS).select_from(T.outerjoin(F, F.c.trial_id == T.c.id)).where(T.c.id == _p("tid"))
)
_FINISHED_AFTER = select(T).where(T.c.campaign_id == _p("cid"), T.c.finish_seq > _p("seq")).order_by(T.c.finish_seq)
# The checkpoint URI is kept when a report brings none.
_KEEP_CHECKPOINT = case((_p("ck") == "", F.c.checkpoint_uri), else_=_p("ck"))


def _fold_upserts(insert: Any) -> tuple[Any, Any]:
    """(open, close) fold upserts for one dialect: each changes an unfinished fold only."""
    key = [F.c.trial_id, F.c.fold]
    unfinished = F.c.finished.is_(False)
    opened = insert(F).values(
        trial_id=_p("tid"), fold=_p("fold"), finished=False, metrics=_p("metrics", F.c.metrics),
        checkpoint_uri=_p("ck"), attempt=_p("attempt"), updated_at=_p("now", F.c.updated_at),
    )  # fmt: skip
    opened = opened.on_conflict_do_update(
        index_elements=key, where=unfinished,
        set_={"attempt": _p("attempt"), "updated_at": _p("now", F.c.updated_at), "checkpoint_uri": _KEEP_CHECKPOINT},
    ).returning(F.c.trial_id)  # fmt: skip
    closed = insert(F).values(
        trial_id=_p("tid"), fold=_p("fold"), finished=True, value=_p("value"), metrics=_p("metrics", F.c.metrics),
        checkpoint_uri=_p("ck"), attempt=_p("attempt"), updated_at=_p("now", F.c.updated_at),
    )  # fmt: skip
    closed = closed.on_conflict_do_update(
        index_elements=key, where=unfinished,
        set_={"finished": True, "value": _p("value"), "metrics": _p("metrics", F.c.metrics), "attempt": _p("attempt"),
              "updated_at": _p("now", F.c.updated_at), "checkpoint_uri": _KEEP_CHECKPOINT},
    ).returning(F.c.checkpoint_uri)  # fmt: skip
    return opened, closed


def _curve_upsert(insert: Any) -> Any:
    q = insert(CURVES).values(trial_id=_p("tid"), fold=_p("fold"), step=_p("step"), value=_p("value"))
    return q.on_conflict_do_update(
        index_elements=[CURVES.c.trial_id, CURVES.c.fold, CURVES.c.step], set_={"value": _p("value")}
    )


_UPSERTS = {
    name: (*_fold_upserts(insert), _curve_upsert(insert))
    for name, insert in (("postgresql", pg_insert), ("sqlite", sqlite_insert))
}


class HotQueries:
    """Mixed into :class:`hpcopt_server.storage.repository.Tx`."""

    s: Session

    @property
    def _c(self) -> Connection:
        return self.s.connection()

    def renew_lease(
        self, trial_id: int, agent_id: str, lease_id: str, now: datetime, expires: datetime
    ) -> tuple[int, int] | None:
        """Extends the lease if it is the trial's current, unexpired one and the trial is
        RUNNING (holding the trial's row lock to the end): (campaign id, attempt), or None."""
        row = self._c.execute(_RENEW, {"tid": trial_id, "lid": lease_id, "aid": agent_id, "now": now,
                                       "exp": expires}).first()  # fmt: skip
        return (int(row[0]), int(row[1])) if row else None

    def open_fold(self, trial_id: int, fold: int, attempt: int, now: datetime, checkpoint_uri: str) -> bool:
        """Creates or touches an unfinished fold row; False (and nothing changed) if the
        fold is already finished."""
        q = _UPSERTS[self._c.dialect.name][0]
        params = {"tid": trial_id, "fold": fold, "attempt": attempt, "now": now, "ck": checkpoint_uri, "metrics": {}}
        return self._c.execute(q, params).first() is not None

    def close_fold(
        self,
        trial_id: int,
        fold: int,
        attempt: int,
        now: datetime,
        value: float,
        metrics: dict[str, float],
        checkpoint_uri: str,
    ) -> str | None:
        """Marks the fold finished with its value: its checkpoint URI (the one given, or
        the one it kept); None, nothing changed, if it was finished already."""
        q = _UPSERTS[self._c.dialect.name][1]
        params = {"tid": trial_id, "fold": fold, "attempt": attempt, "now": now, "ck": checkpoint_uri,
                  "value": value, "metrics": metrics}  # fmt: skip
        row = self._c.execute(q, params).first()
        return None if row is None else str(row[0])

    def set_curve_point(self, trial_id: int, fold: int, step: int, value: float) -> int:
        """Stores one learning-curve point (a repeated step replaces its value); the
        fold's points now."""
        q = _UPSERTS[self._c.dialect.name][2]
        self._c.execute(q, {"tid": trial_id, "fold": fold, "step": step, "value": value})
        return self.curve_count(trial_id, fold)

    def curve_count(self, trial_id: int, fold: int) -> int:
        q = select(func.count()).where(CURVES.c.trial_id == trial_id, CURVES.c.fold == fold)
        return int(self._c.execute(q).scalar() or 0)

    def thin_curve(self, trial_id: int, fold: int, target: int) -> int:
        """Thins the fold's curve to at most ``target`` points (see hpcopt_server.curves);
        the number of points deleted."""
        where = (CURVES.c.trial_id == trial_id, CURVES.c.fold == fold)
        rows = self._c.execute(select(CURVES.c.step, CURVES.c.value).where(*where).order_by(CURVES.c.step))
        points = [(int(r[0]), float(r[1])) for r in rows]
        keep = keep_steps(points, target)
        gone = [s for s, _ in points if s not in keep]
        for i in range(0, len(gone), 500):  # bounded parameter lists
            self._c.execute(delete(CURVES).where(*where, CURVES.c.step.in_(gone[i : i + 500])))
        return len(gone)

    def trial_with_folds(self, trial_id: int) -> d.Trial | None:
        """The trial and its folds in one unlocked read (no curves, no events)."""
        rows = list(self._c.execute(_TRIAL_WITH_FOLDS, {"tid": trial_id}))
        if not rows:
            return None
        folds = tuple(
            d.Fold(
                index=r.fold,
                finished=bool(r.finished),
                value=r.fold_value,
                metrics={k: float(v) for k, v in (r.metrics or {}).items()},
                checkpoint_uri=r.checkpoint_uri,
                attempt=r.fold_attempt,
            )
            for r in sorted(rows, key=lambda r: r.fold if r.fold is not None else -1)
            if r.fold is not None
        )
        return _trial(rows[0]._mapping, folds)

    def finished_after(self, campaign_id: int, finish_seq: int) -> list[d.Trial]:
        """Trials (without folds) that reached a final state after ``finish_seq``, in order."""
        return [_trial(r._mapping) for r in self._c.execute(_FINISHED_AFTER, {"cid": campaign_id, "seq": finish_seq})]

    def count_active(self, campaign_id: int) -> int:
        """The campaign's QUEUED and RUNNING trials."""
        return int(self._c.execute(_COUNT_ACTIVE, {"cid": campaign_id}).scalar() or 0)

    def active_counts(self, campaign_id: int) -> tuple[int, int]:
        """(RUNNING, QUEUED) trials of the campaign, in one read."""
        row = self._c.execute(_ACTIVE, {"cid": campaign_id}).one()
        return int(row[0] or 0), int(row[1] or 0)

    def count_finished(self, campaign_id: int) -> tuple[int, str] | None:
        """Takes the campaign's row lock and its next ``finish_seq``; (seq, campaign state)."""
        row = self._c.execute(_COUNT_FINISHED, {"cid": campaign_id}).first()
        return (int(row[0]), str(row[1])) if row else None

    def take_numbers(self, campaign_id: int, k: int) -> tuple[str, int, int] | None:
        """Takes the campaign's row lock and the next ``k`` trial numbers in one statement:
        (campaign state, the first number, trials finished). Give back the numbers not
        used with :meth:`set_next_number`, or roll back."""
        row = self._c.execute(_TAKE_NUMBERS, {"cid": campaign_id, "k": k}).first()
        return (str(row[0]), int(row[1]) - k, int(row[2])) if row else None

    def set_next_number(self, campaign_id: int, number: int) -> None:
        self._c.execute(_SET_NEXT_NUMBER, {"cid": campaign_id, "n": number})

    def complete_leased(
        self,
        trial_id: int,
        agent_id: str,
        lease_id: str,
        now: datetime,
        *,
        seq: int,
        value: float,
        value_std: float,
        values: list[float] | None,
    ) -> bool:
        """RUNNING -> COMPLETED if the lease still holds; False (nothing changed) if not."""
        params = {"tid": trial_id, "lid": lease_id, "aid": agent_id, "now": now, "now2": now, "seq": seq,
                  "value": value, "std": value_std, "values": values}  # fmt: skip
        return bool(self._c.execute(_COMPLETE, params).rowcount)

    def insert_running_trials(
        self, campaign_id: int, numbers: list[int], params: list[d.Params], agents: list[str], leases: list[str],
        now: datetime, expires: datetime,
    ) -> list[int]:  # fmt: skip
        """New trials, each RUNNING under its agent's lease, in one statement (an
        acquisition batch; numbers from :meth:`take_numbers`); their ids, in order. Their
        "acquired" events are logged and their agents marked seen, one statement each."""
        rows = [
            {"cid": campaign_id, "number": n, "params": dict(p), "aid": a, "lid": lid, "exp": expires, "now": now}
            for n, p, a, lid in zip(numbers, params, agents, leases, strict=True)
        ]
        ids = [int(r[0]) for r in self._c.execute(_NEW_TRIALS, rows)]
        pairs = zip(ids, agents, strict=True)
        events = [{"tid": tid, "attempt": 1, "kind": "acquired", "aid": a, "now": now} for tid, a in pairs]
        self._c.execute(_EVENT, events)
        self._c.execute(_SEEN_MANY, {"aids": sorted(set(agents)), "now": now})
        return ids

    def log_event(self, trial_id: int, attempt: int, kind: str, now: datetime, agent_id: str = "") -> None:
        self._c.execute(_EVENT, {"tid": trial_id, "attempt": attempt, "kind": kind, "aid": agent_id, "now": now})

    def seen_agent(self, agent_id: str, now: datetime) -> None:
        self._c.execute(_SEEN, {"aid": agent_id, "now": now})

    def agent_token(self, agent_id: str) -> tuple[bool, int | None]:
        """(registered?, the token id that registered it)."""
        row = self._c.execute(_AGENT_TOKEN, {"aid": agent_id}).first()
        return (False, None) if row is None else (True, row[0])


_STAMP = m.UTCDateTime()
_HELD = """
    id = :tid AND lease_id = :lid AND agent_id = :aid AND state = 'RUNNING' AND lease_expires_at >= :now"""
_ONE_HEARTBEAT = text(f"""
WITH t AS (UPDATE trials SET lease_expires_at = :exp WHERE {_HELD} RETURNING id),
     a AS (UPDATE agents SET last_seen_at = :now WHERE id = :aid AND EXISTS (SELECT 1 FROM t))
SELECT count(*) FROM t""").bindparams(bindparam("exp", type_=_STAMP), bindparam("now", type_=_STAMP))
_ONE_REPORT = text(f"""
WITH t AS (
  UPDATE trials SET lease_expires_at = :exp
  WHERE {_HELD}
    AND :fold < (SELECT (c.spec ->> 'folds')::int FROM campaigns c WHERE c.id = trials.campaign_id)
    AND NOT EXISTS (SELECT 1 FROM folds WHERE trial_id = :tid AND fold = :fold AND finished)
  RETURNING campaign_id, attempt),
f AS (
  INSERT INTO folds (trial_id, fold, finished, metrics, checkpoint_uri, attempt, updated_at)
  SELECT :tid, :fold, false, '{{}}'::json, :ck, attempt, :now FROM t
  ON CONFLICT (trial_id, fold) DO UPDATE SET attempt = excluded.attempt, updated_at = excluded.updated_at,
    checkpoint_uri = CASE WHEN excluded.checkpoint_uri = '' THEN folds.checkpoint_uri
                          ELSE excluded.checkpoint_uri END),
c AS (
  INSERT INTO curves (trial_id, fold, step, value) SELECT :tid, :fold, :step, :value FROM t
  ON CONFLICT (trial_id, fold, step) DO UPDATE SET value = excluded.value)
SELECT campaign_id, attempt,
       (SELECT count(*) FROM curves WHERE trial_id = :tid AND fold = :fold AND step <> :step) + 1 FROM t""").bindparams(
    bindparam("exp", type_=_STAMP), bindparam("now", type_=_STAMP)
)
_ONE_FOLD = text(f"""
WITH c AS (
  SELECT (spec ->> 'folds')::int AS folds,
         CASE WHEN json_typeof(spec -> 'objectives') = 'array' THEN json_array_length(spec -> 'objectives')
              ELSE 1 END AS objectives
  FROM campaigns WHERE id = (SELECT campaign_id FROM trials WHERE id = :tid)),
t AS (
  UPDATE trials SET lease_expires_at = :exp
  WHERE {_HELD}
    AND :fold < (SELECT folds FROM c) AND (SELECT objectives FROM c) = 1
    AND NOT EXISTS (SELECT 1 FROM folds WHERE trial_id = :tid AND fold = :fold AND finished)
  RETURNING campaign_id, attempt),
f AS (
  INSERT INTO folds (trial_id, fold, finished, value, metrics, checkpoint_uri, attempt, updated_at)
  SELECT :tid, :fold, true, :value, CAST(:metrics AS json), :ck, attempt, :now FROM t
  ON CONFLICT (trial_id, fold) DO UPDATE SET finished = true, value = excluded.value, metrics = excluded.metrics,
    attempt = excluded.attempt, updated_at = excluded.updated_at,
    checkpoint_uri = CASE WHEN excluded.checkpoint_uri = '' THEN folds.checkpoint_uri
                          ELSE excluded.checkpoint_uri END
  RETURNING checkpoint_uri)
SELECT t.campaign_id, t.attempt, f.checkpoint_uri FROM t CROSS JOIN f""").bindparams(
    bindparam("exp", type_=_STAMP), bindparam("now", type_=_STAMP), bindparam("metrics", type_=F.c.metrics.type)
)


class OneStatement:
    """PostgreSQL: a heartbeat, an intermediate report or a finished fold as one statement
    committed by itself, its guards in its WHERE: one round trip instead of BEGIN, two or
    three statements and COMMIT. Each returns what :class:`HotQueries` would, and changes nothing when a
    guard fails."""

    def __init__(self, conn: Connection):
        self.c = conn

    def heartbeat(self, trial_id: int, agent_id: str, lease_id: str, now: datetime, expires: datetime) -> bool:
        params = {"tid": trial_id, "lid": lease_id, "aid": agent_id, "now": now, "exp": expires}
        return bool(self.c.execute(_ONE_HEARTBEAT, params).scalar())

    def report(
        self, trial_id: int, agent_id: str, lease_id: str, now: datetime, expires: datetime, *, fold: int, step: int,
        value: float, checkpoint_uri: str,
    ) -> tuple[int, int, int] | None:  # fmt: skip
        """(campaign id, attempt, the fold's curve points now) if the lease holds and
        ``fold`` is an open fold of the campaign; None, and nothing changed, otherwise."""
        params = {"tid": trial_id, "lid": lease_id, "aid": agent_id, "now": now, "exp": expires, "fold": fold,
                  "step": step, "value": value, "ck": checkpoint_uri}  # fmt: skip
        row = self.c.execute(_ONE_REPORT, params).first()
        return (int(row[0]), int(row[1]), int(row[2])) if row else None

    def fold(
        self, trial_id: int, agent_id: str, lease_id: str, now: datetime, expires: datetime, *, fold: int,
        value: float, metrics: dict[str, float], checkpoint_uri: str,
    ) -> tuple[int, d.Fold] | None:  # fmt: skip
        """A single-objective campaign's fold finished: (campaign id, the fold) if the lease
        holds and the fold is open; None, and nothing changed, otherwise (a replay, a
        multi-objective campaign: the caller's other path names or handles it)."""
        params = {"tid": trial_id, "lid": lease_id, "aid": agent_id, "now": now, "exp": expires, "fold": fold,
                  "value": value, "metrics": metrics, "ck": checkpoint_uri}  # fmt: skip
        row = self.c.execute(_ONE_FOLD, params).first()
        if row is None:
            return None
        return int(row[0]), d.Fold(fold, True, value, dict(metrics), str(row[2]), int(row[1]))


def _trial(t: Any, folds: tuple[d.Fold, ...] = ()) -> d.Trial:
    values = t["values"]
    return d.Trial(
        id=t["id"],
        campaign_id=t["campaign_id"],
        number=t["number"],
        state=d.TrialState(t["state"]),
        attempt=t["attempt"],
        params=dict(t["params"]),
        created_at=t["created_at"],
        value=t["value"],
        value_std=t["value_std"],
        values=None if values is None else tuple(float(v) for v in values),
        agent_id=t["agent_id"],
        lease_id=t["lease_id"],
        lease_expires_at=t["lease_expires_at"],
        error=t["error"],
        started_at=t["started_at"],
        finished_at=t["finished_at"],
        finish_seq=t["finish_seq"],
        folds=folds,
    )
