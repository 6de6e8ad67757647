"""A PBT interval whose agent cannot read its parent's checkpoints
(``AgentService.ReportUnreadableParent``).

An agent checks, before it trains a PBT interval, that every fold's checkpoint of the
parent the server named loads. When one does not (the files were never written, a disk
lost them, or the parent's agent wrote them where this one cannot see), it says so here
instead of failing the interval. In one transaction, under the campaign's lock:

- the interval's lineage gains the parent in ``unreadable``, which the PBT optimizer
  reads back from the trials (so every server and replica sees it): that interval is
  never offered as a parent again;
- the optimizer decides the interval's step again without it (``Optimizer.replan``):
  the next-best member to copy, or the member's own previous interval, or, when the
  member's own last interval is the unreadable one, the best readable interval at its
  epoch. The trial keeps its number, lease and attempt; its params and lineage are the
  new plan's;
- both trials' event logs say what happened (``parent_unreadable`` on the interval,
  ``checkpoint_unreadable`` on the parent).

When the member's own last interval is the unreadable one and no readable interval
has reached its epoch yet, but another member is training toward it, the interval
keeps its parent and waits: the answer names the same parent, the lease is extended,
and the agent asks again (``parent_unreadable`` is logged once, and again when it is
re-planned). So the member keeps its schedule and the budget stays exact.

Only an interval none of whose folds has started is re-planned (weights from two
parents must not mix in one trial), only for the parent its lineage names now, and at
most :data:`~hpcopt_server.service.limits.MAX_UNREADABLE` times.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from hpcopt_server import domain as d
from hpcopt_server import rules
from hpcopt_server.errors import FailedPrecondition, InvalidArgument
from hpcopt_server.rules import Refusal
from hpcopt_server.service import limits as lim
from hpcopt_server.service.agent_messages import Lease
from hpcopt_server.service.context import Context
from hpcopt_server.storage.agent_calls import Refused


def replan_interval(
    ctx: Context, lease: Lease, parent_trial_id: int, fold: int, reason: str, expires: datetime
) -> d.Trial | Refused:
    """The interval as re-planned, its lease extended to ``expires``; with the same
    parent, it must wait (the agent asks again); or why the lease does not hold it.
    InvalidArgument / FailedPrecondition when the call does not fit the interval."""
    now = ctx.clock()
    with ctx.storage.write() as tx:
        found = tx.trials.get(lease.trial_id, folds=False)
        if found is None:
            return Refused(Refusal.NO_TRIAL)
        campaign = tx.campaigns.lock(found.campaign_id)  # the lock order: campaign, then trial
        trial = tx.trials.get(lease.trial_id, lock=True)
        why = rules.lease_refusal(trial, lease.agent_id, lease.lease_id, now)
        if why is not None or trial is None or campaign is None:
            return Refused(why or Refusal.CHANGED, trial)
        lin = trial.lineage
        if lin is None or lin.parent is None or lin.parent_id is None:
            raise FailedPrecondition(f"trial {trial.id} starts from no parent's checkpoints: nothing to replace")
        if parent_trial_id != lin.parent_id:
            raise InvalidArgument(
                f"parent_trial_id: trial {parent_trial_id} is not the parent of trial {trial.id}; its parent is "
                f"trial #{lin.parent} (id {lin.parent_id})",
                [("parent_trial_id", f"must be {lin.parent_id}, the interval's parent")],
            )
        if trial.folds:
            started = sorted(f.index for f in trial.folds)
            raise FailedPrecondition(
                f"trial {trial.id} has folds {started} under way from trial #{lin.parent}'s checkpoints: an interval "
                "is re-planned only before any of its folds started"
            )
        again = lin.parent in lin.unreadable  # asked again while it waits
        if not again and len(lin.unreadable) >= lim.MAX_UNREADABLE:
            raise FailedPrecondition(
                f"trial {trial.id} was re-planned after {len(lin.unreadable)} unreadable parents already (at most "
                f"{lim.MAX_UNREADABLE}): its agent's --checkpoint-dir is likely not the one the others share"
            )
        tried = replace(trial, lineage=lin if again else replace(lin, unreadable=(*lin.unreadable, lin.parent)))
        made = ctx.optimizers.replan(tx, campaign, tried)
        params, lineage = trial.params, tried.lineage
        assert lineage is not None
        if made is None or made.lineage is None:
            outcome = f"it waits for another member to reach epoch {lin.start_epoch} readably"
        else:
            params, lineage = campaign.in_space_order(made.params), made.lineage
            start = f"trial #{lineage.parent}'s" if lineage.parent is not None else "no"
            outcome = f"re-planned: epochs {lineage.start_epoch} to {lineage.stop_epoch} from {start} checkpoints"
        tx.trials.set_plan(trial.id, params, lineage, expires)
        said = f"trial #{lin.parent}'s checkpoint of fold {fold} cannot be read ({reason}); "
        if not again or made is not None:
            tx.trials.add_event(
                trial.id, trial.attempt, "parent_unreadable", now, agent_id=lease.agent_id, reason=said + outcome
            )
        parent = None if again else tx.trials.get(parent_trial_id, folds=False)
        if parent is not None and parent.campaign_id == trial.campaign_id:
            tx.trials.add_event(
                parent.id,
                parent.attempt,
                "checkpoint_unreadable",
                now,
                agent_id=lease.agent_id,
                reason=f"the agent of trial #{trial.number} could not read fold {fold}: {reason}; no interval starts "
                "from this one again",
            )
    return replace(trial, params=params, lineage=lineage, lease_expires_at=expires)
