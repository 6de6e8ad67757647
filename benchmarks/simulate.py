"""A site's worth of agents against real server processes on PostgreSQL.

Thousands of simulated agents (asyncio coroutines, one gRPC connection each) behave as
``hpcopt_agent`` does, on an accelerated clock: a trial's duration is drawn from a
log-normal distribution; the agent reports every epoch of every fold, finishes each
fold, heartbeats when lease/4 (the period the server gives it) passes without a report,
and completes the trial; some trials are preempted (released as PREEMPTED, resumed elsewhere) and some
agents crash (go silent, so the lease must expire; they come back as a new agent).

    python benchmarks/simulate.py                    # 1,000 agents, an empty bo campaign, 2.5 simulated hours
    python benchmarks/simulate.py --agents 2000 --replicas 2 --speedup 20 --duration 300
    python benchmarks/simulate.py --prefill 98000 --algorithm random   # a campaign near its 100,000th trial

``--speedup A`` runs simulated time A times faster than real time: durations, the lease
(so the heartbeat period) and the reaper's interval are all divided by A, so the request
rates are A times those of the real site. The campaign starts empty and uses ``bo``
(``--algorithm``), so the run pays for the optimizer as its history grows;
``--prefill N`` instead first writes N finished trials (folds, curves, events) straight
into the database, to start from a campaign of that size. The run goes on until the
campaign's budget is used or ``--duration`` real seconds pass.

Prints the request rate and latency percentiles of each RPC, the trials completed, the
crashes and preemptions injected, lease expiries (each must be a crashed agent's:
"unwarranted" must be 0), calls refused to live agents, duplicate grants (must be 0),
server and PostgreSQL CPU per call (PostgreSQL: the run database's backends and those
that ended during the run, not other databases' live sessions), the database's size, what that makes
one server core carry at the real (unaccelerated) rates, and each RPC's latency by
phase: the first minute (every agent asking for its first trial at once), then each
simulated hour, then the last 10 s. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing as mp
import os
import random
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from server_throughput import PG_ADMIN, _post, start_servers

# -- the simulated agents (in loader processes) --------------------------------------


def _loader(
    targets: list[str], cid: int, ids: list[int], plan: dict[str, Any], ready: Any, go: Any, stop_box: Any, out: Any
) -> None:
    import asyncio

    import grpc
    from aio_agents import Agent, Recorder

    from hpcopt.v1 import agent_pb2, common_pb2

    class Interrupted(Exception):
        """The agent's node crashes or is preempted here, or the run ends."""

    rec = Recorder()
    A = plan["speedup"]
    granted_status = agent_pb2.AcquireResponse.STATUS_GRANTED
    done_status = agent_pb2.AcquireResponse.STATUS_DONE
    crashed: list[tuple[int, int]] = []  # (trial id, attempt) whose agent went silent
    refused_live = 0

    async def heartbeats(agent: Agent, lease: Any, period: float, stop: asyncio.Event, renewed: list[float]) -> None:
        """As hpcopt_agent: a heartbeat once ``period`` passes with no call renewing the lease."""
        nonlocal refused_live
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(0.0, renewed[0] + period - time.monotonic()))
                return
            except TimeoutError:
                pass
            if time.monotonic() < renewed[0] + period:
                continue  # a report renewed it meanwhile
            sent = time.monotonic()
            try:
                await agent.heartbeat(lease)
                renewed[0] = max(renewed[0], sent)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                    refused_live += 1
                return

    async def one(i: int) -> None:
        nonlocal refused_live
        rng = random.Random(plan["seed"] * 100_003 + i)
        agent = Agent(targets[i % len(targets)], rec)
        reg = await agent.register(cid, f"sim{i:05d}")
        period = reg.heartbeat_seconds
        ready_local.append(i)
        await go_event.wait()
        while time.time() < stop_box.value:
            try:
                resp = await agent.acquire(cid)
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.5)
                continue
            if resp.status == done_status:
                break
            if resp.status != granted_status:
                await asyncio.sleep(resp.retry_after_seconds or 1.0)
                continue
            lease = agent.lease(resp)
            folds, epochs = plan["folds"], plan["epochs"]
            todo = [k for k in range(folds) if not any(f.index == k and f.finished for f in resp.trial.folds)]
            duration = rng.lognormvariate(math.log(plan["median_s"]), plan["sigma"]) / A
            epoch = duration / (folds * epochs)
            steps = len(todo) * epochs
            fate = rng.random()
            cut = rng.randrange(steps) if steps else 0
            crash = fate < plan["crash"]
            preempt = not crash and fate < plan["crash"] + plan["preempt"]
            stop = asyncio.Event()
            renewed = [time.monotonic()]
            beat = asyncio.create_task(heartbeats(agent, lease, period, stop, renewed))
            n = 0
            ended = False
            try:
                for k in todo:
                    for e in range(epochs):
                        await asyncio.sleep(epoch)
                        if ((crash or preempt) and n == cut) or time.time() >= stop_box.value:
                            raise Interrupted
                        n += 1
                        sent = time.monotonic()
                        r = await agent.report(lease, k, e, 1.0 / (e + 1) + rng.random() * 0.01)
                        renewed[0] = max(renewed[0], sent)
                        if r.action != agent_pb2.HeartbeatResponse.ACTION_CONTINUE:
                            ended = True
                            break
                    if ended:
                        break
                    sent = time.monotonic()
                    await agent.report_fold(lease, k, rng.random())
                    await agent.heartbeat(lease)  # the agent asks whether the trial goes on
                    renewed[0] = max(renewed[0], sent)
                stop.set()  # as the agent: the heartbeat thread ends before the trial does
                await beat
                if not ended:
                    await agent.complete(lease)
                    rec.cycles += 1
            except Interrupted:
                if time.time() >= stop_box.value:
                    break  # the run is over: deregister, which requeues the trial
                if crash:  # silent from here: the lease must run out; the node comes back
                    stop.set()
                    crashed.append((resp.trial.id, resp.trial.attempt))
                    rec.counters["crashes"] += 1
                    await beat
                    await agent.close()
                    await asyncio.sleep(plan["restart_s"] / A)
                    agent = Agent(targets[i % len(targets)], rec)
                    reg = await agent.register(cid, f"sim{i:05d}")
                    continue
                rec.counters["preemptions"] += 1
                stop.set()  # as the agent: no heartbeat races the release
                await beat
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await agent.release(lease, common_pb2.TRIAL_STATE_PREEMPTED, "walltime")
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                    refused_live += 1
            finally:
                stop.set()
                await beat
        with contextlib.suppress(grpc.aio.AioRpcError):
            await agent.call("Deregister", agent_pb2.DeregisterRequest(agent_id=agent.agent_id))
        await agent.close()

    ready_local: list[int] = []
    go_event = asyncio.Event()

    async def main() -> None:
        tasks = [asyncio.create_task(one(i)) for i in ids]
        while len(ready_local) < len(ids):
            await asyncio.sleep(0.1)
        rec.latency.clear()
        ready.put(len(ids))
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        # The steady state: after the first minute (every agent asking for its first
        # trial at once) and before the last 10 s (every agent leaving at once).
        rec.window = (time.time() + plan["warmup_s"], stop_box.value - 10.0)
        start, hour, end = time.time(), 3600.0 / plan["speedup"], stop_box.value - 10.0
        rec.phases, mark = [start], min(start + plan["warmup_s"], end)
        while mark < end:  # the first minute, then each simulated hour after it
            rec.phases.append(mark)
            mark += hour
        rec.phases.append(end)
        go_event.set()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    dump = rec.dump()
    dump["crashed"] = crashed
    dump["refused_live"] = refused_live
    out.put(dump)


