"""Server throughput: N simulated agents doing acquire -> heartbeat -> report folds ->
complete cycles against R hpcopt server processes on one database, next to the peer a
user would otherwise pick: N Optuna workers (ask -> report folds -> tell) on the same
database through Optuna's gRPC storage proxy, one proxy process holding a pooled RDB
storage (16 + 16 connections and 64 threads, as an hpcopt server), the workers as
threads in ``--loaders`` processes.

    python benchmarks/server_throughput.py                       # 1, 16, 64, 256 agents, both backends
    python benchmarks/server_throughput.py --agents 256 --backends postgresql --replicas 1,2,4 --no-peer
    python benchmarks/server_throughput.py --agents 256 --backends postgresql --processes 1,2 --no-peer
    python benchmarks/server_throughput.py --agents 256 --backends postgresql --rate 60 --no-peer
    python benchmarks/server_throughput.py --baseline-src /tmp/old   # also an older server, interleaved

Agents are asyncio coroutines on grpc.aio, each with its own connection, in
``--loaders`` processes (light enough that the server, not the load, is measured). By
default each agent loops as fast as the server answers (closed loop: the server's
capacity); ``--rate C`` offers C cycles per second in all, arrivals at random (the
latency a site sees below capacity). ``--epochs E`` adds E intermediate reports per fold;
``--folds K`` sets the folds per trial (3; each is a ReportFold).

Prints one row per configuration (R servers on their own ports, each with P gRPC processes
on its one port: ``serve --processes P``): cycles/s (cycles completed inside the measured window,
per second of it: a cycle started before the deadline and finished after does not count);
p50/p99 of acquire and complete, and of heartbeat and reports; server (every process) and
PostgreSQL CPU milliseconds per RPC (from /proc; PostgreSQL's: the run database's backends and the
backends that ended during the run, not other databases' live sessions); errors; duplicate
acquisitions (a trial granted twice: must be 0); the Optuna peer and the ratio. With
``--reps K`` each configuration runs K times interleaved with the others, and the row
gives medians with the spread. Nothing here is asserted: machines are noisy.

The parent process never imports grpc, so forked loaders start clean.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

PG_ADMIN = os.environ.get("HPCOPT_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
FOLDS = 3
SLOW = ("Acquire", "Complete")
FAST = ("Heartbeat", "ReportIntermediate", "ReportFold")


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
    replicas: int = 1
    processes: int = 1  # gRPC processes per server (serve --processes)
    by_rpc: dict[str, list[float]] = field(default_factory=dict)
    server_cpu: float = 0.0
    pg_cpu: float = 0.0
    calls: int = 0

    @property
    def rate(self) -> float:
        return self.cycles / self.seconds if self.seconds else 0.0

    def pct(self, q: float, methods: tuple[str, ...] = ()) -> float:
        xs = [x for m in methods for x in self.by_rpc.get(m, [])] if methods else self.latencies
        if not xs:
            return float("nan")
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000

    def cpu_per_call(self, seconds: float) -> float:
        return 1000 * seconds / self.calls if self.calls else float("nan")


def _libpq(db: str) -> str:
    return db.replace("postgresql+psycopg://", "postgresql://")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spec(n: int, folds: int = FOLDS) -> dict[str, Any]:
    return {
        "name": f"throughput-{n}",
        "objective": {"metric": "loss"},
        "space": {"x": {"type": "real", "low": 0, "high": 1}, "k": {"type": "int", "low": 1, "high": 9}},
        "algorithm": {"name": "random", "seed": 0},
        "budget": {"max_trials": 1_000_000, "max_parallel": max(n, 1)},
        "folds": folds,
        "training": {"task": "bench:Task"},
    }


# -- hpcopt agents: asyncio coroutines in loader processes ---------------------------


def _loader(
    targets: list[str], cid: int, ids: list[int], plan: dict[str, Any], ready: Any, go: Any, deadline_box: Any, out: Any
) -> None:
    import asyncio

    import grpc
    from aio_agents import Agent, Recorder

    from hpcopt.v1 import agent_pb2

    rec = Recorder()
    granted = agent_pb2.AcquireResponse.STATUS_GRANTED

    async def one(i: int, agent: Agent) -> None:
        rng = random.Random(i)
        deadline = deadline_box.value
        rate = plan["rate"] / plan["agents"] if plan["rate"] else 0.0
        start = time.time() + (rng.expovariate(rate) if rate else 0.0)
        while time.time() < deadline:
            if rate:
                await asyncio.sleep(max(0.0, start - time.time()))
                start += rng.expovariate(rate)
                if time.time() >= deadline:
                    break
            try:
                resp = await agent.acquire(cid)
                if resp.status != granted:
                    await asyncio.sleep(0.01)
                    continue
                lease = agent.lease(resp)
                await agent.heartbeat(lease)
                for k in range(plan["folds"]):
                    for e in range(plan["epochs"]):
                        await agent.report(lease, k, e, 1.0 / (e + 1))
                    await agent.report_fold(lease, k, 0.1 * k)
                await agent.complete(lease)
                if time.time() <= deadline:
                    rec.cycles += 1
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.01)

    async def main() -> None:
        agents = [Agent(targets[i % len(targets)], rec) for i in ids]
        await asyncio.gather(*(a.register(cid, f"sim{i}") for i, a in zip(ids, agents, strict=True)))
        rec.latency.clear()
        ready.put(len(agents))
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        await asyncio.gather(*(one(i, a) for i, a in zip(ids, agents, strict=True)))
        await asyncio.gather(*(a.close() for a in agents))

    asyncio.run(main())
    out.put(rec.dump())


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


def start_servers(
    db: str, replicas: int, src: str = "", workers: int = 0, extra: list[str] | None = None
) -> list[tuple[subprocess.Popen[bytes], str, str]]:
    """R servers on one database: (first process, REST url, gRPC target)."""
    env = dict(os.environ)
    if src:  # an older checkout's server and client, ahead of the installed ones
        env["PYTHONPATH"] = os.pathsep.join([f"{src}/server", f"{src}/client", env.get("PYTHONPATH", "")])
    out = []
    for _ in range(replicas):
        port, gport = _free_port(), _free_port()
        cmd = [
            sys.executable,
            "-m",
            "hpcopt_server.cli",
            "serve",
            "--db",
            db,
            "--port",
            str(port),
            "--grpc-port",
            str(gport),
            "--log-level",
            "warning",
        ]
        if workers:
            cmd += ["--grpc-workers", str(workers)]
        cmd += extra or []
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
        out.append((proc, f"http://127.0.0.1:{port}", f"127.0.0.1:{gport}"))
    for proc, url, _ in out:
        _wait_healthy(url, proc)
    return out


def run_hpcopt(
    db: str,
    backend: str,
    n: int,
    seconds: float,
    *,
    replicas: int = 1,
    rate: float = 0.0,
    epochs: int = 0,
    loaders: int = 1,
    src: str = "",
    workers: int = 0,
    folds: int = FOLDS,
    extra: list[str] | None = None,
    processes: int = 1,
) -> Result:
    from aio_agents import database_cpu, database_cpu_used
    from aio_agents import tree_cpu_seconds as cpu_seconds

    more = ["--processes", str(processes)] if processes > 1 else []
    servers = start_servers(db, replicas, src, workers, (extra or []) + more)
    try:
        cid = _post(servers[0][1] + "/api/v1/campaigns", _spec(n, folds))["id"]
        ctx = mp.get_context("fork")
        ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
        deadline_box = ctx.Value("d", 0.0)
        plan = {"rate": rate, "agents": n, "epochs": epochs, "folds": folds}
        targets = [t for _, _, t in servers]
        procs = [
            ctx.Process(
                target=_loader, args=(targets, cid, list(range(n))[k::loaders], plan, ready, go, deadline_box, out)
            )
            for k in range(min(loaders, n))
        ]
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=300)
        pg0 = database_cpu(_libpq(db)) if backend == "postgresql" else ({}, 0.0)
        cpu0 = sum(cpu_seconds(p.pid) for p, _, _ in servers), 0.0
        deadline_box.value = time.time() + seconds
        go.set()
        time.sleep(seconds)
        pg1 = database_cpu(_libpq(db)) if backend == "postgresql" else ({}, 0.0)
        cpu1 = sum(cpu_seconds(p.pid) for p, _, _ in servers), database_cpu_used(pg0, pg1)
        from aio_agents import Recorder

        rec = Recorder()
        for _ in procs:
            rec.merge(out.get(timeout=600))
        for p in procs:
            p.join(timeout=60)
    finally:
        for proc, _, _ in servers:
            proc.terminate()
        for proc, _, _ in servers:
            proc.wait(timeout=60)
    ids = Counter(tuple(g) for g in rec.granted)
    lat = [x for v in rec.latency.values() for x in v]
    label = "hpcopt" if not src else "hpcopt@" + Path(src).name
    return Result(
        label,
        backend,
        n,
        rec.cycles,
        seconds,
        lat,
        sum(rec.errors.values()),
        sum(1 for c in ids.values() if c > 1),
        rec.first_error,
        replicas,
        processes,
        dict(rec.latency),
        cpu1[0] - cpu0[0],
        cpu1[1] - cpu0[1],
        rec.calls(),
    )


# -- the peer: Optuna workers through its gRPC storage proxy ---------------------------

_PROXY = """
import sys
from concurrent.futures import ThreadPoolExecutor
import optuna
optuna.logging.set_verbosity(optuna.logging.ERROR)
storage = optuna.storages.RDBStorage(sys.argv[1], engine_kwargs={"pool_size": 16, "max_overflow": 16})
optuna.storages.run_grpc_proxy_server(storage, host="127.0.0.1", port=int(sys.argv[2]),
                                      thread_pool=ThreadPoolExecutor(64))
