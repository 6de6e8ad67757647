"""Time to a target: ``training.target`` names a validation metric and the value a fold
must reach, and the agent measures how long each fold took to get there.

.. code-block:: yaml

    objectives:
      - {metric: val_acc, direction: maximize}
      - {metric: seconds_to_target, direction: minimize}
    training:
      target: {metric: val_acc, at_least: 0.8}     # or {metric: val_loss, at_most: 0.3}

After every epoch the agent adds three metrics to the fold's (:func:`clock`):

- ``seconds_to_target``: the fold's ``train_seconds`` (its wall seconds of training and
  evaluation, resumes included) at the end of the first epoch whose metric met the
  target. Until then, and at the end of a fold that never met it, :data:`MISSED` times
  its seconds so far: a fold that misses the target always counts as slower than one of
  the same speed that meets it at its last epoch, and the figure grows with the time
  spent missing it.
- ``rank_seconds_to_target``: the same times the fold group's ranks at that epoch, the
  share of the allocation it took (compare layouts with it, not with seconds).
- ``target_reached``: 1 once met, else 0; a trial's mean is the share of its folds
  that met it.

Once met, a fold's figures stay fixed, also across a preemption and resume (they are in
the metrics its checkpoint keeps). Any metric of the fold's may be the target's,
including one the task reports itself; a task that reports one of these three names
keeps its own value.
"""

from __future__ import annotations

import math
from typing import Any

#: The metrics the agent adds for a target, and which way each is better.
METRICS = {"seconds_to_target": "minimize", "rank_seconds_to_target": "minimize", "target_reached": "maximize"}
#: A fold that has not met the target counts as this many times its seconds so far.
MISSED = 2.0


def met(target: dict[str, Any], metrics: dict[str, float]) -> bool:
    """Whether ``metrics`` meet ``target`` (``{metric, at_least | at_most}``); a missing
    or non-finite metric does not."""
    value = metrics.get(str(target["metric"]))
    if value is None or not math.isfinite(value):
        return False
    if target.get("at_least") is not None:
        return value >= float(target["at_least"])
    return value <= float(target["at_most"])


def clock(
    target: dict[str, Any] | None, metrics: dict[str, float], before: dict[str, float], ranks: int
) -> dict[str, float]:
    """The target's three metrics after an epoch whose metrics (``train_seconds``
    included) are ``metrics``; ``before`` are the previous epoch's (empty at a fold's
    start), ``ranks`` the fold group's. Empty without a target."""
    if target is None:
        return {}
    if before.get("target_reached") == 1.0 and "seconds_to_target" in before:
        keep = ("seconds_to_target", "rank_seconds_to_target", "target_reached")
        return {k: float(before[k]) for k in keep if k in before}
    seconds = float(metrics.get("train_seconds", 0.0))
    if met(target, metrics):
        return {"seconds_to_target": seconds, "rank_seconds_to_target": seconds * ranks, "target_reached": 1.0}
    missed = MISSED * seconds
    return {"seconds_to_target": missed, "rank_seconds_to_target": missed * ranks, "target_reached": 0.0}


def describe(target: dict[str, Any]) -> str:
    """``val_acc >= 0.8``: the target as the logs and errors write it."""
    if target.get("at_least") is not None:
        return f"{target['metric']} >= {target['at_least']:g}"
    return f"{target['metric']} <= {target['at_most']:g}"
