"""``--groups auto``: the agent lays out its allocation itself (``hpcopt.core.planner``).

Every rank takes part: the ranks per node come from the host names (or
``--ranks-per-node``); the throughput model from the campaign's measured points (sent
with the registration) or, where the campaign has none for its scheme, from a probe on
the allocation itself (``probe.py``); the work left from the spec's budget, folds and
epochs, the first fold's training samples and the walltime; the trials from what the campaign has left
to start (else its budget). Rank 0 plans and sends the plan to all, so every rank
builds the same communicators.
"""

from __future__ import annotations

import logging
import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from mpi4py import MPI

from hpcopt.core.planner import (
    Allocation,
    Layout,
    Plan,
    Point,
    Scaling,
    Work,
    epochs_per_trial,
    fit,
    learns_of,
    nodes_spanned,
    plan,
    units_of,
)
from hpcopt.errors import PlanError
from hpcopt_agent.data import Data
from hpcopt_agent.probe import Stopped, middle_params, probe
from hpcopt_agent.script import Script
from hpcopt_agent.settings import TrainingSettings
from hpcopt_agent.task import Task

log = logging.getLogger("hpcopt_agent")


@dataclass(frozen=True)
class Planned:
    layout: Layout
    plan: Plan
    #: None when only one layout fit and nothing was measured (no probe ran).
    model: Scaling | None
    allocation: Allocation
    work: Work
    #: Seconds the probe took (0: no probe ran); the plan's deadline is read after it.
    probe_seconds: float = 0.0
    #: Widths (ranks per fold) the probe could not train: no plan, nor re-plan, uses them.
    failed: frozenset[int] = frozenset()


def ranks_per_node(world: MPI.Comm, given: int | None) -> int:
    """``given``, else the most ranks sharing one host name."""
    if given is not None:
        return given
    return max(Counter(world.allgather(socket.gethostname())).values())


def probe_widths(world: int, per_node: int, valid: list[int]) -> list[int]:
    """The widths the probe measures: one rank, the widest fold group on one node, and
    (on several nodes) one spanning two; each dividing the world."""
    out = [1]
    one_node = max((r for r in range(2, min(per_node, world) + 1) if world % r == 0), default=None)
    if one_node:
        out.append(one_node)
    if world >= 2 * per_node and world % (2 * per_node) == 0:
        out.append(2 * per_node)
    # A scheme that needs several ranks (a parameter server) is measured where it fits too.
    wider = [r for r in valid if r not in out and world % r == 0]
    if valid and not any(r in valid for r in out[1:]) and wider:
        out.append(wider[0])
    return sorted(set(out))


