"""``hpcopt-agent``: one MPI job (``srun`` or ``mpiexec``) pulling trials of a campaign.

    mpiexec -n 8 python -m mpi4py -m hpcopt_agent --server HOST:50051 --campaign 3 \\
        --checkpoint-dir /scratch/ckpt
    hpcopt-agent try path/task.py:Name --params lr=0.01,width=64   # one trial here, first

The world splits into trial groups; each trains one trial at a time, its K folds
spread over fold groups of ``training.ranks_per_fold`` ranks. With ``--groups auto``
(the default) the planner chooses the layout from measured throughput
(``autoplan.py``); ``--groups N`` fixes the number of trial groups.
Exit status: 0 when the campaign is done, the job was signalled (trials checkpointed
and given back) or the walltime is used up; 2 for a configuration the agent refuses at
start (layout, task, settings, server); 1 for anything unexpected.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcopt import AgentClient, ApiError
from hpcopt.cli.util import finish
from hpcopt.core.serverfile import resolve, token_of
from hpcopt.errors import ServerFileError
from hpcopt.transport import verify
from hpcopt_agent.server import register

if TYPE_CHECKING:  # the runtime imports wait until after argparse (MPI starts on import)
    from mpi4py import MPI

    from hpcopt.core.planner import Layout
    from hpcopt_agent.runtime import Context, StopSignal, Walltime
    from hpcopt_agent.script import Script
    from hpcopt_agent.settings import TrainingSettings
    from hpcopt_agent.task import Task

log = logging.getLogger("hpcopt_agent")


def default_checkpoint_dir() -> Path:
    """Never the working directory: an agent started from a source tree would fill it.
    ``$SCRATCH`` is where clusters want large files; the home directory is shared by
    the nodes of most clusters (and ``~/.cache`` is kept out of backups)."""
    if os.environ.get("HPCOPT_CHECKPOINT_DIR"):
        return Path(os.environ["HPCOPT_CHECKPOINT_DIR"])
    if os.environ.get("SCRATCH"):
        return Path(os.environ["SCRATCH"]) / "hpcopt-checkpoints"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "hpcopt" / "checkpoints"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="hpcopt-agent", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--server",
        help="the server's gRPC address (env HPCOPT_SERVER; else the connection file; else 127.0.0.1:50051)",
    )
    ap.add_argument(
        "--server-file",
        help="the connection file `hpcopt-server serve --server-file` wrote (env HPCOPT_SERVER_FILE; "
        "default ~/.hpcopt/server.json when it exists)",
    )
    ap.add_argument(
        "--token",
        default=os.environ.get("HPCOPT_TOKEN"),
        help="an agent-scope token (env HPCOPT_TOKEN; else the token file the connection file names); "
        "needed when the server has auth on",
    )
    ap.add_argument("--campaign", type=int, required=True, help="the campaign id to work on")
    ap.add_argument(
        "--groups",
        type=_groups,
        default="auto",
        help="trial groups (trials trained at once): auto (default) lets the planner choose them, and "
        "training.ranks_per_fold where the spec leaves it unset, from measured throughput; N fixes them",
    )
    ap.add_argument(
        "--ranks-per-node",
        type=_positive,
        help="ranks on each node, for the planner (default: the most ranks sharing a host name)",
    )
    ap.add_argument(
        "--deadline",
        help="when the allocation ends (ISO 8601 time such as 2026-11-29T08:00, or Unix seconds), instead of "
        "Slurm's end time of this job (with --time-limit too: the earlier); the planner plans for it and no "
        "trial starts that is predicted to miss its first checkpoint",
    )
    ap.add_argument(
        "--reserve",
        type=_seconds,
        default=60.0,
        help="seconds before the deadline at which trials checkpoint and go back to the queue, as on SIGUSR1 "
        "(default %(default)s)",
    )
    ap.add_argument(
        "--replan-wait",
        type=_seconds,
        default=30.0,
        help="--groups auto: seconds a trial group may wait for a trial the campaign's max_parallel will not give "
        "it (other agents hold the rest) before the job re-plans at its trial boundaries, for fewer, wider "
        "groups (default %(default)s)",
    )
    ap.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=default_checkpoint_dir(),
        help="where fold checkpoints go, as DIR/<server id>/<campaign>/<trial>/fold<k>.pt; must be visible to "
        "every node and to later jobs, and a trial resumes only from a checkpoint under it "
        "(default: HPCOPT_CHECKPOINT_DIR, else $SCRATCH/hpcopt-checkpoints, else "
        "~/.cache/hpcopt/checkpoints; here %(default)s)",
    )
    ap.add_argument(
        "--task",
        help="override the campaign's training.task (file.py:Name or module:Name); loaded as given, since the "
        "agent's owner chose it",
    )
    ap.add_argument(
        "--task-root",
        type=Path,
        default=Path(os.environ["HPCOPT_TASK_ROOT"]) if os.environ.get("HPCOPT_TASK_ROOT") else None,
        help="a campaign's file task (path.py:Name) runs only if it lies under this directory, symbolic links "
        "resolved, and relative paths are read from it (env HPCOPT_TASK_ROOT; default: the working directory)",
    )
    ap.add_argument(
        "--allow-module",
        action="append",
        default=[m for m in os.environ.get("HPCOPT_ALLOW_MODULES", "").split(",") if m],
        metavar="PREFIX",
        help="a campaign's module task (package.module:Name) runs only if a PREFIX names the module or a package "
        "above it, or it lies under the task root; repeatable (env HPCOPT_ALLOW_MODULES, comma-separated; "
        "default: none)",
    )
    ap.add_argument(
        "--time-limit",
        help="the allocation's walltime (SECONDS, HH:MM:SS or D-HH:MM:SS); default: "
        "Slurm's end time of this job, none outside Slurm",
    )
    ap.add_argument(
        "--tensorboard",
        type=Path,
        default=Path(os.environ["HPCOPT_TENSORBOARD"]) if os.environ.get("HPCOPT_TENSORBOARD") else None,
        metavar="DIR",
        help="write TensorBoard event files to DIR/campaign-<id>/trial-<n>/fold-<k>/: every epoch's metrics and the "
        "trial's parameters as hparams (env HPCOPT_TENSORBOARD; needs the tensorboard package)",
    )
    ap.add_argument(
        "--mlflow",
        default=os.environ.get("HPCOPT_MLFLOW") or None,
        metavar="URI",
        help="log to this MLflow tracking URI (http://host:5000, sqlite:///mlflow.db): a run per trial with its "
        "parameters, a nested run per fold with its metrics per epoch and checkpoint (env HPCOPT_MLFLOW; needs "
        "mlflow-skinny)",
    )
    ap.add_argument("--max-trials", type=int, help="stop after this many trials per group")
    ap.add_argument(
        "--collective-timeout",
        type=float,
        default=300.0,
        help="seconds a gradient collective may wait for a rank before failing (default %(default)s)",
    )
    ap.add_argument("--threads", type=int, help="torch threads per rank (default: cores / ranks on the node)")
    ap.add_argument("--master-addr", help="address of rank 0 for the torch rendezvous (default: its hostname)")
    ap.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return finish(ap, "hpcopt-agent")


def _number(text: str, kind: type[int] | type[float], least: float, what: str) -> float:
    """``text`` as ``kind`` (int or float), finite and at least ``least``, or an argparse error."""
    value: float | None
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not least <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def _groups(text: str) -> str | int:
    return text if text == "auto" else int(_number(text, int, 1, "auto or a positive integer"))


def _positive(text: str) -> int:
    return int(_number(text, int, 1, "a positive integer"))


def _seconds(text: str) -> float:
    return _number(text, float, 0, "a number of seconds >= 0")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:  # every rank reads the same file (a shared home) and dials what it names
        found = resolve(args.server, args.server_file)
        args.server = found.address
        args.token = args.token or token_of(found.file)
        verify(found, args.token)
    except ServerFileError as exc:
        print(f"hpcopt-agent: {exc}", file=sys.stderr)
        return 2
    except ApiError as exc:
        print(f"hpcopt-agent: {exc.message}", file=sys.stderr)
        return 2
    from mpi4py import MPI  # after argparse, so --help works without an MPI launch

    from hpcopt_agent.layout import LayoutError
    from hpcopt_agent.runtime import Context, StopSignal, Walltime, parse_deadline, parse_duration, setup_logging

    world = MPI.COMM_WORLD
    context = Context(world.rank, -1)
    setup_logging(args.log_level, context)
    stop = StopSignal()
    stop.install()
    from hpcopt_agent.comm import limit_threads

    threads = limit_threads(world, args.threads)
    if world.rank == 0:
        how = "--threads" if args.threads else "the node's cores over its ranks; --threads to change"
        log.info("torch: %d thread(s) per rank (%s)", threads, how)

    flag = "--time-limit"
    try:
        limit = parse_duration(args.time_limit) if args.time_limit else None
        flag = "--deadline"
        if args.deadline:
            left = parse_deadline(args.deadline)
            limit = left if limit is None else min(limit, left)
    except ValueError as exc:
        if world.rank == 0:
            log.error("refusing to start: %s: %s", flag, exc)
        return 2

    # The campaign's settings come with the registration of rank 0 (the first group
    # leader); every rank checks them, and all refuse together if any rank cannot go on.
    reg: Any = None
    problem = ""
    if world.rank == 0:
        try:
            with AgentClient(args.server, args.token) as probe:
                reg = register(probe, args, world.size // (args.groups if isinstance(args.groups, int) else 1))
            if not reg.server_id:
                problem = f"the server at {args.server} names no server id (it predates this agent): upgrade it"
        except ApiError as exc:
            problem = f"cannot register with {args.server}: {exc}"
    reg, problem = world.bcast((reg, problem), root=0)
    spec: dict[str, Any] = (reg.campaign_spec or {}) if reg is not None else {}
    if not problem:
        try:
            settings, layout, task = _check(spec, args, world.size)
        except (LayoutError, ValueError) as exc:  # PlanError is a ValueError
            problem = str(exc)
        except Exception as exc:  # the task's own module or constructor failed
            problem = f"cannot load training.task {args.task or spec.get('training', {}).get('task')!r}: {exc!r}"
    problems = [(r, p) for r, p in enumerate(world.allgather(problem)) if p]
    if problems:
        if world.rank == 0:
            rank, first = problems[0]
            where = f" (rank {rank})" if rank else ""
            log.error("refusing to start%s: %s", where, first)
            if reg is not None:  # the campaign's agents list shows why this agent left
                _goodbye_refused(args, reg.agent_id, f"refused to start{where}: {first}")
        return 2
    return _run(args, world, reg, settings, layout, task, context, stop, Walltime(limit, args.reserve), threads)


def _check(
    spec: dict[str, Any], args: argparse.Namespace, world: int
) -> tuple[TrainingSettings, Layout | None, Task | Script]:
    """The settings, the layout when it is fixed (``--groups N`` and a pinned
    ``training.ranks_per_fold``; None: the planner chooses it) and the task (a Task, or
    a script the agent starts per fold)."""
    from hpcopt.core.planner import Allocation, Scaling, Work
    from hpcopt.core.planner import plan as plan_layouts
    from hpcopt_agent.layout import plan
    from hpcopt_agent.pbt import check_mutable
    from hpcopt_agent.schemes import check_scheme, check_task
    from hpcopt_agent.settings import TrainingSettings
    from hpcopt_agent.task import load_task
    from hpcopt_agent.trust import TaskPolicy

    policy = TaskPolicy.of(args.task_root, args.allow_module)  # checked even under --task: a typo is an error
    if args.tensorboard is not None:
        from hpcopt_agent.tracking import check_tensorboard

        check_tensorboard()
    if args.mlflow is not None:
        from hpcopt_agent.tracking import check_mlflow

        check_mlflow(args.mlflow)
    settings = TrainingSettings.from_spec(spec, args.task)
    layout = None
    if isinstance(args.groups, int) and settings.ranks_per_fold is not None:
        layout = plan(world, args.groups, settings.ranks_per_fold, settings.folds)
    else:  # that some layout fits what is pinned: before the task loads or a probe runs
        space = spec.get("space") or {}
        plan_layouts(
            Allocation(world, 1),
            Work(trials=1, folds=settings.folds, epochs=1, train_samples=1),
            Scaling(1.0),
            pinned_ranks=settings.ranks_per_fold,
            groups=args.groups if isinstance(args.groups, int) else None,
            valid_ranks=lambda r: settings.fits(r, space),
        )
    for name in settings.schemes:
        check_scheme(name)
    if settings.script is not None:
        from hpcopt_agent.script import load_script

        return settings, layout, load_script(*settings.script, policy)
    task = load_task(settings.task, None if args.task else policy)
    for name in settings.schemes:
        check_task(name, task)
    check_mutable(task, spec)
    return settings, layout, task


def _run(
    args: argparse.Namespace,
    world: MPI.Comm,
    reg0: Any,
    settings: TrainingSettings,
    layout: Layout | None,
    task: Task | Script,
    context: Context,
    stop: StopSignal,
    walltime: Walltime,
    threads: int,
) -> int:
    import torch

    from hpcopt_agent.comm import local_rank, pick_device, quiet
    from hpcopt_agent.data import Data, LoaderOptions
    from hpcopt_agent.script import Script
    from hpcopt_agent.session import Session

    torch.backends.cudnn.benchmark = settings.cudnn_benchmark
    device = pick_device(local_rank(world))
    data: Data | None = None
    if isinstance(task, Script):  # the script splits its own data (hpcopt_agent.trial.split)
        import numpy as np

        splits, problem = [(np.arange(0), np.arange(0))] * settings.folds, ""
    else:
        data = Data(task.dataset, device, LoaderOptions.from_options(settings.loader), threads)
        splits, problem = _splits(world, task, data, settings)
    if problem:
        if world.rank == 0:
            log.error("refusing to train: %s", problem)
            _goodbye_refused(args, reg0.agent_id, f"refused to train: {problem}")
        quiet(world)
        return 2
    session = Session(args, world, reg0, settings, task, data, splits, context, stop, walltime)
    if layout is None:
        problem = session.plan()
        if problem:
            if world.rank == 0:
                log.error("refusing to start: %s", problem)
                _goodbye_refused(args, reg0.agent_id, f"refused to start: {problem}")
            session.close()
            return 2
        if session.stopped:  # a stop signal while laying out: no trial was taken
            if world.rank == 0:
                log.info("stopping before the first trial: %s", session.stopped)
                _goodbye_refused(args, reg0.agent_id, f"stopped before its first trial: {session.stopped}")
            session.close()
            return 0
    else:
        session.layout = layout
    return session.run()


def _splits(world: MPI.Comm, task: Task, data: Any, settings: TrainingSettings) -> tuple[list[Any], str]:
    """The K folds, computed by the last rank (it reads data in every scheme: a
    parameter server's master and sub-masters never build the dataset) and broadcast
    as one fold number per sample; or why they cannot be made."""
    import numpy as np

    from hpcopt_agent.folds import decode, encode, splits

    last = world.size - 1
    found: Any = None
    if world.rank == last:
        try:
            labels = task.labels() if settings.stratified else None
            if settings.stratified and labels is None:
                raise ValueError("training.options.stratified is true but Task.labels() returned None")
            groups = task.groups() if settings.folds_by == "group" else None
            if settings.folds_by == "group" and groups is None:
                raise ValueError("training.options.folds_by is group but Task.groups() returned None")
            n = len(data)
            parts = splits(n, settings.folds, settings.fold_seed, labels, groups)
            found = (encode(parts, n), len(parts))
        except Exception as exc:  # the task's own code: say which part failed
            found = str(exc) if isinstance(exc, ValueError) else f"building the folds: {exc!r}"
    found = world.bcast(found, root=last)
    if isinstance(found, str):
        return [], found
    fold_of, k = found
    return decode(np.asarray(fold_of), k), ""


def _goodbye_refused(args: argparse.Namespace, agent_id: str, reason: str) -> None:
    """Ends the registration of an agent that refuses to start, saying why."""
    try:
        with AgentClient(args.server, args.token) as client:
            client.deregister(agent_id, reason=reason)
    except Exception as exc:
        log.warning("could not tell the server why this agent refused: %s", exc)


def entry() -> None:
    """``main`` as a program. A refusal at start (exit 2) is agreed by every rank, so the
    job ends quietly: MPI is finalized first, and then the SystemExit that ``python -m
    mpi4py`` would otherwise turn into MPI_Abort (and a screen of abort messages) is
    harmless. The process then leaves through the interpreter's normal exit, never
    ``os._exit`` straight after MPI_Finalize: MPICH's launcher SIGKILLs the ranks still
    inside MPI_Finalize when one rank is gone that soon (exit 9 instead of 2)."""
    if sys.argv[1:2] == ["try"]:  # hpcopt-agent try TASK ...: one trial here, no campaign (trytask.py)
        from hpcopt_agent.trytask import main as try_main

        sys.exit(try_main(sys.argv[2:]))
    rc = main()
    if rc == 2 and "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI

        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.Finalize()
    sys.exit(rc)


if __name__ == "__main__":
    entry()
