"""The agent calls' statements, built once (SQLAlchemy caches a statement's compiled form
by its structure; building the structure costs about 0.1 ms a statement).

Each guarded statement folds a rule of ``hpcopt_server.rules`` into its WHERE
(``UPDATE … WHERE lease_id = … AND state = 'RUNNING' …``), so the common case is one
statement and no read. Statements that return what they changed come twice: with
``RETURNING`` and without it, for an SQLite before 3.35, which reads the same columns
with a ``SELECT`` in the same (single-writer) transaction. ``PG_*`` are PostgreSQL's
whole calls in one statement each.
"""

from __future__ import annotations

import functools
from typing import Any, cast

from sqlalchemy import Table, bindparam, case, func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from hpcopt_server import domain as d
from hpcopt_server.storage import models as m

T = cast(Table, m.TrialRow.__table__)
F = cast(Table, m.FoldRow.__table__)
C = cast(Table, m.CampaignRow.__table__)
CURVES = cast(Table, m.CurveRow.__table__)
EVENTS = cast(Table, m.TrialEventRow.__table__)
AGENTS = cast(Table, m.AgentRow.__table__)
RUNNING = d.TrialState.RUNNING.value
QUEUED = d.TrialState.QUEUED.value


def run(c: Any, stmt: Any, p: dict[str, Any]) -> Any:
    """Executes ``stmt`` with the parameters of ``p`` that it declares, and no others.
    Core's INSERT and UPDATE also set every column an execution parameter is named
    after: a lease renewal given a learning-curve point's ``value`` wrote it into the
    trial's value, and the fold it opened took it as the fold's (SQLite's path)."""
    return c.execute(stmt, {k: p[k] for k in _declared(stmt) if k in p})


@functools.cache
def _declared(stmt: Any) -> frozenset[str]:
    return frozenset(n for n, b in stmt.compile().binds.items() if b.required)


def _p(name: str, column: Any = None) -> Any:
    """A named parameter, typed like ``column`` (datetimes, JSON) where given."""
    return bindparam(name, type_=column.type) if column is not None else bindparam(name)


# rules.lease_refusal(...) is None, as a WHERE clause.
LEASE_HELD = (
    (T.c.id == _p("tid"))
    & (T.c.lease_id == _p("lid"))
    & (T.c.agent_id == _p("aid"))
    & (T.c.state == RUNNING)
    & (T.c.lease_expires_at >= _p("now", T.c.lease_expires_at))
)
RENEW_PLAIN = update(T).where(LEASE_HELD).values(lease_expires_at=_p("exp", T.c.lease_expires_at))
RENEW = RENEW_PLAIN.returning(T.c.campaign_id, T.c.attempt, T.c.fidelity)
OF_TRIAL = select(T.c.campaign_id, T.c.attempt, T.c.fidelity).where(T.c.id == _p("tid"))
COMPLETE = (
    update(T)
    .where(LEASE_HELD)
    .values(
        state=d.TrialState.COMPLETED.value,
        finished_at=_p("now2", T.c.finished_at),
        finish_seq=_p("seq"),
        value=_p("value"),
        value_std=_p("std"),
        values=_p("values", T.c["values"]),
        constraint_values=_p("cvals", T.c.constraint_values),
        violation=_p("violation", T.c.violation),
        broken=_p("broken", T.c.broken),
    )
)
RESUME = (
    update(T)
    .where(T.c.id == _p("tid"), T.c.state == QUEUED)
    .values(
        state=RUNNING,
        agent_id=_p("aid"),
        lease_id=_p("lid"),
        lease_expires_at=_p("exp", T.c.lease_expires_at),
        started_at=func.coalesce(T.c.started_at, _p("now", T.c.started_at)),
        error="",
    )
)
QUEUED_IDS = select(T.c.id).where(T.c.campaign_id == _p("cid"), T.c.state == QUEUED).order_by(T.c.id).limit(_p("k"))

TAKE_NUMBERS_PLAIN = update(C).where(C.c.id == _p("cid")).values(next_number=C.c.next_number + _p("k"))
# The budget is read with the counters, under the campaign's lock: it can be raised
# while the campaign runs (service/steering.py), so a cached spec may be older.
_BUDGET = C.c.spec["budget"]
TAKE_NUMBERS = TAKE_NUMBERS_PLAIN.returning(C.c.state, C.c.next_number, C.c.finished_count, _BUDGET)
NUMBERS = select(C.c.state, C.c.next_number, C.c.finished_count, _BUDGET).where(C.c.id == _p("cid"))
SET_NEXT_NUMBER = update(C).where(C.c.id == _p("cid")).values(next_number=_p("n"))
COUNT_FINISHED_PLAIN = update(C).where(C.c.id == _p("cid")).values(finished_count=C.c.finished_count + 1)
COUNT_FINISHED = COUNT_FINISHED_PLAIN.returning(C.c.finished_count, C.c.state, _BUDGET)
FINISHED_COUNT = select(C.c.finished_count, C.c.state, _BUDGET).where(C.c.id == _p("cid"))
CAMPAIGN = select(C).where(C.c.id == _p("cid"))

