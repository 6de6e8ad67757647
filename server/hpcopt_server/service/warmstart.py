"""Warm starts: a campaign's optimizer first observes the completed trials of earlier
campaigns (``warm_start: {campaigns: [3, 7]}``) where their spaces agree.

A trial carries over when the earlier campaign optimized the same metric in the same
direction, and every parameter of the new space that the trial needs is there with the
same kind and a value the new space allows (inside the bounds, among the choices);
parameters the new space does not have are dropped, a trial missing one it needs is
skipped. Carried trials are observed before the campaign's own, in their campaigns'
order; they are not trials of the new campaign and use none of its budget.

A carried trial is judged against the new campaign's ``constraints``, from its folds'
metrics, as the campaign judges its own: its earlier campaign's outcome was against
that campaign's constraints, which need not be these (other metrics, other bounds, or
none). A metric its folds did not report counts as broken, and tells that constraint's
model nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hpcopt_server import domain as d
from hpcopt_server import rules
from hpcopt_server.errors import InvalidArgument
from hpcopt_server.optimizers.space import SearchSpace
from hpcopt_server.storage.repository import Tx

#: The most earlier trials one campaign observes: each is a row of its GP.
MAX_WARM_TRIALS = 20_000


def sources(spec: dict[str, Any]) -> list[int]:
    return list((spec.get("warm_start") or {}).get("campaigns") or [])


def check_sources(tx: Tx, spec: dict[str, Any]) -> None:
    """InvalidArgument naming a warm-start campaign that does not exist or optimized
    another objective."""
    for i, cid in enumerate(sources(spec)):
        field = f"warm_start.campaigns.{i}"
        other = tx.campaigns.get(cid)
        if other is None:
            raise InvalidArgument(
                f"{field}: campaign {cid} does not exist", [(field, f"campaign {cid} does not exist")]
            )
        mine = d.objectives_of(spec)
        if other.objectives != mine:

            def say(objectives: list[tuple[str, str]]) -> str:
                return ", ".join(f"{direction} {metric}" for metric, direction in objectives)

            msg = f"campaign {cid} optimized {say(other.objectives)}, this one {say(mine)}: their values do not compare"
            raise InvalidArgument(f"{field}: {msg}", [(field, msg)])


def warm_trials(tx: Tx, campaign: d.Campaign) -> list[d.Trial]:
    """The earlier campaigns' completed trials that fit this campaign's space, with
    their params restricted to it."""
    space = SearchSpace(campaign.spec["space"])
    bounds = campaign.spec.get("constraints") or []
    objective = d.objectives_of(campaign.spec)[0][0]
    out: list[d.Trial] = []
    for cid in sources(campaign.spec):
        trials, _ = tx.trials.page(
            cid, states=[d.TrialState.COMPLETED], with_folds=bool(bounds), limit=MAX_WARM_TRIALS - len(out)
        )
        for t in trials:
            params = fit(space, t.params)
            if params is not None:
                out.append(
                    dataclasses.replace(t, params=params, finish_seq=None, folds=(), **judged(t, bounds, objective))
                )
        if len(out) >= MAX_WARM_TRIALS:
            break
    return out


def judged(trial: d.Trial, bounds: list[dict[str, Any]], objective: str) -> dict[str, Any]:
    """``trial``'s outcome fields against ``bounds`` (this campaign's constraints), from
    its folds (``rules.judge``); none without bounds."""
    if not bounds:
        return {"constraint_values": None, "violation": None, "broken": ""}
    o = rules.judge(bounds, trial.folds, objective)
    return {"constraint_values": o.values, "violation": o.violation, "broken": o.broken}


def fit(space: SearchSpace, params: d.Params) -> d.Params | None:
    """``params`` restricted to ``space``, or None where a needed value is missing, of
    another kind or outside what the space allows (``SearchSpace.problems``)."""
    names = {dim.name for dim in space.dims}
    own = space.active({k: v for k, v in params.items() if k in names})
    return None if space.problems(own) else own
