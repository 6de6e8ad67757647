"""Health checks under a flood of slow-header HTTP clients, this tree against another
checkout (the peer: the main a user runs today), interleaved round by round.

A server under ``ulimit -n 1024``; 1,100 HTTP clients that send their headers a byte
every 2 s and reopen whatever the server closes (``tests/helpers/swarm.py slow --reconnect
0.05``). A probe asks ``/healthz`` every 0.3 s on a new connection: on the REST port, and
on ``--health-port`` where the checkout has one. Printed: how many answered, the median,
the 90th percentile and the worst latency, and how many took over a second.

    python benchmarks/slow_headers.py --baseline-src /tmp/base --rounds 3
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402 - after the path

from tests.helpers.live import free_port  # noqa: E402
from tests.helpers.process import ServerProcess  # noqa: E402
from tests.helpers.swarm import swarming  # noqa: E402


def _probe(url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        try:
            ok = httpx.get(url, timeout=10).status_code == 200
        except httpx.HTTPError:
            ok = False
        out.append(time.perf_counter() - t0 if ok else float("inf"))
        time.sleep(0.3)
    return out


def run(checkout: Path, probes: int, health_port: bool) -> dict[str, list[float]]:
    env = {"PYTHONPATH": f"{checkout}/client:{checkout}/server"}
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{tmp}/slow.db"
        subprocess.run(
            [sys.executable, "-m", "hpcopt_server.cli", "db", "upgrade", "--db", db],
            env={**os.environ, **env},
            check=True,
            capture_output=True,
        )
        port = free_port()
        extra = ["--health-port", str(port)] if health_port else []
        server = ServerProcess(db, "--header-timeout", "120", *extra, nofile=1024, env=env)
        with server, swarming("slow", server.port, 1100, "--reconnect", "0.05"):
            out = {"REST port": _probe(server.http_url + "/healthz", probes)}
            if health_port:
                out["health port"] = _probe(f"http://127.0.0.1:{port}/healthz", probes)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline-src", type=Path, required=True, help="the peer checkout (git worktree of main)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--probes", type=int, default=30, help="health probes per port and round")
    args = ap.parse_args()
    rows: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for name, path, health in (("baseline", args.baseline_src, False), ("this tree", ROOT, True)):
            print(f"round {r + 1}/{args.rounds}: {name} ...", file=sys.stderr, flush=True)
            for where, lat in run(path, args.probes, health).items():
                rows.setdefault((name, where), []).extend(lat)
    print(f"{'checkout':<10} {'probed':<12} {'answered':>9} {'p50 s':>6} {'p90 s':>6} {'max s':>6} {'> 1 s':>6}")
    for (name, where), lat in rows.items():
        lat.sort()
        ok = [x for x in lat if x != float("inf")]
        p90 = lat[int(0.9 * (len(lat) - 1))]
        print(
            f"{name:<10} {where:<12} {f'{len(ok)}/{len(lat)}':>9} {statistics.median(lat):>6.3f} {p90:>6.3f} "
            f"{lat[-1]:>6.3f} {sum(x > 1 for x in lat):>6}"
        )


if __name__ == "__main__":
    main()