ACTIVE = select(func.count().filter(T.c.state == RUNNING), func.count().filter(T.c.state == QUEUED)).where(
    T.c.campaign_id == _p("cid"), T.c.state.in_([RUNNING, QUEUED])
)
NEW_TRIAL = T.insert().values(
    campaign_id=_p("cid"),
    number=_p("number"),
    state=RUNNING,
    attempt=1,
    params=_p("params", T.c.params),
    agent_id=_p("aid"),
    lease_id=_p("lid"),
    lease_expires_at=_p("exp", T.c.lease_expires_at),
    error="",
    created_at=_p("now", T.c.created_at),
    started_at=_p("now", T.c.started_at),
    lineage=_p("lineage", T.c.lineage),
    fidelity=_p("fidelity", T.c.fidelity),
)
NEW_TRIALS = NEW_TRIAL.returning(T.c.id, sort_by_parameter_order=True)
EVENT = EVENTS.insert().values(
    trial_id=_p("tid"),
    attempt=_p("attempt"),
    kind=_p("kind"),
    agent_id=_p("aid"),
    reason=_p("reason"),
    at=_p("now", EVENTS.c.at),
)
COUNT_EVENTS = select(func.count()).where(
    EVENTS.c.trial_id == _p("tid"), EVENTS.c.attempt == _p("attempt"), EVENTS.c.kind == _p("kind")
)
SEEN = update(AGENTS).where(AGENTS.c.id == _p("aid")).values(last_seen_at=_p("now", AGENTS.c.last_seen_at))
SEEN_MANY = (
    update(AGENTS)
    .where(AGENTS.c.id.in_(bindparam("aids", expanding=True)))
    .values(last_seen_at=_p("now", AGENTS.c.last_seen_at))
)
AGENT_TOKEN = select(AGENTS.c.token_id).where(AGENTS.c.id == _p("aid"))

FOLD_COLUMNS = [
    F.c.fold,
    F.c.finished,
    F.c.value.label("fold_value"),
    F.c.metrics,
    F.c.checkpoint_uri,
    F.c.attempt.label("fold_attempt"),
]
TRIAL_WITH_FOLDS = (
    select(T, *FOLD_COLUMNS).select_from(T.outerjoin(F, F.c.trial_id == T.c.id)).where(T.c.id == _p("tid"))
)
FOLD_FINISHED = select(F.c.finished).where(F.c.trial_id == _p("tid"), F.c.fold == _p("fold"))
FOLD_CHECKPOINT = select(F.c.checkpoint_uri).where(F.c.trial_id == _p("tid"), F.c.fold == _p("fold"))
CURVE_POINTS = select(func.count()).where(CURVES.c.trial_id == _p("tid"), CURVES.c.fold == _p("fold"))
# The checkpoint URI is kept when a report brings none.
_KEEP_CHECKPOINT = case((_p("ck") == "", F.c.checkpoint_uri), else_=_p("ck"))


def _fold_upserts(insert: Any) -> tuple[Any, Any]:
    """(open, close) fold upserts for one dialect: each changes an unfinished fold only."""
    key = [F.c.trial_id, F.c.fold]
    unfinished = F.c.finished.is_(False)
    opened = insert(F).values(
        trial_id=_p("tid"),
        fold=_p("fold"),
        finished=False,
        metrics=_p("metrics", F.c.metrics),
        checkpoint_uri=_p("ck"),
        attempt=_p("attempt"),
        updated_at=_p("now", F.c.updated_at),
    )
    opened = opened.on_conflict_do_update(
        index_elements=key,
        where=unfinished,
        set_={"attempt": _p("attempt"), "updated_at": _p("now", F.c.updated_at), "checkpoint_uri": _KEEP_CHECKPOINT},
    )
    closed = insert(F).values(
        trial_id=_p("tid"),
        fold=_p("fold"),
        finished=True,
        value=_p("value"),
        metrics=_p("metrics", F.c.metrics),
        checkpoint_uri=_p("ck"),
        attempt=_p("attempt"),
        updated_at=_p("now", F.c.updated_at),
    )
    closed = closed.on_conflict_do_update(
        index_elements=key,
        where=unfinished,
        set_={
            "finished": True,
            "value": _p("value"),
            "metrics": _p("metrics", F.c.metrics),
            "attempt": _p("attempt"),
            "updated_at": _p("now", F.c.updated_at),
            "checkpoint_uri": _KEEP_CHECKPOINT,
        },
    )
    return opened, closed


def _curve_upsert(insert: Any) -> Any:
    q = insert(CURVES).values(trial_id=_p("tid"), fold=_p("fold"), step=_p("step"), value=_p("value"))
    return q.on_conflict_do_update(
        index_elements=[CURVES.c.trial_id, CURVES.c.fold, CURVES.c.step], set_={"value": _p("value")}
    )


