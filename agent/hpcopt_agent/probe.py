"""The throughput probe: a few dozen training steps of the campaign's task on the
allocation itself, at one rank per fold and at wider fold groups, so the planner has
a scaling curve before the first fold has trained (``--groups auto`` with nothing
measured yet).

Every rank trains at once in each phase (the world cut into fold groups of ``r``
ranks, DDP over each), so what a node's ranks share (cores, memory bandwidth, the
network) is in the figure, as it is when the campaign trains. The model is the task's,
built from the middle of the search space; the batches are the first fold's training
samples, read through the agent's loader. Each phase warms up, then times steps between
world barriers until it has run ``steps`` steps or about ``seconds`` seconds (agreed
by all ranks), and reports the samples per second of one fold group: its ranks' samples
over the slowest rank's time.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI
from torch.nn.parallel import DistributedDataParallel

from hpcopt.core.planner import Point
from hpcopt_agent.comm import CollectiveTimeout, bounded_barrier, quiet
from hpcopt_agent.data import Data
from hpcopt_agent.precision import Precision
from hpcopt_agent.task import Task, as_dict, as_user

log = logging.getLogger("hpcopt_agent")

WARMUP = 3


class ProbeError(RuntimeError):
    """The probe could not train; the message says which phase and why."""


class Stopped(Exception):
    """A stop signal (SIGTERM, SIGUSR1) came while the job was laying itself out: it
    ends before its first trial, at once, on every rank."""


def middle_params(space: dict[str, Any]) -> dict[str, Any]:
    """A point in the middle of the space: the midpoint of each range (geometric on a
    log scale), the first choice of each categorical."""
    out: dict[str, Any] = {}
    for name, p in space.items():
        kind = p.get("type")
        if kind == "categorical":
            out[name] = p["choices"][0]
        elif kind in ("real", "int"):
            lo, hi = float(p["low"]), float(p["high"])
            mid = math.sqrt(lo * hi) if p.get("scale") == "log" and lo > 0 else (lo + hi) / 2
            out[name] = round(mid) if kind == "int" else mid
    return out


def init_torch(world: MPI.Comm, device: torch.device, timeout: float, master_addr: str | None) -> None:
    """torch.distributed over the world, once (the fold groups are its subgroups)."""
    from hpcopt_agent.comm import rendezvous

    if dist.is_initialized():
        return
    host, port = rendezvous(world, master_addr)
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        init_method=f"tcp://{host}:{port}",
        rank=world.rank,
        world_size=world.size,
        timeout=timedelta(seconds=timeout),
    )


def probe(
    world: MPI.Comm,
    task: Task,
    data: Data,
    train: np.ndarray,
    params: dict[str, Any],
    ranks: list[int],
    *,
    nodes_of: dict[int, int],
    scheme: str,
    precision: str,
    timeout: float,
    master_addr: str | None = None,
    steps: int = 30,
    seconds: float = 2.0,
    stopping: Callable[[], bool] = lambda: False,
) -> tuple[list[Point], dict[int, str]]:
    """One :class:`Point` per fold-group width in ``ranks`` (each divides the world) that
    trained, and why each other width failed (``{ranks: reason}``, logged): the planner
    plans without those. ``nodes_of[r]`` is how many nodes such a fold group spans.
    :class:`ProbeError` when no width trained; :class:`Stopped` when ``stopping()`` became
    true on any rank (checked between widths and every few steps)."""
    device = data.device
    if any(r > 1 for r in ranks) and world.size > 1:
        init_torch(world, device, timeout, master_addr)
    points: list[Point] = []
    dropped: dict[int, str] = {}
    for r in ranks:
        if world.allreduce(stopping(), op=MPI.LOR):
            raise Stopped(f"stopped during the throughput probe, before {r} rank(s) per fold")
        t0 = time.perf_counter()
        try:
            rate = _phase(
                world, task, data, train, params, r, steps, seconds, timeout, Precision(precision, device), stopping
            )
        except Exception as exc:
            rate, problem = 0.0, f"{type(exc).__name__}: {exc}"
        else:
            problem = ""
        _bounded(world, timeout, r)
        problems = [p for p in world.allgather(problem) if p]
        if problems:
            dropped[r] = problems[0]
            if world.rank == 0:
                log.warning("probe: %d rank(s) per fold failed, so no layout uses that width: %s", r, problems[0])
            continue
        points.append(Point(r, nodes_of.get(r, 1), rate, scheme, "probe"))
        if world.rank == 0:
            log.info(
                "probe: %d rank(s) per fold: %.4g samples/s per fold group (%.1f s)", r, rate, time.perf_counter() - t0
            )
    if not points:
        why = "; ".join(f"at {r} rank(s) per fold: {p}" for r, p in dropped.items())
        raise ProbeError(
            f"the throughput probe failed at every width it measured ({why}); pin training.ranks_per_fold, "
            "and --groups, to skip the probe"
        )
    return points, dropped


def _bounded(world: MPI.Comm, timeout: float, r: int) -> None:
    """A barrier of the probe: a rank that hangs (in the task's step, say) ends the
    job after ``--collective-timeout`` seconds, as in a fold, instead of hanging it."""
    try:
        bounded_barrier(world, timeout)
    except CollectiveTimeout as exc:
        missing = f"world rank(s) {exc.missing}" if exc.missing else "a rank"
        log.error(
            "the throughput probe at %d rank(s) per fold: %s did not arrive within %.0f s (--collective-timeout); "
            "ending the job",
            r,
            missing,
            timeout,
        )
        world.Abort(3)


@contextlib.contextmanager
def _width_groups(world: MPI.Comm, r: int, device: torch.device, timeout: float) -> Iterator[Any]:
    """The process group of this rank's fold group at ``r`` ranks (None for one rank),
    destroyed with the others of the width on the way out, also where the width failed:
    the next width builds its own."""
    if r == 1:
        yield None
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    groups = [
        dist.new_group(list(range(g * r, g * r + r)), timeout=timedelta(seconds=timeout), backend=backend)
        for g in range(world.size // r)
    ]
    try:
        yield groups[world.rank // r]
    finally:
        for g in groups:
            dist.destroy_process_group(g)


def _phase(
    world: MPI.Comm,
    task: Task,
    data: Data,
    train: np.ndarray,
    params: dict[str, Any],
    r: int,
    steps: int,
    seconds: float,
    timeout: float,
    precision: Precision,
    stopping: Callable[[], bool] = lambda: False,
) -> float:
    """The samples per second of one fold group at ``r`` ranks."""
    with _width_groups(world, r, data.device, timeout) as pg:
        torch.manual_seed(0)
        built = task.build(params)
        single = isinstance(built, torch.nn.Module)
        models = {k: m.to(data.device) for k, m in as_dict(built).items()}
        optimizers = precision.wrap(as_dict(task.optimizer(params, as_user(models, single))))
        wrapped: dict[str, Any] = (
            dict(models) if pg is None else {k: DistributedDataParallel(m, process_group=pg) for k, m in models.items()}
        )
        precision.compress(wrapped)
        step_models, step_optimizers = as_user(wrapped, single), as_user(optimizers, single)
        batch = max(1, task.batch_size(params) // r)
        order = np.random.default_rng(world.rank).permutation(train)
        need = (WARMUP + steps) * batch
        order = np.resize(order, max(need, batch))
        chunks = Data.batches(order[:need], batch)
        data.open(0)
        done, elapsed, t0 = 0, 0.0, 0.0
        try:
            for i, b in enumerate(data.read(chunks)):
                if i == WARMUP:
                    quiet(world)
                    t0 = time.perf_counter()
                with precision.active():
                    task.train_step(step_models, step_optimizers, b, params)
                precision.end_step()
                if i >= WARMUP:
                    done += 1
                    # Every few steps, all ranks agree whether the time is up.
                    if done % 4 == 0:
                        over = time.perf_counter() - t0 > seconds or stopping()
                        _bounded(world, timeout, r)
                        if world.allreduce(over, op=MPI.LOR):
                            break
            if data.device.type == "cuda":
                torch.cuda.synchronize(data.device)
            elapsed = time.perf_counter() - t0
        finally:
            data.close()
        _bounded(world, timeout, r)
        done = world.allreduce(done, op=MPI.MIN)
        slowest = world.allreduce(elapsed, op=MPI.MAX)
        if pg is not None:  # as Comms.close: a barrier and a pause before gloo's groups go
            dist.barrier(group=pg)
            quiet(world)
            time.sleep(0.1)

        if done < 1 or slowest <= 0:
            raise ProbeError(f"no step timed at {r} rank(s) per fold")
        return float(r * batch * done / slowest)


def main(argv: list[str] | None = None) -> int:
    """``python -m hpcopt_agent.probe SPEC``: the probe on one rank here, for ``hpcopt
    plan --probe``; prints ``{"points": [...], "train_samples": N}`` as one JSON line."""
    import argparse
    import json
    import sys

    from hpcopt.core.specfile import load_spec_file
    from hpcopt_agent.comm import local_rank, pick_device
    from hpcopt_agent.data import LoaderOptions
    from hpcopt_agent.folds import splits
    from hpcopt_agent.settings import TrainingSettings
    from hpcopt_agent.task import load_task

    ap = argparse.ArgumentParser(prog="python -m hpcopt_agent.probe", description=main.__doc__)
    ap.add_argument("spec", help="the campaign spec (YAML or JSON)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    spec = load_spec_file(args.spec).model_dump(mode="json")
    world = MPI.COMM_WORLD
    settings = TrainingSettings.from_spec(spec)
    task = load_task(settings.task, None)  # the user's own spec, on their own machine
    data = Data(task.dataset, pick_device(local_rank(world)), LoaderOptions.from_options(settings.loader), 1)
    train = splits(len(data), settings.folds, settings.fold_seed, None, None)[0][0]
    points, _ = probe(
        world,
        task,
        data,
        train,
        middle_params(spec.get("space") or {}),
        [1],
        nodes_of={1: 1},
        scheme=settings.schemes[0],
        precision=settings.precision,
        timeout=300.0,
    )
    print(json.dumps({"points": [p.as_dict() for p in points], "train_samples": len(train)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
