"""Agents and the gRPC health check while a hostile client holds half-open gRPC calls
(HEADERS without END_STREAM: a request that never arrives), or calls whose response it
never lets through (a zero or tiny HTTP/2 window):

    python benchmarks/half_open.py                         # this checkout
    python benchmarks/half_open.py --baseline /tmp/base    # also a checkout to compare
                                                          # (e.g. `git worktree add /tmp/base REV`)

Scenarios (``tests/helpers/swarm.py halfopen``, its own process), each with auth off and on:

- ``64 x 1``: one connection, 64 calls to AgentService/Heartbeat, held;
- ``1000 x 1``: one connection, 1,000 calls;
- ``1000 x 16``: 16 connections of 63 calls each (about 1,000), held;
- ``30 x 1``: one connection, 30 calls (under the server-wide cap on waiting calls);
- ``stubborn``: 16 connections of 63 calls, each reopened (with its calls) 0.2 s after
  the server closes it;
- ``window 0``, ``window 1``, ``opens once``: 1,000 connections (``tests/helpers/swarm.py
  nowindow``) that advertise a window of 0 bytes, of 1 byte, or of 0 and then one
  WINDOW_UPDATE of 3 bytes, each with one complete Health/Check call, each reopened
  0.05 s after the server closes it; ``window 0, own address``: the same from
  127.0.0.2, an address of its own (the agents are on 127.0.0.1). Here each health
  check opens a channel of its own, as a monitor or a starting agent does.

A server with a 6 s lease runs an agent that holds a trial and heartbeats every 1 s
(5 s deadline, as the real agent's), and a prober that calls grpc.health.v1 Check every
0.2 s on its own channel (5 s deadline), for ``--seconds`` while the swarm holds its
calls. Rows: health checks answered, their p50/p99/worst latency, heartbeats answered,
whether the agent's lease survived (its trial still RUNNING at attempt 1), the
connections the server closed and the server's CPU seconds meanwhile. Nothing is
asserted: this prints what it saw.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcopt import AgentClient, ApiError, Client  # noqa: E402 - after the path
from tests.helpers.process import ServerProcess  # noqa: E402
from tests.helpers.specs import make_spec  # noqa: E402
from tests.helpers.swarm import heartbeating, probe_health, swarming  # noqa: E402

_NOWINDOW = ["--reconnect", "0.05"]
#: scenario: the swarm's kind, its connections, its arguments
SCENARIOS: dict[str, tuple[str, int, list[str]]] = {
    "64 x 1": ("halfopen", 1, ["--calls", "64"]),
    "1000 x 1": ("halfopen", 1, ["--calls", "1000"]),
    "1000 x 16": ("halfopen", 16, ["--calls", "63"]),
    "30 x 1": ("halfopen", 1, ["--calls", "30"]),
    "stubborn": ("halfopen", 16, ["--calls", "63", "--reconnect", "0.2"]),
    "window 0": ("nowindow", 1000, ["--window", "0", *_NOWINDOW]),
    "window 1": ("nowindow", 1000, ["--window", "1", *_NOWINDOW]),
    "opens once": ("nowindow", 1000, ["--window", "0", "--open-once", "3", *_NOWINDOW]),
    "window 0, own address": ("nowindow", 1000, ["--window", "0", "--source", "127.0.0.2", *_NOWINDOW]),
}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _trial_after(target: str, token: str | None, trial_id: int) -> Any:
    """The trial, read once the swarm has gone: a server that it locked up may take a few
    tries to answer again."""
    for attempt in range(10):
        try:
            with Client(target, token=token, timeout=20) as c:
                return c.get_trial(trial_id)
        except ApiError:
            if attempt == 9:
                raise
            time.sleep(1)


def run(checkout: Path, scenario: str, auth: bool, seconds: float) -> dict[str, Any]:
    kind, conns, extra = SCENARIOS[scenario]
    env = {"PYTHONPATH": f"{checkout}/client:{checkout}/server"}
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{tmp}/halfopen.db"
        token = None
        if auth:  # a token turns auth on
            cmd = [sys.executable, "-m", "hpcopt_server.cli", "token", "create", "--db", db, "--name", "probe"]
            made = subprocess.run([*cmd, "--scope", "admin"], env={**os.environ, **env}, capture_output=True, text=True)
            token = made.stdout.strip()
        with ServerProcess(db, "--lease-seconds", "6", "--reap-interval", "1", env=env) as server:
            with Client(server.grpc_target, token=token, timeout=20) as c:
                campaign = c.create_campaign(make_spec(name="half-open", folds=1)).id
            agent = AgentClient(server.grpc_target, token=token, timeout=5)
            agent_id = agent.register(host="victim").agent_id
            lease = agent.acquire(agent_id, campaign).lease
            assert lease is not None
            assert server.proc is not None
            cpu0 = _cpu_seconds(server.proc.pid)
            with heartbeating(agent, lease) as beats, swarming(kind, server.grpc_port, conns, *extra) as swarm:
                health = probe_health(server.grpc_target, seconds, token, new_channel=kind == "nowindow")
            cpu = _cpu_seconds(server.proc.pid) - cpu0
            trial = _trial_after(server.grpc_target, token, lease.trial_id)
            agent.close()
    return {
        "health": health,
        "beats": beats,
        "lease_kept": str(trial.state) == "RUNNING" and trial.attempt == 1,
        "closed": swarm.closed_by_server,
        "cpu": cpu,
    }


def fmt(x: float) -> str:
    return ">5" if x == float("inf") else f"{x:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, help="another checkout to compare against")
    ap.add_argument("--seconds", type=float, default=15.0, help="how long each scenario is probed")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--scenario", action="append", choices=list(SCENARIOS), help="default: all")
    args = ap.parse_args()
    checkouts = [("this", ROOT)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    rows: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        for scenario in args.scenario or list(SCENARIOS):
            for auth in (False, True):
                for name, path in checkouts:
                    mode = "on" if auth else "off"
                    print(f"round {r + 1}/{args.rounds}: {scenario}, auth {mode}, {name} ...", file=sys.stderr)
                    rows.setdefault((scenario, mode, name), []).append(run(path, scenario, auth, args.seconds))
    print(f"\nhostile gRPC calls held for {args.seconds:.0f} s; lease 6 s; {args.rounds} round(s)\n")
    print(
        f"{'scenario':<21} {'auth':<4} {'checkout':<9} {'health ok':>9} {'p50 s':>6} {'p99 s':>6} "
        f"{'worst s':>7} {'beats ok':>9} {'lease kept':>10} {'closed':>6} {'cpu s':>6}"
    )
    for (scenario, mode, name), results in rows.items():
        lat = sorted(x for res in results for x in res["health"])
        ok = sum(x != float("inf") for x in lat)
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        beats_ok = sum(res["beats"].ok for res in results)
        beats = beats_ok + sum(res["beats"].failed for res in results)
        kept = sum(res["lease_kept"] for res in results)
        closed = ",".join(str(res["closed"]) for res in results)
        cpu = ",".join(f"{res['cpu']:.1f}" for res in results)
        print(
            f"{scenario:<21} {mode:<4} {name:<9} {f'{ok}/{len(lat)}':>9} {fmt(statistics.median(lat)):>6} "
            f"{fmt(p99):>6} {fmt(lat[-1]):>7} {f'{beats_ok}/{beats}':>9} {f'{kept}/{len(results)}':>10} "
            f"{closed:>6} {cpu:>6}"
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