"""


def _optuna_loader(port: int, study: str, workers: int, go: Any, deadline_box: Any, out: Any) -> None:
    import threading
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    lat: list[float] = []
    granted: list[int] = []
    counts = {"cycles": 0, "errors": 0}
    first_error: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        try:
            storage = optuna.storages.GrpcStorageProxy(host="127.0.0.1", port=port)
            s = optuna.load_study(study_name=study, storage=storage, sampler=optuna.samplers.RandomSampler())
        except Exception as exc:
            with lock:
                counts["errors"] += 1
                first_error.append(repr(exc)[:200])
            return
        go.wait()
        deadline = deadline_box.value
        mine: list[float] = []
        while time.time() < deadline:
            try:
                t0 = time.perf_counter()
                trial = s.ask()
                trial.suggest_float("x", 0, 1)
                trial.suggest_int("k", 1, 9)
                mine.append(time.perf_counter() - t0)
                with lock:
                    granted.append(trial._trial_id)
                for k in range(FOLDS):
                    t0 = time.perf_counter()
                    trial.report(0.1 * k, k)
                    mine.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                s.tell(trial, 0.1)
                mine.append(time.perf_counter() - t0)
                if time.time() <= deadline:
                    with lock:
                        counts["cycles"] += 1
            except Exception as exc:
                with lock:
                    counts["errors"] += 1
                    first_error.append(repr(exc)[:200])
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((counts["cycles"], lat, counts["errors"], granted, first_error[0] if first_error else ""))


def run_optuna(db: str, backend: str, n: int, seconds: float, loaders: int = 8) -> Result:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage_url = db.replace("postgresql://", "postgresql+psycopg://")
    study = f"bench-{uuid.uuid4().hex[:8]}"
    optuna.create_study(study_name=study, storage=storage_url)
    port = _free_port()
    proxy = subprocess.Popen([sys.executable, "-c", _PROXY, storage_url, str(port)])
    try:
        _wait_port(port, proxy)
        procs = min(loaders, n)
        shares = [len(range(n)[k::procs]) for k in range(procs)]
        return _drive("optuna", backend, n, seconds, _optuna_loader, [(port, study, w) for w in shares])
    finally:
        proxy.terminate()
        proxy.wait(timeout=60)


def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"the Optuna proxy exited with {proc.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit("the Optuna proxy did not start")


# -- shared driver ---------------------------------------------------------------------


def _drive(system: str, backend: str, n: int, seconds: float, target: Any, args: list[tuple[Any, ...]]) -> Result:
    """One process per entry of ``args``, each running ``target(*entry, go, deadline, out)``."""
    ctx = mp.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    deadline_box = ctx.Value("d", 0.0)
    procs = [ctx.Process(target=target, args=(*a, go, deadline_box, out)) for a in args]
    for p in procs:
        p.start()
    time.sleep(min(3 + len(procs) * 0.5 + n * 0.02, 60))  # let every worker import and load its study
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
    return Result(
        system, backend, n, cycles, min(elapsed, seconds), lat, errors, sum(1 for c in ids.values() if c > 1), first
    )


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
    ap.add_argument(
        "--replicas", default="1", help="comma-separated server counts, each on its own port (PostgreSQL only)"
    )
    ap.add_argument(
        "--processes",
        default="1",
        help="comma-separated serve --processes counts: gRPC processes "
        "sharing one server's port (PostgreSQL only; not the --baseline-src server)",
    )
    ap.add_argument("--rate", type=float, default=0.0, help="offered cycles/s in all (0: as fast as answered)")
    ap.add_argument("--epochs", type=int, default=0, help="intermediate reports per fold")
    ap.add_argument("--folds", type=int, default=FOLDS, help="folds per trial (hpcopt rows)")
    ap.add_argument("--loaders", type=int, default=1, help="processes running the simulated agents")
    ap.add_argument("--grpc-workers", type=int, default=0, help="passed to serve (0: its default)")
    ap.add_argument("--db-pool", type=int, default=0, help="passed to serve (0: its default, 16)")
    ap.add_argument("--baseline-src", default="", help="a checkout whose server also runs, interleaved")
    ap.add_argument("--reps", type=int, default=1, help="runs per configuration, interleaved")
    ap.add_argument("--no-peer", action="store_true", help="skip the Optuna rows")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="hpcopt-bench-"))
    print(
        f"{os.cpu_count()} cores; {args.seconds:g} s per row; rate {args.rate or 'closed loop'}; "
        f"{args.folds} folds x {args.epochs} epochs; loaders {args.loaders}",
        flush=True,
    )
    rows: list[tuple[list[Result], list[Result]]] = []
    srcs = [""] + ([args.baseline_src] if args.baseline_src else [])
    pool = ["--db-pool", str(args.db_pool)] if args.db_pool else []
    try:
        for backend in args.backends.split(","):
            for n in (int(x) for x in args.agents.split(",")):
                pg = backend == "postgresql"
                counts = [int(r) for r in args.replicas.split(",")] if pg else [1]
                procs = [int(p) for p in args.processes.split(",")] if pg else [1]
                configs = [(r, p, src) for r in counts for p in procs for src in srcs if p == 1 or not src]
                runs: dict[tuple[int, int, str], list[Result]] = {c: [] for c in configs}
                peers: list[Result] = []
                for _ in range(args.reps):
                    for r, p, src in configs:
                        db, drop = _fresh_db(backend, tmp)
                        try:
                            runs[(r, p, src)].append(
                                run_hpcopt(
                                    db,
                                    backend,
                                    n,
                                    args.seconds,
                                    replicas=r,
                                    rate=args.rate,
                                    epochs=args.epochs,
                                    loaders=args.loaders,
                                    src=src,
                                    workers=args.grpc_workers,
                                    folds=args.folds,
                                    extra=None if src else pool,
                                    processes=p,
                                )
                            )
                        finally:
                            drop()
                    if not args.no_peer:
                        db, drop = _fresh_db(backend, tmp)
                        try:
                            peers.append(
                                run_optuna(
                                    db.replace("postgresql+psycopg://", "postgresql://"), backend, n, args.seconds
                                )
                            )
                        finally:
                            drop()
                for c in configs:
                    rows.append((runs[c], peers))
                    _print_row(runs[c], peers, header=len(rows) == 1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        args.json.write_text(
            json.dumps(
                [[vars(r) | {"latencies": None, "by_rpc": None} for r in ours + peer] for ours, peer in rows], indent=1
            )
        )
    for ours, peer in rows:
        for res in ours + peer:
            if res.first_error:
                print(f"first error, {res.system} {res.backend} n={res.agents} R={res.replicas}: {res.first_error}")
    return 0


def _med(xs: list[float], fmt: str, spread: bool) -> str:
    m = statistics.median(xs)
    if not spread or len(xs) < 2:
        return format(m, fmt)
    return f"{format(m, fmt)} ({format(min(xs), fmt)}-{format(max(xs), fmt)})"


def _print_row(ours: list[Result], peers: list[Result], header: bool) -> None:
    if header:
        print(
            f"{'system':<14} {'backend':<10} {'agents':>6} {'R':>2} {'P':>2} | {'cyc/s':>16} | "
            f"{'acq/cpl p50':>11} {'p99 ms':>8} | {'hb/rep p50':>10} {'p99 ms':>8} | {'srv ms/rpc':>10} "
            f"{'pg ms/rpc':>9} | {'errors':>6} {'dupes':>5} | {'optuna cyc/s':>12} {'ratio':>6}"
        )
        print("-" * 153)
    first = ours[0]
    spread = len(ours) > 1
    rate = _med([r.rate for r in ours], ".1f", spread)

    def p(q: float, methods: tuple[str, ...]) -> str:
        return _med([r.pct(q, methods) for r in ours], ".1f", False)

    line = (
        f"{first.system:<14} {first.backend:<10} {first.agents:>6} {first.replicas:>2} {first.processes:>2} | "
        f"{rate:>16} | "
        f"{p(0.5, SLOW):>11} {p(0.99, SLOW):>8} | {p(0.5, FAST):>10} {p(0.99, FAST):>8} | "
        f"{_med([r.cpu_per_call(r.server_cpu) for r in ours], '.2f', False):>10} "
        f"{_med([r.cpu_per_call(r.pg_cpu) for r in ours], '.2f', False):>9} | "
        f"{sum(r.errors for r in ours):>6} {sum(r.duplicates for r in ours):>5} | "
    )
    if not peers:
        line += f"{'-':>12} {'-':>6}"
    else:
        peer = statistics.median(r.rate for r in peers)
        ratio = statistics.median(r.rate for r in ours) / peer if peer else float("inf")
        line += f"{_med([r.rate for r in peers], '.1f', False):>12} {ratio:>5.1f}x"
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
