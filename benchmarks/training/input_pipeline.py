"""Input-pipeline benchmark: an hpcopt trial reading HDF5 shards through the agent's
DataLoader pipeline, against plain torch DDP with a tuned DataLoader (the peer a user
would write) and against the one-sample-at-a-time path, on the calorimeter GAN's data;
and the agent's resident memory as the dataset grows.

    python benchmarks/training/input_pipeline.py [--reps 7] [--ranks 2] [--read-ms 1]

Data: ``examples/calorimeter/generate.py`` showers (25^3 cells, 62 KB each) in shards of
128, generated into a temporary folder (``--data DIR`` keeps and reuses them). Every
read request waits ``--read-ms`` first (``showers.py`` says why: the round trip of a
parallel file system, where this machine's page cache has none).

1. **Throughput**, samples/s of the batch loop (all ranks' samples over the slowest
   rank's loop) of each fold's epochs after the first, median per run; the three
   interleaved in each repetition, in rotating order:
   - *hpcopt*: a trial (2 folds over shards, DDP over all ranks) with the default loader;
   - *plain DDP + DataLoader*: ``plain_loader.py``, same model, batch, workers, prefetch;
   - *item by item*: the trial with ``loader.workers: 0`` and a dataset without
     ``__getitems__`` (the input path before the pipeline).
   Two steps: ``feed`` (the step only touches the batch: what the input path delivers
   to a fast GPU) and ``gan`` (the GAN's real step on this CPU).
   Targets: hpcopt >= 0.95 of plain DDP; well above the item path.
2. **Memory**: peak memory (sum of PSS) of the agent (its ranks and loader workers) reading
   every sample of 1x, 4x and 16x the data (``--rss-base`` showers in 8 shards, the
   shards growing), feed step. An open shard costs a process about 1 MB whatever its
   size, so many small shards cost memory: that is measured in the docs' guide, not here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from run import HERE, ROOT, Server, agent_cmd, env, mpi_cmd

PER_SHARD = 128
RSS_SHARDS = 8  # the memory runs grow the shards, not their number (see the docs: ~1 MB per open shard)
PARAMS = {"lr_g": 1e-3, "lr_d": 1e-3, "width": 8, "latent": 16, "aux_weight": 0.5, "batch_size": 32}
RATE = re.compile(r"fold (\d+) epoch (\d+)/\d+: .*?samples_per_second=([\d.e+]+)")


def generate(store: Path, shards: int, per_shard: int) -> Path:
    folder = store / f"{shards}x{per_shard}"
    if (folder / "complete").exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    print(f"generating {shards} x {per_shard} showers into {folder} ...", file=sys.stderr, flush=True)
    cmd = [
        sys.executable,
        str(ROOT / "examples/calorimeter/generate.py"),
        "--out",
        str(folder),
        "--shards",
        str(shards),
        "--per-shard",
        str(per_shard),
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    (folder / "complete").touch()
    return folder


class TreeMemory(threading.Thread):
    """Samples the memory of a process and its descendants every 200 ms: the peak of the
    sum of their proportional set sizes (PSS: a page shared by k processes counts 1/k in
    each, so forked loader workers and the ranks' common libraries are not counted
    again in every process), and the largest single process's resident set (RSS)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.done = pid, threading.Event()
        self.peak_sum = self.peak_one = 0

    @staticmethod
    def _tree(root: int) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry))
        out, todo = [], [root]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo += children.get(pid, [])
        return out

    def run(self) -> None:
        while not self.done.wait(0.2):
            pss, rss = [], []
            for pid in self._tree(self.pid):
                with contextlib.suppress(OSError, ValueError):
                    fields = dict(
                        line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
                    )
                    pss.append(int(fields["Pss"].split()[0]) * 1024)
                    rss.append(int(fields["Rss"].split()[0]) * 1024)
            if pss:
                self.peak_sum = max(self.peak_sum, sum(pss))
                self.peak_one = max(self.peak_one, max(rss))


