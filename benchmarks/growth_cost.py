"""What a caller who grows things costs the server: a trial holding 10**6 learning-curve
points, and import documents that are small in bytes but large in work.

    python benchmarks/growth_cost.py                         # this checkout
    python benchmarks/growth_cost.py --baseline /tmp/base    # also a checkout to compare
                                                            # (e.g. `git worktree add /tmp/base REV`)

Each checkout's server runs as its own process on SQLite. Rows:

- ``GET /trials/{id}``, ``/curves``, ``export``: the three reads that return curves, of a
  trial whose fold 0 holds ``--points`` points (written straight into the database, as
  an agent reporting for hours would leave them where nothing caps them); seconds and
  bytes, and the worst /healthz latency seen meanwhile (probed every 0.2 s);
- ``report 5,000 points``: the points stored after an agent reports 5,000 of them
  through the API (what the cap keeps);
- ``import 61,564 trials``: a 33 MB document of small trials, over REST;
- ``import zeros REST`` / ``gRPC``: a 31 MB JSON array of zeros.

Seconds (median of ``--reps``, interleaved), bytes, status, and the server's peak RSS
after each group. Requests time out after ``--timeout`` seconds (">T"). Nothing is
asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcopt import AgentClient, Client  # noqa: E402 - after the path
from tests.helpers.process import ServerProcess  # noqa: E402

SPEC: dict[str, Any] = {
    "name": "growth",
    "objective": {"metric": "loss"},
    "space": {"x": {"type": "real", "low": 0.0, "high": 1.0}},
    "algorithm": {"name": "random", "seed": 1},
    "budget": {"max_trials": 1_000_000, "max_parallel": 4},
    "folds": 2,
    "training": {"task": "t:T"},
}


class Healthz:
    """Probes /healthz every 0.2 s in a thread; ``worst`` is the slowest answer."""

    def __init__(self, url: str):
        self.url, self.worst, self._stop = url, 0.0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            t0 = time.monotonic()
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(self.url + "/healthz", timeout=60)
            self.worst = max(self.worst, time.monotonic() - t0)

    def __enter__(self) -> Healthz:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def timed(call: Callable[[], tuple[int, int]], timeout: float) -> tuple[float, int, int]:
    t0 = time.monotonic()
    try:
        status, size = call()
    except (httpx.HTTPError, Exception):  # a timeout or a reset: the row says so
        return float("inf"), 0, 0
    took = time.monotonic() - t0
    return (took if took < timeout else float("inf")), status, size


def get(url: str, timeout: float) -> Callable[[], tuple[int, int]]:
    def call() -> tuple[int, int]:
        r = httpx.get(url, timeout=timeout)
        return r.status_code, len(r.content)

    return call


def curve_rows(checkout: Path, points: int, timeout: float, reps: int) -> dict[str, Any]:
    env = {"PYTHONPATH": f"{checkout}/client:{checkout}/server"}
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "g.db"
        with ServerProcess(f"sqlite:///{path}", env=env) as server:
            with Client(server.grpc_target, timeout=timeout) as c:
                cid = c.create_campaign(SPEC).id
            with AgentClient(server.grpc_target, timeout=timeout) as a:
                aid = a.register(host="bench").agent_id
                got = a.acquire(aid, cid)
                lease = got.lease
                for step in range(5000):  # through the API: what the server keeps
                    a.report_intermediate(lease, 1, step, 1.0 / (step + 1))
            with sqlite3.connect(path) as db:
                out["kept of 5,000"] = db.execute(
                    "SELECT count(*) FROM curves WHERE trial_id=? AND fold=1", (got.trial.id,)
                ).fetchone()[0]
                db.executemany(
                    "INSERT OR REPLACE INTO curves (trial_id, fold, step, value) VALUES (?, 0, ?, ?)",
                    ((got.trial.id, s, 1.0 / (s + 1)) for s in range(points)),
                )
            base = server.http_url + "/api/v1"
            reads = {
                "GET /trials/{id}": f"{base}/trials/{got.trial.id}",
                "GET /curves": f"{base}/campaigns/{cid}/curves?trial_id={got.trial.id}",
                "GET export": f"{base}/campaigns/{cid}/export",
            }
            for name, url in reads.items():
                runs = []
                with Healthz(server.http_url) as probe:
                    for _ in range(reps):
                        runs.append(timed(get(url, timeout), timeout))
                out[name] = (statistics.median(r[0] for r in runs), runs[0][2], runs[0][1], probe.worst)
            out["rss"] = server.peak_rss_mb()
    return out


def import_rows(checkout: Path, timeout: float) -> dict[str, Any]:
    env = {"PYTHONPATH": f"{checkout}/client:{checkout}/server"}
    trial = {"number": 0, "state": "QUEUED", "params": {"x": 0.5}, "created_at": "2026-01-01T00:00:00Z"}
    many = {
        "format": "hpcopt-campaign",
        "version": 1,
        "campaign": {"id": 1, "name": "many", "state": "RUNNING", "created_at": "2026-01-01T00:00:00Z"},
        "spec": SPEC,
        "trials": [{**trial, "number": i} for i in range(61_564)],
    }
    many_body = json.dumps(many).encode()
    zeros = b"[" + b"0," * (31 * 1024 * 1024 // 2 - 1) + b"0]"
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(f"sqlite:///{tmp}/i.db", env=env) as server:
        url = server.http_url + "/api/v1/campaigns/import"

        def post(body: bytes) -> Callable[[], tuple[int, int]]:
            def call() -> tuple[int, int]:
                r = httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=timeout)
                return r.status_code, len(body)

            return call

        def grpc_zeros() -> tuple[int, int]:
            with Client(server.grpc_target, timeout=timeout) as c:
                try:
                    c._do(c._stub.ImportCampaign, _import_request(zeros.decode()))
                    return 200, len(zeros)
                except Exception as exc:  # refused: the message says how
                    print(f"    gRPC import: {exc}", file=sys.stderr)
                    return 400, len(zeros)

        with Healthz(server.http_url) as probe:
            out[f"import 61,564 trials ({len(many_body) / 1e6:.0f} MB)"] = (*timed(post(many_body), timeout), 0.0)
            out["import zeros REST (31 MB)"] = (*timed(post(zeros), timeout), 0.0)
            out["import zeros gRPC (31 MB)"] = (*timed(grpc_zeros, timeout), 0.0)
        out["healthz worst"] = probe.worst
        out["rss"] = server.peak_rss_mb()
    return out


def _import_request(text: str) -> Any:
    from hpcopt.v1 import campaign_pb2

    return campaign_pb2.ImportCampaignRequest(document_json=text)


def fmt(x: float) -> str:
    return ">T" if x == float("inf") else f"{x:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=180)
    args = ap.parse_args()
    checkouts = [("this", ROOT)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    print(f"{'checkout':<9} {'row':<32} {'seconds':>8} {'bytes':>11} {'status':>6} {'worst healthz s':>15}")
    for name, path in checkouts:
        print(f"{name}: curves ...", file=sys.stderr, flush=True)
        rows = curve_rows(path, args.points, args.timeout, args.reps)
        print(f"{name:<9} {'points kept of 5,000 reported':<32} {rows.pop('kept of 5,000'):>8}")
        rss = rows.pop("rss")
        for row, (sec, size, status, worst) in rows.items():
            print(f"{name:<9} {row:<32} {fmt(sec):>8} {size:>11,} {status:>6} {worst:>15.3f}")
        print(f"{name:<9} {'peak RSS MB (curves)':<32} {rss:>8.0f}")
    for name, path in checkouts:
        print(f"{name}: imports ...", file=sys.stderr, flush=True)
        rows = import_rows(path, args.timeout)
        rss, worst = rows.pop("rss"), rows.pop("healthz worst")
        for row, (sec, status, size, _) in rows.items():
            print(f"{name:<9} {row:<32} {fmt(sec):>8} {size:>11,} {status!s:>6} {worst:>15.3f}")
        print(f"{name:<9} {'peak RSS MB (imports)':<32} {rss:>8.0f}")


if __name__ == "__main__":
    main()
