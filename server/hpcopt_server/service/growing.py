"""A define-by-run study's space, grown while its first trials run (embedded mode only:
``hpcopt_server.optuna``; nothing on the wire calls it).

An objective that defines its parameters as it runs (``trial.suggest_float("x", ...)``)
names them one by one. Until any trial of the campaign has ended, each new name is added
to the campaign's space and given a value in the trial that named it, in one
transaction under the campaign's lock; the campaign's optimizer is rebuilt from SQL at
its next suggestion. Once a trial has ended the space is fixed, so every finished trial
holds every parameter of the space (warm starts, exports and imports, the optimizers
and the dashboard see complete points). A name first seen later is outside the space:
the study samples it independently and keeps it with the trial as an event
(``hpcopt_server.optuna``), as Optuna samples parameters outside its intersection
search space.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

from hpcopt_server import domain as d
from hpcopt_server.errors import FailedPrecondition, InvalidArgument, NotFound
from hpcopt_server.optimizers.space import SearchSpace
from hpcopt_server.service.campaigns import validate_spec
from hpcopt_server.service.context import Context, campaign_or_404

log = logging.getLogger(__name__)


class SpaceGrowth:
    """After a growth the optimizer and the agent calls' cached campaign are dropped (the
    agent calls compare only the budget with the database). Growth is for one process's
    campaign (the embedded mode), so no other replica holds a cached copy."""

    def __init__(self, ctx: Context):
        self.ctx = ctx

    def grow(
        self,
        trial_id: int,
        agent_id: str,
        lease_id: str,
        space: dict[str, Any],
        values: dict[str, Any],
        constraints: Sequence[dict[str, Any]] = (),
    ) -> bool:
        """Adds ``space`` (parameter specs, as in a campaign spec) to the campaign of the
        RUNNING trial ``trial_id`` held under ``lease_id``, ``values`` to that trial's
        params, and ``constraints`` (as in a spec) to the campaign's, those whose metric it
        does not bound yet: how Optuna's constraints (``trial.set_constraint``, a
        ``constraints_func``) become the campaign's. False (nothing changed) once a trial
        of the campaign has ended, or for an algorithm whose space cannot grow (grid);
        InvalidArgument naming the parameter for a spec or value the space refuses;
        FailedPrecondition if the lease is not held."""
        with self.ctx.storage.write() as tx:
            trial = tx.trials.get(trial_id)
            if trial is None:
                raise NotFound(f"trial {trial_id} does not exist")
            campaign = campaign_or_404(tx, trial.campaign_id, lock=True)
            trial = tx.trials.get(trial_id)
            assert trial is not None
            if trial.state != d.TrialState.RUNNING or trial.lease_id != lease_id or trial.agent_id != agent_id:
                raise FailedPrecondition(
                    f"trial {trial_id} is not held under lease {lease_id!r} (it is {trial.state.value})"
                )
            if campaign.trials_finished or campaign.algorithm == "grid":
                return False
            spec = copy.deepcopy(campaign.spec)
            for name, param in space.items():
                if name in spec["space"]:
                    if spec["space"][name] != param:
                        raise InvalidArgument(
                            f"space.{name}: already {spec['space'][name]}, not {param}",
                            [(f"space.{name}", "the distribution it was first given")],
                        )
                    continue
                spec["space"][name] = param
            bounded = {c["metric"] for c in spec.get("constraints") or ()}
            added = [c for c in constraints if c["metric"] not in bounded]
            spec["constraints"] = [*(spec.get("constraints") or ()), *added]
            spec = validate_spec(spec)
            params = {**trial.params, **values}
            problems = SearchSpace(spec["space"]).problems(params)
            if problems:
                name, what = problems[0]
                raise InvalidArgument(f"params.{name}: {what}", [(f"params.{name}", what)])
            tx.campaigns.set_spec(campaign.id, spec)
            tx.trials.set_params(trial_id, params)
        self.ctx.optimizers.forget(campaign.id)
        self.ctx.agent_calls.forget_campaign(campaign.id)
        grown = [*space, *(f"constraint {c['metric']}" for c in constraints)]
        log.info("campaign %d: space grown by %s in trial %d", campaign.id, ", ".join(grown), trial_id)
        return True


__all__ = ["SpaceGrowth"]
