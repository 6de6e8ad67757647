"""The allocation planner, measured: a campaign run to the end by one agent job under
``--groups auto`` against every valid fixed layout of the same allocation, and against
today's default (``--groups 1`` with the spec's ``ranks_per_fold``), interleaved.

    python benchmarks/training/planner.py [--reps 3] [--ranks 8] [--trials 24] [--folds 4]

The task is the digits MLP of ``examples/digits`` (CPU ranks; 1,797 samples), random
search with the same seed for every layout of one repetition, so each trains the same
trials. Per run:

- **time to finish**: the agent job's wall time, start to exit (the probe included);
- **trials by T**: trials COMPLETED within ``--walltime`` seconds of the job's start;
- **idle tail**: idle rank-seconds in the campaign's last 20 % (from its first trial's
  start to its last trial's end): the allocation's ranks
  less the ranks of the trial groups holding a trial (server times; the layout a trial
  ran under read from the agent's log).

``--nodes 2 --rate 100mbit`` runs every agent job over the slow-link harness
(``netns.py``, root): the ranks split over that many network-namespace "nodes" whose
egress is rate-limited, the server on the bridge, so a fold group spanning nodes pays a
real link and the planner's probe measures a two-node width.

``--simulate`` then plans a large allocation from the curve the auto runs measured
(``GET /campaigns/{id}/throughput``): 250 nodes x 4 ranks, 500 trials x 5 folds, 24 h,
re-planned against the best static layout; and it prints how far each layout's
predicted time was from the measured one.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from netns import SERVER_ADDR, SlowLink
from run import ROOT, Server, agent_cmd, env, mpi_cmd

from hpcopt.core.planner import (
    Allocation,
    Layout,
    Point,
    Work,
    candidates,
    fit,
    plan,
    predict,
    simulate,
)

PHASE = re.compile(r"campaign \d+: (\d+) ranks = (\d+) trial group\(s\) x (\d+) fold group\(s\) x (\d+) rank")
START = re.compile(r"trial #(\d+) \(id (\d+)")


def spec(args: argparse.Namespace, rep: int, rpf: int | None) -> dict[str, Any]:
    s: dict[str, Any] = yaml.safe_load((ROOT / "examples/digits/campaign.yaml").read_text())
    s["name"] = f"planner-{rep}-{rpf}"
    s["algorithm"] = {"name": "random", "seed": rep}
    s["budget"] = {"max_trials": args.trials, "max_parallel": args.trials}
    s["folds"] = args.folds
    s["training"]["epochs"] = args.epochs
    s["training"]["options"] = {"stratified": True, "checkpoint_every": args.epochs}
    if rpf is None:
        s["training"].pop("ranks_per_fold", None)
    else:
        s["training"]["ranks_per_fold"] = rpf
    return s


def run_one(
    server: Server, args: argparse.Namespace, workdir: Path, rep: int, name: str, link: SlowLink | None
) -> dict[str, Any]:
    from hpcopt import Client

    if name == "auto":
        rpf, extra = None, []
    elif name == "default":
        rpf, extra = args.default_rpf, ["--groups", "1"]
    else:
        g, _, r = (int(x) for x in name.split("x"))
        rpf, extra = r, ["--groups", str(g)]
    with Client(server.target) as c:
        cid = int(c.create_campaign(spec(args, rep, rpf)).id)
    launcher = link.launcher(args.ranks // args.nodes) if link is not None else []
    cmd = [*mpi_cmd(args.ranks), *launcher, *agent_cmd(server.target, cid, workdir / "ckpt"), *extra]
    t0 = time.time()
    run_env = link.rank_env(env()) if link is not None else env()
    out = subprocess.run(cmd, capture_output=True, text=True, env=run_env, cwd=ROOT, timeout=3600)
    seconds = time.time() - t0
    if out.returncode != 0:
        raise SystemExit(f"{name}: agent failed ({out.returncode}):\n{out.stderr[-4000:]}")
    trials = server.get(f"/campaigns/{cid}/trials?limit=1000")["trials"]
    done = [t for t in trials if t["state"] == "COMPLETED"]
    if len(done) != args.trials:
        raise SystemExit(f"{name}: {len(done)} of {args.trials} trials completed:\n{out.stderr[-3000:]}")
    # The layout each trial ran under, from the log's phases, in order.
    size, ranks_of = args.ranks, {}
    for line in out.stderr.splitlines():
        if m := PHASE.search(line):
            size = int(m.group(1)) // int(m.group(2))
        elif m := START.search(line):
            ranks_of[int(m.group(2))] = size
    spans = []
    for t in done:
        a = datetime.fromisoformat(t["started_at"]).timestamp() - t0
        b = datetime.fromisoformat(t["finished_at"]).timestamp() - t0
        spans.append((a, b, ranks_of.get(int(t["id"]), size)))
    # The campaign's last 20 %: from its first trial's start (after the job's start-up
    # and any probe) to its last trial's end.
    first, end = min(a for a, _, _ in spans), max(b for _, b, _ in spans)
    tail = end - 0.2 * (end - first)
    busy_tail = sum(r * max(0.0, b - max(a, tail)) for a, b, r in spans)
    phases = [m.group(0).split(": ", 1)[1] for m in PHASE.finditer(out.stderr)]
    return {
        "campaign": cid,
        "seconds": seconds,
        "by_walltime": sum(1 for _, b, _ in spans if b <= args.walltime),
        "idle_tail": args.ranks * (end - tail) - busy_tail,
        "phases": phases,
        "fold_seconds": statistics.median(
            (datetime.fromisoformat(t["finished_at"]).timestamp() - datetime.fromisoformat(t["started_at"]).timestamp())
            for t in done
        ),
    }


def merged(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One throughput document from several campaigns': per width, the median of their
    medians, counting every measurement."""
    by: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for doc in docs:
        for p in doc["points"]:
            by.setdefault((p["scheme"], p["ranks"], p["nodes"]), []).append(p)
    points = [
        {
            "scheme": s,
            "ranks": r,
            "nodes": n,
            "source": "fold",
            "count": sum(p["count"] for p in ps),
            "samples_per_second": statistics.median(p["samples_per_second"] for p in ps),
        }
        for (s, r, n), ps in sorted(by.items())
    ]
    samples = [d["train_samples"] for d in docs if d.get("train_samples")]
    return {"points": points, "train_samples": int(statistics.median(samples)) if samples else None}


