"""``hpcopt-agent try``: train one trial of a task with given parameters, on this machine,
before any campaign: no server to start, no spec to write, no ``mpiexec`` unless
``--ranks`` is above 1.

    hpcopt-agent try examples/digits/task.py:DigitsTask --params lr=0.01,width=64 --folds 2 --epochs 1

It is the real path, not a stand-in: a throw-away server on a temporary SQLite file
(in this process, on a loopback port of the system's choosing) serves a one-trial
campaign of exactly these parameters, and the agent trains it as it would on a cluster
(the same fold trainer, scheme, data loading and checks), as one process or under
``mpiexec -n RANKS``. The agent's log streams as it trains; at the end the fold metrics,
the samples/s and what the campaign would record are printed. A task that raises is
shown with its own traceback, and the exit status is 1. Needs ``hpcopt-server``
installed beside the agent (it is, wherever ``make demo`` ran).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hpcopt.cli.util import finish
from hpcopt.core.records import Trial
from hpcopt.core.taskref import parse_task_ref

SCHEMES = ("allreduce", "downpour", "easgd", "gem", "daso", "pipeline", "horovod")


def parse_params(text: str) -> dict[str, Any]:
    """``lr=0.01,width=64,act=relu`` -> ``{"lr": 0.01, "width": 64, "act": "relu"}``:
    integers, then floats, then true/false, else the text."""
    out: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, eq, raw = item.partition("=")
        name, raw = name.strip(), raw.strip()
        if not eq or not name or not raw:
            raise ValueError(f"--params: {item!r} is not NAME=VALUE (give lr=0.01,width=64)")
        if name in out:
            raise ValueError(f"--params: {name} is given twice")
        value: Any
        for convert in (int, float):
            try:
                value = convert(raw)
                break
            except ValueError:
                continue
        else:
            value = {"true": True, "false": False}.get(raw.lower(), raw)
        out[name] = value
    return out


def build_spec(args: argparse.Namespace, params: dict[str, Any]) -> dict[str, Any]:
    """A one-trial campaign whose only point is ``params`` (each a one-choice categorical)."""
    training: dict[str, Any] = {"task": args.task, "epochs": args.epochs, "scheme": args.scheme}
    if args.ranks_per_fold:
        training["ranks_per_fold"] = args.ranks_per_fold
    if args.options:
        training["options"] = json.loads(args.options)
    return {
        "name": "try",
        "objective": {"metric": args.metric, "direction": args.direction},
        "space": {name: {"type": "categorical", "choices": [value]} for name, value in params.items()},
        "algorithm": {"name": "random", "seed": 0},
        "budget": {"max_trials": 1},
        "folds": args.folds,
        "training": training,
        "max_attempts": 1,
    }


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="hpcopt-agent try",
        description="Train one trial of a task with the given parameters on this machine, "
        "with no server and no campaign (and no mpiexec unless --ranks > 1).",
    )
    ap.add_argument("task", help="the task as a campaign names it: path/task.py:Name or package.module:Name")
    ap.add_argument("--params", default="", help="the trial's parameters: lr=0.01,width=64,activation=relu")
    ap.add_argument("--folds", type=int, default=2, help="K of the K-fold cross-validation (default 2)")
    ap.add_argument("--epochs", type=int, default=1, help="epochs per fold (default 1)")
    ap.add_argument("--ranks", type=int, default=1, help="MPI ranks; above 1 runs mpiexec (default 1)")
    ap.add_argument("--ranks-per-fold", type=int, help="ranks that train one fold (default: the planner's)")
    ap.add_argument(
        "--threads",
        type=int,
        help="torch threads per rank (default: cores / ranks on this machine; give 1 on a shared login node)",
    )
    ap.add_argument("--scheme", default="allreduce", choices=SCHEMES, help="the parallel scheme (default allreduce)")
    ap.add_argument("--metric", default="val_loss", help="the objective: a key evaluate() returns (default val_loss)")
    ap.add_argument("--direction", default="minimize", choices=["minimize", "maximize"])
    ap.add_argument("--options", help='training.options as JSON, e.g. \'{"precision": "bf16"}\'')
    ap.add_argument("--task-root", type=Path, help="where file tasks resolve (default: the working directory)")
    ap.add_argument("--allow-module", action="append", default=[], help="allow a module task under this prefix")
    ap.add_argument(
        "--mpiexec",
        help="the launcher for --ranks > 1 (env MPIEXEC; default: the one beside this Python, else mpiexec)",
    )
    return finish(ap, "hpcopt-agent try")


def _beside_python(name: str) -> str:
    """``name`` in the interpreter's own bin folder (a venv's MPICH wheel), else ``name``."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else name


