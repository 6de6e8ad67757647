"""A large import on SQLite never starves the agents of other campaigns: it is written
in chunks, each its own transaction, and an agent heartbeating over gRPC on another
campaign lands heartbeats between them, its lease intact. While it is written the new
campaign is PAUSED saying how far it is (no agent takes a trial of it, and it cannot be
resumed); at the end it has the document's state and every trial; an import that fails
half-way leaves nothing."""

from __future__ import annotations

import copy
import itertools
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpcopt_server import domain as d
from hpcopt_server.errors import FailedPrecondition
from hpcopt_server.service import Service
from hpcopt_server.service.agents import Lease
from hpcopt_server.storage.db import FairLock
from hpcopt_server.storage.repository import Storage
from tests.helpers.agents import wait_for
from tests.helpers.clients import AgentClient
from tests.helpers.db import migrated_sqlite
from tests.helpers.env import scaled
from tests.helpers.live import LiveServer, run_live_server
from tests.helpers.specs import make_spec

pytestmark = pytest.mark.timeout(900)


@pytest.fixture
def sqlite_server(tmp_path: Path) -> Iterator[LiveServer]:
    url = migrated_sqlite(tmp_path / "import.db")
    storage = Storage(url)
    try:
        yield from run_live_server(Service(storage))
    finally:
        storage.close()


def _document(service: Service, n: int) -> dict[str, Any]:
    """An export document of ``n`` finished trials, each with two folds, five curve
    points and its events (a real export, its trial repeated)."""
    c = service.campaigns.create(make_spec(name="source", folds=2, budget={"max_trials": 1, "max_parallel": 1}))
    agent = service.agents.register(host="h", ranks=1, gpus=0).agent_id
    got = service.agents.acquire(agent, c.id)
    assert got.trial is not None
    lease = Lease(agent, got.trial.id, got.lease_id)
    for step in range(1, 6):
        service.agents.report_intermediate(lease, 0, step, 1.0 / step)
    service.agents.report_fold(lease, 0, 0.5)
    service.agents.report_fold(lease, 1, 0.6)
    service.agents.complete(lease)
    doc = service.export_campaign(c.id)
    one = doc["trials"][0]
    doc["trials"] = [dict(copy.deepcopy(one), number=i) for i in range(n)]
    doc["spec"]["budget"]["max_trials"] = n
    doc["campaign"]["name"] = f"imported-{n}"
    return doc


@pytest.mark.parametrize("n", [2000, pytest.param(20_000, marks=pytest.mark.slow)])
def test_an_agent_of_another_campaign_heartbeats_between_the_chunks_of_a_large_import(
    sqlite_server: LiveServer, n: int
) -> None:
    service = sqlite_server.service
    doc = _document(service, n)
    other = service.campaigns.create(make_spec(name="live", folds=1))
    seq = itertools.count()
    beats: list[int] = []  # the order (in ``seq``) in which heartbeats landed
    progress: list[tuple[int, str]] = []  # (order, pause_reason) of the importing campaign
    stop = threading.Event()
    actions: list[str] = []
    with AgentClient(sqlite_server.grpc_target) as agent:
        aid = agent.register(host="n1", campaign_id=other.id).agent_id
        got = agent.acquire(aid, other.id)
        assert got.lease is not None

        def heartbeat() -> None:
            while not stop.is_set():
                actions.append(agent.heartbeat(got.lease))
                beats.append(next(seq))
                stop.wait(0.2)

        def watch() -> None:
            while not stop.is_set():
                for c in service.campaigns.page(0, 10, name=f"imported-{n}")[0]:
                    if c.campaign.pause_reason:
                        progress.append((next(seq), c.campaign.pause_reason))
                stop.wait(0.2)

        threads = [threading.Thread(target=heartbeat), threading.Thread(target=watch)]
        for t in threads:
            t.start()
        try:
            imported = service.import_campaign(doc)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=scaled(60))
        assert set(actions) == {"continue"}  # the lease held throughout
        assert agent.heartbeat(got.lease) == "continue"
    assert imported.state == "COMPLETED" and imported.pause_reason is None
    assert service.campaigns.get(imported.id).trial_counts == {"COMPLETED": n}
    # It was written in several commits (seen half-way by another transaction), and the
    # agent's heartbeats landed between them.
    partial = [at for at, why in progress if 0 < _written(why) < n]
    assert len(partial) >= 2, progress[:5]
    assert any(partial[0] < b < partial[-1] for b in beats), (beats[:10], partial[:5])


