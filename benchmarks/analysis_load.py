"""/healthz and the server's memory while readers ask for costly analyses at once:

    python benchmarks/analysis_load.py                       # 8 readers x 8 campaigns
    python benchmarks/analysis_load.py --params 20 --trials 10000 --campaigns 2

Seeds ``--campaigns`` campaigns of ``--params`` real parameters and ``--trials``
completed trials straight into a SQLite file (as ``tests/helpers/seed.py`` does), then serves
it (``hpcopt-server serve``, its own process). One reader per campaign, ``--readers``
in all, asks for permutation importance, first-order importance, plot data and the
JSON export in turn for ``--seconds``, finishing one more trial of its campaign through
the agent API before each request so that no answer comes from the cache (the hostile
probe's way of busting it). Meanwhile a prober calls /healthz every 0.2 s (5 s timeout).

Prints the /healthz latencies (p50, p99, worst, failures), the readers' answers by
request and status (200, 429 with Retry-After, anything else) with the slowest of each,
and the server's
peak RSS above its size before the readers started. Before the analysis bounds, one
permutation answer at 100 x 2,000 took 404 s and 3.4 GB, and a few at once took the
server past 7.4 GB until the kernel killed it. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcopt import AgentClient  # noqa: E402 - after the path
from hpcopt_server import domain as d  # noqa: E402
from hpcopt_server.service import Service  # noqa: E402
from hpcopt_server.storage.migrate import upgrade  # noqa: E402
from hpcopt_server.storage.repository import Storage  # noqa: E402
from tests.helpers.process import ServerProcess  # noqa: E402
from tests.helpers.specs import make_spec  # noqa: E402

ASKS = ["importance?method=permutation", "importance?method=first-order", "plot", "export"]


def seed(db: str, campaigns: int, params: int, trials: int) -> list[int]:
    upgrade(db)
    storage = Storage(db)
    service = Service(storage)
    space = {f"x{i}": {"type": "real", "low": 0.0, "high": 1.0} for i in range(params)}
    ids = []
    rng = random.Random(1)
    t0 = datetime.now(UTC) - timedelta(days=1)
    for c in range(campaigns):
        spec = make_spec(
            name=f"load{c}",
            space=space,
            folds=1,
            algorithm={"name": "random", "seed": c},
            budget={"max_trials": trials + 10_000, "max_parallel": 64},
        )
        cid = int(service.campaigns.create(spec).id)
        with storage.write() as tx:
            for number in range(trials):
                x = [rng.random() for _ in space]
                p: d.Params = dict(zip(space, x, strict=True))
                v = x[0] + 0.5 * x[1] ** 2 + 0.1 * rng.random()
                at = t0 + timedelta(seconds=number)
                trial = tx.trials.insert(cid, number, p, d.TrialState.RUNNING, at, started_at=at)
                tx.trials.put_folds(trial.id, [d.Fold(0, True, v, {"loss": v}, "", 1)], at)
                tx.trials.finish(trial.id, d.TrialState.COMPLETED, at + timedelta(seconds=1), value=v, value_std=0.0)
            tx.campaigns.set_next_number(cid, trials)
        ids.append(cid)
        print(f"seeded campaign {cid}: {params} parameters x {trials} trials", file=sys.stderr, flush=True)
    storage.close()
    return ids


def rss_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--campaigns", type=int, default=8)
    ap.add_argument("--readers", type=int, default=8)
    ap.add_argument("--params", type=int, default=100)
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=90.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{tmp}/load.db"
        campaigns = seed(db, args.campaigns, args.params, args.trials)
        with ServerProcess(db) as server:
            assert server.proc is not None
            pid = server.proc.pid
            idle = rss_mb(pid, "VmRSS")
            stop = threading.Event()
            answers: dict[str, int] = {}
            slowest: dict[str, float] = {}
            lock = threading.Lock()

            def reader(k: int) -> None:
                cid = campaigns[k % len(campaigns)]
                agent = AgentClient(server.grpc_target, timeout=60)
                agent_id = agent.register(host=f"reader{k}").agent_id
                with httpx.Client(base_url=server.http_url + f"/api/v1/campaigns/{cid}/", timeout=600) as h:
                    i = k
                    while not stop.is_set():
                        lease = agent.acquire(agent_id, cid).lease
                        if lease is not None:  # a new result: no answer below comes from the cache
                            agent.report_fold(lease, 0, random.random())
                            agent.complete(lease)
                        ask = ASKS[i % len(ASKS)]
                        i += 1
                        t0 = time.monotonic()
                        try:
                            status = str(h.get(ask).status_code)
                        except httpx.HTTPError as exc:
                            status = type(exc).__name__
                        took = time.monotonic() - t0
                        with lock:
                            key = f"{ask.split('?')[0]}{'/' + ask.split('=')[1] if '=' in ask else ''} {status}"
                            answers[key] = answers.get(key, 0) + 1
                            if status == "200":
                                slowest[key] = max(took, slowest.get(key, 0.0))
                        if status == "429":
                            time.sleep(1.0)
                agent.close()

            threads = [threading.Thread(target=reader, args=(k,), daemon=True) for k in range(args.readers)]
            for t in threads:
                t.start()
            health: list[float] = []
            end = time.monotonic() + args.seconds
            while time.monotonic() < end and server.proc.poll() is None:
                t0 = time.monotonic()
                try:
                    ok = httpx.get(server.http_url + "/healthz", timeout=5).status_code == 200
                except httpx.HTTPError:
                    ok = False
                health.append(time.monotonic() - t0 if ok else float("inf"))
                time.sleep(max(0.0, 0.2 - (time.monotonic() - t0)))
            stop.set()
            for t in threads:
                t.join(timeout=900)
            alive = server.proc.poll() is None
            peak = rss_mb(pid, "VmHWM") if alive else float("nan")
    health.sort()
    failed = sum(x == float("inf") for x in health)
    p99 = health[min(len(health) - 1, int(0.99 * len(health)))]
    print(
        f"\n{args.readers} readers x {args.campaigns} campaigns of {args.params} parameters x {args.trials} trials, "
        f"{args.seconds:.0f} s\n"
    )
    print(f"server alive at the end: {alive}; peak RSS {peak:.0f} MB, {peak - idle:.0f} MB above its idle {idle:.0f}")
    print(
        f"/healthz: {len(health)} probes, p50 {statistics.median(health):.3f} s, p99 {p99:.3f} s, "
        f"worst {health[-1]:.3f} s, failed {failed}"
    )
    print(f"  {'request and status':<40} {'count':>5} {'slowest s':>9}")
    for key in sorted(answers):
        worst = f"{slowest[key]:.1f}" if key in slowest else ""
        print(f"  {key:<40} {answers[key]:>5} {worst:>9}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
