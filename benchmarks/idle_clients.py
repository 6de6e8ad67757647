"""/healthz and agents while a swarm of idle clients holds connections to a server
limited to 1,024 open files (``ulimit -n 1024``, soft and hard):

    python benchmarks/idle_clients.py                         # this checkout
    python benchmarks/idle_clients.py --baseline /tmp/base    # also a checkout to compare
                                                             # (e.g. `git worktree add /tmp/base REV`)

Scenarios (``tests/helpers/swarm.py``, its own process):

- ``grpc idle``: N connections that finish a gRPC channel's HTTP/2 handshake, then sit;
- ``grpc stubborn``: the same, each reopened 0.5 s after the server closes it;
- ``slow headers``: N HTTP clients sending their headers one byte every 2 s.

In each, an agent registered before the swarm arrived (``old agent``) and one that
connects during it (``new agent``) each run a trial: Acquire, ReportFold, Complete.
Then 10 /healthz probes, each on a new connection, 0.3 s apart, with a 5 s timeout.
Rows: probes answered within 1 s, median and worst probe latency, whether both agents
finished, and how many swarm connections the server closed. Rounds interleave the
checkouts; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcopt import AgentClient, Client  # noqa: E402 - after the path
from tests.helpers.process import ServerProcess  # noqa: E402
from tests.helpers.specs import make_spec  # noqa: E402
from tests.helpers.swarm import finish_one_trial, swarming  # noqa: E402

SCENARIOS = {"grpc idle": ("grpc", []), "grpc stubborn": ("grpc", ["--reconnect", "0.5"]), "slow headers": ("slow", [])}


def one_trial(agent: AgentClient, agent_id: str | None, campaign: int) -> bool:
    """Runs one trial; ``agent_id`` None registers first. False if a call failed."""
    try:
        return finish_one_trial(agent, agent_id or agent.register(host="new").agent_id, campaign) == "COMPLETED"
    except Exception as exc:  # the row says it failed
        print(f"    agent call failed: {exc}", file=sys.stderr)
        return False


def run(checkout: Path, scenario: str, n: int) -> dict[str, Any]:
    kind, extra = SCENARIOS[scenario]
    env = {"PYTHONPATH": f"{checkout}/client:{checkout}/server"}
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{tmp}/idle.db"
        with ServerProcess(db, env=env, nofile=1024) as server:
            with Client(server.grpc_target, timeout=20) as c:
                campaign = c.create_campaign(make_spec(name="idle-clients", folds=1)).id
            old = AgentClient(server.grpc_target, timeout=20)
            old_id = old.register(host="old").agent_id
            port = server.grpc_port if kind == "grpc" else server.port
            with swarming(kind, port, n, *extra) as swarm:
                time.sleep(1.0)
                old_ok = one_trial(old, old_id, campaign)
                with AgentClient(server.grpc_target, timeout=20) as new:
                    new_ok = one_trial(new, None, campaign)
                latencies = []
                for _ in range(10):
                    t0 = time.monotonic()
                    try:
                        ok = httpx.get(server.http_url + "/healthz", timeout=5).status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    latencies.append(time.monotonic() - t0 if ok else float("inf"))
                    time.sleep(0.3)
                old.close()
            closed = swarm.closed_by_server
    return {"latencies": latencies, "old": old_ok, "new": new_ok, "closed": closed}


def fmt(x: float) -> str:
    return ">5" if x == float("inf") else f"{x:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, help="another checkout to compare against")
    ap.add_argument("--clients", type=int, default=1100)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--scenario", action="append", choices=list(SCENARIOS), help="default: all")
    args = ap.parse_args()
    checkouts = [("this", ROOT)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        for scenario in args.scenario or list(SCENARIOS):
            for name, path in checkouts:
                print(f"round {r + 1}/{args.rounds}: {scenario}, {name} ...", file=sys.stderr, flush=True)
                rows.setdefault((scenario, name), []).append(run(path, scenario, args.clients))
    print(f"\n{args.clients} hostile clients, server under ulimit -n 1024; {args.rounds} round(s)\n")
    print(
        f"{'scenario':<15} {'checkout':<9} {'healthz <1 s':>12} {'median s':>9} {'worst s':>8} "
        f"{'old agent':>9} {'new agent':>9} {'swarm closed':>12}"
    )
    for (scenario, name), results in rows.items():
        lat = [x for res in results for x in res["latencies"]]
        within = sum(x < 1.0 for x in lat)
        old = sum(res["old"] for res in results)
        new = sum(res["new"] for res in results)
        closed = ",".join(str(res["closed"]) for res in results)
        print(
            f"{scenario:<15} {name:<9} {f'{within}/{len(lat)}':>12} {fmt(statistics.median(lat)):>9} "
            f"{fmt(max(lat)):>8} {f'{old}/{len(results)}':>9} {f'{new}/{len(results)}':>9} {closed:>12}"
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
