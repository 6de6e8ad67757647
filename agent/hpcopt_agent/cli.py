"""``hpcopt-agent``: one MPI job (``srun`` or ``mpiexec``) pulling trials of a campaign.

    mpiexec -n 8 python -m mpi4py -m hpcopt_agent --server HOST:50051 --campaign 3 \\
        --groups 2 --checkpoint-dir /scratch/ckpt

The world splits into ``--groups`` trial groups; each trains one trial at a time, its K
folds spread over fold groups of the campaign's ``training.ranks_per_fold`` ranks.
Exit status: 0 when the campaign is done, the job was signalled (trials checkpointed
and given back) or the walltime is used up; 2 for a configuration the agent refuses at
start (layout, task, settings, server); 1 for anything unexpected.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcopt import Agent, AgentClient, ApiError
from hpcopt.cliutil import finish
from hpcopt_agent import __version__

if TYPE_CHECKING:  # the runtime imports wait until after argparse (MPI starts on import)
    from mpi4py import MPI

    from hpcopt_agent.layout import Layout
    from hpcopt_agent.runtime import Context, StopSignal, Walltime
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
        default=os.environ.get("HPCOPT_SERVER", "127.0.0.1:50051"),
        help="the server's gRPC address (env HPCOPT_SERVER; default %(default)s)",
    )
    ap.add_argument(
        "--token",
        default=os.environ.get("HPCOPT_TOKEN"),
        help="an agent-scope token (env HPCOPT_TOKEN); needed when the server has auth on",
    )
    ap.add_argument("--campaign", type=int, required=True, help="the campaign id to work on")
    ap.add_argument("--groups", type=int, default=1, help="trial groups: trials trained at once (default 1)")
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mpi4py import MPI  # after argparse, so --help works without an MPI launch

    from hpcopt_agent.layout import LayoutError
    from hpcopt_agent.runtime import Context, StopSignal, Walltime, parse_duration, setup_logging

    world = MPI.COMM_WORLD
    context = Context(world.rank, -1)
    setup_logging(args.log_level, context)
    stop = StopSignal()
    stop.install()
    from hpcopt_agent.comm import limit_threads

    threads = limit_threads(world, args.threads)

    try:
        limit = parse_duration(args.time_limit) if args.time_limit else None
    except ValueError as exc:
        if world.rank == 0:
            log.error("refusing to start: --time-limit: %s", exc)
        return 2

    # The campaign's settings come with the registration of rank 0 (the first group
    # leader); every rank checks them, and all refuse together if any rank cannot go on.
    reg: Any = None
    problem = ""
    if world.rank == 0:
        try:
            with AgentClient(args.server, args.token) as probe:
                reg = _register(probe, args, world.size // max(args.groups, 1))
            if not reg.server_id:
                problem = f"the server at {args.server} names no server id (it predates this agent): upgrade it"
        except ApiError as exc:
            problem = f"cannot register with {args.server}: {exc}"
    reg, problem = world.bcast((reg, problem), root=0)
    spec: dict[str, Any] = (reg.campaign_spec or {}) if reg is not None else {}
    if not problem:
        try:
            settings, layout, task = _check(spec, args, world.size)
        except (LayoutError, ValueError) as exc:
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
    return _run(args, world, reg, settings, layout, task, context, stop, Walltime(limit), threads)


def _register(client: AgentClient, args: argparse.Namespace, ranks: int) -> Agent:
    import torch

    return client.register(
        host=socket.gethostname(),
        ranks=ranks,
        gpus=min(ranks, torch.cuda.device_count()) if torch.cuda.is_available() else 0,
        slurm_job_id=os.environ.get("SLURM_JOB_ID", ""),
        campaign_id=args.campaign,
        version=__version__,
    )


def _check(spec: dict[str, Any], args: argparse.Namespace, world: int) -> tuple[TrainingSettings, Layout, Task]:
    from hpcopt_agent.layout import plan
    from hpcopt_agent.schemes import check_scheme, check_task
    from hpcopt_agent.settings import TrainingSettings
    from hpcopt_agent.task import load_task
    from hpcopt_agent.trust import TaskPolicy

    policy = TaskPolicy.of(args.task_root, args.allow_module)  # checked even under --task: a typo is an error
    settings = TrainingSettings.from_spec(spec, args.task)
    layout = plan(world, args.groups, settings.ranks_per_fold, settings.folds)
    for name in settings.schemes:
        check_scheme(name)
    task = load_task(settings.task, None if args.task else policy)
    for name in settings.schemes:
        check_task(name, task)
    return settings, layout, task


def _run(
    args: argparse.Namespace,
    world: MPI.Comm,
    reg0: Any,
    settings: TrainingSettings,
    layout: Layout,
    task: Task,
    context: Context,
    stop: StopSignal,
    walltime: Walltime,
    threads: int,
) -> int:
    import torch
    from mpi4py import MPI

    from hpcopt_agent.agent import GroupLoop
    from hpcopt_agent.comm import bcast, quiet, split
    from hpcopt_agent.data import Data, LoaderOptions
    from hpcopt_agent.fold import FoldTrainer
    from hpcopt_agent.schemes import uses_horovod

    comms = split(layout, world, timeout=args.collective_timeout, master_addr=args.master_addr)
    torch.backends.cudnn.benchmark = settings.cudnn_benchmark
    if uses_horovod(settings):
        comms.init_horovod()
    context.where = f"r{world.rank} g{comms.group_index}"
    client = AgentClient(args.server, args.token) if comms.is_fold_leader else None
    reg = reg0
    if comms.is_group_leader and world.rank != 0:
        assert client is not None
        reg = _register(client, args, layout.group_size)
    reg = bcast(comms.group, reg)
    if world.rank == 0:
        log.info(
            "campaign %d: %s; scheme %s, %d epochs",
            args.campaign,
            layout.describe(),
            settings.scheme if settings.scheme != "search" else "searched among " + ", ".join(settings.schemes),
            settings.epochs,
        )
    if comms.is_group_leader:
        log.info("registered as agent %s (%d ranks)", reg.agent_id, layout.group_size)

    data = Data(task.dataset, comms.device, LoaderOptions.from_options(settings.loader), threads)
    splits, problem = _splits(world, task, data, settings)
    if problem:
        if world.rank == 0:
            log.error("refusing to train: %s", problem)
        quiet(world)
        comms.close()
        return 2
    trainer = FoldTrainer(
        comms=comms,
        task=task,
        data=data,
        settings=settings,
        stop=stop,
        checkpoint_root=args.checkpoint_dir.resolve(),
        server_id=reg.server_id,
        timeout=args.collective_timeout,
    )
    loop = GroupLoop(
        comms=comms,
        client=client,
        agent_id=reg.agent_id,
        campaign_id=args.campaign,
        heartbeat_seconds=reg.heartbeat_seconds,
        trainer=trainer,
        splits=splits,
        stop=stop,
        walltime=walltime,
        context=context,
        max_trials=args.max_trials,
    )
    reason, normal = loop.run()
    if comms.is_group_leader:
        (log.info if normal else log.error)("stopping after %d trial(s): %s", loop.trials, reason)
    if client is not None:
        if comms.is_group_leader:
            _goodbye(client, reg.agent_id)
        client.close()
    quiet(world)
    comms.close()
    all_normal = world.allreduce(normal, op=MPI.LAND)
    return 0 if all_normal else 1


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


def _goodbye(client: AgentClient, agent_id: str) -> None:
    """Ends the registration, so the dashboard shows this agent as gone at once (a
    server that cannot be reached is only logged: the agent is leaving anyway)."""
    try:
        requeued = client.deregister(agent_id)
    except Exception as exc:
        log.warning("could not end the registration of agent %s: %s", agent_id, exc)
        return
    if requeued:
        log.warning("trials with id(s) %s were still held and went back to the queue", ", ".join(map(str, requeued)))


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
    rc = main()
    if rc == 2 and "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI

        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.Finalize()
    sys.exit(rc)


if __name__ == "__main__":
    entry()
