"""SIGKILL the server in the middle of a stream of reports, or of a burst of
completions from many agents retrying, and restart it: every report the server
acknowledged is still there, and no trial completes twice."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy import create_engine, text

from hpcopt import ApiError
from tests.helpers.clients import AgentClient, Client
from tests.helpers.env import scaled
from tests.helpers.process import ServerProcess
from tests.helpers.specs import make_spec

T = TypeVar("T")
#: What a call sees while the server is down or restarting: retry it.
TRANSIENT = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "UNKNOWN", "INTERNAL")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_acknowledged_reports_survive_sigkill(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    db = f"sqlite:///{tmp_path / 'crash.db'}" if backend == "sqlite" else request.getfixturevalue("pg_url")
    server = ServerProcess(db).start()
    target = server.grpc_target
    acked: list[tuple[int, int, float]] = []  # (fold, step, value) the server answered OK
    folds_acked: list[int] = []
    try:
        with Client(target) as c:
            cid = c.create_campaign(make_spec(folds=100, budget={"max_trials": 1, "max_parallel": 1})).id
        agent = AgentClient(target, timeout=scaled(5))
        reg = agent.register(host="crash-test")
        lease = (agent.acquire(reg.agent_id, cid)).lease
        stop = threading.Event()
        unexpected: list[ApiError] = []

        def stream() -> None:
            # Fold k gets curve points at steps 10k..10k+8, then its final value.
            for step in range(1000):
                fold, value = step // 10, step * 0.5
                if stop.is_set():
                    return
                try:
                    if step % 10 == 9:
                        agent.report_fold(lease, fold, value)
                        folds_acked.append(fold)
                    else:
                        agent.report_intermediate(lease, fold, step, value)
                        acked.append((fold, step, value))
                except ApiError as exc:
                    if exc.code not in TRANSIENT:
                        unexpected.append(exc)
                    return  # the server is gone: this report was not acknowledged

        t = threading.Thread(target=stream)
        t.start()
        while len(acked) < 200 and t.is_alive():
            time.sleep(0.01)
        assert not unexpected, unexpected
        assert t.is_alive(), "the report stream ended before the kill"
        server.kill()
        stop.set()
        t.join(timeout=scaled(30))
        agent.close()
        assert len(acked) >= 200

        server.start()
        with Client(target) as c:
            trial = c.get_trial(lease.trial_id)
        stored = {(p.fold, p.step): p.value for p in trial.curves}
        missing = [a for a in acked if stored.get((a[0], a[1])) != a[2]]
        assert not missing, f"{len(missing)} acknowledged reports lost, e.g. {missing[:3]}"
        finished = {f.index for f in trial.folds if f.finished}
        assert set(folds_acked) <= finished
    finally:
        server.kill()


def _retrying(call: Callable[[], T], deadline: float) -> T:
    """``call()`` until it answers, through a server restart (what an agent does)."""
    while True:
        try:
            return call()
        except ApiError as exc:
            if exc.code not in TRANSIENT or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_completions_survive_sigkill_during_a_burst_and_none_counts_twice(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db = f"sqlite:///{tmp_path / 'burst.db'}" if backend == "sqlite" else request.getfixturevalue("pg_url")
    agents, per_agent = 12, 4
    server = ServerProcess(db).start()
    with Client(server.grpc_target) as c:
        # Room for trials whose Acquire reply was lost at the kill: they stay RUNNING, unknown to
        # their agent, until the lease expires.
        spec = make_spec(folds=2, budget={"max_trials": 2 * agents * per_agent, "max_parallel": 2 * agents})
        cid = c.create_campaign(spec).id
    acked: list[int] = []  # trials whose Complete the server answered OK
    failures: list[BaseException] = []
    lock = threading.Lock()

    def agent(k: int) -> None:
        deadline = time.monotonic() + scaled(120)
        try:
            with AgentClient(server.grpc_target, timeout=scaled(5)) as a:
                agent_id = _retrying(lambda: a.register(host=f"burst-{k}", campaign_id=cid), deadline).agent_id
                for _ in range(per_agent):
                    got = _retrying(lambda: a.acquire(agent_id, cid), deadline)
                    while not got.trial.id:  # an Acquire whose reply was lost holds a slot until its lease ends
                        assert time.monotonic() < deadline, "no trial to acquire"
                        time.sleep(0.1)
                        got = _retrying(lambda: a.acquire(agent_id, cid), deadline)
                    lease = got.lease
                    for fold in range(2):
                        _retrying(lambda f=fold, ls=lease: a.report_fold(ls, f, 0.1 * k + f), deadline)  # type: ignore[misc]
                    done = _retrying(lambda ls=lease: a.complete(ls), deadline)  # type: ignore[misc]
                    assert done.id == lease.trial_id
                    with lock:
                        acked.append(done.id)
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=agent, args=(k,)) for k in range(agents)]
    try:
        for t in threads:
            t.start()
        while len(acked) < agents and all(t.is_alive() for t in threads):
            time.sleep(0.005)
        server.kill()  # mid-burst: some Completes are in flight, some replies are lost
        killed_at = len(acked)
        time.sleep(0.5)
        server.start()
        for t in threads:
            t.join(timeout=scaled(150))
        assert not failures, failures
        assert killed_at < agents * per_agent, "the burst ended before the kill"
    finally:
        server.kill()
    engine = create_engine(db)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT id, state, finish_seq FROM trials WHERE campaign_id = :c"), {"c": cid}
            ).all()
            events = conn.execute(
                text(
                    "SELECT e.trial_id, count(*) FROM trial_events e JOIN trials t ON t.id = e.trial_id "
                    "WHERE t.campaign_id = :c AND e.kind = 'completed' GROUP BY e.trial_id"
                ),
                {"c": cid},
            ).all()
            finished_count = conn.execute(
                text("SELECT finished_count FROM campaigns WHERE id = :c"), {"c": cid}
            ).scalar()
    finally:
        engine.dispose()
    completed = {r[0] for r in rows if r[1] == "COMPLETED"}
    assert set(acked) <= completed, f"acknowledged completions lost: {set(acked) - completed}"
    assert len(acked) == len(set(acked)) == agents * per_agent  # every agent finished its trials
    assert all(n == 1 for _, n in events) and {t for t, _ in events} == completed  # none completed twice
    seqs = [r[2] for r in rows if r[2] is not None]
    assert sorted(seqs) == list(range(1, len(seqs) + 1)) and finished_count == len(seqs)