# -- the campaign's history, written straight into the database --------------------


def prefill(db: str, cid: int, n: int, folds: int, epochs: int) -> None:
    """n COMPLETED trials with their folds, curves and events, by COPY."""
    import psycopg

    if n <= 0:
        return
    t0 = time.time()
    now = time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime())
    rng = random.Random(1)
    with psycopg.connect(db.replace("postgresql+psycopg://", "postgresql://")) as conn:
        first = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM trials").fetchone()[0]  # type: ignore[index]
        with conn.cursor().copy(
            "COPY trials (id, campaign_id, number, state, attempt, params, value, value_std, agent_id, lease_id, "
            "error, finish_seq, created_at, started_at, finished_at) FROM STDIN"
        ) as cp:
            for j in range(n):
                params = json.dumps({"x": rng.random(), "k": rng.randint(1, 9)})
                cp.write_row(
                    (
                        first + j,
                        cid,
                        j,
                        "COMPLETED",
                        1,
                        params,
                        rng.random(),
                        0.01,
                        "prefill",
                        "",
                        "",
                        j + 1,
                        now,
                        now,
                        now,
                    )
                )
        with conn.cursor().copy(
            "COPY folds (trial_id, fold, finished, value, metrics, checkpoint_uri, attempt, updated_at) FROM STDIN"
        ) as cp:
            for j in range(n):
                for k in range(folds):
                    cp.write_row((first + j, k, True, rng.random(), "{}", "", 1, now))
        with conn.cursor().copy("COPY curves (trial_id, fold, step, value) FROM STDIN") as cp:
            for j in range(n):
                for k in range(folds):
                    for e in range(epochs):
                        cp.write_row((first + j, k, e, 1.0 / (e + 1)))
        with conn.cursor().copy("COPY trial_events (trial_id, attempt, kind, agent_id, reason, at) FROM STDIN") as cp:
            for j in range(n):
                cp.write_row((first + j, 1, "acquired", "prefill", "", now))
                cp.write_row((first + j, 1, "completed", "prefill", "", now))
        conn.execute("UPDATE campaigns SET next_number = %s, finished_count = %s WHERE id = %s", (n, n, cid))
        conn.execute("SELECT setval(pg_get_serial_sequence('trials', 'id'), %s)", (first + n,))
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")
        with contextlib.suppress(psycopg.Error):  # flush it now, not as a checkpoint during the run
            conn.execute("CHECKPOINT")
    print(f"prefilled {n:,} completed trials in {time.time() - t0:.0f} s", flush=True)


