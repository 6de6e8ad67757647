"""What the costliest requests cost the server: hostile documents, the largest allowed
optimizer options, and /healthz latency while hostile requests stream in.

    python benchmarks/request_cost.py                         # this checkout, SQLite
    python benchmarks/request_cost.py --baseline /tmp/base    # also a checkout to compare
                                                             # (e.g. `git worktree add /tmp/base REV`)

Each server runs as its own process (``python -m hpcopt_server.cli serve``; a baseline
is imported from ``DIR/client:DIR/server``). Rows, interleaved over ``--reps`` rounds:

- ``alias bomb``: ~500 bytes of YAML aliases in a spec (9**8 strings expanded) to /validate;
- ``grid 10^7``: a grid spec with ``points: 10000000`` to /validate;
- ``json 100k deep``: 100,000 nested lists to POST /campaigns;
- ``acquire, BO max options``: Acquire of a BO campaign with the largest options allowed
  (``candidates`` 8192, ``polish`` 16) over 20 parameters after 40 completed trials, the
  suggestion computed under the campaign's lock; ``BO defaults`` for scale;
- ``healthz under bombs``: /healthz while another client sends alias bombs back to back.

Seconds per request (median, min, max) and the server's peak RSS. Requests time out
after ``--timeout`` seconds (shown as ">T"). Nothing is asserted: machines are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.hostile import alias_bomb  # noqa: E402 - after the path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spec(**overrides: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": "cost",
        "objective": {"metric": "loss"},
        "space": {f"x{i}": {"type": "real", "low": 0.0, "high": 1.0} for i in range(20)},
        "algorithm": {"name": "random", "seed": 1},
        "budget": {"max_trials": 1000, "max_parallel": 4},
        "training": {"task": "t:T"},
    }
    out.update(overrides)
    return out


class Server:
    def __init__(self, src: Path | None, workdir: Path):
        self.port, self.grpc_port = _free_port(), _free_port()
        env = dict(os.environ)
        if src is not None:
            env["PYTHONPATH"] = f"{src / 'client'}:{src / 'server'}"
        db = f"sqlite:///{workdir / f'{self.port}.db'}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hpcopt_server.cli",
                "serve",
                "--db",
                db,
                "--port",
                str(self.port),
                "--grpc-port",
                str(self.grpc_port),
                "--log-level",
                "error",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=2).close()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("server did not start")

    def post(self, path: str, body: bytes, content_type: str, timeout: float) -> tuple[float, int]:
        req = urllib.request.Request(self.url + path, data=body, headers={"content-type": content_type})
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status = r.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except (TimeoutError, urllib.error.URLError):
            return float("inf"), 0
        return time.perf_counter() - t0, status

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def acquire_seconds(server: Server, options: dict[str, Any], completed: int, timeout: float) -> list[float]:
    """Acquire times of a BO campaign with these options after ``completed`` results."""
    from hpcopt import AgentClient, Client

    target = f"127.0.0.1:{server.grpc_port}"
    with Client(target, timeout=timeout) as c:
        algo = {"name": "bo", "seed": 1, "options": {"n_initial": 10, **options}}
        cid = c.create_campaign(spec(algorithm=algo)).id
    times = []
    with AgentClient(target, timeout=timeout) as a:
        agent_id = a.register(host="cost", campaign_id=cid).agent_id
        for i in range(completed + 5):
            t0 = time.perf_counter()
            got = a.acquire(agent_id, cid)
            times.append(time.perf_counter() - t0)
            lease = got.lease
            a.report_fold(lease, 0, float(sum((v.real - 0.3) ** 2 for v in got.trial.params.values())) + 0.01 * i)
            a.complete(lease)
    return times[completed:]


def fmt(xs: list[float]) -> str:
    if not xs:
        return "-"
    med = statistics.median(xs)

    def show(x: float) -> str:
        return ">T" if x == float("inf") else f"{x:.3f}"

    return f"{show(med):>8} {show(min(xs)):>8} {show(max(xs)):>8}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--baseline", type=Path, help="a checkout to compare with (its client/ and server/)")
    args = ap.parse_args()
    sides: list[tuple[str, Path | None]] = [("this checkout", None)]
    if args.baseline:
        sides.append((f"baseline {args.baseline}", args.baseline))
    grid = json.dumps(
        spec(
            algorithm={"name": "grid", "options": {"points": 10_000_000}},
            space={"x": {"type": "real", "low": 0, "high": 1}},
        )
    ).encode()
    deep = b"[" * 100_000 + b"]" * 100_000
    rows: dict[tuple[str, str], list[float]] = {}
    rss: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        servers = {name: Server(src, Path(tmp)) for name, src in sides}
        try:
            for rep in range(args.reps):
                for name, server in servers.items():
                    for row, path, body, kind in (
                        (
                            "alias bomb -> validate",
                            "/api/v1/campaigns/validate",
                            alias_bomb(8).encode(),
                            "application/yaml",
                        ),
                        ("grid 10^7 -> validate", "/api/v1/campaigns/validate", grid, "application/json"),
                        ("json 100k deep -> create", "/api/v1/campaigns", deep, "application/json"),
                    ):
                        seconds, _ = server.post(path, body, kind, args.timeout)
                        rows.setdefault((row, name), []).append(seconds)
                        if seconds == float("inf"):  # a timed-out request may still be running: wait it out
                            time.sleep(5)
                print(f"round {rep + 1}/{args.reps} done", file=sys.stderr, flush=True)
            for name, server in servers.items():
                stop = threading.Event()

                def bombs(server: Server = server, stop: threading.Event = stop) -> None:
                    while not stop.is_set():
                        server.post(
                            "/api/v1/campaigns/validate", alias_bomb(8).encode(), "application/yaml", args.timeout
                        )

                t = threading.Thread(target=bombs, daemon=True)
                t.start()
                time.sleep(0.5)
                lat = []
                for _ in range(10):
                    t0 = time.perf_counter()
                    try:
                        urllib.request.urlopen(server.url + "/healthz", timeout=args.timeout).close()
                        lat.append(time.perf_counter() - t0)
                    except OSError:
                        lat.append(float("inf"))
                    time.sleep(0.1)
                stop.set()
                rows[("healthz under bombs", name)] = lat
                t.join(timeout=args.timeout + 5)
                if server is servers["this checkout"]:
                    rows[("acquire, BO defaults", name)] = acquire_seconds(server, {}, 40, args.timeout)
                    big = {"candidates": 8192, "polish": 16}
                    rows[("acquire, BO max options", name)] = acquire_seconds(server, big, 40, args.timeout)
                rss[name] = server.peak_rss_mb()
        finally:
            for server in servers.values():
                server.close()
    print(f"\nseconds per request over {args.reps} rounds (acquire: 5 calls after 40 results; healthz: 10 calls)")
    print(f"{'request':<28} {'server':<28} {'median':>8} {'min':>8} {'max':>8}")
    for (row, name), xs in rows.items():
        print(f"{row:<28} {name:<28} {fmt(xs)}")
    for name, mb in rss.items():
        print(f"peak RSS of {name}: {mb:.0f} MB")


if __name__ == "__main__":
    main()