def _written(why: str) -> int:
    found = re.search(r": ([\d,]+) of [\d,]+ trials written", why)
    return int(found[1].replace(",", "")) if found else -1


def test_a_campaign_being_imported_takes_no_trial_cannot_be_resumed_and_a_failed_import_leaves_nothing(
    sqlite_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpcopt_server.service import importing

    service = sqlite_server.service
    doc = _document(service, 600)
    doc["campaign"]["state"] = "RUNNING"
    for t in doc["trials"][300:]:
        t.update(state="QUEUED", value=None, value_std=None, finished_at=None, folds=[], curves=[])
    imported = service.import_campaign(doc)
    assert imported.state == "RUNNING" and imported.pause_reason is None
    assert service.campaigns.get(imported.id).trial_counts == {"COMPLETED": 300, "QUEUED": 300}
    # Between two chunks (no transaction open): PAUSED, agents wait, a resume is refused;
    # then the import fails half-way.
    monkeypatch.setattr(importing, "CHUNK_TRIALS", 100)
    seen: dict[str, Any] = {}
    chunks, trial = importing._chunks, importing._trial

    def observing(*args: Any, **kwargs: Any) -> Iterator[int]:
        for i, n in enumerate(chunks(*args, **kwargs)):
            if i == 1:
                (c,) = [c.campaign for c in service.campaigns.page(0, 10, name="second")[0]]
                seen["paused"] = (c.state, c.pause_reason)
                agent = service.agents.register(host="x", ranks=1, gpus=0).agent_id
                seen["acquire"] = service.agents.acquire(agent, c.id).status
                with pytest.raises(FailedPrecondition) as err:
                    service.steering.resume(c.id)
                seen["resume"] = err.value.message
            yield n

    def failing(tx: Any, c: d.Campaign, doc: Any, t: Any, *args: Any) -> None:
        if t.number == 400:
            raise OSError("the disk went away")
        trial(tx, c, doc, t, *args)

    monkeypatch.setattr(importing, "_chunks", observing)
    monkeypatch.setattr(importing, "_trial", failing)
    doc["campaign"]["name"] = "second"
    before = len(service.campaigns.page(0, 1000)[0])
    with pytest.raises(OSError, match="the disk went away"):
        service.import_campaign(doc)
    state, why = seen["paused"]
    # The first chunk: at most 100 trials, fewer when it took its 0.5 s first (a loaded machine).
    assert state == "PAUSED" and 1 <= _written(why) <= 100 and why.startswith("importing 'second': "), why
    assert seen["acquire"] == "WAIT" and "is being imported" in seen["resume"]
    names = [c.campaign.name for c in service.campaigns.page(0, 1000)[0]]
    assert "second" not in names and len(names) == before  # the failed import left nothing


def test_the_sqlite_write_lock_goes_to_the_oldest_waiter_not_back_to_the_thread_that_released_it() -> None:
    """What lets a heartbeat in between two chunks: the importing thread asks for the
    write lock again at once, and still queues behind the threads that were waiting
    (``threading.Lock`` gives it back to the importing thread, nearly always)."""
    lock, order = FairLock(), []

    def writer(name: str) -> None:
        with lock:
            order.append(name)

    lock.__enter__()  # the import's first chunk
    waiting = [threading.Thread(target=writer, args=(name,)) for name in ("heartbeat", "report")]
    for i, t in enumerate(waiting):
        t.start()  # each in the queue before the next asks
        wait_for(lambda i=i: len(lock._waiters) == i + 1, scaled(30), f"writer {i} to queue", poll=0.01)
    lock.__exit__()
    writer("import")  # the next chunk, asked for at once
    for t in waiting:
        t.join(timeout=scaled(30))
    assert order == ["heartbeat", "report", "import"]