def hpcopt_run(
    server: Server,
    args: argparse.Namespace,
    data: Path,
    step: str,
    item: bool,
    epochs: int,
    workdir: Path,
    measure_memory: bool = False,
) -> tuple[list[float], TreeMemory]:
    from hpcopt import Client

    loader = {"workers": 0 if item else args.workers}
    spec = {
        "name": f"input-{step}-{'item' if item else 'hpcopt'}",
        "objective": {"metric": "physics_distance"},
        "space": {k: {"type": "categorical", "choices": [v]} for k, v in params(args).items()},
        "budget": {"max_trials": 1, "max_parallel": 1},
        "folds": args.folds,
        "training": {
            "task": f"benchmarks/training/showers.py:{'ShowersItem' if item else 'Showers'}",
            "epochs": epochs,
            "ranks_per_fold": args.ranks,
            "options": {
                "folds_by": "group",
                "loader": {**loader, "prefetch": args.prefetch},
                "precision": args.precision,
            },
        },
    }
    with Client(server.target) as c:
        cid = int(c.create_campaign(spec).id)
    cmd = [*mpi_cmd(args.ranks), *agent_cmd(server.target, cid, workdir / "ckpt")]
    run_env = dict(env(), CALO_DATA=str(data), HPCOPT_BENCH_READ_MS=str(args.read_ms), HPCOPT_BENCH_STEP=step)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env, cwd=ROOT)
    memory = TreeMemory(proc.pid)
    if measure_memory:  # reading every process's smaps costs CPU: never in a timed run
        memory.start()
    _, err = proc.communicate(timeout=1800)
    if measure_memory:
        memory.done.set()
        memory.join()
    if proc.returncode != 0:
        raise SystemExit(f"agent failed ({proc.returncode}):\n{err[-4000:]}")
    [trial] = server.get(f"/campaigns/{cid}/trials")["trials"]
    if trial["state"] != "COMPLETED":
        raise SystemExit(f"trial {trial['id']} is {trial['state']}: {trial.get('error')}")
    rates = [float(r) for _, e, r in RATE.findall(err) if int(e) > 1]
    return rates, memory


