"""Which folds are analysed under the spec's ``analysis.on: best`` (the default): a fold
that has trained its last epoch is analysed when its result would make its trial the
best so far, were the trial's other folds to come out the same.

- **One objective**: the fold's value is at least as good as the best completed trial's
  value (its mean over folds).
- **Several**: the fold's objective values are dominated by no completed trial's values
  (means over folds): the trial would join the Pareto front.
- **No completed trial** yet: analysed.

So the incumbent and every Pareto member are analysed when they finish, and the trials
that never lead are not: with the analysis at a few percent of a trial, that is a few
percent of the first trials and of the leaders. A trial judged by a fold that later
loses its lead keeps its analysis (the trace of what led at the time). ``on: all``
analyses every fold and never asks.

The decision reads committed data only, without the campaign lock: two folds ending at
once may both be analysed, which costs a little more and loses nothing.
"""

from __future__ import annotations

import math

import numpy as np

from hpcopt_server import domain as d
from hpcopt_server.optimizers.pareto import losses
from hpcopt_server.storage.repository import Tx


def should_analyse(tx: Tx, campaign: d.Campaign, trial_id: int, metrics: dict[str, float]) -> tuple[bool, str]:
    """(analyse, why) for a fold of ``trial_id`` whose last epoch gave ``metrics``."""
    on = str((campaign.spec.get("analysis") or {}).get("on", "best"))
    if on == "all":
        return True, "analysis.on: all"
    objectives = campaign.objectives
    mine: list[float] = []
    for metric, _ in objectives:
        value = metrics.get(metric)
        if value is None or not math.isfinite(value):
            return False, f"the fold's metrics have no finite {metric}"
        mine.append(float(value))
    if len(objectives) == 1:
        [(metric, direction)] = objectives
        sign = 1.0 if direction == "minimize" else -1.0
        best = tx.results.best_trial_ids(campaign.id, direction, 2)
        best = [b for b in best if b != trial_id][:1]
        if not best:
            return True, "no trial has completed yet"
        leader = tx.trials.get(best[0], folds=False)
        if leader is None or leader.value is None:
            return True, "no trial has completed yet"
        if sign * mine[0] <= sign * leader.value:
            return True, f"{metric} {mine[0]:.6g} is at least as good as the best trial's {leader.value:.6g}"
        return False, f"{metric} {mine[0]:.6g} is not as good as the best trial's {leader.value:.6g}"
    others = [values for tid, values in tx.results.completed_values(campaign.id, feasible=True) if tid != trial_id]
    if not others:
        return True, "no trial has completed yet"
    directions = [direction for _, direction in objectives]
    them, me = losses(others, directions), losses([mine], directions)[0]
    if bool(np.any(np.all(them <= me, axis=1) & np.any(them < me, axis=1))):
        return False, "a completed trial is at least as good in every objective and better in one"
    return True, "no completed trial is as good in every objective: it would join the Pareto front"
