"""What each agent call costs inside the server: statements, wall and CPU time, and how
long it holds the campaign's row lock, for one agent on PostgreSQL (no gRPC, no load).

    python benchmarks/call_cost.py
    PYTHONPATH=OLD/server:OLD/client python benchmarks/call_cost.py    # an older checkout

Statements exclude BEGIN and COMMIT; the lock is timed from the statement that takes it
to the commit (for a statement that commits by itself, to its end, its commit
included). Medians over 250 trials (the first 50 are warm-up).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from typing import Any

import psycopg
from sqlalchemy import event

import hpcopt_server
from hpcopt_server.service import Service
from hpcopt_server.service.agents import Lease
from hpcopt_server.storage.migrate import upgrade
from hpcopt_server.storage.repository import Storage

ADMIN = os.environ.get("HPCOPT_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def main() -> int:
    name = f"hpcopt_cost_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + "/" + name
    try:
        upgrade(url)
        storage = Storage(url)
        rows = _measure(Service(storage), storage)
        storage.close()
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"server code: {os.path.dirname(hpcopt_server.__file__)}")
    print(f"{'call':<20} {'statements':>10} {'wall ms':>8} {'CPU ms':>7} {'campaign lock held ms':>22}")
    for call, samples in rows.items():
        kept = samples[50:]

        def med(i: int, kept: list[tuple[float, float, float, int]] = kept) -> float:
            return statistics.median(s[i] for s in kept)

        print(f"{call:<20} {int(med(3)):>10} {1000 * med(0):>8.2f} {1000 * med(1):>7.2f} {1000 * med(2):>22.2f}")
    return 0


def _measure(svc: Service, storage: Storage) -> dict[str, list[tuple[float, float, float, int]]]:
    statements: list[str] = []
    marks: dict[str, float] = {}

    @event.listens_for(storage.db.engine, "before_cursor_execute")
    def _statement(_conn: Any, _cur: Any, sql: str, *_: Any) -> None:
        statements.append(sql)
        flat = " ".join(sql.split()).lower()
        if (
            ("from campaigns" in flat and "for update" in flat)
            or flat.startswith("update campaigns")
            or ("as ( update campaigns" in flat)
        ):
            marks.setdefault("lock", time.perf_counter())
            marks["locking"] = 1.0

    @event.listens_for(storage.db.engine, "after_cursor_execute")
    def _executed(conn: Any, *_: Any) -> None:
        if marks.pop("locking", 0.0) and conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
            marks["commit"] = time.perf_counter()

    @event.listens_for(storage.db.engine, "commit")
    def _commit(_conn: Any) -> None:
        marks["commit"] = time.perf_counter()

    spec = {
        "name": "cost",
        "objective": {"metric": "loss"},
        "space": {"x": {"type": "real", "low": 0, "high": 1}},
        "algorithm": {"name": "random", "seed": 0},
        "budget": {"max_trials": 100_000, "max_parallel": 1000},
        "folds": 3,
        "training": {"task": "cost:Task"},
    }
    cid = svc.campaigns.create(spec).id
    agent = svc.agents.register(host="cost", ranks=1, gpus=0, campaign_id=cid).agent_id
    out: dict[str, list[tuple[float, float, float, int]]] = {}

    def timed(call: str, fn: Any, *args: Any) -> Any:
        statements.clear()
        marks.clear()
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn(*args)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        held = marks["commit"] - marks["lock"] if "lock" in marks and "commit" in marks else 0.0
        out.setdefault(call, []).append((wall, cpu, held, len(statements)))
        return result

    for _ in range(300):
        got = timed("Acquire", svc.agents.acquire, agent, cid)
        lease = Lease(agent, got.trial.id, got.lease_id)
        timed("Heartbeat", svc.agents.heartbeat, lease)
        for k in range(3):
            timed("ReportIntermediate", svc.agents.report_intermediate, lease, k, 1, 0.5)
            timed("ReportFold", svc.agents.report_fold, lease, k, 0.1 * k)
        timed("Complete", svc.agents.complete, lease)
    return out


if __name__ == "__main__":
    sys.exit(main())