def plain_run(args: argparse.Namespace, data: Path, step: str, epochs: int) -> list[float]:
    workers = args.workers
    cmd = [
        *mpi_cmd(args.ranks),
        sys.executable,
        str(HERE / "plain_loader.py"),
        "--epochs",
        str(epochs),
        "--folds",
        str(args.folds),
        "--workers",
        str(workers),
        "--prefetch",
        str(args.prefetch),
        "--batch",
        str(args.batch),
        "--width",
        str(args.width),
        "--precision",
        args.precision,
        "--device",
        "cuda" if cuda() else "cpu",
    ]
    run_env = dict(env(), CALO_DATA=str(data), HPCOPT_BENCH_READ_MS=str(args.read_ms), HPCOPT_BENCH_STEP=step)
    out = subprocess.run(cmd, capture_output=True, text=True, env=run_env, cwd=ROOT, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"plain DDP failed ({out.returncode}):\n{out.stderr[-4000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return [e["samples"] / e["seconds"] for e in result["epochs"][1:]]


def params(args: argparse.Namespace) -> dict[str, float]:
    return {**PARAMS, "width": args.width, "batch_size": args.batch}


def cuda() -> bool:
    """Whether the runs train on a GPU (the agent takes one when torch sees it)."""
    import torch

    return torch.cuda.is_available()


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):>9.0f} {min(values):>9.0f} {max(values):>9.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--folds", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2, help="per fold; the first is dropped")
    ap.add_argument("--read-ms", type=float, default=1.0, help="latency of each read request, ms")
    ap.add_argument(
        "--workers",
        type=int,
        default=4,
        help="loader workers per rank, both sides (default 4: a GPU's share of a node)",
    )
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--showers", type=int, default=1024, help="data of the throughput runs")
    ap.add_argument("--rss-base", type=int, default=512, help="showers of the 1x memory run")
    ap.add_argument("--steps", default="feed,gan")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="both sides (bf16 on GPUs)")
    ap.add_argument("--width", type=int, default=PARAMS["width"], help="the GAN's width, both sides")
    ap.add_argument("--batch", type=int, default=PARAMS["batch_size"], help="global batch, both sides")
    ap.add_argument("--no-memory", action="store_true", help="skip the memory runs")
    ap.add_argument("--no-item", action="store_true", help="skip the item-by-item runs")
    ap.add_argument("--data", type=Path, help="keep the generated showers here (reused)")
    ap.add_argument(
        "--small",
        action="store_true",
        help="tiny data, one rep, memory at 1x and 16x only: a smoke run, not a measurement",
    )
    args = ap.parse_args()
    if args.small:
        args.reps, args.showers, args.rss_base, args.epochs = 1, 256, 128, 2
    workdir = Path(tempfile.mkdtemp(prefix="hpcopt-input-"))
    store = args.data or workdir / "data"
    server = Server(workdir)
    names = ("hpcopt", "plain DDP + DataLoader") + (() if args.no_item else ("item by item",))
    rates: dict[str, dict[str, list[float]]] = {}
    ratios: dict[str, dict[str, list[float]]] = {}
    memory: list[tuple[int, TreeMemory]] = []
    try:
        data = generate(store, args.showers // PER_SHARD, PER_SHARD)
        for step in [s for s in args.steps.split(",") if s]:
            got = rates[step] = {n: [] for n in names}
            ratio = ratios[step] = {"plain": [], "item": []}
            for rep in range(args.reps):
                per: dict[str, float] = {}
                for k in range(len(names)):
                    name = names[(rep + k) % len(names)]
                    if name == "hpcopt":
                        r, _ = hpcopt_run(server, args, data, step, False, args.epochs, workdir)
                    elif name == "item by item":
                        r, _ = hpcopt_run(server, args, data, step, True, args.epochs, workdir)
                    else:
                        r = plain_run(args, data, step, args.epochs)
                    got[name] += r
                    per[name] = statistics.median(r)
                ratio["plain"].append(per["hpcopt"] / per["plain DDP + DataLoader"])
                if "item by item" in per:
                    ratio["item"].append(per["hpcopt"] / per["item by item"])
                print(
                    f"{step} rep {rep + 1}/{args.reps}: " + ", ".join(f"{n} {v:.0f}/s" for n, v in per.items()),
                    file=sys.stderr,
                    flush=True,
                )
        # --small keeps the two ends of the growth figure (a smoke run, not a measurement).
        for scale in () if args.no_memory else (1, 16) if args.small else (1, 4, 16):
            folder = generate(store, RSS_SHARDS, args.rss_base * scale // RSS_SHARDS)
            _, mem = hpcopt_run(server, args, folder, "feed", False, 1, workdir, measure_memory=True)
            memory.append((scale, mem))
            print(f"memory {scale}x done", file=sys.stderr, flush=True)
    finally:
        server.close()
        shutil.rmtree(workdir if args.data is None else workdir / "ckpt", ignore_errors=True)
        if args.data is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    print(
        f"\ninput pipeline: {args.ranks} ranks, {args.showers} showers in shards of {PER_SHARD}, "
        f"{args.read_ms:g} ms per read request, {args.reps} interleaved reps, epochs 2..{args.epochs} of "
        f"fold runs; loader workers {args.workers} per rank, prefetch {args.prefetch}; width {args.width}, "
        f"batch {args.batch}, {args.precision} on {'CUDA' if cuda() else 'CPUs'}"
    )
    for step in rates:
        print(f"\nstep: {step} — samples/s of the batch loop")
        print(f"{'':26} {'median':>9} {'min':>9} {'max':>9}")
        for name in names:
            print(f"{name:26} {spread(rates[step][name])}")
        p, i = ratios[step]["plain"], ratios[step]["item"]
        print(
            f"ratio hpcopt / plain DDP ({step}): {statistics.median(p):.3f} "
            f"(min {min(p):.3f}, max {max(p):.3f}; target >= 0.95)"
        )
        if i:
            print(
                f"ratio hpcopt / item by item ({step}): {statistics.median(i):.2f}x "
                f"(min {min(i):.2f}, max {max(i):.2f})"
            )
        print("  per rep vs plain: " + " ".join(f"{r:.3f}" for r in p))
    if not memory:
        return 0
    print(f"\nagent memory reading all of the data (feed step, {args.ranks} ranks + their loader workers)")
    print(f"{'data':>6} {'showers':>8} {'on disk MB':>11} {'peak sum PSS MB':>16} {'largest process MB':>19}")
    for scale, mem in memory:
        n = args.rss_base * scale
        disk = n * 25**3 * 4 / 2**20
        print(f"{scale:>5}x {n:>8} {disk:>11.0f} {mem.peak_sum / 2**20:>16.0f} {mem.peak_one / 2**20:>19.0f}")
    growth = memory[-1][1].peak_sum / memory[0][1].peak_sum
    print(f"memory growth 16x data / 1x: {growth:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
