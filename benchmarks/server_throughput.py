"""Server throughput: N concurrent agents (separate processes) doing
acquire -> heartbeat -> report folds -> complete cycles against one hpcopt server, on
SQLite and on PostgreSQL, next to the peer a user would otherwise pick: N Optuna
processes sharing one RDB storage (ask -> report folds -> tell) on the same database.

    python benchmarks/server_throughput.py                       # 1, 16, 64, 256 agents, both backends
    python benchmarks/server_throughput.py --agents 256 --seconds 20 --backends postgresql

Prints one table: cycles/s, RPC latency p50/p99 (every RPC of a cycle), errors, and
duplicate acquisitions (a trial granted to two agents; must be 0), with the ratio of
hpcopt's cycles/s to Optuna's. Nothing here is asserted: machines are noisy.

The parent process never imports grpc, so forked agents start clean.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PG_ADMIN = os.environ.get("HPCOPT_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
FOLDS = 3


@dataclass
class Result:
    system: str
    backend: str
    agents: int
    cycles: int
    seconds: float
    latencies: list[float]
    errors: int
    duplicates: int
    first_error: str = ""

    @property
    def rate(self) -> float:
        return self.cycles / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spec(n: int) -> dict[str, Any]:
    return {
        "name": f"throughput-{n}",
        "objective": {"metric": "loss"},
        "space": {"x": {"type": "real", "low": 0, "high": 1}, "k": {"type": "int", "low": 1, "high": 9}},
        "algorithm": {"name": "random", "seed": 0},
        "budget": {"max_trials": 1_000_000, "max_parallel": max(n, 1)},
        "folds": FOLDS,
        "training": {"task": "bench"},
    }


# -- hpcopt agents ------------------------------------------------------------------


def _hpcopt_agent(target: str, cid: int, go: Any, deadline_box: Any, out: Any) -> None:
    from hpcopt import AgentClient, ApiError, lease_of
    from hpcopt.v1 import agent_pb2

    lat: list[float] = []
    granted: list[int] = []
    cycles = errors = 0
    first_error = ""
    with AgentClient(target, timeout=60) as api:

        def timed(fn: Any, *args: Any) -> Any:
            t0 = time.perf_counter()
            r = fn(*args)
            lat.append(time.perf_counter() - t0)
            return r

        reg = api.register(host=socket.gethostname(), campaign_id=cid)
        go.wait()
        deadline = deadline_box.value
        while time.time() < deadline:
            try:
                resp = timed(api.acquire, reg.agent_id, cid)
                if resp.status != agent_pb2.AcquireResponse.STATUS_GRANTED:
                    time.sleep(0.01)
                    continue
                granted.append(resp.trial.id)
                lease = lease_of(resp, reg.agent_id)
                timed(api.heartbeat, lease)
                for k in range(FOLDS):
                    timed(api.report_fold, lease, k, 0.1 * k, {"loss": 0.1 * k})
                timed(api.complete, lease)
                cycles += 1
            except ApiError as exc:
                errors += 1
                first_error = first_error or str(exc)
    out.put((cycles, lat, errors, granted, first_error))


def _wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("server did not start")


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        out: dict[str, Any] = json.loads(resp.read())
        return out


def run_hpcopt(db: str, backend: str, n: int, seconds: float) -> Result:
    port, gport = _free_port(), _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "hpcopt_server.cli", "serve", "--db", db, "--port", str(port),
         "--grpc-port", str(gport), "--log-level", "warning", "--grpc-workers", "64"],
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, server)
        cid = _post(url + "/api/v1/campaigns", _spec(n))["id"]
        return _drive("hpcopt", backend, n, seconds, _hpcopt_agent, (f"127.0.0.1:{gport}", cid))
    finally:
        server.terminate()
        server.wait(timeout=60)


# -- the peer: Optuna processes sharing one RDB storage --------------------------------


def _optuna_agent(storage_url: str, study: str, go: Any, deadline_box: Any, out: Any) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    lat: list[float] = []
    granted: list[int] = []
    cycles = errors = 0
    first_error = ""
    try:
        s = optuna.load_study(study_name=study, storage=storage_url, sampler=optuna.samplers.RandomSampler())
    except Exception as exc:
        out.put((0, [], 1, [], repr(exc)))
        return
    go.wait()
    deadline = deadline_box.value
    while time.time() < deadline:
        try:
            t0 = time.perf_counter()
            trial = s.ask()
            trial.suggest_float("x", 0, 1)
            trial.suggest_int("k", 1, 9)
            lat.append(time.perf_counter() - t0)
            granted.append(trial._trial_id)
            for k in range(FOLDS):
                t0 = time.perf_counter()
                trial.report(0.1 * k, k)
                lat.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            s.tell(trial, 0.1)
            lat.append(time.perf_counter() - t0)
            cycles += 1
        except Exception as exc:
            errors += 1
            first_error = first_error or repr(exc)[:200]
    out.put((cycles, lat, errors, granted, first_error))


def run_optuna(db: str, backend: str, n: int, seconds: float) -> Result:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage_url = db.replace("postgresql://", "postgresql+psycopg://")
    study = f"bench-{uuid.uuid4().hex[:8]}"
    optuna.create_study(study_name=study, storage=storage_url)
    return _drive("optuna", backend, n, seconds, _optuna_agent, (storage_url, study))


# -- shared driver ---------------------------------------------------------------------


def _drive(system: str, backend: str, n: int, seconds: float, target: Any, args: tuple[Any, ...]) -> Result:
    ctx = mp.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    deadline_box = ctx.Value("d", 0.0)
    procs = [ctx.Process(target=target, args=(*args, go, deadline_box, out)) for _ in range(n)]
    for p in procs:
        p.start()
    time.sleep(min(2 + n * 0.15, 60))  # let every process import and register
    deadline_box.value = time.time() + seconds
    t0 = time.time()
    go.set()
    results = [out.get(timeout=seconds + 600) for _ in procs]
    elapsed = time.time() - t0
    for p in procs:
        p.join(timeout=60)
    cycles = sum(r[0] for r in results)
    lat = [x for r in results for x in r[1]]
    errors = sum(r[2] for r in results)
    ids = Counter(i for r in results for i in r[3])
    first = next((r[4] for r in results if r[4]), "")
    return Result(system, backend, n, cycles, min(elapsed, seconds), lat, errors,
                  sum(1 for c in ids.values() if c > 1), first)  # fmt: skip


def _fresh_db(backend: str, tmp: Path) -> tuple[str, Any]:
    if backend == "sqlite":
        path = tmp / f"{uuid.uuid4().hex[:8]}.db"
        return f"sqlite:///{path}", lambda: None
    import psycopg

    name = f"hpcopt_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + "/" + name, drop


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", default="1,16,64,256", help="comma-separated agent counts")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds per row")
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--no-peer", action="store_true", help="skip the Optuna rows")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="hpcopt-bench-"))
    rows: list[tuple[Result, Result | None]] = []
    try:
        for backend in args.backends.split(","):
            for n in (int(x) for x in args.agents.split(",")):
                db, drop = _fresh_db(backend, tmp)
                try:
                    ours = run_hpcopt(db, backend, n, args.seconds)
                finally:
                    drop()
                peer = None
                if not args.no_peer:
                    db, drop = _fresh_db(backend, tmp)
                    try:
                        peer = run_optuna(
                            db.replace("postgresql+psycopg://", "postgresql://"), backend, n, args.seconds
                        )
                    finally:
                        drop()
                rows.append((ours, peer))
                _print_row(ours, peer, header=len(rows) == 1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        args.json.write_text(
            json.dumps([[vars(r) | {"latencies": None} for r in pair if r] for pair in rows], indent=1)
        )
    for ours, peer in rows:
        for r in (ours, peer):
            if r and r.first_error:
                print(f"first error, {r.system} {r.backend} n={r.agents}: {r.first_error}")
    return 0


def _print_row(ours: Result, peer: Result | None, header: bool) -> None:
    if header:
        print(
            f"{'backend':<10} {'agents':>6} | {'hpcopt cyc/s':>12} {'p50 ms':>7} {'p99 ms':>8} {'errors':>6} "
            f"{'dupes':>5} | {'optuna cyc/s':>12} {'p50 ms':>7} {'p99 ms':>8} {'errors':>6} | {'ratio':>6}"
        )
        print("-" * 118)
    line = (
        f"{ours.backend:<10} {ours.agents:>6} | {ours.rate:>12.1f} {ours.pct(0.5):>7.1f} {ours.pct(0.99):>8.1f} "
        f"{ours.errors:>6} {ours.duplicates:>5} | "
    )
    if peer is None:
        line += f"{'-':>12} {'-':>7} {'-':>8} {'-':>6} | {'-':>6}"
    else:
        ratio = ours.rate / peer.rate if peer.rate else float("inf")
        line += f"{peer.rate:>12.1f} {peer.pct(0.5):>7.1f} {peer.pct(0.99):>8.1f} {peer.errors:>6} | {ratio:>5.1f}x"
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
