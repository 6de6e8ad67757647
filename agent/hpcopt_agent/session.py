"""One agent job from its layout to its exit, in phases: each phase splits the world
by one layout and runs every trial group's loop (``agent.py``); under ``--groups auto``
a phase ends when fewer trials remain to start than there are trial groups, and the
world re-plans (``hpcopt.core.planner``) for what is left: idle groups join as wider fold
groups or wider trial groups. Every group ends its phase at a trial boundary, so no
trial is interrupted; the registered agents follow the layout (a rank that becomes a
group leader registers, one that stops being one says goodbye).
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace
from typing import Any

import numpy as np
from mpi4py import MPI

from hpcopt import AgentClient, ApiError
from hpcopt.core.planner import Allocation, Layout, Plan, Point, Scaling, Work, fit, merge_points, plan
from hpcopt.core.records import QueueState
from hpcopt.errors import PlanError
from hpcopt_agent.autoplan import Planned, choose
from hpcopt_agent.comm import Comms, Notices, bcast, quiet, split
from hpcopt_agent.data import Data
from hpcopt_agent.probe import ProbeError, Stopped
from hpcopt_agent.runtime import Context, StopSignal, Walltime
from hpcopt_agent.script import Script
from hpcopt_agent.server import goodbye, gpus_of, register
from hpcopt_agent.settings import TrainingSettings
from hpcopt_agent.task import Task

log = logging.getLogger("hpcopt_agent")


def script_grace(reserve: float) -> float:
    """Seconds a script may take to checkpoint and exit after a stop before it is
    terminated: half the walltime's ``--reserve`` (so it ends before the allocation
    does), at least 5."""
    return max(5.0, reserve / 2)


def free_parallel(q: QueueState) -> int | None:
    """The campaign's max_parallel less the trials other agents run (None: no limit);
    called when none of this job's groups holds a trial."""
    return max(1, q.max_parallel - q.running) if q.max_parallel else None