def layouts(ranks: int, folds: int) -> list[str]:
    return [f"{lay.groups}x{lay.fold_groups}x{lay.ranks_per_fold}" for lay in candidates(ranks, folds)]


def per_node(args: argparse.Namespace) -> int:
    return int(args.ranks) // int(args.nodes)


def spread(v: list[float]) -> str:
    return f"{statistics.median(v):8.1f} ({min(v):.1f}-{max(v):.1f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--folds", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--default-rpf", type=int, default=2, help="the spec's ranks_per_fold of today's default run")
    ap.add_argument("--walltime", type=float, default=30.0, help="seconds: count trials finished by then")
    ap.add_argument("--only", help="comma-separated configs (auto, default, GxFxR); default: all")
    ap.add_argument("--simulate", action="store_true", help="then plan 1,000 ranks from the measured curve")
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    ap.add_argument("--save-throughput", type=Path, help="write the measured curve (all runs' folds) here")
    ap.add_argument("--scale-samples", type=int, default=1_000_000, help="--simulate: samples per fold-epoch")
    ap.add_argument("--scale-epochs", type=int, default=50, help="--simulate: epochs")
    ap.add_argument("--nodes", type=int, default=1, help="emulated nodes over a rate-limited link (root; netns.py)")
    ap.add_argument("--rate", default="100mbit", help="--nodes > 1: each node's egress rate (tc's syntax)")
    args = ap.parse_args()
    if args.nodes < 1 or args.ranks % args.nodes:
        ap.error(f"--nodes must divide --ranks ({args.ranks}); got {args.nodes}")
    configs = ["auto", "default", *layouts(args.ranks, args.folds)]
    if args.only:
        configs = [c for c in args.only.split(",") if c]
    workdir = Path(tempfile.mkdtemp(prefix="hpcopt-planner-"))
    link = SlowLink(args.nodes, args.rate).__enter__() if args.nodes > 1 else None
    server = Server(workdir, host=SERVER_ADDR) if link is not None else Server(workdir)
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    try:
        for rep in range(args.reps):
            for k in range(len(configs)):
                name = configs[(rep + k) % len(configs)]
                r = run_one(server, args, workdir, rep, name, link)
                runs[name].append(r)
                print(
                    f"rep {rep + 1}/{args.reps} {name}: {r['seconds']:.1f} s, {r['by_walltime']} trials by "
                    f"{args.walltime:g} s, idle tail {r['idle_tail']:.0f} rank-s; {' / '.join(r['phases'])}",
                    file=sys.stderr,
                    flush=True,
                )
        # The measured curve: every run's folds (each fixed layout measured its own width).
        docs = [server.get(f"/campaigns/{r['campaign']}/throughput") for rs in runs.values() for r in rs]
        points = merged(docs)
        if args.save_throughput:
            args.save_throughput.write_text(json.dumps(points, indent=1) + "\n")
    finally:
        server.close()
        if link is not None:
            link.__exit__(None, None, None)
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "throughput": points}, indent=1))
    where = f"{args.nodes} nodes over a {args.rate} link" if link is not None else "one node"
    print(
        f"\nplanner: {args.trials} trials x {args.folds} folds x {args.epochs} epochs (digits MLP) on {args.ranks} "
        f"ranks ({where}), {args.reps} interleaved reps; median (min-max)"
    )
    print(f"{'layout':>10} {'finish s':>22} {f'trials by {args.walltime:g} s':>16} {'idle tail rank-s':>22}")
    for name, rs in runs.items():
        by, secs, idle = (
            statistics.median([r["by_walltime"] for r in rs]),
            [r["seconds"] for r in rs],
            [r["idle_tail"] for r in rs],
        )
        print(f"{name:>10} {spread(secs):>22} {by:>16.1f} {spread(idle):>22}")
    fixed = {n: statistics.median(r["seconds"] for r in rs) for n, rs in runs.items() if "x" in n}
    if "auto" in runs and fixed:
        best = min(fixed, key=fixed.__getitem__)
        auto = [r["seconds"] for r in runs["auto"]]
        per_rep = [b["seconds"] / a["seconds"] for a, b in zip(runs["auto"], runs[best], strict=True)]
        mid, lo, hi = statistics.median(per_rep), min(per_rep), max(per_rep)
        print(
            f"\nbest fixed layout {best}: {fixed[best]:.1f} s; auto / best fixed speed: "
            f"{mid:.3f} (min {lo:.3f}, max {hi:.3f}; target >= 0.9)"
        )
        if "default" in runs:
            d = [b["seconds"] / a["seconds"] for a, b in zip(runs["auto"], runs["default"], strict=True)]
            print(
                f"auto / today's default (--groups 1, ranks_per_fold {args.default_rpf}) speed: "
                f"{statistics.median(d):.2f}x (min {min(d):.2f}, max {max(d):.2f}; target >= 1.3)"
            )
        tails = [r["idle_tail"] for r in runs["auto"]]
        best_tail = statistics.median(r["idle_tail"] for r in runs[best])
        print(
            f"idle tail: auto {statistics.median(tails):.0f} rank-s against {best_tail:.0f} for {best} (target <= half)"
        )
        print(f"auto's phases: {' / '.join(runs['auto'][0]['phases'])}; median {statistics.median(auto):.1f} s")
    if args.simulate and points:
        simulate_scale(points, runs, args)
    return 0