# -- the run ------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--replicas", type=int, default=1, help="server processes on the one database")
    ap.add_argument("--trials", type=int, default=100_000, help="the campaign's budget")
    ap.add_argument("--prefill", type=int, default=0, help="finished trials written before the run")
    ap.add_argument("--algorithm", default="bo", help="the campaign's optimizer")
    ap.add_argument("--duration", type=float, default=900.0, help="real seconds at most")
    ap.add_argument("--speedup", type=float, default=10.0, help="simulated seconds per real second")
    ap.add_argument("--median-minutes", type=float, default=10.0, help="median simulated trial duration")
    ap.add_argument("--sigma", type=float, default=0.6, help="log-normal spread of trial durations")
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=5, help="epochs (intermediate reports) per fold")
    ap.add_argument("--lease", type=float, default=60.0, help="simulated lease seconds (heartbeat: a quarter)")
    ap.add_argument("--crash", type=float, default=0.01, help="share of trials whose agent crashes")
    ap.add_argument("--preempt", type=float, default=0.02, help="share of trials preempted")
    ap.add_argument("--restart-minutes", type=float, default=2.0, help="simulated time a crashed agent is away")
    ap.add_argument("--loaders", type=int, default=2, help="processes running the agents")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--db-pool", type=int, default=0, help="serve --db-pool (0: its default)")
    args = ap.parse_args()

    import psycopg
    from aio_agents import cpu_seconds, database_cpu, database_cpu_used

    A = args.speedup
    name = f"hpcopt_sim_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    db = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + "/" + name
    print(
        f"{os.cpu_count()} cores; {args.agents} agents; {args.replicas} server process(es); speedup {A:g}; "
        f"trials {args.trials:,} (prefill {args.prefill:,}); median trial {args.median_minutes:g} min; "
        f"{args.folds} folds x {args.epochs} epochs; lease {args.lease:g} s",
        flush=True,
    )
    extra = ["--lease-seconds", str(args.lease / A), "--reap-interval", str(max(0.05, 5.0 / A))]
    if args.db_pool:
        extra += ["--db-pool", str(args.db_pool)]
    servers = start_servers(db, 1, extra=extra)
    try:
        spec = {
            "name": "simulated-site",
            "objective": {"metric": "loss"},
            "space": {"x": {"type": "real", "low": 0, "high": 1}, "k": {"type": "int", "low": 1, "high": 9}},
            "algorithm": {"name": args.algorithm, "seed": args.seed},
            "budget": {"max_trials": args.trials, "max_parallel": args.agents},
            "folds": args.folds,
            "training": {"task": "simulated:Task", "epochs": args.epochs},
            "max_attempts": 10,
        }
        cid = _post(servers[0][1] + "/api/v1/campaigns", spec)["id"]
        prefill(db, cid, min(args.prefill, args.trials), args.folds, args.epochs)
        servers += start_servers(db, args.replicas - 1, extra=extra)
        size0 = _db_size(db)

        plan = {
            "speedup": A,
            "folds": args.folds,
            "epochs": args.epochs,
            "median_s": args.median_minutes * 60,
            "sigma": args.sigma,
            "crash": args.crash,
            "preempt": args.preempt,
            "restart_s": args.restart_minutes * 60,
            "seed": args.seed,
            "warmup_s": 60.0,
        }
        ctx = mp.get_context("fork")
        ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
        stop_box = ctx.Value("d", time.time() + 10**6)
        targets = [t for _, _, t in servers]
        procs = [
            ctx.Process(
                target=_loader,
                args=(targets, cid, list(range(args.agents))[k :: args.loaders], plan, ready, go, stop_box, out),
            )
            for k in range(args.loaders)
        ]
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=600)
        print(f"{args.agents} agents registered; running for at most {args.duration:g} s", flush=True)
        pg0 = database_cpu(_libpq(db))
        cpu0 = sum(cpu_seconds(p.pid) for p, _, _ in servers)
        t0 = time.time()
        stop_box.value = t0 + args.duration
        go.set()
        finished0 = _finished(db, cid)
        while time.time() < stop_box.value:
            time.sleep(min(30.0, max(0.0, stop_box.value - time.time())))
            done = _finished(db, cid)
            print(
                f"  {time.time() - t0:6.0f} s: {done - finished0:,} trials finished in the run "
                f"({done:,} of {args.trials:,})",
                flush=True,
            )
            if done >= args.trials:
                stop_box.value = time.time()
        elapsed = time.time() - t0
        cpu1 = sum(cpu_seconds(p.pid) for p, _, _ in servers)
        pg_cpu = database_cpu_used(pg0, database_cpu(_libpq(db)))
        from aio_agents import Recorder

        rec = Recorder()
        crashed: set[tuple[int, int]] = set()
        refused = 0
        for _ in procs:
            part = out.get(timeout=900)
            rec.merge(part)
            crashed.update(tuple(c) for c in part["crashed"])
            refused += part["refused_live"]
        for p in procs:
            p.join(timeout=60)
        expiries = _expiries(db, t0)
        size1 = _db_size(db)
        finished1 = _finished(db, cid)
    finally:
        for proc, _, _ in servers:
            proc.terminate()
        for proc, _, _ in servers:
            proc.wait(timeout=60)
    _report(
        args,
        rec,
        elapsed,
        cpu1 - cpu0,
        pg_cpu,
        crashed,
        refused,
        expiries,
        finished1 - finished0,
        finished1,
        size0,
        size1,
    )
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return 0