@contextmanager
def _server(folder: Path) -> Iterator[str]:
    """A throw-away server in this process on ``folder``'s SQLite file; its gRPC address."""
    try:
        from hpcopt_server.local import LocalServer
    except ImportError as exc:
        raise SystemExit(
            f"hpcopt-agent try: needs hpcopt-server beside the agent ({exc.name} is missing): pip install hpcopt-server"
        ) from None
    with LocalServer.open(f"sqlite:///{folder / 'try.db'}", pool_size=4) as server:
        endpoint = server.serve_grpc("127.0.0.1", 0)
        endpoint.start()
        yield f"127.0.0.1:{endpoint.port}"


def _agent_command(args: argparse.Namespace, campaign: int, target: str, folder: Path) -> list[str]:
    agent = ["-m", "hpcopt_agent", "--campaign", str(campaign), "--server", target]
    agent += ["--task-root", str(args.task_root), "--checkpoint-dir", str(folder / "checkpoints")]
    agent += ["--groups", "1", "--reserve", "0", *(f"--allow-module={m}" for m in args.allow_module)]
    if args.threads is not None:
        agent += ["--threads", str(args.threads)]
    if args.ranks == 1:
        return [sys.executable, *agent]
    if shutil.which(args.mpiexec) is None:
        raise SystemExit(f"hpcopt-agent try: --ranks {args.ranks} needs {args.mpiexec!r} on the PATH (or --mpiexec)")
    return [args.mpiexec, "-n", str(args.ranks), sys.executable, "-m", "mpi4py", *agent]


def report(trial: Trial, metric: str) -> str:
    """The folds' metrics and what the campaign would record, as text."""
    lines = [f"trial: {trial.state}"]
    for fold in trial.folds:
        metrics = {k: v for k, v in sorted(fold.metrics.items()) if k != metric}
        shown = "  ".join(f"{k}={v:.6g}" for k, v in metrics.items())
        value = "unfinished" if fold.value is None else f"{metric}={fold.value:.6g}"
        lines.append(f"  fold {fold.index}: {value}  {shown}")
    speeds = [f.metrics["samples_per_second"] for f in trial.folds if "samples_per_second" in f.metrics]
    if speeds:
        lines.append(f"samples/s per fold: {', '.join(f'{s:,.0f}' for s in speeds)}")
    if trial.state == "COMPLETED":
        spread = f" ± {trial.value_std:.3g}" if trial.value_std is not None else ""
        lines.append(f"a campaign would record: {metric} = {trial.value:.6g}{spread} (the mean over the folds)")
    elif trial.error:
        lines.append("the task failed:\n" + trial.error)
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    args.task_root = args.task_root or Path.cwd()
    args.mpiexec = args.mpiexec or os.environ.get("MPIEXEC") or _beside_python("mpiexec")
    for flag, value in (
        ("--folds", args.folds),
        ("--epochs", args.epochs),
        ("--ranks", args.ranks),
        ("--threads", args.threads),
    ):
        if value is not None and value < 1:
            print(f"hpcopt-agent try: {flag} must be at least 1, got {value}", file=sys.stderr)
            return 2
    try:
        try:
            parse_task_ref(args.task)
        except ValueError as exc:
            raise ValueError(f"the task: {exc}") from None
        params = parse_params(args.params)
        if not params:
            raise ValueError("--params: give the trial's parameters, e.g. --params lr=0.01,width=64")
        if args.options:
            json.loads(args.options)
    except ValueError as exc:
        print(f"hpcopt-agent try: {exc}", file=sys.stderr)
        return 2
    from hpcopt import ApiError, Client

    with (
        tempfile.TemporaryDirectory(prefix="hpcopt-try-") as tmp,
        _server(Path(tmp)) as target,
        Client(target) as client,
    ):
        try:
            campaign = client.create_campaign(build_spec(args, params))
        except ApiError as exc:
            fields = "; ".join(f"{e['field']}: {e['message']}" for e in exc.field_errors)
            print(f"hpcopt-agent try: {exc.message}{' (' + fields + ')' if fields else ''}", file=sys.stderr)
            return 2
        env = {k: v for k, v in os.environ.items() if k not in ("HPCOPT_SERVER", "HPCOPT_SERVER_FILE")}
        rc = subprocess.run(_agent_command(args, campaign.id, target, Path(tmp)), env=env).returncode
        trials = client.list_trials(campaign.id)
        if not trials:
            print(f"hpcopt-agent try: the agent trained nothing (exit {rc}); its log is above", file=sys.stderr)
            return 2 if rc == 2 else 1
        trial = client.get_trial(trials[0].id)
        print("\n" + report(trial, args.metric), flush=True)
        unread = [e.reason.removeprefix("fold 0: ") for e in trial.events if e.kind == "params_unread"]
        if unread:  # the run trained on something other than what --params says
            print(f"hpcopt-agent try: --params: {unread[0]}", file=sys.stderr)
            return 2
        return 0 if trial.state == "COMPLETED" else 1
