"""What keeps a busy server flat: heartbeats and reports never wait for the campaign's
lock, acquisitions waiting for it hold no database connection, and every agent call is
a handful of statements (the round trips that the server's latency is made of)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import event

from hpcopt_server.service import Service
from hpcopt_server.service.agents import AcquireStatus, Action, Lease
from hpcopt_server.storage.repository import Storage
from tests.helpers.env import scaled
from tests.helpers.specs import make_spec


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # the test reads it
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _hold_campaign_lock(pg_url: str, campaign_id: int) -> psycopg.Connection[Any]:
    """Another session holding the campaign's row lock, as a slow acquisition would."""
    conn = psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"))
    conn.execute("SELECT id FROM campaigns WHERE id = %s FOR UPDATE", (campaign_id,))
    return conn


@pytest.fixture
def pg_service(pg_url: str) -> Iterator[Service]:
    storage = Storage(pg_url, pool_size=2)  # 2 + 2 overflow connections: easy to exhaust
    yield Service(storage)
    storage.close()


@pytest.mark.postgres
def test_heartbeats_and_reports_go_on_while_the_campaign_lock_is_held(pg_url: str, pg_service: Service) -> None:
    svc = pg_service
    spec = make_spec(folds=3, pruner={"name": "median"}, budget={"max_trials": 10, "max_parallel": 4})
    cid = svc.campaigns.create(spec).id
    agent = svc.agents.register(host="a", ranks=1, gpus=0).agent_id
    other = svc.agents.register(host="b", ranks=1, gpus=0).agent_id
    got = svc.agents.acquire(agent, cid)
    assert got.trial is not None
    lease = Lease(agent, got.trial.id, got.lease_id)

    locker = _hold_campaign_lock(pg_url, cid)
    try:
        waiting, acquired = _in_thread(lambda: svc.agents.acquire(other, cid))
        calls = [
            lambda: svc.agents.heartbeat(lease),
            lambda: svc.agents.report_intermediate(lease, 0, 1, 0.5),
            lambda: svc.agents.report_fold(lease, 0, 0.4),
        ]
        for call in calls:
            t, out = _in_thread(call)
            t.join(timeout=scaled(20))
            assert not t.is_alive(), "an agent's own-trial call waited for the campaign lock"
            assert not isinstance(out[0], BaseException), out[0]
        assert waiting.is_alive(), "the acquisition did not wait for the lock: the test proves nothing"
    finally:
        locker.rollback()
        locker.close()
    waiting.join(timeout=scaled(20))
    assert acquired[0].status == AcquireStatus.GRANTED


@pytest.mark.postgres
def test_acquisitions_waiting_for_the_campaign_hold_no_database_connection(pg_url: str, pg_service: Service) -> None:
    svc = pg_service
    cid = svc.campaigns.create(make_spec(folds=1, budget={"max_trials": 20, "max_parallel": 20})).id
    holder = svc.agents.register(host="holder", ranks=1, gpus=0).agent_id
    got = svc.agents.acquire(holder, cid)
    assert got.trial is not None
    lease = Lease(holder, got.trial.id, got.lease_id)
    agents = [svc.agents.register(host=f"n{i}", ranks=1, gpus=0).agent_id for i in range(8)]

    locker = _hold_campaign_lock(pg_url, cid)
    try:
        waiting = [_in_thread(lambda a=a: svc.agents.acquire(a, cid)) for a in agents]  # type: ignore[misc]
        # Eight blocked acquisitions and a pool of four: the heartbeat still gets through.
        t, out = _in_thread(lambda: svc.agents.heartbeat(lease))
        t.join(timeout=scaled(20))
        assert not t.is_alive(), "waiting acquisitions took every pooled connection"
        assert out[0].action == Action.CONTINUE
        assert all(w.is_alive() for w, _ in waiting)
    finally:
        locker.rollback()
        locker.close()
    for w, _ in waiting:
        w.join(timeout=scaled(30))
    results = [out[0] for _, out in waiting]
    assert all(r.status == AcquireStatus.GRANTED for r in results), results
    assert len({r.trial.id for r in results} | {lease.trial_id}) == 9