def _libpq(db: str) -> str:
    return db.replace("postgresql+psycopg://", "postgresql://")


def _finished(db: str, cid: int) -> int:
    import psycopg

    with psycopg.connect(_libpq(db)) as conn:
        row = conn.execute("SELECT finished_count FROM campaigns WHERE id = %s", (cid,)).fetchone()
        return int(row[0]) if row else 0


def _db_size(db: str) -> int:
    import psycopg

    with psycopg.connect(_libpq(db)) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(row[0]) if row else 0


def _expiries(db: str, since: float) -> list[tuple[int, int, str]]:
    """(trial id, attempt, reason) of every lease that ran out during the run."""
    import psycopg

    with psycopg.connect(_libpq(db)) as conn:
        rows = conn.execute(
            "SELECT trial_id, attempt, reason FROM trial_events "
            "WHERE kind = 'lease_expired' AND at >= to_timestamp(%s)",
            (since,),
        ).fetchall()
    return [(int(a), int(b), str(c)) for a, b, c in rows]


def _phases(args: Any, rec: Any) -> None:
    """p50 / p99 (ms) of each RPC in each phase of the run."""
    from aio_agents import pct

    if len(rec.phases) < 2:
        return
    methods = ["Acquire", "Heartbeat", "ReportIntermediate", "ReportFold", "Complete"]
    n = len(rec.phases)
    names = ["first minute", *(f"sim. hour {i}" for i in range(1, n - 1)), "last 10 s"]
    print()
    print(f"{'phase':<14} " + " ".join(f"{m[:12]:>19}" for m in methods) + "   (p50 / p99 ms, calls)")
    for i, name in enumerate(names):
        row = rec.by_phase.get(i, {})
        cells = []
        for m in methods:
            xs = row.get(m, [])
            cells.append(f"{pct(xs, 0.5):>6.1f}/{pct(xs, 0.99):>6.0f} {len(xs):>5}" if xs else f"{'-':>19}")
        print(f"{name:<14} " + " ".join(f"{c:>19}" for c in cells))


