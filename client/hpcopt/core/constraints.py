"""Outcome constraints: ``constraints`` in the spec bounds metrics a trial must satisfy.

.. code-block:: yaml

    constraints:
      - {metric: peak_gpu_memory_mb, max: 40000}     # what the agent measures
      - {metric: val_loss, max: 0.5}                 # any metric the folds report
      - {metric: target_reached, min: 1}             # every fold met training.target
      - {metric: seconds_per_epoch, max: 90, spread: 1}

A COMPLETED trial is **feasible** when every constraint holds for its K-fold mean; with
``spread: c`` the bound applies to mean + c·std (``max``) or mean - c·std (``min``), the
fold spread's sample standard deviation, so that a configuration that fits on average
but not on some folds can be refused. The default is 0: the mean, which is what a trial
reports as its value, and the one reading that does not punish a campaign for having
more folds.

Each constraint's **value** follows Optuna's convention (``trial.set_constraint``): a
number ≤ 0 when it holds, the amount by which it is broken otherwise (``mean + c·std -
max``, ``min - (mean - c·std)``). A trial's **violation** is the sum of its broken
values, each divided by its bound's magnitude (1 for a bound of 0), so constraints in
megabytes and in seconds weigh alike: 0 for a feasible trial. Views rank feasible
trials first (by their objective), then infeasible ones by violation.

The agent adds the **resources** it measures to every fold's metrics (:data:`RESOURCES`).
A trial that failed by exhausting one (an out-of-memory error, a walltime) is infeasible
for it (:func:`exhausted`) and says nothing about its objective.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The metrics the agent measures itself, and what each one is.
RESOURCES = {
    "peak_gpu_memory_mb": "the largest CUDA memory allocated on a rank of the fold group (MiB)",
    "peak_host_memory_mb": "the largest resident set size of a rank of the fold group (MiB)",
    "seconds_per_epoch": "the fold's wall seconds of training and evaluation per epoch",
    "trial_rank_seconds": "the fold's rank-seconds times K: the fold mean is the trial's total",
}
#: The most constraints one campaign may have.
MAX_CONSTRAINTS = 16
#: What an exhausted resource's constraint counts as broken by, as a share of its bound.
#: A failure says the trial did not fit, not by how much: it counts as 10 % over, the
#: least claim a model should learn from, so that a constraint model puts the boundary
#: between a trial that fit and one that failed rather than a cliff at the failure (at
#: twice the bound, a 4,000 MiB limit's model predicted 6,900 MiB at the 4,000 MiB a
#: fitting model measured next to a failed one).
EXHAUSTED = 0.1

# What a failure's text says when a resource ran out. CUDA's error names itself; the
# host's is Python's MemoryError (numpy's _ArrayMemoryError: "Unable to allocate"),
# torch's CPU allocator ("can't allocate memory"), ENOMEM, C++'s bad_alloc, or the
# kernel's OOM killer (signal 9, "Killed"); a walltime is Slurm's "DUE TO TIME LIMIT"
# or the agent's own timeout.
_GPU = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|HIP out of memory")
_HOST = re.compile(
    r"MemoryError|std::bad_alloc|\bout of memory\b|[Cc]annot allocate memory|can't allocate memory|"
    r"Unable to allocate|oom-kill|\bKilled\b|signal 9\b|SIGKILL"
)
_TIME = re.compile(r"DUE TO TIME LIMIT|\bTimeoutError\b|\btimed out\b|walltime|time limit", re.IGNORECASE)


@dataclass(frozen=True)
class Outcome:
    """A trial against its campaign's constraints."""

    values: tuple[float | None, ...]
    """One per constraint, in the spec's order: ≤ 0 holds, > 0 by how much it is broken,
    None where it was not measured (a metric the folds did not report counts as broken;
    beside an exhausted resource, the others are unknown)."""
    violation: float
    """0 when feasible; the sum of the broken values over their bounds' magnitudes."""
    broken: str
    """What was broken, for people (``peak_gpu_memory_mb 5120 > 4000``); "" when feasible."""

    @property
    def feasible(self) -> bool:
        return self.violation <= 0


def bound(constraint: Mapping[str, Any]) -> tuple[str, float]:
    """("max" | "min", the bound) of a canonical constraint."""
    if constraint.get("max") is not None:
        return "max", float(constraint["max"])
    return "min", float(constraint["min"])


def scale(constraint: Mapping[str, Any]) -> float:
    """What a broken value is divided by in a violation: the bound's magnitude, or 1."""
    return abs(bound(constraint)[1]) or 1.0


