"""Training benchmark: hpcopt's allreduce scheme against plain torch DDP, and K folds
in parallel against folds in turn, on the same model, data and ranks.

    python benchmarks/training/run.py [--ranks 2] [--epochs 4] [--reps 3]

1. Throughput: one fold of an hpcopt trial (agent under mpiexec, DDP over all ranks)
   vs `plain_ddp.py` (the same model, data, split, batch, evaluation and checkpoint per
   epoch). Samples/s per epoch (training + evaluation + checkpoint), the first epoch
   dropped as warm-up; the target is hpcopt within 5% of plain DDP.
2. Fold layouts: the trial's wall time (server clock, acquire to complete) with K =
   ranks folds trained all at once (ranks_per_fold 1) vs in turn over all ranks with
   DDP (ranks_per_fold = ranks) vs in turn on one rank.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
TASK = "benchmarks/training/task.py:Synthetic"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mpi_cmd(ranks: int) -> list[str]:
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if mpiexec is None:
        raise SystemExit("mpiexec not found: pip install mpich")
    return [mpiexec, "-n", str(ranks)]


def agent_cmd(target: str, campaign: int, checkpoints: Path) -> list[str]:
    """The agent's command line after the launcher (``mpiexec -n N`` and its options)."""
    return [
        sys.executable,
        "-m",
        "mpi4py",
        "-m",
        "hpcopt_agent",
        "--server",
        target,
        "--campaign",
        str(campaign),
        "--checkpoint-dir",
        str(checkpoints),
    ]


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))


class Server:
    """A server on ``host`` (the slow-link harness's bridge address, where agents in
    its namespaces reach it). Beyond loopback it has auth on: a fresh admin token, in
    ``HPCOPT_TOKEN`` for this process's clients and the agents it starts."""

    def __init__(self, workdir: Path, host: str = "127.0.0.1") -> None:
        self.rest, grpc = free_port(), free_port()
        self.target = f"{host}:{grpc}"
        self.token = None if host == "127.0.0.1" else secrets.token_urlsafe(24)
        server_env = dict(os.environ)
        if self.token:
            os.environ["HPCOPT_TOKEN"] = server_env["HPCOPT_ADMIN_TOKEN"] = self.token
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hpcopt_server.cli",
                "serve",
                "--db",
                f"sqlite:///{workdir / 'bench.db'}",
                "--host",
                host,
                "--port",
                str(self.rest),
                "--grpc-port",
                str(grpc),
                "--log-level",
                "warning",
            ],
            env=server_env,
        )
        self.host = host
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://{host}:{self.rest}/healthz", timeout=2):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.2)

    def get(self, path: str) -> Any:
        req = urllib.request.Request(f"http://{self.host}:{self.rest}/api/v1{path}")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def campaign(server: Server, folds: int, rpf: int, epochs: int) -> int:
    from hpcopt import Client

    spec = {
        "name": f"bench-k{folds}-rpf{rpf}",
        "objective": {"metric": "val_loss"},
        "space": {"unused": {"type": "categorical", "choices": [0]}},
        "budget": {"max_trials": 1, "max_parallel": 1},
        "folds": folds,
        "training": {"task": TASK, "epochs": epochs, "ranks_per_fold": rpf, "options": {"checkpoint_every": 1}},
    }
    with Client(server.target) as c:
        return int(c.create_campaign(spec).id)


def run_trial(
    server: Server, ranks: int, folds: int, rpf: int, epochs: int, workdir: Path
) -> tuple[float, list[float]]:
    """(trial wall seconds from the server, samples/s of fold 0's epochs after the first)."""
    cid = campaign(server, folds, rpf, epochs)
    cmd = [*mpi_cmd(ranks), *agent_cmd(server.target, cid, workdir / "ckpt")]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"agent failed ({out.returncode}):\n{out.stderr[-4000:]}")
    [trial] = server.get(f"/campaigns/{cid}/trials")["trials"]
    if trial["state"] != "COMPLETED":
        raise SystemExit(f"trial {trial['id']} is {trial['state']}: {trial.get('error')}")
    wall = (datetime.fromisoformat(trial["finished_at"]) - datetime.fromisoformat(trial["started_at"])).total_seconds()
    rates = [float(r) for r in re.findall(r"fold 0 epoch \d+/\d+: .*?, ([\d.]+) samples/s\)", out.stderr)]
    return wall, rates[1:]