def simulate_scale(doc: dict[str, Any], runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> None:
    pts = [Point.from_dict(p) for p in doc["points"]]
    model = fit(pts)
    samples = int(doc.get("train_samples") or 1348)
    print(
        "\nmeasured points (all runs' folds): "
        + ", ".join(f"{p.ranks} rank(s) on {p.nodes} node(s) {p.samples_per_second:.4g}/s" for p in pts)
    )
    print(
        f"\nmeasured curve ({len(pts)} widths, {samples} samples per fold-epoch): compute {model.compute:.3g} s, "
        f"comm {model.comm:.3g} s, link {model.link:.3g} s per sample; fit error {model.error():.1%}"
    )
    for a in model.assumptions:
        print(f"  assumed: {a}")
    # How far predictions were from what each layout measured (one node, this machine).
    alloc = Allocation(args.ranks, per_node(args))
    work = Work(trials=args.trials, folds=args.folds, epochs=args.epochs, train_samples=samples)
    print(f"\n{'layout':>10} {'predicted s':>12} {'measured s':>11} {'error':>7}")
    for name, rs in runs.items():
        if "x" not in name:
            continue
        g, f, r = (int(x) for x in name.split("x"))
        pred = predict(Layout(g * f * r, g, r, args.folds), alloc, work, model).makespan
        got = statistics.median(x["seconds"] for x in rs)
        print(f"{name:>10} {pred:>12.1f} {got:>11.1f} {pred / got - 1:>+7.0%}")
    big = Allocation(1000, 4)
    w = Work(trials=500, folds=5, epochs=args.scale_epochs, train_samples=args.scale_samples, deadline=24 * 3600.0)
    p = plan(big, w, model)
    sim = simulate(big, w, model)
    statics = sorted((simulate(big, w, model, fixed=x.layout) for x in p.table), key=lambda s: s.makespan)
    b = statics[0]
    print(
        f"\nat scale: 1,000 ranks (250 nodes x 4), 500 trials x 5 folds x {args.scale_epochs} epochs of "
        f"{args.scale_samples:,} samples, 24 h deadline, the measured curve"
    )
    print(f"  plan: {p.describe(big)}")
    print(
        f"  re-planned: {' -> '.join(x.describe() for x in sim.layouts)}; finishes in {sim.makespan / 3600:.2f} h, "
        f"{sim.completed_by_deadline} trials by 24 h, {sim.utilisation(1000):.0%} busy, idle tail "
        f"{sim.idle_tail / 3600:.1f} rank-h"
    )
    print(
        f"  best static: {b.layouts[0].describe()}; {b.makespan / 3600:.2f} h, {b.completed_by_deadline} trials, "
        f"{b.utilisation(1000):.0%} busy, idle tail {b.idle_tail / 3600:.1f} rank-h"
    )


if __name__ == "__main__":
    sys.exit(main())
