"""Optimizer quality: median and IQR of the final simple regret over seeds on Branin
(50 evaluations), Hartmann6 (50), Rosenbrock 4-d on [-2, 2] (50), Ackley 10-d on
[-5, 5] (100), Levy 8-d (100) and a rotated ill-conditioned 5-d ellipsoid (60), one
evaluation at a time and with 4 and 16 pending (asynchronous workers: the oldest
pending evaluation finishes, one new suggestion is made with the others pending), for
our ``bo`` and ``ea`` next to BoTorch (``SingleTaskGP`` and qLogNoisyEI), skopt's GP,
Optuna's GPSampler and TPESampler, and random search, all in the same run.

    python benchmarks/optimizers/quality.py [--seeds 10] [--procs 2] [--pending 4,16] [--only bo,optuna-gp]
    python benchmarks/optimizers/quality.py --only "bo,bo[acquisition=ucb]"   # an ablation of bo's options
    python benchmarks/optimizers/quality.py --functions held-out            # the eight functions held out
    python benchmarks/optimizers/quality.py --functions many-peaked         # many optima of random heights
    python benchmarks/optimizers/quality.py --at 0.5                        # the regret halfway through each run

With two or more optimizers the runs are also paired by seed with the first one named:
in how many the other ended lower, higher or the same, and the sign test's two-sided
p-value (a change is more than the spread between seeds only where p is small).

Optuna's GPSampler needs torch, BoTorch its package (`make bench` installs both:
requirements/bench.txt). Each run uses one thread (``OMP_NUM_THREADS=1`` unless set):
BoTorch's results change with torch's thread count, and a seed's regret should not
depend on how many cores a machine has; ``--procs`` runs that many at once. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from functions import ALL_FUNCTIONS, FUNCTIONS, HELD_OUT, MANY_PEAKED
from runners import ALL, run, split_names

CASES: list[tuple[str, int]] = []


def evaluations_at(fraction: float, budget: int) -> int:
    """The evaluations after which ``--at fraction`` reads a run's regret: at least one."""
    return max(1, round(fraction * budget))


