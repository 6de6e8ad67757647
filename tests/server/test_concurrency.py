"""Many agents at once over real gRPC: every trial is acquired exactly once; a lease that
is not renewed goes to another agent as the same trial with attempt 2."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from hpcopt_server.service import Service, ServiceSettings
from hpcopt_server.storage.repository import Storage
from tests.helpers.clients import AgentClient, Client
from tests.helpers.env import scaled, timeout_scale
from tests.helpers.live import LiveServer, run_live_server
from tests.helpers.pg import fresh_pg_database
from tests.helpers.process import ServerProcess
from tests.helpers.seed import checkpoint_uri
from tests.helpers.specs import make_spec

GRANTED, WAIT = "granted", "wait"


def _swarm(targets: list[str], campaign_id: int, agents: int) -> list[int]:
    """Runs ``agents`` threads, each its own gRPC channel, until the campaign is done;
    returns every trial id any of them was granted."""
    granted: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(agents)
    # A bound on a hang, not a speed check: 64 agents on SQLite took over 300 s on a
    # machine loaded 5 deep per core.
    deadline = time.monotonic() + scaled(600) * timeout_scale()
    failed = threading.Event()  # one agent's error ends the swarm: the others would wait
    # for ever on the trial it held (no reaper runs here)

    def work(i: int) -> None:
        try:
            with AgentClient(targets[i % len(targets)]) as api:
                reg = api.register(host=f"agent-{i}", campaign_id=campaign_id)
                start.wait(timeout=scaled(60))
                while not failed.is_set() and time.monotonic() < deadline:
                    resp = api.acquire(reg.agent_id, campaign_id)
                    if resp.status == WAIT:
                        time.sleep(0.01)
                        continue
                    if resp.status != GRANTED:
                        return
                    with lock:
                        granted.append(resp.trial.id)
                    lease = resp.lease
                    api.report_fold(lease, 0, float(resp.trial.number))
                    api.complete(lease)
        except BaseException as exc:
            errors.append(exc)
            failed.set()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(agents)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(0.0, deadline + 60 - time.monotonic()))
    assert not errors, errors[:3]
    assert not any(t.is_alive() for t in threads), "agents still working after the deadline (a hang?)"
    return granted


def _check_exactly_once(target: str, campaign_id: int, granted: list[int], max_trials: int) -> None:
    dupes = [tid for tid, n in Counter(granted).items() if n > 1]
    assert not dupes, f"trials acquired more than once: {dupes}"
    assert len(granted) == max_trials
    with Client(target) as c:
        trials = c.list_trials(campaign_id)
        assert sorted(t.id for t in trials) == sorted(granted)
        assert sorted(t.number for t in trials) == list(range(max_trials))
        assert {t.state for t in trials} == {"COMPLETED"}
        assert all(t.attempt == 1 for t in trials)
        assert c.get_campaign(campaign_id).state == "COMPLETED"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_64_agents_acquire_every_trial_exactly_once(live_server: LiveServer) -> None:
    with Client(live_server.grpc_target) as c:
        cid = c.create_campaign(make_spec(folds=1, budget={"max_trials": 192, "max_parallel": 64})).id
    granted = _swarm([live_server.grpc_target], cid, 64)
    _check_exactly_once(live_server.grpc_target, cid, granted, 192)


@pytest.mark.slow
@pytest.mark.postgres
def test_two_serve_processes_on_one_postgresql_share_the_work_exactly_once(
    pg_admin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The docker-compose topology without containers: two ``serve`` processes started
    together on an empty PostgreSQL with one HPCOPT_ADMIN_TOKEN (one migrates and stores
    the token, the other waits for it), agents spread over both as a load balancer would."""
    fresh = fresh_pg_database(pg_admin)
    url = next(fresh)
    secret = "hpcopt_compose_" + "x" * 40
    monkeypatch.setenv("HPCOPT_TOKEN", secret)  # every client below presents it
    servers = [ServerProcess(url, env={"HPCOPT_ADMIN_TOKEN": secret}) for _ in range(2)]
    try:
        errors: list[BaseException] = []
        starts = [threading.Thread(target=lambda s=s: _capture(s.start, errors)) for s in servers]
        for t in starts:
            t.start()
        for t in starts:
            t.join(timeout=scaled(120))
        assert not errors, errors
        targets = [s.grpc_target for s in servers]
        with Client(targets[0]) as c:
            cid = c.create_campaign(make_spec(folds=1, budget={"max_trials": 128, "max_parallel": 16})).id
        granted = _swarm(targets, cid, 64)
        _check_exactly_once(targets[1], cid, granted, 128)
    finally:
        for s in servers:
            s.stop()
        fresh.close()