def _report(
    args: Any,
    rec: Any,
    elapsed: float,
    server_cpu: float,
    pg_cpu: float,
    crashed: set[tuple[int, int]],
    refused: int,
    expiries: list[tuple[int, int, str]],
    run_trials: int,
    total: int,
    size0: int,
    size1: int,
) -> None:
    from aio_agents import pct

    calls = rec.calls()
    print()
    print(f"{'':<20} {'':>9} {'':>8} {'whole run':^35} | {'steady (after 60 s, before the end)':^35}")
    print(
        f"{'rpc':<20} {'calls':>9} {'per s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8} | "
        f"{'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8}"
    )
    print("-" * 123)
    for method in sorted(rec.latency, key=lambda m: -len(rec.latency[m])):
        xs, ys = rec.latency[method], rec.steady.get(method, [])
        steady = (
            f"{pct(ys, 0.5):>8.1f} {pct(ys, 0.95):>8.1f} {pct(ys, 0.99):>8.1f} {max(ys) * 1000:>8.1f}"
            if ys
            else f"{'-':>8} {'-':>8} {'-':>8} {'-':>8}"
        )
        print(
            f"{method:<20} {len(xs):>9,} {len(xs) / elapsed:>8.1f} {pct(xs, 0.5):>8.1f} {pct(xs, 0.95):>8.1f} "
            f"{pct(xs, 0.99):>8.1f} {max(xs) * 1000:>8.1f} | {steady}"
        )
    print("-" * 123)
    print(f"{'all':<20} {calls:>9,} {calls / elapsed:>8.1f}")
    _phases(args, rec)
    exited = [e for e in expiries if e[2] == "the agent exited"]
    lost = [e for e in expiries if e[2] != "the agent exited"]
    unwarranted = [e for e in lost if (e[0], e[1]) not in crashed]
    grants = Counter(tuple(g) for g in rec.granted)  # (trial id, attempt): one agent each
    dupes = sum(1 for c in grants.values() if c > 1)
    sim_hours = elapsed * args.speedup / 3600
    print()
    print(
        f"run: {elapsed:.0f} s real = {sim_hours:.1f} h simulated; {run_trials:,} trials finished in the run "
        f"({run_trials / elapsed:.1f}/s), the campaign at {total:,} of {args.trials:,}"
    )
    print(f"injected: {rec.counters.get('crashes', 0)} crashes, {rec.counters.get('preemptions', 0)} preemptions")
    print(
        f"lease expiries: {len(lost)} (crashed agents' {len(lost) - len(unwarranted)}, "
        f"unwarranted {len(unwarranted)}); {len(exited)} requeued as their agent exited at the end"
    )
    print(
        f"calls refused to live agents (lost lease): {refused}; duplicate grants: {dupes}; "
        f"errors: {dict(rec.errors) or 0}"
    )
    per_call = 1000 * server_cpu / calls if calls else float("nan")
    pg_per_call = 1000 * pg_cpu / calls if calls else float("nan")
    busy = f"server processes busy {100 * server_cpu / elapsed:.0f}% of a core"
    busy += f", PostgreSQL {100 * pg_cpu / elapsed:.0f}%"
    print(f"CPU per call: server {per_call:.2f} ms, PostgreSQL {pg_per_call:.2f} ms ({busy})")
    print(
        f"database: {size0 / 2**20:.0f} MiB before the run, {size1 / 2**20:.0f} MiB after "
        f"({(size1 - size0) / max(run_trials, 1) / 1024:.1f} KiB per trial finished in the run)"
    )
    # The real site's rates: the simulated ones divided by the speedup.
    real_rate = calls / elapsed / args.speedup / args.agents
    if per_call == per_call and real_rate:
        carried = 1000 / (per_call * real_rate), 1000 / (pg_per_call * real_rate)
        print(
            f"at real (unaccelerated) rates each agent makes {real_rate:.3f} calls/s: one server core carries "
            f"~{carried[0]:,.0f} agents, one PostgreSQL core ~{carried[1]:,.0f}"
        )


if __name__ == "__main__":
    sys.exit(main())