def test_each_agent_call_is_a_handful_of_statements(service: Service) -> None:
    """The round-trip budget of the hot path (BEGIN and COMMIT aside), on both backends."""
    statements: list[str] = []

    @event.listens_for(service.ctx.storage.db.engine, "before_cursor_execute")
    def count(_conn: Any, _cur: Any, sql: str, *_: Any) -> None:
        if not sql.lstrip().upper().startswith(("BEGIN", "PRAGMA")):
            statements.append(sql)

    cid = service.campaigns.create(make_spec(folds=2, budget={"max_trials": 10, "max_parallel": 4})).id
    agent = service.agents.register(host="a", ranks=1, gpus=0).agent_id
    agents = service.agents
    used: dict[str, int] = {}

    def run(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        statements.clear()
        result = fn(*args)
        used[name] = max(used.get(name, 0), len(statements))
        return result

    def trial() -> None:
        got = run("acquire", agents.acquire, agent, cid)
        lease = Lease(agent, got.trial.id, got.lease_id)
        run("heartbeat", agents.heartbeat, lease)
        for k in range(2):
            run("report_intermediate", agents.report_intermediate, lease, k, 1, 0.5)
            run("report_fold", agents.report_fold, lease, k, 0.25 * k)
        done = run("complete", agents.complete, lease)
        assert done.state.value == "COMPLETED" and done.value == 0.125

    trial()  # fills the per-process caches (the agent's token, the campaign's spec)
    used.clear()
    trial()
    # PostgreSQL: a heartbeat, an intermediate report and a fold are one statement, committed by itself;
    # a completion reads the folds, then completes in one statement.
    # SQLite's intermediate report counts the fold's curve points in a statement of its own
    # (the cap of issue 25: budget.curve_points_per_fold); PostgreSQL's counts inside its one.
    one = service.ctx.storage.dialect == "postgresql"
    expected = {
        "acquire": 6,
        "heartbeat": 1 if one else 2,
        "report_intermediate": 1 if one else 4,
        "report_fold": 1 if one else 2,
        "complete": 2 if one else 4,
    }
    assert used == expected, used


@pytest.mark.postgres
def test_waiting_acquisitions_are_served_together_and_the_budget_stays_exact(pg_url: str, pg_service: Service) -> None:
    svc = pg_service
    cid = svc.campaigns.create(make_spec(folds=1, budget={"max_trials": 10, "max_parallel": 10})).id
    agents = [svc.agents.register(host=f"n{i}", ranks=1, gpus=0).agent_id for i in range(30)]
    svc.agents.acquire(agents[0], cid)  # caches the agent and the campaign: a warm server
    commits: list[int] = []
    event.listen(svc.ctx.storage.db.engine, "commit", lambda _conn: commits.append(1))

    locker = _hold_campaign_lock(pg_url, cid)
    try:
        waiting = [_in_thread(lambda a=a: svc.agents.acquire(a, cid)) for a in agents[1:]]  # type: ignore[misc]
        deadline = time.monotonic() + scaled(20)
        assert svc.agents.queue is not None
        while svc.agents.queue.waiting() < 28 and time.monotonic() < deadline:
            time.sleep(0.01)  # all but the one at the lock are queued at the gate
    finally:
        locker.rollback()
        locker.close()
    for t, _ in waiting:
        t.join(timeout=scaled(30))
    transactions = len(commits)
    answers = [out[0] for _, out in waiting]
    granted = [a.trial.id for a in answers if a.status == AcquireStatus.GRANTED]
    assert len(granted) == 9 and len(set(granted)) == 9  # the budget's 10, one taken before
    for agent, answer in zip(agents[1:], answers, strict=True):  # each trial is stored as its agent's
        if answer.status == AcquireStatus.GRANTED:
            stored = svc.campaigns.trial(answer.trial.id)
            assert (stored.agent_id, stored.lease_id, stored.state.value) == (agent, answer.lease_id, "RUNNING")
            assert answer.trial.number == stored.number and answer.trial.params == stored.params
    assert sum(a.status == AcquireStatus.WAIT for a in answers) == 20
    assert transactions <= 3, f"29 acquisitions took {transactions} transactions"


def test_an_sqlite_without_returning_answers_as_a_newer_one(tmp_path: Any) -> None:
    """SQLite before 3.35 (still the system one on some clusters) has no RETURNING: the
    agent calls then read back what they changed, and answer as on a newer one."""
    from hpcopt_server.storage.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url)
    storage = Storage(url)
    dialect = storage.db.engine.dialect
    dialect.update_returning = dialect.insert_returning = dialect.delete_returning = False  # as SQLAlchemy sets them
    svc = Service(storage)
    assert not svc.ctx.agent_calls.returning
    cid = svc.campaigns.create(make_spec(folds=2, budget={"max_trials": 1, "max_parallel": 1})).id
    agent = svc.agents.register(host="old", ranks=1, gpus=0).agent_id
    got = svc.agents.acquire(agent, cid)
    assert got.trial is not None
    lease = Lease(agent, got.trial.id, got.lease_id)
    assert svc.agents.heartbeat(lease).action == Action.CONTINUE
    for k in range(2):
        assert svc.agents.report_intermediate(lease, k, 1, 0.5).action == Action.CONTINUE
        svc.agents.report_fold(lease, k, 0.25 * k)
    done = svc.agents.complete(lease)
    assert done.state.value == "COMPLETED" and done.value == 0.125
    assert svc.agents.acquire(agent, cid).status == AcquireStatus.DONE
    storage.close()