class Session:
    def __init__(
        self,
        args: argparse.Namespace,
        world: MPI.Comm,
        reg0: Any,
        settings: TrainingSettings,
        task: Task | Script,
        data: Data | None,
        splits: list[tuple[np.ndarray, np.ndarray]],
        context: Context,
        stop: StopSignal,
        walltime: Walltime,
    ) -> None:
        self.args, self.world, self.reg = args, world, reg0
        self.settings, self.task, self.data, self.splits = settings, task, data, splits
        #: What the spec pins (each phase's settings carry the width it chose).
        self.pinned = settings.ranks_per_fold
        self.context, self.stop, self.walltime = context, stop, walltime
        self.layout: Layout | None = None
        self.planned: Planned | None = None
        #: The agent this rank registered (rank 0 at start; group leaders after).
        self.agent_id: str | None = reg0.agent_id if world.rank == 0 else None
        #: The ranks this rank's registration says its group has (rank 0 registered
        #: before the layout split the world: its group's size may differ).
        self.registered_ranks = world.size // (args.groups if isinstance(args.groups, int) else 1)
        self.client: AgentClient | None = None
        self.trials = 0
        #: Re-plan only when fewer trials than this remain (None: never, a fixed layout).
        self.drain_below: int | None = None
        #: Trials left to start when the layout was planned (the waves count from it).
        self.wave_base = 0
        #: Seconds a group waits for a trial max_parallel holds back before a re-plan
        #: (None: never); doubled after a re-plan that kept the layout.
        self.replan_wait: float | None = None
        self.notices = Notices(world)
        #: Why the job stopped while it laid itself out ('' if it did not).
        self.stopped = ""

    # -- the layout -------------------------------------------------------------------

    def plan(self) -> str:
        """Chooses the layout (every rank); the problem in words, or ''."""
        groups = self.args.groups if isinstance(self.args.groups, int) else None
        left = free = None
        if self.world.rank == 0:
            try:
                with AgentClient(self.args.server, self.args.token) as c:
                    q = c.queue(self.reg.agent_id, self.args.campaign)
                left = None if q.done else q.unstarted
                free = free_parallel(q)
            except ApiError as exc:  # plan for the budget instead
                log.warning("could not ask what is left to start: %s", exc)
        left, free = self.world.bcast((left, free), root=0)
        try:
            self.planned = choose(
                self.world,
                spec=self.reg.campaign_spec or {},
                settings=self.settings,
                task=self.task,
                data=self.data,
                train=self.splits[0][0],
                measured=list(getattr(self.reg, "throughput", ()) or ()),
                per_node=self.args.ranks_per_node,
                groups=groups,
                window=self.walltime.window,
                timeout=self.args.collective_timeout,
                master_addr=self.args.master_addr,
                trials=left,
                max_parallel=free,
                stopping=lambda: self.stop.requested,
            )
        except Stopped as exc:  # before the first trial: nothing to give back
            self.stopped = f"{exc}: {self.stop.name or 'a signal'} received"
            return ""
        except (PlanError, ProbeError) as exc:
            return str(exc)
        self.layout = self.planned.layout
        self.wave_base = self.planned.work.trials
        self._store_probe(self.planned)
        self._predict(self.planned)
        from hpcopt_agent.schemes import uses_horovod

        if groups is None and not uses_horovod(self.settings):  # Horovod starts once per job
            self.drain_below = self.world.size + 1
            self.replan_wait = self.args.replan_wait
        return ""

    def _store_probe(self, planned: Planned) -> None:
        """Rank 0: what the probe measured goes to the server, so the next job (and
        ``GET /campaigns/{id}/throughput``) plans from it until folds measure those widths."""
        probed = [p for p in (planned.model.points if planned.model else ()) if p.source == "probe"]
        if self.world.rank != 0 or not probed:
            return
        try:
            with AgentClient(self.args.server, self.args.token) as c:
                c.report_throughput(self.reg.agent_id, self.args.campaign, probed, planned.work.train_samples)
        except ApiError as exc:  # a server older than this call, or one that refused: plan on
            log.warning("could not store the probe's measurements on the server: %s", exc)

    def _predict(self, planned: Planned) -> None:
        """The walltime rule's figure: seconds from a trial's start to its first checkpoint
        (none for a script: the agent knows neither its samples nor when it checkpoints,
        so the rule takes the longest trial so far)."""
        if planned.model is None or isinstance(self.task, Script):
            return
        best, work = planned.plan.best, planned.work
        per_epoch = (best.fold_seconds - work.fold_overhead) / work.epochs
        every = min(self.settings.checkpoint_every, work.epochs)
        self.walltime.to_checkpoint = work.trial_overhead + work.fold_overhead + every * per_epoch

    def _would_change(self, left: int) -> bool:
        """Whether a plan for ``left`` trials, with the model this job has, lays the
        world out differently from now (the re-plan itself uses the latest measurements)."""
        planned = self.planned
        if planned is None or planned.model is None or self.layout is None:
            return True
        _, layout = self._plan_for(planned.allocation, replace(planned.work, trials=left), planned.model)
        return layout != self.layout

    def _plan_for(self, alloc: Allocation, work: Work, model: Scaling) -> tuple[Plan, Layout]:
        """The plan for ``work`` (what the spec pins kept) and the layout of its best."""
        space = (self.reg.campaign_spec or {}).get("space") or {}
        failed = self.planned.failed if self.planned is not None else frozenset()

        def fits(r: int) -> bool:
            return self.settings.fits(r, space) and r not in failed

        chosen = plan(alloc, work, model, pinned_ranks=self.pinned, valid_ranks=fits)
        return chosen, chosen.best.layout

    def _replan(self) -> bool:
        """Every rank: rank 0 plans for the trials left to start and sends the layout;
        whether it changed."""
        decision: Any = None
        if self.world.rank == 0:
            try:
                decision = self._replan_leader()
            except Exception as exc:  # keep the layout: re-planning is an optimisation
                log.warning("re-plan failed, keeping the layout: %s", exc)
                decision = ("keep", 0, "")
            decision = (*decision, self.planned)
        kind, left, text, self.planned = self.world.bcast(decision, root=0)
        self.wave_base = left
        if kind == "keep":
            self.drain_below = left  # not again until fewer remain
            if self.replan_wait is not None:
                self.replan_wait *= 2
            if self.world.rank == 0 and text:
                log.info("re-plan for %d trial(s): %s; keeping the layout", left, text)
            return False
        assert isinstance(kind, Layout)
        self.layout = kind
        if self.replan_wait is not None:
            self.replan_wait = self.args.replan_wait
        if self.world.rank == 0:
            log.info("re-plan for %d trial(s): %s", left, text)
        return True

    def _replan_leader(self) -> tuple[Any, int, str]:
        assert self.client is not None and self.agent_id is not None and self.planned is not None
        q = self.client.queue(self.agent_id, self.args.campaign, with_throughput=True)
        if q.done or q.unstarted == 0:
            return "keep", max(q.unstarted, 1), ""
        old = self.planned
        schemes = set(self.settings.schemes)
        measured = [Point.from_dict(p) for p in q.throughput]
        earlier = old.model.points if old.model is not None else ()
        model = fit(merge_points([p for p in measured if p.scheme in schemes], earlier))
        left = self.walltime.window()  # the trials' window: the walltime less --reserve
        # Every group of this job is at a trial boundary: what runs is other agents'.
        work = replace(
            old.work,
            trials=q.unstarted,
            max_parallel=free_parallel(q),
            deadline=None if left is None else max(left, 1.0),
        )
        chosen, layout = self._plan_for(old.allocation, work, model)
        self.planned = replace(old, plan=chosen, model=model, work=work)
        text = chosen.describe(old.allocation)
        if self.layout is not None and layout == self.layout:
            return "keep", q.unstarted, text
        return layout, q.unstarted, text

    # -- the phases -------------------------------------------------------------------

    def run(self) -> int:
        self.walltime.watch(self.stop)
        normal = True
        comms = self._start_phase()
        while True:
            reason, normal, replan = self._phase(comms)
            quiet(self.world)  # groups end their phases at their own trial boundaries
            self.notices.settle()
            if self.world.allreduce(replan, op=MPI.LAND):
                if self._replan():
                    if self.planned is not None:
                        self._predict(self.planned)
                    comms.close()
                    comms = self._start_phase()
                continue
            if replan:  # this group waited to re-plan; another stopped (done, signalled...)
                reason = "another trial group stopped, so there is no re-plan"
            if comms.is_group_leader:
                (log.info if normal else log.error)("stopping after %d trial(s): %s", self.trials, reason)
            self._end(comms)
            break
        self.walltime.cancel()
        all_normal = self.world.allreduce(normal, op=MPI.LAND)
        return 0 if all_normal else 1

    def _start_phase(self) -> Comms:
        from hpcopt_agent.schemes import uses_horovod

        assert self.layout is not None
        layout, args = self.layout, self.args
        self.settings = replace(self.settings, ranks_per_fold=layout.ranks_per_fold)
        comms = split(layout, self.world, timeout=args.collective_timeout, master_addr=args.master_addr)
        if uses_horovod(self.settings):
            comms.init_horovod()
        self.context.where = f"r{self.world.rank} g{comms.group_index}"
        if comms.is_fold_leader and self.client is None:
            self.client = AgentClient(args.server, args.token)
        if comms.is_group_leader and self.agent_id is not None and self.registered_ranks != layout.group_size:
            assert self.client is not None
            try:  # the agents list counts this group's ranks, not the world's
                self.client.resize(self.agent_id, layout.group_size, gpus_of(layout.group_size))
                self.registered_ranks = layout.group_size
            except ApiError as exc:  # a server older than this call: the list keeps the old count
                log.warning("could not tell the server this group's size: %s", exc)
        if comms.is_group_leader and self.agent_id is not None and self.world.rank == 0 and not self.trials:
            log.info("registered as agent %s (%d ranks)", self.agent_id, layout.group_size)
        if comms.is_group_leader and self.agent_id is None:
            assert self.client is not None
            self.reg = register(self.client, args, layout.group_size)
            self.agent_id = self.reg.agent_id
            self.registered_ranks = layout.group_size
            log.info("registered as agent %s (%d ranks)", self.agent_id, layout.group_size)
        elif not comms.is_group_leader and self.agent_id is not None:
            assert self.client is not None
            goodbye(self.client, self.agent_id)  # this rank's group joined a wider one
            self.agent_id = None
        if self.world.rank == 0:
            log.info(
                "campaign %d: %s; scheme %s, %d epochs",
                args.campaign,
                layout.describe(),
                self.settings.scheme
                if self.settings.scheme != "search"
                else "searched among " + ", ".join(self.settings.schemes),
                self.settings.epochs,
            )
        if not comms.is_fold_leader and self.client is not None:
            self.client.close()
            self.client = None
        return comms

    def _phase(self, comms: Comms) -> tuple[str, bool, bool]:
        from hpcopt_agent.agent import GroupLoop
        from hpcopt_agent.fold import FoldTrainer
        from hpcopt_agent.script.fold import ScriptFold
        from hpcopt_agent.tracking import Tracking

        args = self.args
        agent_id = bcast(comms.group, self.agent_id)
        # Every rank holds a registration (rank 0's, sent to all at start): one server, one lease term.
        server_id, heartbeat = self.reg.server_id, self.reg.heartbeat_seconds
        tracking = Tracking(args.tensorboard, args.mlflow, str((self.reg.campaign_spec or {}).get("name", "")))
        trainer: FoldTrainer | ScriptFold
        if isinstance(self.task, Script):
            trainer = ScriptFold(
                comms=comms,
                script=self.task,
                settings=self.settings,
                stop=self.stop,
                checkpoint_root=args.checkpoint_dir.resolve(),
                server_id=server_id,
                grace=script_grace(args.reserve),
                master_addr=args.master_addr,
                tracking=tracking,
            )
        else:
            assert self.data is not None
            trainer = FoldTrainer(
                comms=comms,
                task=self.task,
                data=self.data,
                settings=self.settings,
                stop=self.stop,
                checkpoint_root=args.checkpoint_dir.resolve(),
                server_id=server_id,
                timeout=args.collective_timeout,
                tracking=tracking,
            )
        loop = GroupLoop(
            comms=comms,
            client=self.client if comms.is_fold_leader else None,
            agent_id=agent_id,
            campaign_id=args.campaign,
            heartbeat_seconds=heartbeat,
            trainer=trainer,
            splits=self.splits,
            stop=self.stop,
            walltime=self.walltime,
            context=self.context,
            max_trials=None if args.max_trials is None else max(0, args.max_trials - self.trials),
            drain_below=self.drain_below,
            wave_base=self.wave_base,
            replan_wait=self.replan_wait,
            notices=self.notices,
            would_change=self._would_change,
        )
        reason, normal = loop.run()
        self.trials += loop.trials
        return reason, normal, loop.replan

    def _end(self, comms: Comms) -> None:
        if self.client is not None:
            if comms.is_group_leader and self.agent_id is not None:
                goodbye(self.client, self.agent_id)
            self.client.close()
            self.client = None
        quiet(self.world)
        comms.close()

    def close(self) -> None:
        """After a refusal in :meth:`plan`: the probe's process groups go."""
        import torch.distributed as dist

        quiet(self.world)
        if dist.is_initialized():
            dist.destroy_process_group()
