r"""The multi-fidelity searcher end to end: real agents, a real server, real training.

The replay (``compute_to_target.py``) is the figure with enough seeds; this is the
proof that the same searcher, run as ``algorithm: mf`` through the agent, saves compute
on real training and reports K-fold results. For each seed it runs the digits campaign
(``examples/digits/campaign.yaml``: an MLP, 5-fold cross-validated) twice on one
SQLite server: with ``bo`` and full K-fold evaluation of every trial, and with ``mf``
and a budget of ``--mf-configs`` configurations. Both sides run the same agent layout
(``--ranks`` ranks as ``--groups`` trial groups). It prints, per run and per method:
the fold-epochs trained, the compute (each fold's ``train_seconds`` summed: the
seconds the agents' folds spent training and evaluating), the wall time, and the best
K-fold validation loss the campaign reports (for ``mf`` a COMPLETED trial: all folds,
all epochs).

    .venv/bin/python benchmarks/multifidelity/end_to_end.py --seeds 3

(about 25 minutes on the 2-core development machine).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from examples.demo.run_demo import CAMPAIGN, agent_command, free_port, stop, wait_healthy  # noqa: E402
from hpcopt import Client  # noqa: E402


def run(method: str, seed: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    spec = yaml.safe_load(CAMPAIGN.read_text())
    spec["name"] = f"e2e-{method}-{seed}"
    spec["training"]["epochs"] = args.epochs
    spec["budget"]["max_parallel"] = args.groups
    if method == "mf":
        spec["algorithm"] = {"name": "mf", "seed": seed}
        spec["budget"]["max_trials"] = args.mf_configs
    else:
        spec["algorithm"] = {"name": "bo", "seed": seed}
        spec["budget"]["max_trials"] = args.bo_trials
    rest, grpc_port = free_port(), free_port()
    url = f"http://127.0.0.1:{rest}"
    db = workdir / f"{method}-{seed}.db"
    cmd = [sys.executable, "-m", "hpcopt_server.cli", "serve", "--db", f"sqlite:///{db}"]
    cmd += ["--port", str(rest), "--grpc-port", str(grpc_port)]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    agent = None
    try:
        wait_healthy(url, server)
        target = f"127.0.0.1:{grpc_port}"
        with Client(target) as client:
            cid = client.create_campaign(spec).id
            t0 = time.monotonic()
            log = workdir / f"{method}-{seed}.log"
            with open(log, "wb") as out:
                agent = subprocess.Popen(
                    agent_command(target, cid, args.ranks, args.groups, workdir / f"ck-{method}-{seed}"),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=ROOT,
                )
                code = agent.wait(timeout=args.timeout)
            wall = time.monotonic() - t0
            if code != 0:
                raise SystemExit(f"{method} seed {seed}: the agent exited {code}; see {log}")
            c = client.get_campaign(cid)
            trials = [client.get_trial(t.id) for t in client.list_trials(cid, limit=10_000)]
    finally:
        stop(agent, server)
    seconds = sum(float(f.metrics.get("train_seconds", 0.0)) for t in trials for f in t.folds)
    fold_epochs = sum(len({p.step for p in t.curves if p.fold == f.index}) for t in trials for f in t.folds)
    completed = [t for t in trials if t.state == "COMPLETED"]
    assert all(len([f for f in t.folds if f.finished]) == spec["folds"] for t in completed)
    return {
        "method": method,
        "seed": seed,
        "configs": len(trials),
        "completed": len(completed),
        "fold_epochs": fold_epochs,
        "compute": seconds,
        "wall": wall,
        "best": c.best_value,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--bo-trials", type=int, default=20, help="bo's max_trials, each all folds and epochs")
    ap.add_argument("--mf-configs", type=int, default=60, help="mf's max_trials (configurations)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=3600)
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="hpcopt-mf-e2e-"))
    rows = []
    try:
        print(
            f"{'method':<6} {'seed':>4} {'configs':>7} {'K-fold':>6} {'fold-epochs':>11} {'compute s':>9} "
            f"{'wall s':>7} {'best val_loss':>13}",
            flush=True,
        )
        for seed in range(args.seeds):
            for method in ("bo", "mf"):  # interleaved, so that a change in load hits both
                r = run(method, seed, args, workdir)
                rows.append(r)
                print(
                    f"{r['method']:<6} {r['seed']:>4} {r['configs']:>7} {r['completed']:>6} {r['fold_epochs']:>11} "
                    f"{r['compute']:>9.1f} {r['wall']:>7.1f} {r['best']:>13.4f}",
                    flush=True,
                )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    for method in ("bo", "mf"):
        mine = [r for r in rows if r["method"] == method]
        print(
            f"{method}: compute median {statistics.median(r['compute'] for r in mine):.1f} s, "
            f"best val_loss median {statistics.median(r['best'] for r in mine):.4f} "
            f"(range {min(r['best'] for r in mine):.4f}-{max(r['best'] for r in mine):.4f})"
        )
    ratio = [b["compute"] / m["compute"] for b, m in zip(rows[::2], rows[1::2], strict=True)]
    better = sum(m["best"] <= b["best"] for b, m in zip(rows[::2], rows[1::2], strict=True))
    print(
        f"bo / mf compute, per seed: {', '.join(f'{x:.2f}' for x in ratio)}; mf's best at least as good on "
        f"{better} of {len(ratio)} seeds"
    )


if __name__ == "__main__":
    main()