def _task(args: tuple[str, str, int, int, float]) -> tuple[str, str, int, int, float, float]:
    opt, fn, batch, seed, at = args
    t0 = time.perf_counter()
    f = ALL_FUNCTIONS[fn]
    regret = run(opt, f, seed, batch, evaluations_at(at, f.budget))
    return opt, fn, batch, seed, regret, time.perf_counter() - t0


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction of the budget in (0, 1]")
    return value


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--procs", type=int, default=2, help="runs at once (processes)")
    ap.add_argument("--pending", default="4,16", help="batch tables: evaluations in flight")
    ap.add_argument(
        "--functions", default=",".join(FUNCTIONS), help="comma-separated names; held-out, many-peaked: those groups"
    )
    ap.add_argument("--only", default=",".join(ALL), help="comma-separated optimizers")
    ap.add_argument(
        "--json", type=Path, help="write every run's regret here; runs already in the file are not run again"
    )
    ap.add_argument(
        "--at",
        type=_fraction,
        default=1.0,
        metavar="FRACTION",
        help="the regret after this fraction of each function's budget (default 1: the final regret); the "
        "optimizers are still told the whole budget",
    )
    args = ap.parse_args()
    opts = split_names(args.only)
    fns = functions_named(ap, args.functions)
    CASES[:] = [(fn, w) for w in [1, *(int(p) for p in args.pending.split(",") if p)] for fn in fns]
    here = machine()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in here.items()))
    done, made_on, at = _load(args.json) if args.json and args.json.exists() else ({}, here, args.at)
    if at != args.at:
        ap.error(f"--json: {args.json} holds regrets at --at {at:g}, not {args.at:g}; use another file")
    record = made_on if made_on is not None else ({} if done else here)  # {}: runs of an unrecorded machine
    warn_if_made_elsewhere("quality.py", args.json, made_on, here)
    tasks = [
        (o, fn, b, s, args.at)
        for fn, b in CASES
        for o in opts
        for s in range(args.seeds)
        if s not in done.get((o, fn, b), {})
    ]
    # The slow peers first, so the pool stays busy to the end.
    tasks.sort(key=lambda t: t[0] not in ("botorch", "skopt", "optuna-gp"))
    results = {k: dict(v) for k, v in done.items()}
    seconds: dict[str, float] = {}
    t0 = time.time()
    # One thread per run unless told otherwise: BoTorch's results change with torch's thread
    # count, so a seed's regret would depend on the machine's cores.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with mp.get_context("spawn").Pool(args.procs) as pool:
        for i, (o, fn, b, s, regret, dt) in enumerate(pool.imap_unordered(_task, tasks), 1):
            results.setdefault((o, fn, b), {})[s] = regret
            seconds[o] = seconds.get(o, 0.0) + dt
            if args.json:  # after every run: a long run stopped early keeps what it measured
                _dump(args.json, results, record, args.at)
            print(f"\r{i}/{len(tasks)} runs, {time.time() - t0:.0f} s", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    if args.at < 1:
        print(
            "\nregret after "
            + ", ".join(
                f"{fn} {evaluations_at(args.at, ALL_FUNCTIONS[fn].budget)} of {ALL_FUNCTIONS[fn].budget}" for fn in fns
            )
            + " evaluations (--at)"
        )
    _table({k: {s: r for s, r in v.items() if s < args.seeds} for k, v in results.items()}, opts)
    print("\nCPU seconds per optimizer (runs made now): " + ", ".join(f"{o} {seconds.get(o, 0):.0f}" for o in opts))
    return 0


Results = dict[tuple[str, str, int], dict[int, float]]


def functions_named(ap: argparse.ArgumentParser, text: str) -> list[str]:
    """``--functions``: comma-separated names, ``held-out`` for the functions in HELD_OUT,
    ``many-peaked`` for those in MANY_PEAKED; an unknown name is an argument error that
    lists the allowed ones."""
    groups = {"held-out": list(HELD_OUT), "many-peaked": list(MANY_PEAKED)}
    fns = [f for name in text.split(",") for f in groups.get(name, [name])]
    unknown = [f for f in fns if f not in ALL_FUNCTIONS]
    if unknown:
        allowed = ", ".join(ALL_FUNCTIONS)
        ap.error(f"--functions: unknown {', '.join(unknown)}; allowed: {allowed}, held-out or many-peaked")
    return fns


def warn_if_made_elsewhere(tool: str, path: Path | None, made_on: dict[str, str] | None, here: dict[str, str]) -> None:
    """Resuming a ``--json`` file made on another machine (or an unrecorded one, None)
    mixes the two: the peers on torch may give other regrets for the same seeds."""
    if made_on == here:
        return
    print(
        f"{tool}: the runs in {path} were made on "
        + (", ".join(f"{k} {v}" for k, v in made_on.items()) if made_on else "an unrecorded machine")
        + "; this one differs, so their regrets may not be what this machine gives (use a new --json file "
        "to compare like with like)",
        file=sys.stderr,
    )


def machine() -> dict[str, str]:
    """What a run's regrets may depend on beyond the seed and the code: the CPU and the
    numeric packages' versions. BoTorch's median on Ackley-10 with 4 pending, seeds 0-9,
    was 2.03 in the runs of 2026-11-26 and 1.61 on 2026-11-27 (an AMD EPYC), with the
    same pinned versions; ``bo``'s regrets were the same on both days."""
    import platform
    from importlib import metadata

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
        cpu = names[0] if names else cpu
    out = {"cpu": cpu}
    for package in ("numpy", "scipy", "torch", "botorch", "optuna", "scikit-optimize"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "-"
    return out


def _dump(path: Path, results: Results, made_on: dict[str, str], at: float) -> None:
    """``{"optimizer/function/pending": {"seed": regret}, "_machine": machine()}``, and
    ``"_at"`` when the regrets are not final ones (``--at``); replaced whole."""
    tmp = path.with_suffix(".tmp")
    data: dict[str, object] = {f"{o}/{fn}/{b}": r for (o, fn, b), r in results.items()}
    tmp.write_text(json.dumps({**data, "_machine": made_on, **({"_at": at} if at != 1 else {})}, indent=1))
    tmp.replace(path)


def _load(path: Path) -> tuple[Results, dict[str, str] | None, float]:
    """The runs in a ``--json`` file, the machine they were made on (None: not recorded)
    and the fraction of the budget their regrets were read at."""
    out: Results = {}
    data = json.loads(path.read_text())
    made_on = data.pop("_machine", None)
    at = float(data.pop("_at", 1.0))
    for key, runs in data.items():
        o, fn, b = key.rsplit("/", 2)
        out[(o, fn, int(b))] = {int(s): float(r) for s, r in runs.items()}
    return out, made_on, at


def _table(results: Results, opts: list[str]) -> None:
    # Wide enough for "1.23e-05 [1.2e-05, 0.00012]" and for an option's name, plus a gap.
    width = max([28, *(len(o) + 2 for o in opts)])
    medians: dict[tuple[str, str, int], float] = {}
    for pending in sorted({b for _, b in CASES}):
        title = "one at a time" if pending == 1 else f"{pending} pending"
        print(f"\n{title}: median regret [IQR]; lower is better\n")
        print(f"{'function':<14}" + "".join(f"{o:>{width}}" for o in opts))
        print("-" * (14 + width * len(opts)))
        for fn, b in CASES:
            if b != pending:
                continue
            cells = []
            for o in opts:
                r = np.array(list(results.get((o, fn, b), {}).values()) or [np.nan])
                med, q1, q3 = np.median(r), np.percentile(r, 25), np.percentile(r, 75)
                medians[(o, fn, b)] = float(med)
                cells.append(f"{med:.3g} [{q1:.2g}, {q3:.2g}]")
            print(f"{fn:<14}" + "".join(f"{c:>{width}}" for c in cells))
    print()
    for pending in sorted({b for _, b in CASES}):
        fns = [fn for fn, b in CASES if b == pending]
        for ours in [o for o in opts if o.split("[")[0] in ("bo", "ea")]:
            for peer in ("botorch", "optuna-gp", "skopt", "optuna-tpe", "random"):
                if ours in opts and peer in opts:
                    wins = sum(medians[(ours, f, pending)] <= medians[(peer, f, pending)] for f in fns)
                    print(f"{pending} pending: {ours} no worse than {peer} on {wins} of {len(fns)} functions")
        for ours in [o for o in opts if o.split("[")[0] == "bo"] if pending > 1 else []:
            ratios = [medians[(ours, f, pending)] / max(medians[(ours, f, 1)], 1e-12) for f in fns]
            print(
                f"{pending} pending: {ours}'s regret over its sequential regret: "
                + ", ".join(f"{f} {r:.2f}" for f, r in zip(fns, ratios, strict=True))
            )
    if len(opts) > 1:
        _paired(results, opts)


def sign_test(first: dict[int, float], other: dict[int, float]) -> tuple[int, int, int, float]:
    """Runs paired by seed: in how many ``other`` ended lower than ``first``, higher, the
    same, and the sign test's two-sided p-value over the runs that differ (1 if none do)."""
    from scipy.stats import binomtest

    seeds = sorted(set(first) & set(other))
    lower = sum(other[s] < first[s] for s in seeds)
    higher = sum(other[s] > first[s] for s in seeds)
    p = float(binomtest(lower, lower + higher, 0.5).pvalue) if lower + higher else 1.0
    return lower, higher, len(seeds) - lower - higher, p


def _paired(results: Results, opts: list[str]) -> None:
    """Each optimizer after the first against the first, run by run on the same seeds: a
    median alone hides whether a change is more than the spread between seeds."""
    first = opts[0]
    width = max(len(o) for o in opts[1:]) + 2
    print(
        f"\npaired by seed with {first}: median {first} -> other, and in how many runs the other ended lower /"
        " higher / the same (sign test, two-sided p)\n"
    )
    for fn, b in CASES:
        for o in opts[1:]:
            a, v = results.get((first, fn, b), {}), results.get((o, fn, b), {})
            seeds = sorted(set(a) & set(v))
            if not seeds:
                continue
            lower, higher, same, p = sign_test(a, v)
            title = "one at a time" if b == 1 else f"{b} pending"
            print(
                f"{fn:<14}{title:<15}{o:<{width}} {np.median([a[s] for s in seeds]):.3g} -> "
                f"{np.median([v[s] for s in seeds]):.3g}   {lower} / {higher} / {same} of {len(seeds)}  p = {p:.2g}"
            )


if __name__ == "__main__":
    sys.exit(main())