def run_plain(ranks: int, folds: int, epochs: int) -> list[float]:
    cmd = [*mpi_cmd(ranks), sys.executable, str(HERE / "plain_ddp.py"), "--epochs", str(epochs), "--folds", str(folds)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"plain DDP failed ({out.returncode}):\n{out.stderr[-4000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return [e["samples"] / e["seconds"] for e in result["epochs"][1:]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="2,048 samples: a smoke run, not a measurement")
    ap.add_argument("--throughput-only", action="store_true", help="skip the fold-layout table")
    args = ap.parse_args()
    if args.small:
        os.environ["HPCOPT_BENCH_SAMPLES"] = "2048"
    workdir = Path(tempfile.mkdtemp(prefix="hpcopt-bench-"))
    server = Server(workdir)
    try:
        k = args.ranks
        plain: list[float] = []
        ours: list[float] = []
        ratios: list[float] = []  # per repetition: median hpcopt over median plain
        walls: dict[str, list[float]] = {"parallel": [], "in turn, DDP": [], "in turn, 1 rank": []}
        for rep in range(args.reps):
            # Alternate the order so drift on a noisy machine hits both sides alike.
            if rep % 2 == 0:
                theirs = run_plain(args.ranks, k, args.epochs)
                wall, rates = run_trial(server, args.ranks, k, args.ranks, args.epochs, workdir)
            else:
                wall, rates = run_trial(server, args.ranks, k, args.ranks, args.epochs, workdir)
                theirs = run_plain(args.ranks, k, args.epochs)
            plain += theirs
            ours += rates
            ratios.append(statistics.median(rates) / statistics.median(theirs))
            walls["in turn, DDP"].append(wall)
            if not args.throughput_only:
                walls["parallel"].append(run_trial(server, args.ranks, k, 1, args.epochs, workdir)[0])
                walls["in turn, 1 rank"].append(run_trial(server, 1, k, 1, args.epochs, workdir)[0])
            print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr, flush=True)
    finally:
        server.close()
        shutil.rmtree(workdir, ignore_errors=True)

    p, o = statistics.median(plain), statistics.median(ours)
    print(
        f"\nthroughput: {args.ranks} ranks, one fold, DDP (allreduce), {args.epochs} epochs x {args.reps} runs; "
        "median samples/s of epochs 2.. (train + evaluate + checkpoint)"
    )
    print(f"{'':24} {'samples/s':>10} {'min':>10} {'max':>10}")
    print(f"{'plain torch DDP':24} {p:>10.0f} {min(plain):>10.0f} {max(plain):>10.0f}")
    print(f"{'hpcopt trial (allreduce)':24} {o:>10.0f} {min(ours):>10.0f} {max(ours):>10.0f}")
    print(f"ratio hpcopt / plain DDP: {o / p:.3f}  (target >= 0.95)")
    print("per repetition (interleaved): " + " ".join(f"{r:.3f}" for r in ratios))
    print(f"median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, max {max(ratios):.3f} over {len(ratios)}")
    if args.throughput_only:
        return 0
    print(f"\nfold layouts: K={k} folds, {args.epochs} epochs, median trial wall time over {args.reps} runs")
    print(f"{'layout':36} {'seconds':>8} {'speed-up':>9}")
    base = statistics.median(walls["in turn, 1 rank"])
    rows = [
        (f"{k} folds at once (ranks_per_fold 1)", walls["parallel"]),
        (f"in turn, DDP on {args.ranks} ranks", walls["in turn, DDP"]),
        ("in turn, 1 rank", walls["in turn, 1 rank"]),
    ]
    for name, values in rows:
        m = statistics.median(values)
        print(f"{name:36} {m:>8.1f} {base / m:>8.2f}x")
    par, ddp = statistics.median(walls["parallel"]), statistics.median(walls["in turn, DDP"])
    print(f"folds in parallel vs in turn with DDP on the same ranks: {ddp / par:.2f}x faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