def _upserts(insert: Any, returning: bool) -> tuple[Any, Any, Any]:
    opened, closed = _fold_upserts(insert)
    if returning:
        opened, closed = opened.returning(F.c.trial_id), closed.returning(F.c.checkpoint_uri)
    return opened, closed, _curve_upsert(insert)


#: (open fold, close fold, curve point) by (dialect, RETURNING?): the fold upserts return a
#: row only when the fold was unfinished.
UPSERTS = {
    (name, returning): _upserts(insert, returning)
    for name, insert in (("postgresql", pg_insert), ("sqlite", sqlite_insert))
    for returning in (True, False)
}

_STAMP = m.UTCDateTime()
_HELD = """
    id = :tid AND lease_id = :lid AND agent_id = :aid AND state = 'RUNNING' AND lease_expires_at >= :now"""
# A heartbeat commits without waiting for its WAL to reach the disk (synchronous_commit
# off for its own transaction only): what PostgreSQL can lose in a crash is the last
# ~0.6 s (3 x wal_writer_delay) of lease extensions and "last seen" times, never a
# trial's state, a report or a result; such a lease then ends at its previous expiry,
# at least (lease - heartbeat period) after the agent's last heartbeat, and the agent's
# next heartbeat renews it first.
PG_HEARTBEAT = text(f"""
WITH s AS (SELECT set_config('synchronous_commit', 'off', true)),
     t AS (UPDATE trials SET lease_expires_at = :exp WHERE {_HELD} RETURNING id),
     a AS (UPDATE agents SET last_seen_at = :now WHERE id = :aid AND EXISTS (SELECT 1 FROM t))
SELECT count(*) FROM t, s""").bindparams(bindparam("exp", type_=_STAMP), bindparam("now", type_=_STAMP))
PG_REPORT = text(f"""
WITH t AS (
  UPDATE trials SET lease_expires_at = :exp
  WHERE {_HELD}
    AND :fold < (SELECT (c.spec ->> 'folds')::int FROM campaigns c WHERE c.id = trials.campaign_id)
    AND :fold < COALESCE((trials.fidelity ->> 'folds')::int, :fold + 1)
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
# The objectives after the first must each be a key of the fold's metrics (rules.missing_metrics).
PG_FOLD = text(f"""
WITH c AS (
  SELECT (spec ->> 'folds')::int AS folds,
         CASE WHEN json_typeof(spec -> 'objectives') = 'array' THEN spec -> 'objectives'
              ELSE '[]'::json END AS objectives
  FROM campaigns WHERE id = (SELECT campaign_id FROM trials WHERE id = :tid)),
t AS (
  UPDATE trials SET lease_expires_at = :exp
  WHERE {_HELD}
    AND :fold < (SELECT folds FROM c)
    AND :fold < COALESCE((trials.fidelity ->> 'folds')::int, :fold + 1)
    AND NOT EXISTS (SELECT 1 FROM c, json_array_elements(c.objectives) WITH ORDINALITY AS o(objective, i)
                    WHERE o.i > 1 AND (CAST(:metrics AS json) -> (o.objective ->> 'metric')) IS NULL)
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
# A completion: the campaign's counter (its row lock, held for this statement and its
# commit only), the trial, its event and, when this was the budget's last trial, the
# campaign's end (rules.campaign_done), in one statement. The trial's guard is checked
# again under its row lock; if it no longer holds, the division by zero makes the whole
# statement fail, so the counter is never taken for a trial that did not complete.
PG_COMPLETE = text(f"""
WITH c AS (
  UPDATE campaigns SET finished_count = finished_count + 1,
    state = CASE WHEN state IN ('RUNNING', 'PAUSED')
                  AND finished_count + 1 >= (spec -> 'budget' ->> 'max_trials')::int
                 THEN 'COMPLETED' ELSE state END,
    finished_at = CASE WHEN state IN ('RUNNING', 'PAUSED')
                        AND finished_count + 1 >= (spec -> 'budget' ->> 'max_trials')::int
                       THEN :now ELSE finished_at END
  WHERE id = :cid AND EXISTS (SELECT 1 FROM trials WHERE {_HELD})
  RETURNING finished_count),
t AS (
  UPDATE trials SET state = 'COMPLETED', finished_at = :now, finish_seq = (SELECT finished_count FROM c),
    value = :value, value_std = :std, "values" = :values,
    constraint_values = :cvals, violation = :violation, broken = :broken
  WHERE {_HELD} AND EXISTS (SELECT 1 FROM c)
  RETURNING id, attempt),
e AS (
  INSERT INTO trial_events (trial_id, attempt, kind, agent_id, reason, at)
  SELECT id, attempt, 'completed', :aid, '', :now FROM t)
SELECT c.finished_count, 1 / (SELECT count(*) FROM t) FROM c""").bindparams(
    bindparam("now", type_=_STAMP),
    bindparam("values", type_=T.c["values"].type),
    bindparam("cvals", type_=T.c.constraint_values.type),
)