def value_of(constraint: Mapping[str, Any], mean: float, std: float = 0.0) -> float:
    """The constraint's value (≤ 0 holds) for a fold mean and spread."""
    side, limit = bound(constraint)
    c = float(constraint.get("spread") or 0.0)
    return mean + c * std - limit if side == "max" else limit - (mean - c * std)


def outcome(constraints: Sequence[Mapping[str, Any]], values: Sequence[float | None]) -> Outcome:
    """The outcome of constraint ``values`` (one per constraint, ≤ 0 holds); None or NaN
    (a metric the trial did not report) counts as broken."""
    violation, broken = 0.0, []
    kept: list[float | None] = []
    for c, v in zip(constraints, values, strict=True):
        if v is None or not math.isfinite(v):
            kept.append(None)
            violation += 1.0
            broken.append(f"{c['metric']}: not reported")
            continue
        kept.append(float(v))
        if v > 0:
            violation += v / scale(c)
            side, limit = bound(c)
            shown = limit + v if side == "max" else limit - v
            broken.append(f"{c['metric']} {shown:.6g} {'>' if side == 'max' else '<'} {limit:.6g}")
    return Outcome(tuple(kept), violation, "; ".join(broken))


def from_folds(constraints: Sequence[Mapping[str, Any]], folds: Iterable[Mapping[str, float]]) -> Outcome:
    """The outcome of a trial whose folds reported ``folds`` (each one's metrics)."""
    rows = list(folds)
    values: list[float | None] = []
    for c in constraints:
        seen = [float(m[c["metric"]]) for m in rows if c["metric"] in m and math.isfinite(float(m[c["metric"]]))]
        if len(seen) < len(rows) or not seen:
            values.append(None)
            continue
        mean = math.fsum(seen) / len(seen)
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in seen) / (len(seen) - 1)) if len(seen) > 1 else 0.0
        values.append(value_of(c, mean, std))
    return outcome(constraints, values)


def resources(
    metrics: Mapping[str, float], before: Mapping[str, float], epochs: int, ranks: int, folds: int
) -> dict[str, float]:
    """The resources the agent adds after the fold's ``epochs``-th epoch (:data:`RESOURCES`),
    from the epoch's ``metrics`` (``train_seconds`` of the fold so far and the epoch's
    peaks) and the previous epoch's ``before``: the peaks are the fold's largest so far,
    the seconds its mean per epoch, and its rank-seconds times K (``folds``) so that the
    mean over folds is the trial's total. What to set in ``metrics``."""
    out = {}
    for peak in ("peak_gpu_memory_mb", "peak_host_memory_mb"):
        if metrics.get(peak) or before.get(peak):
            out[peak] = max(float(metrics.get(peak) or 0.0), float(before.get(peak) or 0.0))
    seconds = float(metrics.get("train_seconds") or 0.0)
    if seconds > 0 and epochs > 0:
        out["seconds_per_epoch"] = seconds / epochs
    if seconds > 0:
        out["trial_rank_seconds"] = seconds * ranks * folds
    # A task that reports seconds of its own keeps them; a peak is the larger of both.
    return {k: v for k, v in out.items() if k.startswith("peak_") or k not in metrics}


def exhausted(reason: str, constraints: Sequence[Mapping[str, Any]]) -> list[str]:
    """The constrained resources a failure ``reason`` says ran out (the campaign's
    constraints' metrics, in their order): a CUDA out-of-memory error exhausts
    ``peak_gpu_memory_mb``, a host one ``peak_host_memory_mb``, a timeout the time
    constraints (``seconds_per_epoch``, ``trial_rank_seconds``). Empty: the failure is no
    constraint's, and counts as a failure."""
    gpu = bool(_GPU.search(reason))
    host = not gpu and bool(_HOST.search(reason))
    time = not (gpu or host) and bool(_TIME.search(reason))
    wanted = {
        "peak_gpu_memory_mb": gpu,
        "peak_host_memory_mb": host,
        "seconds_per_epoch": time,
        "trial_rank_seconds": time,
    }
    return [str(c["metric"]) for c in constraints if wanted.get(str(c["metric"]))]


def exhausted_outcome(constraints: Sequence[Mapping[str, Any]], metrics: Sequence[str], why: str) -> Outcome:
    """The outcome of a trial that failed because ``metrics`` ran out: those constraints
    count as broken by :data:`EXHAUSTED` of their bound, the others as unknown (None)."""
    values = tuple(EXHAUSTED * scale(c) if c["metric"] in metrics else None for c in constraints)
    return Outcome(values, EXHAUSTED * len(metrics), f"{', '.join(metrics)}: {why}")