def choose(
    world: MPI.Comm,
    *,
    spec: dict[str, Any],
    settings: TrainingSettings,
    task: Task | Script,
    data: Data | None,
    train: np.ndarray,
    measured: list[dict[str, Any]],
    per_node: int | None,
    groups: int | None,
    window: Callable[[], float | None],
    timeout: float,
    master_addr: str | None,
    trials: int | None = None,
    max_parallel: int | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> Planned:
    """The layout for this allocation (every rank calls; all get the same answer);
    ``max_parallel``: the trials the campaign lets this job run at once (default: the
    budget's); ``window()``: the seconds trials may still train (the walltime left less
    ``--reserve``; None without a deadline), read after the probe, so that the plan's
    deadline is the window the trials have.
    Raises :class:`PlanError` or :class:`ProbeError` with a message naming the field, and
    :class:`Stopped` on every rank once ``stopping()`` is true on any (a stop signal
    during start-up: no probe runs, or the one running ends within a few steps)."""
    per_node = ranks_per_node(world, per_node)
    alloc = Allocation(world.size, per_node)
    space = spec.get("space") or {}
    valid = [r for r in range(1, world.size + 1) if world.size % r == 0 and settings.fits(r, space)]
    schemes = set(settings.schemes)
    points = [Point.from_dict(p) for p in measured]
    points = [p for p in points if p.scheme in schemes]
    budget = spec.get("budget") or {}
    work = Work(
        trials=trials or int(budget.get("max_trials") or 1),
        folds=settings.folds,
        epochs=epochs_per_trial(spec),
        train_samples=max(1, len(train)),
        max_parallel=max_parallel or budget.get("max_parallel"),
        units=units_of(spec),
        learns=learns_of(spec),
    )

    # Check what the user pinned before spending time on a probe. A width the probe
    # could not train is out of every later plan.
    failed: set[int] = set()

    def fits(r: int) -> bool:
        return settings.fits(r, space) and r not in failed

    only = plan(alloc, work, Scaling(1.0), pinned_ranks=settings.ranks_per_fold, groups=groups, valid_ranks=fits)
    if not points and len(only.table) == 1:  # nothing to choose: no probe
        lay = only.best.layout
        if world.rank == 0:
            log.info("planner: %s is the only layout that fits", lay.shape())
        return Planned(lay, only, None, alloc, work)
    if world.allreduce(stopping(), op=MPI.LOR):
        raise Stopped("stopped before laying out the allocation")
    probed = 0.0
    if not points and (isinstance(task, Script) or data is None):
        # A probe would run the user's training: until the script's folds report
        # samples_per_second, plan as if training scaled perfectly with ranks.
        if world.rank == 0:
            log.info(
                "planner: no throughput measured for this campaign yet and a script is not probed: planning as if "
                "it scaled perfectly with ranks until its folds report samples_per_second (pin "
                "training.ranks_per_fold or pass --groups N to choose yourself)"
            )
    elif not points:
        assert isinstance(task, Task) and data is not None
        pinned = settings.ranks_per_fold
        widths = [pinned] if pinned is not None else probe_widths(world.size, per_node, valid)
        if world.rank == 0:
            log.info("no throughput measured for this campaign yet: probing %s rank(s) per fold", widths)
        nodes_of = {r: nodes_spanned(r, per_node, world.size) for r in widths}
        scheme = settings.schemes[0] if settings.schemes else settings.scheme
        started = time.monotonic()
        points, dropped = probe(
            world,
            task,
            data,
            train,
            middle_params(space),
            widths,
            nodes_of=nodes_of,
            scheme=scheme,
            precision=settings.precision,
            timeout=timeout,
            master_addr=master_addr,
            stopping=stopping,
        )
        probed = time.monotonic() - started
        if world.allreduce(stopping(), op=MPI.LOR):
            raise Stopped("stopped during the throughput probe")
        failed.update(dropped)
        if failed and world.rank == 0:
            log.warning(
                "planner: without %s rank(s) per fold (the probe failed there); pin training.ranks_per_fold to "
                "skip the probe",
                ", ".join(map(str, sorted(failed))),
            )
    model = fit(points) if points else Scaling(1.0, assumptions=("a script: perfect scaling assumed",))
    left = world.bcast(window() if world.rank == 0 else None, root=0)
    if left is not None and left <= 0:
        raise PlanError(
            "no walltime is left for a trial: the allocation ends within --reserve, the seconds kept for "
            "checkpointing and giving trials back"
        )
    work = replace(work, deadline=left)
    if world.rank == 0 and left is not None:
        log.info("planner: the trials have %.0f s of walltime (after the probe, less --reserve)", left)
    chosen = plan(alloc, work, model, pinned_ranks=settings.ranks_per_fold, groups=groups, valid_ranks=fits)
    chosen = world.bcast(chosen if world.rank == 0 else None, root=0)
    layout = chosen.best.layout
    if world.rank == 0:
        source = ", ".join(f"{p.ranks}r/{p.nodes}n {p.samples_per_second:.4g}/s ({p.source})" for p in model.points)
        log.info("planner: model from %s; %s", source, "; ".join(model.assumptions) or "fitted on every term")
        log.info("planner: %s", chosen.describe(alloc))
    # A script's first plan has no model (its walltime rule then uses the longest trial so far).
    return Planned(layout, chosen, model if points else None, alloc, work, probed, frozenset(failed))


__all__ = ["Planned", "choose", "probe_widths", "ranks_per_node"]