def _capture(fn: Callable[[], object], errors: list[BaseException]) -> None:
    try:
        fn()
    except BaseException as exc:
        errors.append(exc)


@pytest.fixture
def short_lease_server(db_url: str) -> Iterator[LiveServer]:
    storage = Storage(db_url)
    service = Service(storage, ServiceSettings(lease_seconds=1.0, heartbeat_seconds=0.25), reap_interval=0.2)
    service.reaper.start()
    try:
        yield from run_live_server(service)
    finally:
        service.reaper.stop()
        storage.close()


@pytest.mark.slow
def test_a_silent_agent_loses_its_trial_to_another_agent(short_lease_server: LiveServer) -> None:
    target = short_lease_server.grpc_target
    with Client(target) as c:
        cid = c.create_campaign(make_spec(folds=2, budget={"max_trials": 1, "max_parallel": 1})).id
    with AgentClient(target) as a, AgentClient(target) as b:
        ra, rb = a.register(host="silent"), b.register(host="rescuer")
        first = a.acquire(ra.agent_id, cid)
        lease_a = first.lease
        a.report_fold(lease_a, 0, 0.25, {"loss": 0.25}, checkpoint_uri(ra.server_id, cid, first.trial.id, 0))
        assert b.acquire(rb.agent_id, cid).status == WAIT  # max_parallel 1, and it is held
        # Agent a now goes silent; within lease + reap interval the trial must come back.
        deadline = time.monotonic() + scaled(10)
        while (second := b.acquire(rb.agent_id, cid)).status != GRANTED:
            assert time.monotonic() < deadline, "the trial never came back"
            time.sleep(0.1)
        assert second.trial.id == first.trial.id and second.trial.attempt == 2
        assert [(f.index, f.finished, f.value) for f in second.trial.folds] == [(0, True, 0.25)]
        lease_b = second.lease
        with pytest.raises(Exception, match="FAILED_PRECONDITION"):
            a.report_fold(lease_a, 1, 0.5)  # the old holder is refused
        b.report_fold(lease_b, 1, 0.75)
        done = b.complete(lease_b)
    assert done.state == "COMPLETED" and done.value == 0.5 and done.attempt == 2
    with Client(target) as c:
        kinds = [e.kind for e in c.get_trial(done.id).events]
    assert kinds == ["acquired", "lease_expired", "acquired", "completed"]


@pytest.mark.postgres
def test_reapers_of_two_server_processes_requeue_each_trial_once(pg_url: str) -> None:
    from datetime import timedelta

    from hpcopt_server.service.agents import AcquireStatus

    storages = [Storage(pg_url) for _ in range(2)]
    services = [Service(s) for s in storages]
    try:
        a = services[0]
        cid = a.campaigns.create(make_spec(folds=1, budget={"max_trials": 40, "max_parallel": 40})).id
        agent = a.agents.register(host="doomed", ranks=1, gpus=0).agent_id
        for _ in range(40):
            assert a.agents.acquire(agent, cid).status == AcquireStatus.GRANTED
        later = a.ctx.clock() + timedelta(seconds=a.ctx.settings.lease_seconds + 5)
        for s in services:
            s.ctx.clock = lambda: later
        counts: list[int] = []
        threads = [threading.Thread(target=lambda s=s: counts.append(s.reaper.reap())) for s in services * 2]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=scaled(60))
        assert sum(counts) == 40
        trials = a.campaigns.trials(cid, limit=100)[0]
        assert {(t.state, t.attempt) for t in trials} == {("QUEUED", 2)}
        for t in trials:
            assert [e.kind for e in a.campaigns.trial(t.id).events] == ["acquired", "lease_expired"]
    finally:
        for s in storages:
            s.close()
